"""The harness's data pipeline: the same tokens, padding and batches for every backend.

Backends receive numpy arrays and only convert them to their framework, so a difference
in step time between backends is never a difference in what they were fed. Labels are
aligned with `input_ids` (-100 where no loss is taken); a backend shifts them by one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness.data.examples import count_examples
from harness.data.function_calling import generate
from harness.data.tokenizer import TokenizerHandle, encode_chat, load_tokenizer
from harness.scenario.spec import Scenario

IGNORE_INDEX = -100


@dataclass(frozen=True)
class MicroBatch:
    input_ids: np.ndarray  # int64 [rows, length]
    attention_mask: np.ndarray  # int64 [rows, length], 1 on real tokens
    labels: np.ndarray  # int64 [rows, length], IGNORE_INDEX where untrained
    # Packed rows only (sequence.padding: packed): each token's position in its own
    # example, restarting at 0 where an example (or the row's tail of padding) begins;
    # attention is per example. None: one example a row, positions 0.. as usual.
    position_ids: np.ndarray | None = None

    @property
    def examples(self) -> int:
        """Examples the rows hold: one a row, or every packed example."""
        return count_examples(self.attention_mask, self.position_ids)

    @property
    def example_tokens(self) -> list[int]:
        """Each example's real tokens, in order (its attention spans only itself)."""
        if self.position_ids is None:
            return [int(n) for n in self.attention_mask.sum(axis=1)]
        return [len(s) for row, mask in zip(self.position_ids, self.attention_mask) for s in _segments(row, mask)]

    @property
    def tokens_real(self) -> int:
        return int(self.attention_mask.sum())

    @property
    def tokens_padded(self) -> int:
        return int(self.input_ids.size)

    @property
    def seq_len(self) -> int:
        return int(self.input_ids.shape[1])

    def rows(self, start: int, stop: int) -> "MicroBatch":
        """A slice of rows: a data-parallel rank's share."""
        positions = None if self.position_ids is None else self.position_ids[start:stop]
        return MicroBatch(
            self.input_ids[start:stop], self.attention_mask[start:stop], self.labels[start:stop], positions
        )


def _segments(positions: np.ndarray, mask: np.ndarray) -> list[np.ndarray]:
    """A packed row's examples, as the indices of their real tokens."""
    starts = np.flatnonzero((positions == 0) & (mask == 1))
    ends = list(starts[1:]) + [len(positions)]
    return [np.arange(a, b)[mask[a:b] == 1] for a, b in zip(starts, ends)]


@dataclass(frozen=True)
class StepBatch:
    """Everything one optimizer step consumes: its gradient-accumulation chunks."""

    index: int
    micro_batches: tuple[MicroBatch, ...]
    # Label tokens after the one-position shift, over the whole step: the loss is
    # sum(token losses) / num_loss_tokens, identical however the step is split.
    num_loss_tokens: int

    @property
    def tokens_real(self) -> int:
        return sum(m.tokens_real for m in self.micro_batches)

    @property
    def tokens_padded(self) -> int:
        return sum(m.tokens_padded for m in self.micro_batches)

    @property
    def rows(self) -> int:
        """The plan's rows: examples (several share a device row when packed)."""
        return sum(m.examples for m in self.micro_batches)

    @property
    def row_tokens(self) -> list[int]:
        """Each example's real tokens, in order: the lengths attention spans."""
        return [n for m in self.micro_batches for n in m.example_tokens]

    @property
    def seq_lens(self) -> tuple[int, ...]:
        return tuple(m.seq_len for m in self.micro_batches)


@dataclass
class Batches:
    """Every step's batch of a run, and the tokenizer that made them."""

    steps: list[StepBatch]
    tokenizer: TokenizerHandle
    description: dict[str, Any] = field(default_factory=dict)


def load_examples(scenario: Scenario) -> list[tuple[list[dict], list[dict] | None]]:
    """(messages, tools) pairs from the generator or the JSONL file."""
    data = scenario.data
    if data.source == "jsonl":
        return _read_jsonl(Path(data.path or ""))
    examples = generate(data.num_examples, data.seed, data.mix.model_dump())
    return [(list(e.messages), list(e.tools)) for e in examples]


