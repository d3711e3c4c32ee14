"""Accelerator identity in one place: catalog keys, chip counting, datasheet peaks.

Backends report what the runtime calls the device ("NVIDIA H100 80GB HBM3", "TPU v5
lite"); cost and MFU need a stable key for it, and slice names count TensorCores on some
generations, not chips ("v5p-8" is 4 chips).
"""

from __future__ import annotations

import re
from pathlib import Path


def on_tpu_vm(dev: Path = Path("/dev")) -> bool:
    """Whether this host is a TPU VM: its chips are /dev/accel* (v4, v5e) or VFIO-bound
    (v5p, v6e). Read from the device files, never by importing a framework, so the core
    and every backend decide the same way before any runtime initialises."""
    vfio = dev / "vfio"
    return any(dev.glob("accel*")) or (vfio.is_dir() and any(p.name != "vfio" for p in vfio.iterdir()))


# Peak dense bf16 FLOP/s per chip, from the vendors' datasheets (metrics.md). A key
# without a peak (a device we can name but whose peak we have not verified) gets no MFU.
PEAK_BF16_FLOPS: dict[str, float] = {
    "tpu-v4": 275e12,  # cloud.google.com/tpu/docs/v4
    "tpu-v5e": 197e12,  # cloud.google.com/tpu/docs/v5e
    "tpu-v5p": 459e12,  # cloud.google.com/tpu/docs/v5p
    "tpu-v6e": 918e12,  # cloud.google.com/tpu/docs/v6e (Trillium)
    "a100-40gb": 312e12,  # NVIDIA A100 datasheet, dense BF16 tensor core
    "a100-80gb": 312e12,  # same die and clocks as the 40GB part
    "h100-sxm": 989e12,  # NVIDIA H100 datasheet, SXM5 dense BF16
    "h100-pcie": 756e12,  # NVIDIA H100 datasheet, PCIe dense BF16
    "h100-nvl": 835e12,  # NVIDIA H100 NVL datasheet: 1,671 TFLOPS BF16 with sparsity, half dense
    "h200": 989e12,  # NVIDIA H200 datasheet, dense BF16 (same die as H100 SXM)
    "gh200": 989e12,  # NVIDIA GH200 datasheet: the H100-class GPU of the superchip, dense BF16
    "l4": 121e12,  # NVIDIA L4 datasheet, dense BF16
    "l40s": 362e12,  # NVIDIA L40S datasheet: 733 TFLOPS BF16 with sparsity, half dense
    "l40": 181e12,  # NVIDIA L40 datasheet: 362 TFLOPS BF16 with sparsity, half dense
    "b200": 2250e12,  # NVIDIA HGX B200 datasheet: 4.5 PFLOPS FP16/BF16 with sparsity per GPU, half dense
}
# A CPU has no meaningful bf16 peak for this purpose: MFU is reported as absent.

# HBM per TPU chip (capacity, bytes; bandwidth, bytes/s), from the same datasheets: what
# a projection checks a compiled program against (harness.projection.projection).
HBM_BYTES: dict[str, int] = {
    "tpu-v4": 32 * 1024**3,  # cloud.google.com/tpu/docs/v4: 32 GiB HBM2
    "tpu-v5e": 16 * 1024**3,  # cloud.google.com/tpu/docs/v5e: 16 GiB HBM2
    "tpu-v5p": 95 * 1024**3,  # cloud.google.com/tpu/docs/v5p: 95 GiB HBM2e
    "tpu-v6e": 32 * 1024**3,  # cloud.google.com/tpu/docs/v6e: 32 GiB HBM
}
HBM_BYTES_PER_S: dict[str, float] = {
    "tpu-v4": 1200e9,  # 1,200 GB/s
    "tpu-v5e": 819e9,  # 819 GB/s
    "tpu-v5p": 2765e9,  # 2,765 GB/s
    "tpu-v6e": 1640e9,  # 1,640 GB/s
}

# Usable HBM per chip: what a compiled program may fill. The compiler's own limit where
# it states one (v5e: "exceeds available HBM (15.75G)", docs/measurements/projections-and-calibration.md, issue 28;
# v6e: 31.25G, issue 37),
# else the datasheet where it already is the user-allocatable figure (v5p: 95 GiB of 96
# physical, cloud.google.com/tpu/docs/v5p), else the datasheet less HBM_RESERVE_FRACTION.
HBM_RESERVE_FRACTION = 1 / 64  # the share v5e's compiler withholds (16 GiB -> 15.75 GiB)
HBM_USABLE_BYTES: dict[str, tuple[int, str]] = {
    "tpu-v5e": (int(15.75 * 1024**3), "the TPU compiler's limit (its out-of-memory message: 15.75G)"),
    "tpu-v5p": (95 * 1024**3, "datasheet, already user-allocatable (96 GiB physical)"),
    # Llama 3.1 8B's compile for v6e-8 (docs/measurements/projections-and-calibration.md, "Calibration"): "exceeds available HBM (31.25G)".
    "tpu-v6e": (int(31.25 * 1024**3), "the TPU compiler's limit (its out-of-memory message: 31.25G)"),
}


