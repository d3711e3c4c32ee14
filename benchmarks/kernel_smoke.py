"""The optional kernels the device suite's runs may take, each tried on the device in
its own process in the suite's first seconds (all at once, each bounded): Liger Kernel's
fused linear cross-entropy, PyTorch's compiled FlexAttention with a block mask, and
cuDNN attention through JAX. Each: a tiny forward and backward; ok, or the reason it
cannot run (its last error line, "not installed", "no CUDA device", or its time limit).

    python benchmarks/kernel_smoke.py OUT_JSON [limit_s]

Writes {kernel: {"ok": bool, "reason": str, "seconds": float, "fallback": {field: value}}}
to OUT_JSON; benchmarks/device_suite.py pins each failed kernel's fallback on the runs
(the reason in $OUT/runs.tsv and $OUT/kernels.json)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

NO_CUDA = 3  # exit code of a check that found no CUDA device

LIGER = """
import torch, sys
if not torch.cuda.is_available(): print("no CUDA device"); sys.exit(3)
from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss
h = torch.randn(64, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
w = torch.randn(512, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
t = torch.randint(0, 512, (64,), device="cuda")
LigerFusedLinearCrossEntropyLoss(reduction="sum")(w, h, t).backward()
torch.cuda.synchronize()
"""

FLEX = """
import torch, sys
if not torch.cuda.is_available(): print("no CUDA device"); sys.exit(3)
from torch.nn.attention.flex_attention import create_block_mask, flex_attention
doc = torch.arange(256, device="cuda") // 100
mask = create_block_mask(lambda b, h, q, k: (doc[q] == doc[k]) & (q >= k), None, None, 256, 256, device="cuda")
q, k, v = (torch.randn(1, 2, 256, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
torch.compile(flex_attention)(q, k, v, block_mask=mask).sum().backward()
torch.cuda.synchronize()
"""

CUDNN = """
import sys, jax, jax.numpy as jnp
if jax.devices()[0].platform != "gpu": print("no CUDA device"); sys.exit(3)
q = jnp.ones((1, 256, 2, 64), jnp.bfloat16)
f = lambda q: jax.nn.dot_product_attention(q, q, q, is_causal=True, implementation="cudnn").astype(jnp.float32).sum()
jax.block_until_ready(jax.grad(f)(q))
"""

# kernel: (module to find, code, the runs' fallback where it fails)
CHECKS = {
    "liger": (
        "liger_kernel",
        LIGER,
        {"backend_options.torch.loss_kernel": "chunked", "backend_options.gpu-fsdp.loss_kernel": "chunked"},
    ),
    "flex_attention": (
        "torch",
        FLEX,
        {"backend_options.torch.flex_attention": "false", "backend_options.gpu-fsdp.flex_attention": "false"},
    ),
    "cudnn_attention": (
        "jax",
        CUDNN,
        {"backend_options.torchax.attention": "xla", "backend_options.jax-tunix.attention": "xla"},
    ),
}


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def smoke(limit_s: float = 90.0, python: str = sys.executable) -> dict:
    """Every check at once, each in its own process, each cut at `limit_s`."""
    import importlib.util

    started, found, running = time.monotonic(), {}, {}
    for name, (module, code, fallback) in CHECKS.items():
        if importlib.util.find_spec(module) is None:
            found[name] = {"ok": False, "reason": f"{module} is not installed", "seconds": 0.0, "fallback": fallback}
            continue
        running[name] = subprocess.Popen(
            [python, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
    for name, process in running.items():
        fallback = CHECKS[name][2]
        try:
            out, err = process.communicate(timeout=max(1.0, limit_s - (time.monotonic() - started)))
            ok = process.returncode == 0
            reason = "ran" if ok else last_line(err) or last_line(out) or f"exit {process.returncode}"
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            ok, reason = False, f"did not finish within {limit_s:g} s"
        seconds = round(time.monotonic() - started, 1)
        found[name] = {"ok": ok, "reason": reason, "seconds": seconds, "fallback": {} if ok else fallback}
    return found


def main(argv: list[str]) -> int:
    target = Path(argv[0])
    limit = float(argv[1]) if len(argv) > 1 else 90.0
    found = smoke(limit)
    target.write_text(json.dumps(found, indent=1) + "\n")
    for name, result in found.items():
        print(f"kernel {name}: {'ok' if result['ok'] else 'falls back'} ({result['reason']}, {result['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
