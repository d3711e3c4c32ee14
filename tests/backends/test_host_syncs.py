"""The host-sync counter (backends/torch_common/syncs.py): it sees what makes a host
wait on an accelerator, and nothing outside its block."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from backends.torch_common.syncs import HostSyncCounter  # noqa: E402


def test_counts_host_reads_inside_its_block_only():
    counter = HostSyncCounter(torch.device("cpu"))
    x = torch.ones(3)
    x.sum().item()  # outside: not counted
    with counter.counting():
        x.sum().item()
        float(x[0])
        if x.sum() > 0:  # a tensor used as a Python bool: the host must see its value
            x.tolist()
        y = x * 2  # device work: no wait
    assert counter.take() == 4
    assert counter.take() == 0  # take() resets
    assert y.shape == (3,)


def test_an_optimizers_host_side_step_counter_is_no_sync():
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)  # reads its CPU step tensors with .item()
    counter = HostSyncCounter(torch.device("cpu"))
    with counter.counting():
        model(torch.ones(2, 4)).sum().backward()
        optimizer.step()
    assert counter.take() == 0
