"""The one mapping between our architecture fields (`harness.scenario.presets`) and a Hugging
Face text config's names, both ways. Standard library only: jax-tunix reads a
checkpoint's `config.json` with it in an environment that may have no torch."""

from __future__ import annotations

from typing import Any

# Our field -> the Hugging Face config's (the sizes every family's config states).
HF_NAMES = {
    "vocab_size": "vocab_size",
    "hidden_size": "hidden_size",
    "intermediate_size": "intermediate_size",
    "num_layers": "num_hidden_layers",
    "num_heads": "num_attention_heads",
    "num_kv_heads": "num_key_value_heads",
}


def to_hf(arch: dict[str, Any]) -> dict[str, Any]:
    """Our architecture's sizes as a Hugging Face config's keyword arguments."""
    return {hf: arch[ours] for ours, hf in HF_NAMES.items()}


def from_hf(config: dict[str, Any] | Any) -> dict[str, Any]:
    """A Hugging Face config's sizes (its `config.json` as a dict, or a config object)
    under our field names, in `HF_NAMES`' order."""
    read = config.__getitem__ if isinstance(config, dict) else lambda name: getattr(config, name)
    return {ours: read(hf) for ours, hf in HF_NAMES.items()}
