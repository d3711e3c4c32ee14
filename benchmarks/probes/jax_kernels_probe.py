"""Do the JAX backends' unmasked attention and chunked loss match their references? Answer: docs/measurements/device-suite.md, "Attention without a padding mask"; docs/measurements/xla-and-jax-backends.md, "Chunked cross-entropy".
The attention and loss-kernel probes of one JAX stack in one interpreter. Each was its own
interpreter before: a torchax start spends ~11 s on imports and ~5 s on its first model
build before compiling anything. Run by tests/backends/test_jax_attention.py and
tests/backends/test_jax_loss_kernels.py (one run shared by both, tests/conftest.py's
shared_across_workers).

    PYTHONPATH=. python benchmarks/probes/jax_kernels_probe.py torchax|jax-tunix

Prints one JSON line: {"attention": jax_attention_probe's answer, "loss": jax_loss_probe's}.
The loss probe runs last: it sets the chunk plan (the loss module's shared state) itself."""

from __future__ import annotations

import json
import sys

import jax_attention_probe
import jax_loss_probe


def probe(backend: str) -> dict:
    attention = {"torchax": jax_attention_probe.torchax_probe, "jax-tunix": jax_attention_probe.tunix_probe}
    loss = {"torchax": jax_loss_probe.torchax_probe, "jax-tunix": jax_loss_probe.tunix_probe}
    return {"attention": attention[backend](), "loss": loss[backend]()}


if __name__ == "__main__":
    print(json.dumps(probe(sys.argv[1])))
