"""Counting the host's waits for the device inside a JAX training step.

The JAX twin of backends/torch_common/syncs.py, for torchax and jax-tunix. JAX dispatch
is asynchronous on every platform, CPU included: the host waits only where it asks for a
value or for readiness. Those requests all pass through `jax.Array` (ArrayImpl):

- a device-to-host read: `_value`, which `float()`, `int()`, `bool()`, `.item()`,
  `.tolist()`, `np.asarray()` and `jax.device_get` use; counted when it actually
  transfers (not when the array's host copy is already cached);
- `np.asarray(array)` / `np.array(array)`: on the CPU numpy reads a jax array through
  the buffer protocol, past `_value` (on an accelerator it goes through `_value`), so
  numpy's two entry points are wrapped too and count a call given a jax array;
- a wait: `Array.block_until_ready()` and `jax.block_until_ready(tree)`, one count per
  call that finds an array still being computed (the tree's leaves are one wait); a
  call on arrays already done returns at once, with no device round trip, and is no
  wait (e.g. Tunix's in-flight throttle on a step the timing already synchronised).

Python-level counting sees what Python code asks for (bench's, Tunix's, torchax's);
a wait inside XLA's C++ runtime is invisible here (a GPU trace shows those).
"""

from __future__ import annotations

import threading

from harness.run.backend import HostWaitCounter

_COUNTERS: list[JaxHostSyncCounter] = []
_INSIDE = threading.local()  # inside a counted call: its own nested reads are not new waits


class JaxHostSyncCounter(HostWaitCounter):
    def __init__(self) -> None:
        super().__init__()
        _install(self)


def _add_one() -> None:
    for counter in _COUNTERS:
        counter.count += counter.active


def _pending(tree) -> bool:
    """Whether any jax array in `tree` is still being computed."""
    import jax

    return any(isinstance(leaf, jax.Array) and not leaf.is_ready() for leaf in jax.tree_util.tree_leaves(tree))


def _counted_call(function, waits_only_if_pending: bool = False):
    """`function`, counting one wait per outermost call (with `waits_only_if_pending`:
    only a call whose first argument, an array or a tree, is still being computed)."""

    def wrapper(*args, **kwargs):
        if getattr(_INSIDE, "depth", 0):
            return function(*args, **kwargs)
        if not waits_only_if_pending or _pending(args[0] if args else None):
            _add_one()
        _INSIDE.depth = 1
        try:
            return function(*args, **kwargs)
        finally:
            _INSIDE.depth = 0

    return _marked(wrapper, function)


def _marked(wrapper, wrapped):
    """`wrapper`, named like `wrapped` and marked as a counting wrapper of it (what
    `is_counted` and inspect.unwrap read)."""
    wrapper.__name__ = getattr(wrapped, "__name__", "counted")
    wrapper.__doc__ = wrapped.__doc__
    wrapper.__wrapped__ = wrapped
    wrapper.counts_host_waits = True
    return wrapper


def is_counted(function) -> bool:
    return getattr(function, "counts_host_waits", False)


def _counted_value(getter):
    """ArrayImpl._value's getter, counting a read that transfers (no cached host copy)."""

    def value(self):
        if getattr(self, "_npy_value", None) is None and not getattr(_INSIDE, "depth", 0):
            _add_one()
        return getter(self)

    return _marked(value, getter)


def _counted_numpy(function, array_type):
    """numpy's asarray/array, counting a call whose argument is a jax array."""
    counted = _counted_call(function)

    def wrapper(value, *args, **kwargs):
        if isinstance(value, array_type):
            return counted(value, *args, **kwargs)
        return function(value, *args, **kwargs)

    return _marked(wrapper, function)


def _install(counter: JaxHostSyncCounter) -> None:
    """Wrap ArrayImpl's host paths, numpy's readers and jax.block_until_ready, once
    per process (read from jax.block_until_ready itself, not from the counter list: a
    wrapper around a wrapper would count twice)."""
    import jax

    if not is_counted(jax.block_until_ready):
        import numpy as np
        from jax._src.array import ArrayImpl

        ArrayImpl._value = property(_counted_value(ArrayImpl._value.fget))
        ArrayImpl.block_until_ready = _counted_call(ArrayImpl.block_until_ready, waits_only_if_pending=True)
        jax.block_until_ready = _counted_call(jax.block_until_ready, waits_only_if_pending=True)
        np.asarray = _counted_numpy(np.asarray, jax.Array)
        np.array = _counted_numpy(np.array, jax.Array)
    _COUNTERS.append(counter)