def _read_jsonl(path: Path) -> list[tuple[list[dict], list[dict] | None]]:
    rows = []
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                messages = row["messages"]
            except (ValueError, KeyError, TypeError):
                raise ValueError(f"{path}:{number}: expected a JSON object with a `messages` list") from None
            tools = row.get("tools")
            rows.append((messages, json.loads(tools) if isinstance(tools, str) else tools))
    if not rows:
        raise ValueError(f"{path}: no examples")
    return rows


def tokenize(scenario: Scenario, handle: TokenizerHandle) -> tuple[list[tuple[list[int], list[bool]]], int]:
    """Encoded examples truncated to max_length, and how many were truncated."""
    limit = scenario.sequence.max_length
    encoded, truncated = [], 0
    for messages, tools in load_examples(scenario):
        ids, trained = encode_chat(handle, messages, tools, scenario.data.chat_format)
        if scenario.data.loss_on == "all":
            trained = [True] * len(ids)
        if len(ids) > limit:
            truncated += 1
            ids, trained = _truncate_prompt(ids, trained, limit)
        encoded.append((ids, trained))
    return encoded, truncated


def _truncate_prompt(ids: list[int], trained: list[bool], limit: int) -> tuple[list[int], list[bool]]:
    """Cut the prompt from the left, keeping the first token (BOS): the answer at the end
    is what is trained, and a right cut would leave an example with nothing to learn."""
    keep = limit - 1
    return ids[:1] + ids[-keep:], trained[:1] + trained[-keep:]


def padded_length(longest: int, scenario: Scenario) -> int:
    """The length a micro-batch is padded to under the scenario's padding policy."""
    seq = scenario.sequence
    if seq.padding in ("static", "packed"):
        return seq.max_length
    if seq.padding == "dynamic":
        return longest
    return next(b for b in seq.bucket_lengths() if b >= longest)


def collate(rows: list[tuple[list[int], list[bool]]], length: int, pad_id: int) -> MicroBatch:
    ids = np.full((len(rows), length), pad_id, dtype=np.int64)
    mask = np.zeros((len(rows), length), dtype=np.int64)
    labels = np.full((len(rows), length), IGNORE_INDEX, dtype=np.int64)
    for r, (tokens, trained) in enumerate(rows):
        n = len(tokens)
        ids[r, :n] = tokens
        mask[r, :n] = 1
        labels[r, :n] = np.where(np.asarray(trained, dtype=bool), tokens, IGNORE_INDEX)
    return MicroBatch(ids, mask, labels)


def pack(rows: list[tuple[list[int], list[bool]]], length: int, pad_id: int) -> MicroBatch:
    """Examples packed into as few rows of `length` as hold them (first fit, in order).
    Positions restart at each example; the first token of an example is never a target
    (after the one-position shift it would be the previous example's next token), as
    it never is in an unpacked row; a row's tail of padding is a segment of its own."""
    bins: list[list[tuple[list[int], list[bool]]]] = []
    for example in rows:
        room = next((b for b in bins if sum(len(t) for t, _ in b) + len(example[0]) <= length), None)
        if room is None:
            bins.append(room := [])
        room.append(example)
    ids = np.full((len(bins), length), pad_id, dtype=np.int64)
    mask = np.zeros((len(bins), length), dtype=np.int64)
    labels = np.full((len(bins), length), IGNORE_INDEX, dtype=np.int64)
    positions = np.zeros((len(bins), length), dtype=np.int64)
    for r, examples in enumerate(bins):
        at = 0
        for tokens, trained in examples:
            n = len(tokens)
            ids[r, at : at + n], mask[r, at : at + n] = tokens, 1
            labels[r, at : at + n] = np.where(np.asarray(trained, dtype=bool), tokens, IGNORE_INDEX)
            labels[r, at] = IGNORE_INDEX
            positions[r, at : at + n] = np.arange(n)
            at += n
        positions[r, at:] = np.arange(length - at)
    return MicroBatch(ids, mask, labels, positions)


