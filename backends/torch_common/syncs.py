"""Counting the host's waits for the device inside a training step.

A step that makes the host wait (a loss read, a data-dependent branch, a mask inspected
on the host) stalls the launch queue: the GPU idles while Python catches up. The loop
counts these inside every issued step (`harness.run.loop`), so a record shows how many a
backend pays beyond the one sync that timing needs.

- On CUDA: PyTorch's own sync debug mode flags every synchronising CUDA call (C++
  level, e.g. `nonzero`, `.item()`, a blocking copy); each flag is counted.
- Elsewhere (CPU, where nothing is asynchronous): the Python-level calls that would
  make the host wait on an accelerator are counted: `.item()`, `.tolist()`, `.cpu()`,
  `.numpy()`, and a tensor used as a Python bool, float, int or index; not torch.optim's
  reads of its step counters, which live on the host on every device. Ops that sync
  inside C++ (e.g. `nonzero`) are seen on CUDA only.
"""

from __future__ import annotations

import contextlib
import sys
import warnings

import torch

from harness.run.backend import HostWaitCounter

_PATCHED = ("item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__", "__index__")


class HostSyncCounter(HostWaitCounter):
    def __init__(self, device: torch.device) -> None:
        super().__init__()
        self.cuda = device.type == "cuda"
        if not self.cuda:
            _install(self)

    @contextlib.contextmanager
    def counting(self):
        """On CUDA, PyTorch's sync debug mode flags each synchronising call; elsewhere the
        patched Tensor methods count while active."""
        if not self.cuda:
            with super().counting():
                yield self
            return
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                yield self
            finally:
                torch.cuda.set_sync_debug_mode("default")
        self.count += sum("synchronizing" in str(w.message) for w in caught)


_COUNTERS: list[HostSyncCounter] = []
# Callers whose tensors live on the host on every device: torch.optim keeps each
# parameter's step count as a CPU tensor (unless fused or capturable) and reads it
# with .item(): no device sync on a GPU either.
_HOST_STATE_MODULES = ("torch.optim.",)


def _from_host_state(frame) -> bool:
    return frame.f_globals.get("__name__", "").startswith(_HOST_STATE_MODULES)


def _install(counter: HostSyncCounter) -> None:
    """Wrap the Tensor methods once per process; each wrapper adds a count to the
    counters that are counting, then does what the method did. Whether they are wrapped
    is read from the methods themselves, not from the counter list: a wrapper around a
    wrapper would count every read twice and take the outer wrapper for the caller."""
    if not is_counted(torch.Tensor.item):
        for name in _PATCHED:
            setattr(torch.Tensor, name, _counted(getattr(torch.Tensor, name)))
    _COUNTERS.append(counter)


def uninstall() -> None:
    """Put the original Tensor methods back and forget every counter (for a process that
    ran a backend in-process and goes on with other work, e.g. a test)."""
    for name in _PATCHED:
        method = getattr(torch.Tensor, name)
        if is_counted(method):
            setattr(torch.Tensor, name, method.__wrapped__)
    _COUNTERS.clear()


def _counted(method):
    def wrapper(self, *args, **kwargs):
        if any(c.active for c in _COUNTERS) and not _from_host_state(sys._getframe(1)):
            for counter in _COUNTERS:
                counter.count += counter.active
        return method(self, *args, **kwargs)

    wrapper.__name__ = getattr(method, "__name__", "counted")
    wrapper.__wrapped__ = method  # what inspect.unwrap (and a test restoring the originals) reads
    wrapper.counts_host_waits = True
    return wrapper


def is_counted(method) -> bool:
    return getattr(method, "counts_host_waits", False)
