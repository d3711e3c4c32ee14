"""Accelerator identity in one place: catalog keys, chip counting, datasheet peaks.

Backends report what the runtime calls the device ("NVIDIA H100 80GB HBM3", "TPU v5
lite"); cost and MFU need a stable key for it, and slice names count TensorCores on some
generations, not chips ("v5p-8" is 4 chips).
"""

from __future__ import annotations

import re

# Peak dense bf16 FLOP/s per chip, from the vendors' datasheets (metrics.md):
PEAK_BF16_FLOPS: dict[str, float] = {
    "tpu-v4": 275e12,  # cloud.google.com/tpu/docs/v4
    "tpu-v5e": 197e12,  # cloud.google.com/tpu/docs/v5e
    "tpu-v5p": 459e12,  # cloud.google.com/tpu/docs/v5p
    "tpu-v6e": 918e12,  # cloud.google.com/tpu/docs/v6e (Trillium)
    "a100": 312e12,  # NVIDIA A100 datasheet, dense BF16 tensor core
    "h100-sxm": 989e12,  # NVIDIA H100 datasheet, SXM5 dense BF16
    "h100-pcie": 756e12,  # NVIDIA H100 datasheet, PCIe dense BF16
    "h200": 989e12,  # NVIDIA H200 datasheet, dense BF16 (same die as H100 SXM)
    "l4": 121e12,  # NVIDIA L4 datasheet, dense BF16
}
# A CPU has no meaningful bf16 peak for this purpose: MFU is reported as absent.

# Generations whose slice names count TensorCores, two per chip.
_CORES_PER_CHIP = {"tpu-v4": 2, "tpu-v5p": 2}


def catalog_key(kind: str, name: str) -> str:
    """`cpu`, `h100-sxm`, `tpu-v5e`, ...: the key for prices and peaks."""
    text = (name or "").lower()
    if kind == "cpu":
        return "cpu"
    if kind == "cuda":
        for needle, key in (("h200", "h200"), ("h100", "h100-sxm"), ("a100", "a100"), ("l4", "l4")):
            if needle in text:
                return "h100-pcie" if key == "h100-sxm" and "pcie" in text else key
        return "gpu-unknown"
    if kind == "tpu":
        if "v6" in text:
            return "tpu-v6e"
        if "v5 lite" in text or "v5e" in text or "v5lite" in text:
            return "tpu-v5e"
        if "v5" in text:
            return "tpu-v5p"
        if "v4" in text:
            return "tpu-v4"
        return "tpu-unknown"
    return f"{kind}-unknown"


def chips_in_slice(slice_name: str) -> int:
    """Chips in a slice name such as `v5p-8` (4 chips) or `v5litepod-8` (8 chips)."""
    match = re.fullmatch(r"(v\d+[a-z]*?)(?:litepod|pod)?-(\d+)", slice_name.strip().lower())
    if not match:
        raise ValueError(f"not a TPU slice name: {slice_name!r}")
    generation, count = match.group(1), int(match.group(2))
    key = catalog_key("tpu", "v5e" if generation == "v5litepod" else generation)
    if "lite" in slice_name.lower():
        key = "tpu-v5e"
    return max(1, count // _CORES_PER_CHIP.get(key, 1))


def peak_flops(key: str) -> float | None:
    return PEAK_BF16_FLOPS.get(key)
