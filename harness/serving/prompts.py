"""Prompts for the serving benchmark: the same function-calling conversations the
fine-tune trains on (developer and user turns, the assistant's turn left to the model),
or seeded synthetic text of a given length."""

from __future__ import annotations

import random
from typing import Any

from harness.data.tokenizer import chat_segments

_WORDS = ("steps", "sleep", "heart", "rate", "battery", "workout", "water", "goal", "today", "yesterday",
          "calories", "stress", "running", "yoga", "minutes", "score", "level", "week", "average", "daily")


def build_prompts(scenario, count: int) -> list[dict[str, Any]]:
    """`count` prompts: {"text": for /completions, "messages": for /chat/completions}."""
    spec = scenario.serve.prompts
    if spec.source == "synthetic":
        rng = random.Random(spec.seed)
        texts = [" ".join(rng.choice(_WORDS) for _ in range(spec.input_words)) for _ in range(count)]
        return [{"text": t, "messages": [{"role": "user", "content": t}]} for t in texts]
    from harness.data.batches import load_examples

    examples = load_examples(scenario)
    prompts = []
    for i in range(count):
        messages, tools = examples[i % len(examples)]
        asked = [m for m in messages if m["role"] != "assistant"]
        pieces = chat_segments(asked, tools, scenario.data.chat_format)
        opener = "<start_of_turn>model\n" if scenario.data.chat_format == "gemma" else "<|im_start|>assistant\n"
        prompts.append({"text": "".join(text for text, _ in pieces) + opener, "messages": asked})
    return prompts
