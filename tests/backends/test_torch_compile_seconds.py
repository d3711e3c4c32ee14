"""Compile seconds of the PyTorch backends count each backward compile once: a static
graph's backward is compiled lazily at its first backward, a dynamic graph's inside the
frame's compilation (the second shape under dynamo's automatic dynamic shapes)."""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")

from backends.torch_common import execution  # noqa: E402


@pytest.mark.slow
def test_compile_seconds_fit_inside_the_wall_time_of_the_compiling_calls():
    import torch._dynamo
    from torch._dynamo.utils import compilation_time_metrics

    torch._dynamo.reset()
    compilation_time_metrics.clear()  # this process's earlier compilations are not this test's
    model = torch.nn.Linear(16, 16)
    step = torch.compile(lambda x: model(x).relu().sum(), backend="inductor")
    walls = []
    for rows in (4, 6):  # static graph (lazy backward), then one dynamic graph
        start = time.perf_counter()
        step(torch.randn(rows, 16)).backward()
        walls.append(time.perf_counter() - start)
    seconds = execution.compile_seconds()
    # Compiling is most of these calls, and never more than all of them: the dynamic
    # graph's backward, compiled inside its frame, would push a double count past the wall.
    assert 0.5 * sum(walls) <= seconds <= sum(walls), (seconds, walls)