def usable_hbm(key: str) -> tuple[int, str] | None:
    """(bytes a program may use per chip, where that figure comes from), or None."""
    if key in HBM_USABLE_BYTES:
        return HBM_USABLE_BYTES[key]
    if key not in HBM_BYTES:
        return None
    reserve = HBM_RESERVE_FRACTION
    return int(HBM_BYTES[key] * (1 - reserve)), f"datasheet less a {reserve:.4%} reserve (v5e's compiler's share)"


# Inter-chip bandwidth per chip, bytes/s, bidirectional (every link of the chip, both
# ways): what the projection's collectives term divides a device's collective bytes by.
ICI_BYTES_PER_S: dict[str, float] = {
    "tpu-v5e": 400e9,  # cloud.google.com/tpu/docs/v5e: bidirectional ICI bandwidth per chip 400 GBps (1,600 Gbps)
    "tpu-v5p": 1200e9,  # cloud.google.com/tpu/docs/v5p: bidirectional ICI bandwidth per chip 1,200 GBps
    "tpu-v6e": 800e9,  # cloud.google.com/tpu/docs/v6e: bidirectional ICI bandwidth per chip 800 GBps
}
# The GPU side of the same bound (the calibration on a measured card): NVLink per GPU,
# bidirectional, and HBM bandwidth, from NVIDIA's datasheets.
NVLINK_BYTES_PER_S: dict[str, float] = {
    "h100-sxm": 900e9,  # NVIDIA H100 datasheet: NVLink 900 GB/s (SXM5)
    "h200": 900e9,  # NVIDIA H200 datasheet: NVLink 900 GB/s
}
# GPU memory per card (bytes, decimal GB as the datasheets state it): how many cards
# auto's vLLM shards a model's weights over (harness.serving.engines).
GPU_MEMORY_BYTES: dict[str, int] = {
    "h100-sxm": 80 * 10**9,  # NVIDIA H100 datasheet: 80 GB HBM3 (SXM5)
    "h100-pcie": 80 * 10**9,  # NVIDIA H100 datasheet: 80 GB HBM2e (PCIe)
    "h200": 141 * 10**9,  # NVIDIA H200 datasheet: 141 GB HBM3e
    "a100-40gb": 40 * 10**9,  # NVIDIA A100 datasheet: 40 GB HBM2
    "a100-80gb": 80 * 10**9,  # NVIDIA A100 datasheet: 80 GB HBM2e
    "l4": 24 * 10**9,  # NVIDIA L4 datasheet: 24 GB GDDR6
}
GPU_HBM_BYTES_PER_S: dict[str, float] = {
    "h100-sxm": 3.35e12,  # NVIDIA H100 datasheet: 3.35 TB/s (SXM5, 80 GB HBM3)
    "h200": 4.8e12,  # NVIDIA H200 datasheet: 4.8 TB/s (141 GB HBM3e)
    # Added for the serving projection's calibration (a published vLLM result on an A100 40GB):
    "a100-40gb": 1.555e12,  # NVIDIA A100 datasheet: 1,555 GB/s (40GB HBM2)
}