def build_batches(scenario: Scenario, rows_per_forward: int | None = None, shards: int = 1) -> Batches:
    """Batches for every step the run takes (warm-up, measured and window steps). Each
    step is cut into forward passes of `rows_per_forward` rows (the plan's micro_batch x
    data-parallel shards; micro_batch when not given), each padded on its own. Packed
    passes hold a multiple of `shards` rows, so every data-parallel shard gets as many."""
    train = scenario.train
    rows_per_chunk = rows_per_forward or train.micro_batch
    if train.global_batch % rows_per_chunk:
        raise ValueError(
            f"train.global_batch: {train.global_batch} is not a multiple of the {rows_per_chunk} rows per forward pass"
        )
    tok = scenario.data.tokenizer
    handle = load_tokenizer(tok.kind, tok.vocab_size, tok.path)
    encoded, truncated = tokenize(scenario, handle)
    order = _sample_order(len(encoded), train.global_batch * (train.steps + train.window_steps), train.seed)
    steps = []
    for index in range(train.steps + train.window_steps):
        picked = [encoded[i] for i in order[index * train.global_batch : (index + 1) * train.global_batch]]
        assemble = pack if scenario.sequence.padding == "packed" else collate
        chunks = tuple(
            assemble(chunk, padded_length(max(len(t) for t, _ in chunk), scenario), handle.pad_id)
            for chunk in (picked[c : c + rows_per_chunk] for c in range(0, len(picked), rows_per_chunk))
        )
        steps.append(StepBatch(index, chunks, int(sum((m.labels[:, 1:] != IGNORE_INDEX).sum() for m in chunks))))
    if scenario.sequence.padding == "packed":
        steps = fixed_packed_rows(steps, handle.pad_id, shards)
    description = {
        "num_examples": len(encoded),
        "num_truncated": truncated,
        "tokenizer": handle.description,
        "rows_per_forward": rows_per_chunk,
        "grad_accum": len(steps[0].micro_batches),
    }
    if scenario.sequence.padding == "packed":
        description["packed_rows_per_forward"] = int(steps[0].micro_batches[0].input_ids.shape[0])
    return Batches(steps, handle, description)


def fixed_packed_rows(steps: list[StepBatch], pad_id: int, shards: int = 1) -> list[StepBatch]:
    """Every packed forward pass padded to one row count for the whole run: the most
    rows any of the run's forward passes packs into (its examples are known before the
    first step), rounded up to a multiple of `shards` (the data-parallel shards split the
    rows evenly). One shape for every pass, so a compiled step never recompiles on the
    number of packed rows; the added rows are all padding (no real token, no label: the
    real tokens and the loss are unchanged, only the padded tokens grow)."""
    most = max(m.input_ids.shape[0] for step in steps for m in step.micro_batches)
    rows = -(-most // shards) * shards
    return [
        StepBatch(s.index, tuple(pad_rows(m, rows, pad_id) for m in s.micro_batches), s.num_loss_tokens) for s in steps
    ]


def pad_rows(micro: MicroBatch, rows: int, pad_id: int) -> MicroBatch:
    """A packed micro-batch with all-padding rows appended up to `rows`: each a segment
    of padding of its own (positions 0.., as a packed row's tail of padding is)."""
    extra, length = rows - micro.input_ids.shape[0], micro.seq_len
    if extra <= 0:
        return micro
    positions = np.broadcast_to(np.arange(length, dtype=np.int64), (extra, length))
    return MicroBatch(
        np.concatenate([micro.input_ids, np.full((extra, length), pad_id, dtype=np.int64)]),
        np.concatenate([micro.attention_mask, np.zeros((extra, length), dtype=np.int64)]),
        np.concatenate([micro.labels, np.full((extra, length), IGNORE_INDEX, dtype=np.int64)]),
        np.concatenate([micro.position_ids, positions]),
    )


def _sample_order(num_examples: int, needed: int, seed: int) -> list[int]:
    """Seeded epochs: a fresh permutation each time the examples run out."""
    rng = np.random.default_rng(seed)
    order: list[int] = []
    while len(order) < needed:
        order.extend(rng.permutation(num_examples).tolist())
    return order[:needed]
