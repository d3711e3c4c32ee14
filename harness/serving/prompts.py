"""Prompts for the serving benchmark: the same function-calling conversations the
fine-tune trains on (developer and user turns, the assistant's turn left to the model),
multi-turn conversations built from them, or seeded synthetic text of a stated length,
optionally behind shared prefixes (what a prefix cache speeds up)."""

from __future__ import annotations

import random
from typing import Any

from harness.data.tokenizer import chat_segments

_WORDS = (
    "steps",
    "sleep",
    "heart",
    "rate",
    "battery",
    "workout",
    "water",
    "goal",
    "today",
    "yesterday",
    "calories",
    "stress",
    "running",
    "yoga",
    "minutes",
    "score",
    "level",
    "week",
    "average",
    "daily",
)


def build_prompts(scenario, count: int) -> list[dict[str, Any]]:
    """`count` prompts: {"text": for /completions, "messages": for /chat/completions,
    "output_tokens": the length this request asks for}."""
    if scenario.serve.prompts.source == "trace":
        return trace_prompts(scenario, count)
    prompts = _inputs(scenario, count)
    for prompt, length in zip(prompts, output_lengths(scenario.serve, count)):
        prompt["output_tokens"] = length
    return prompts


def trace_prompts(scenario, count: int) -> list[dict[str, Any]]:
    """The trace's requests, exact to the token in the project's tokenizer ("token_ids",
    which the local engine feeds as they are; a server re-tokenizes the text): warm-up
    requests first, the shape of the trace's first rows but their own text (a prefix
    cache must not be primed by them), then the trace's first num_requests rows, each
    with its arrival ("arrival_s", seconds after the measured phase starts). Rows that
    share a Mooncake block id share that block's text."""
    from harness.data.tokenizer import load_tokenizer
    from harness.serving.trace import BLOCK_TOKENS, read_trace

    spec, tok = scenario.serve, scenario.data.tokenizer
    handle, rows = load_tokenizer(tok.kind, tok.vocab_size, tok.path), read_trace(spec.prompts.path)
    warm = spec.warmup_requests
    out = []
    for i in range(count):
        row, salt = (rows[i % len(rows)], "warm-up") if i < warm else (rows[i - warm], "trace")
        if row.blocks:
            pieces = [_token_ids(handle, f"{salt}-{spec.prompts.seed}-block-{b}", BLOCK_TOKENS) for b in row.blocks]
            ids = [t for piece in pieces for t in piece][: row.input_tokens]
        else:
            ids = _token_ids(handle, f"{salt}-{spec.prompts.seed}-row-{i}", row.input_tokens)
        text = handle.tokenizer.decode(ids)
        prompt = {"text": text, "messages": [{"role": "user", "content": text}], "token_ids": ids}
        prompt.update(output_tokens=row.output_tokens, arrival_s=None if i < warm else row.arrival_s)
        out.append(prompt)
    return out


def _token_ids(handle, seed: str, length: int) -> list[int]:
    """`length` token ids of seeded random words (every word is at least one token)."""
    ids = handle.encode(_words(random.Random(seed), length))
    assert len(ids) >= length, "a word encodes to at least one token"
    return ids[:length]


def output_lengths(serve, count: int) -> list[int]:
    """Each request's output length: `output_tokens`, or uniform from it to
    `output_tokens_max` from its own seeded stream (the inputs' draws stay the same)."""
    if serve.output_tokens_max is None:
        return [serve.output_tokens] * count
    rng = random.Random(f"output-{serve.prompts.seed}")
    return [rng.randint(serve.output_tokens, serve.output_tokens_max) for _ in range(count)]