# The GPU projection's datasheet figures (issue 43: `bench plan --project-for KEY:N`,
# harness/projection/gpu_projection.py), per GPU, from NVIDIA's datasheets: memory capacity in
# bytes (GB = 10^9 bytes, as the datasheets write it), memory bandwidth in bytes/s, and
# the GPU-to-GPU link (bidirectional, bytes/s) with its name. Kept apart from the
# tables above so that additions elsewhere do not collide with them.
GPU_PROJECTION_DATASHEET: dict[str, dict[str, float | str]] = {
    "h100-sxm": {  # NVIDIA H100 Tensor Core GPU datasheet, SXM: 80 GB HBM3, 3.35 TB/s, NVLink 900 GB/s
        "memory_bytes": 80e9,
        "memory_bytes_per_s": 3.35e12,
        "link_bytes_per_s": 900e9,
        "link": "NVLink 4",
    },
    "h200": {  # NVIDIA H200 Tensor Core GPU datasheet, SXM: 141 GB HBM3e, 4.8 TB/s, NVLink 900 GB/s
        "memory_bytes": 141e9,
        "memory_bytes_per_s": 4.8e12,
        "link_bytes_per_s": 900e9,
        "link": "NVLink 4",
    },
    "b200": {  # NVIDIA DGX B200 datasheet: 1,440 GB and 64 TB/s HBM3e over 8 GPUs; NVLink 5 1.8 TB/s per GPU
        "memory_bytes": 180e9,
        "memory_bytes_per_s": 8e12,
        "link_bytes_per_s": 1800e9,
        "link": "NVLink 5",
    },
    "a100-40gb": {  # NVIDIA A100 Tensor Core GPU datasheet, SXM 40 GB: HBM2 1,555 GB/s, NVLink 600 GB/s
        "memory_bytes": 40e9,
        "memory_bytes_per_s": 1555e9,
        "link_bytes_per_s": 600e9,
        "link": "NVLink 3",
    },
    "a100-80gb": {  # NVIDIA A100 Tensor Core GPU datasheet, SXM 80 GB: HBM2e 2,039 GB/s, NVLink 600 GB/s
        "memory_bytes": 80e9,
        "memory_bytes_per_s": 2039e9,
        "link_bytes_per_s": 600e9,
        "link": "NVLink 3",
    },
    "l4": {  # NVIDIA L4 datasheet: 24 GB GDDR6, 300 GB/s; no NVLink: PCIe Gen4 x16, 64 GB/s both ways
        "memory_bytes": 24e9,
        "memory_bytes_per_s": 300e9,
        "link_bytes_per_s": 64e9,
        "link": "PCIe Gen4 x16",
    },
}


def interconnect_bytes_per_s(key: str) -> float | None:
    """A chip's inter-chip bandwidth (ICI on a TPU, NVLink on a GPU), or None if unknown."""
    return ICI_BYTES_PER_S.get(key) or NVLINK_BYTES_PER_S.get(key)


# Generations whose slice names count TensorCores, two per chip.
_CORES_PER_CHIP = {"tpu-v4": 2, "tpu-v5p": 2}

# Device names exactly as the runtimes report them -> catalog key. Whole-name matches
# only: a substring test once took an L40S for an L4 (3x the wrong peak, the wrong
# price) and a GH200 for an H200. A name not listed is unknown: no MFU, no price.
_CUDA_NAMES: tuple[tuple[str, str], ...] = (  # torch.cuda.get_device_name / nvidia-smi
    (r"nvidia h100 80gb hbm3|nvidia h100 sxm5? ?(80gb|94gb)?|nvidia h100", "h100-sxm"),
    (r"nvidia h100 pcie", "h100-pcie"),
    (r"nvidia h100 nvl", "h100-nvl"),
    (r"nvidia h200|nvidia h200 141gb hbm3e", "h200"),
    (r"nvidia gh200 (480gb|144g hbm3e|96gb hbm3)", "gh200"),
    (r"nvidia a100-(sxm4|pcie)-40gb|nvidia a100 40gb pcie", "a100-40gb"),
    (r"nvidia a100-(sxm4|pcie)-80gb|nvidia a100 80gb pcie", "a100-80gb"),
    (r"nvidia l4", "l4"),
    (r"nvidia l40", "l40"),
    (r"nvidia l40s", "l40s"),
    (r"nvidia b200", "b200"),
)
_TPU_NAMES: tuple[tuple[str, str], ...] = (  # JAX device_kind, or a slice/generation name
    (r"tpu v4|v4(-\d+)?", "tpu-v4"),
    (r"tpu v5 lite|tpu v5e|v5e(-\d+)?|v5litepod(-\d+)?|v5lite(-\d+)?", "tpu-v5e"),
    (r"tpu v5|tpu v5p|v5p(-\d+)?", "tpu-v5p"),
    (r"tpu v6 lite|tpu v6e|v6e(-\d+)?", "tpu-v6e"),
    (r"tpu7x|tpu 7x|tpu7x(-\d+)?|7x(-\d+)?", "tpu-7x"),  # Ironwood: named, no verified peak or price yet
)


def identify(kind: str, name: str) -> str | None:
    """The catalog key of a device name as its runtime reports it, or None if unknown."""
    text = " ".join((name or "").lower().split())
    table = {"cuda": _CUDA_NAMES, "tpu": _TPU_NAMES}.get(kind, ())
    for pattern, key in table:
        if re.fullmatch(pattern, text):
            return key
    return None


def catalog_key(kind: str, name: str) -> str:
    """`cpu`, `h100-sxm`, `tpu-v5e`, ...: the key for prices and peaks. An unknown device
    is `<kind>-unknown`, which has no peak and no price (never a neighbour's)."""
    if kind == "cpu":
        return "cpu"
    return identify(kind, name) or f"{kind}-unknown"


def is_unknown(key: str) -> bool:
    return key.endswith("-unknown")


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
