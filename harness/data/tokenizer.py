"""Tokenizers without a hub, and the chat rendering every backend shares.

`local-bpe` trains a byte-level BPE (Hugging Face `tokenizers`) on a fixed corpus of the
project's own function-calling text and caches it, so every machine and backend gets the
same token ids. `hf-dir` loads a real tokenizer from a local directory. Chat turns are
rendered here, not by each backend, so the loss mask (assistant tokens only) is the same
everywhere.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from harness.data.function_calling import DEVELOPER_PROMPT, generate

SPECIAL_TOKENS = (
    "<pad>",
    "<eos>",
    "<bos>",
    "<unk>",
    "<start_of_turn>",
    "<end_of_turn>",
    "<start_function_call>",
    "<end_function_call>",
    "<|im_start|>",
    "<|im_end|>",
)
# Bump when the corpus or the training recipe changes: it keys the cache.
LOCAL_BPE_VERSION = 2
_CORPUS_SEED, _CORPUS_SIZE = 20260101, 3000


@dataclass(frozen=True)
class TokenizerHandle:
    """A loaded tokenizer and the ids the pipeline needs."""

    tokenizer: Any  # tokenizers.Tokenizer
    pad_id: int
    bos_id: int | None
    eos_id: int
    description: dict[str, Any]

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size(with_added_tokens=True)


def cache_dir() -> Path:
    return Path(os.environ.get("BENCH_CACHE_DIR") or Path.home() / ".cache" / "bench")


def load_tokenizer(kind: str, vocab_size: int, path: str | None) -> TokenizerHandle:
    if kind == "hf-dir":
        return _load_hf_dir(Path(path or ""))
    return _load_local_bpe(vocab_size)


def _load_local_bpe(vocab_size: int) -> TokenizerHandle:
    from tokenizers import Tokenizer

    from harness.basics.files import write_text_atomic

    key = hashlib.sha256(f"{LOCAL_BPE_VERSION}:{vocab_size}".encode()).hexdigest()[:12]
    file = cache_dir() / "tokenizers" / f"local-bpe-{vocab_size}-{key}" / "tokenizer.json"
    if not file.exists():
        write_text_atomic(file, _train_local_bpe(vocab_size).to_str())
    tok = Tokenizer.from_file(str(file))
    ids = {t: tok.token_to_id(t) for t in ("<pad>", "<bos>", "<eos>")}
    desc = {
        "kind": "local-bpe",
        "vocab_size": tok.get_vocab_size(),
        "version": LOCAL_BPE_VERSION,
        "sha256": hashlib.sha256(file.read_bytes()).hexdigest()[:16],
    }
    return TokenizerHandle(tok, ids["<pad>"], ids["<bos>"], ids["<eos>"], desc)


def _train_local_bpe(vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    corpus = [m["content"] for ex in generate(_CORPUS_SIZE, _CORPUS_SEED, _ALL_KINDS) for m in ex.messages]
    tok.train_from_iterator(corpus, trainer=trainer)
    # The corpus saturates the merges well below vocab_size. Fill the rest with plain
    # `<unusedN>` tokens (as Gemma's vocabulary has) so that every id a random-weight
    # model can emit decodes to visible text: a server then streams every token.
    from tokenizers import AddedToken

    missing = vocab_size - tok.get_vocab_size(with_added_tokens=True)
    tok.add_tokens([AddedToken(f"<unused{i}>", special=False, normalized=False) for i in range(max(0, missing))])
    return tok


_ALL_KINDS = {"single": 1.0, "multiple": 1.0, "parallel": 1.0, "irrelevance": 1.0}


def _load_hf_dir(directory: Path) -> TokenizerHandle:
    from tokenizers import Tokenizer

    file = directory / "tokenizer.json"
    if not file.is_file():
        raise FileNotFoundError(f"{directory}: no tokenizer.json (data.tokenizer.path)")
    tok = Tokenizer.from_file(str(file))
    config = _read_json(directory / "tokenizer_config.json")

    def token_id(field: str, fallback: str) -> int | None:
        name = config.get(field)
        name = name.get("content") if isinstance(name, dict) else name
        return tok.token_to_id(name or fallback)

    eos = token_id("eos_token", "<eos>")
    pad = token_id("pad_token", "<pad>")
    if eos is None:
        raise ValueError(f"{directory}: tokenizer has no eos token")
    desc = {
        "kind": "hf-dir",
        "path": str(directory),
        "vocab_size": tok.get_vocab_size(),
        "sha256": hashlib.sha256(file.read_bytes()).hexdigest()[:16],
    }
    return TokenizerHandle(tok, eos if pad is None else pad, token_id("bos_token", "<bos>"), eos, desc)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


# --------------------------------------------------------------------------- chat
_FORMATS = {
    # (turn open, turn close); Gemma names the assistant role "model".
    "gemma": ("<start_of_turn>{role}\n", "<end_of_turn>", {"assistant": "model"}),
    "chatml": ("<|im_start|>{role}\n", "<|im_end|>", {}),
}


def chat_segments(messages: Sequence[dict[str, str]], tools: Sequence[dict] | None, fmt: str) -> list[tuple[str, bool]]:
    """The conversation as (text, is_trained) pieces: only the assistant's reply and its
    closing marker are trained, never the prompt or the role header."""
    open_turn, close_turn, roles = _FORMATS[fmt]
    messages = _with_tool_turn(messages, tools)
    pieces: list[tuple[str, bool]] = []
    for message in messages:
        role = message["role"]
        pieces.append((open_turn.format(role=roles.get(role, role)), False))
        trained = role == "assistant"
        pieces.append((message["content"] + close_turn, trained))
        pieces.append(("\n", False))
    return pieces


def _with_tool_turn(messages: Sequence[dict[str, str]], tools: Sequence[dict] | None) -> list[dict[str, str]]:
    """A JSONL example may carry `tools` separately: list them in a developer turn."""
    messages = list(messages)
    if tools and not any(m["role"] in ("developer", "system") for m in messages):
        listing = "\n".join(json.dumps(t, separators=(",", ":")) for t in tools)
        messages.insert(0, {"role": "developer", "content": f"{DEVELOPER_PROMPT}\n{listing}"})
    return messages


def encode_chat(handle: TokenizerHandle, messages, tools, fmt: str) -> tuple[list[int], list[bool]]:
    """Token ids and, per token, whether it is trained (assistant) or not."""
    ids: list[int] = [handle.bos_id] if handle.bos_id is not None else []
    trained: list[bool] = [False] * len(ids)
    for text, is_trained in chat_segments(messages, tools, fmt):
        piece = handle.encode(text)
        ids.extend(piece)
        trained.extend([is_trained] * len(piece))
    return ids, trained
