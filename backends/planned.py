"""Backends the product plans but this version does not implement yet.

They are listed so that `bench backends` tells the user what exists and why it is not
runnable here: what to install, or that the code is not written yet. Never a stub that
pretends to run.
"""

from __future__ import annotations

from harness.backend import BackendInfo, BackendOptions


class _NoOptions(BackendOptions):
    pass


PLANNED = [
    BackendInfo("jax-tunix", "JAX + Tunix PeftTrainer + Qwix LoRA (TPU, GPU)", ("jax", "tunix", "qwix"),
                "pip install -e '.[jax]'", _NoOptions, load=None, priority=20),
]
