"""A small shim for torchax 0.0.13 on torch >= 2.10.

torchax builds tables (AMP cast policies, decompositions) that name the named-tensor
overloads of some aten ops (`prod.dim_Dimname`, `index_copy.dimname`, ...). Newer torch
removed those overloads, so `import torchax` fails with AttributeError although torchax
never calls them. This makes the lookup of a missing named-tensor overload (`*Dimname*`, `*names*`: 21 of them in torchax 0.0.13) return an inert
stand-in instead; every other lookup is untouched. Installed only by this backend, before
torchax is imported; a no-op on a torch that still has the overloads (2.9).
"""

from __future__ import annotations


class RemovedOverload:
    """Stands in for an overload this torch no longer has; calling it is an error."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<removed op {self.name}>"

    def __call__(self, *args, **kwargs):
        raise NotImplementedError(f"{self.name} does not exist in this torch")


def allow_removed_named_overloads() -> None:
    import torch._ops as ops

    original = ops.OpOverloadPacket.__getattr__
    if getattr(original, "_bench_shim", False):
        return

    def lookup(self, key):
        try:
            return original(self, key)
        except AttributeError:
            if "dimname" in key.lower() or "names" in key.split("_"):
                return RemovedOverload(f"{self._qualified_op_name}.{key}")
            raise

    lookup._bench_shim = True
    ops.OpOverloadPacket.__getattr__ = lookup
