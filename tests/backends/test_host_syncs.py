"""The host-sync counters (backends/torch_common/syncs.py, backends/jax_common/syncs.py):
each sees what makes a host wait on an accelerator, and nothing outside its block. That
every backend's measured steps wait at most once is asserted on real runs in
tests/backends/test_parity.py."""

from __future__ import annotations

import inspect

import pytest

torch = pytest.importorskip("torch")

from backends.torch_common import syncs as torch_syncs  # noqa: E402
from backends.torch_common.syncs import HostSyncCounter  # noqa: E402


@pytest.fixture(autouse=True)
def unwrapped_during_each_test(monkeypatch):
    """The counters wrap framework methods for the life of a process, and an earlier
    test in this worker may have run a backend in-process. Each test here starts on the
    unwrapped methods with no counters; afterwards what was there before is put back."""
    for name in torch_syncs._PATCHED:
        monkeypatch.setattr(torch.Tensor, name, inspect.unwrap(getattr(torch.Tensor, name)))
    monkeypatch.setattr(torch_syncs, "_COUNTERS", [])
    try:
        import jax
        import numpy as np
        from jax._src.array import ArrayImpl

        from backends.jax_common import syncs as jax_syncs
    except ImportError:
        return
    monkeypatch.setattr(ArrayImpl, "_value", property(inspect.unwrap(ArrayImpl.__dict__["_value"].fget)))
    monkeypatch.setattr(ArrayImpl, "block_until_ready", inspect.unwrap(ArrayImpl.block_until_ready))
    monkeypatch.setattr(jax, "block_until_ready", inspect.unwrap(jax.block_until_ready))
    monkeypatch.setattr(np, "asarray", inspect.unwrap(np.asarray))
    monkeypatch.setattr(np, "array", inspect.unwrap(np.array))
    monkeypatch.setattr(jax_syncs, "_COUNTERS", [])


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


def test_the_jax_counter_counts_each_host_read_and_wait_and_no_device_work():
    jax = pytest.importorskip("jax")
    import numpy as np

    from backends.jax_common.syncs import JaxHostSyncCounter

    jnp = jax.numpy
    counter = JaxHostSyncCounter()
    x = jnp.ones(3) * 2
    float(x[0])  # outside: not counted
    reads = [
        lambda: float(x[0]),
        lambda: int(x.sum()),
        lambda: bool(x.sum() > 0),
        lambda: x.sum().item(),  # item() reads through np.asarray: one read, not two
        lambda: x.tolist(),
        lambda: np.asarray(x),  # numpy's buffer protocol on the CPU, past jax.Array's own paths
        lambda: np.array(x),
        lambda: jax.device_get(x),
    ]
    for read in reads:
        with counter.counting():
            read()
        assert counter.take() == 1, read
    # A wait counts when it finds work still running (a 3000^3 matmul just dispatched),
    # not when everything is done already (no device round trip).
    big = jnp.ones((3000, 3000))
    for wait in (lambda a: a.block_until_ready(), lambda a: jax.block_until_ready((x, a))):
        running = big @ big
        with counter.counting():
            wait(running)  # a tree of arrays: one wait
            wait(running)  # done now: returns at once
        assert counter.take() == 1, wait
    with counter.counting():
        y = jax.jit(lambda a: a * 3)(x) + x  # dispatched device work: no wait
        np.asarray([1.0, 2.0])  # numpy of host data: no wait
    assert counter.take() == 0
    assert y.shape == (3,)


def test_a_second_counter_after_the_list_was_emptied_wraps_nothing_twice():
    """Once per process is read from the methods: a counter made after the counter list
    was replaced (as a fresh worker state, or this file's fixture, does) still counts
    one read once, and torch.optim's step reads are still seen as its own."""
    HostSyncCounter(torch.device("cpu"))
    torch_syncs._COUNTERS = []  # monkeypatch puts the fixture's list back afterwards
    counter = HostSyncCounter(torch.device("cpu"))
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    with counter.counting():
        torch.ones(2).sum().item()
        model(torch.ones(2, 4)).sum().backward()
        optimizer.step()
    assert counter.take() == 1
    assert inspect.unwrap(torch.Tensor.item) is not torch.Tensor.item
    assert not torch_syncs.is_counted(inspect.unwrap(torch.Tensor.item))
    torch_syncs.uninstall()  # what a process that ran a backend in-process calls after it
    assert torch_syncs._COUNTERS == [] and not any(
        torch_syncs.is_counted(getattr(torch.Tensor, name)) for name in torch_syncs._PATCHED
    )
    with counter.counting():
        torch.ones(2).sum().item()
    assert counter.take() == 0


def test_the_jax_counter_made_twice_counts_a_read_once():
    jax = pytest.importorskip("jax")
    from backends.jax_common import syncs as jax_syncs

    jax_syncs.JaxHostSyncCounter()
    jax_syncs._COUNTERS = []
    counter = jax_syncs.JaxHostSyncCounter()
    x = jax.numpy.ones(3) * 2
    with counter.counting():
        float(x[0])
    assert counter.take() == 1


def test_each_test_starts_unwrapped_though_earlier_tests_wrapped():
    """The earlier tests in this file made counters (wrapping the methods); the fixture
    hands this one the originals, so its list of what to unwrap covers what _install wraps."""
    assert torch_syncs._COUNTERS == []
    assert not any(torch_syncs.is_counted(getattr(torch.Tensor, name)) for name in torch_syncs._PATCHED)
    jax = pytest.importorskip("jax")
    import numpy as np
    from jax._src.array import ArrayImpl

    from backends.jax_common import syncs as jax_syncs

    def jax_paths():
        return {
            "ArrayImpl._value": ArrayImpl.__dict__["_value"].fget,
            "ArrayImpl.block_until_ready": ArrayImpl.block_until_ready,
            "jax.block_until_ready": jax.block_until_ready,
            "np.asarray": np.asarray,
            "np.array": np.array,
        }

    assert jax_syncs._COUNTERS == []
    assert not any(jax_syncs.is_counted(f) for f in jax_paths().values()), jax_paths()
    jax_syncs.JaxHostSyncCounter()  # the fixture's list is _install's: each is now wrapped
    assert all(jax_syncs.is_counted(f) for f in jax_paths().values()), jax_paths()
