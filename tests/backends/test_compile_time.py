"""Compile time is tracing + lowering + compiling (metrics.md): the JAX backends' compile
counter is checked against a direct measurement of each stage (JAX's ahead-of-time API
times trace, lower and compile separately)."""

from __future__ import annotations

import time

import pytest


@pytest.mark.serial
def test_jax_compile_time_is_tracing_plus_lowering_plus_compiling():
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    from backends.jax_common import CompileCounter

    def bench_compile_probe(x):
        for _ in range(200):  # enough ops that tracing and lowering take measurable time
            x = jnp.tanh(x @ x.T) + 1.0
        return x.sum()

    x = jnp.ones((64, 64)).block_until_ready()
    counter = CompileCounter("bench_compile_probe")
    counter.ensure_listening()
    try:
        staged = jax.jit(bench_compile_probe)
        start = time.perf_counter()
        traced = staged.trace(x)
        traced_at = time.perf_counter()
        lowered = traced.lower()
        lowered_at = time.perf_counter()
        lowered.compile()
        compiled_at = time.perf_counter()
    finally:
        counter._forget()
    tracing, lowering, compiling = traced_at - start, lowered_at - traced_at, compiled_at - lowered_at
    stats = counter.snapshot()
    assert stats.count == 1
    # Within the directly measured total, and well beyond the XLA compile stage alone.
    assert stats.seconds <= tracing + lowering + compiling
    assert stats.seconds >= 0.7 * (tracing + lowering + compiling)
    assert stats.seconds > compiling * 0.95 + 0.5 * (tracing + lowering)


def test_a_persistent_jax_compilation_cache_is_stated(tmp_path):
    jax = pytest.importorskip("jax")

    from backends.jax_common import JaxDeviceFacts

    assert JaxDeviceFacts().compile_cache()["persistent"] is False
    previous = jax.config.jax_compilation_cache_dir
    jax.config.update("jax_compilation_cache_dir", str(tmp_path))
    try:
        cache = JaxDeviceFacts().compile_cache()
    finally:
        jax.config.update("jax_compilation_cache_dir", previous)
    assert cache["persistent"] is True and cache["dir"] == str(tmp_path)