def _inputs(scenario, count: int) -> list[dict[str, Any]]:
    spec = scenario.serve.prompts
    if spec.input_tokens is not None:
        return _token_prompts(scenario, count)
    if spec.source in ("synthetic", "shared-prefix"):
        return _word_prompts(spec, count)
    from harness.data.batches import load_examples

    examples = load_examples(scenario)
    if spec.source == "multi-turn":
        return [_chat_prompt(*_turn(examples, i, spec.turns), scenario) for i in range(count)]
    asked = lambda messages: [m for m in messages if m["role"] != "assistant"]  # noqa: E731
    return [
        _chat_prompt(asked(messages), tools, scenario)
        for messages, tools in (examples[i % len(examples)] for i in range(count))
    ]


def _token_prompts(scenario, count: int) -> list[dict[str, Any]]:
    """Seeded random words cut to exactly `input_tokens` tokens of the project's
    tokenizer ("token_ids", fed as they are by the local engine; a launched server is
    given the same tokenizer and re-tokenizes the text)."""
    from harness.data.tokenizer import load_tokenizer

    spec, tok = scenario.serve.prompts, scenario.data.tokenizer
    handle = load_tokenizer(tok.kind, tok.vocab_size, tok.path)
    out = []
    for i in range(count):
        ids = _token_ids(handle, f"synthetic-{spec.seed}-{i}", spec.input_tokens)
        text = handle.tokenizer.decode(ids)
        out.append({"text": text, "messages": [{"role": "user", "content": text}], "token_ids": ids})
    return out


def _words(rng: random.Random, count: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(count))


def _word_prompts(spec, count: int) -> list[dict[str, Any]]:
    """Seeded random words; a length uniform in [input_words, input_words_max] when a
    maximum is given. shared-prefix: prompt i starts with prefix i mod num_prefixes
    (prefix_words words), then its own input_words-long suffix."""
    rng = random.Random(spec.seed)
    prefixes = [_words(rng, spec.prefix_words) for _ in range(spec.num_prefixes or 0)]
    texts = []
    for i in range(count):
        length = rng.randint(spec.input_words, spec.input_words_max) if spec.input_words_max else spec.input_words
        suffix = _words(rng, length)
        texts.append(f"{prefixes[i % len(prefixes)]} {suffix}" if prefixes else suffix)
    return [{"text": t, "messages": [{"role": "user", "content": t}]} for t in texts]


def _turn(examples, index: int, turns: int) -> tuple[list[dict[str, str]], Any]:
    """Prompt `index` of the multi-turn set: conversation index // turns, user turn
    index % turns + 1. A conversation is `turns` consecutive generated examples: the
    first one's developer turn (its tools), then each example's user question and
    reference answer; a turn asks its question after every earlier exchange. The
    history holds the generator's answers, not the server's, so no turn waits for the
    reply to the previous one."""
    conversation, turn = divmod(index, turns)
    chosen = [examples[(conversation * turns + k) % len(examples)] for k in range(turn + 1)]
    messages, tools = chosen[0]
    history = [m for m in messages if m["role"] not in ("user", "assistant")]
    for k, (example, _) in enumerate(chosen):
        history += [m for m in example if m["role"] == "user" or (m["role"] == "assistant" and k < turn)]
    return history, tools


def _chat_prompt(asked: list[dict[str, str]], tools, scenario) -> dict[str, Any]:
    """The turns asked so far, as chat messages and as the chat format's text."""
    pieces = chat_segments(asked, tools, scenario.data.chat_format)
    opener = "<start_of_turn>model\n" if scenario.data.chat_format == "gemma" else "<|im_start|>assistant\n"
    return {"text": "".join(text for text, _ in pieces) + opener, "messages": asked}


def longest_request(scenario) -> int:
    """The longest request the run sends, in tokens of the project's tokenizer: its
    prompt (with the BOS token a server adds) plus its output length."""
    from harness.data.tokenizer import load_tokenizer
    from harness.serving.loads import prompt_count

    tok = scenario.data.tokenizer
    handle = load_tokenizer(tok.kind, tok.vocab_size, tok.path)
    prompts = build_prompts(scenario, prompt_count(scenario.serve))
    sizes = [len(p.get("token_ids") or handle.encode(p["text"])) + 1 + p["output_tokens"] for p in prompts]
    return max(sizes)
