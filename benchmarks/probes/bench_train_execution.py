"""How do the backends execute a step on the CPU? Answer: docs/measurements/torch-backends.md and xla-and-jax-backends.md (#27).
How the backends execute a training step on the CPU: host syncs per step, graph
breaks of the compiled step, and the loss kernels' peak memory.

Three questions a GPU run answers with the device's own tools (sync debug mode, a trace)
and the CPU answers by counting (backends/torch_common/syncs.py, backends/jax_common/syncs.py):
- host syncs inside each step (the timing sync excluded): 0 is the target everywhere;
- graph breaks of the torch backend's compiled step (model + chunked loss): 0 on Gemma 3;
- peak memory the loss adds at Gemma 3's vocabulary (262,144) x 512 tokens x 4 rows:
  plain cross-entropy on full fp32 logits against the chunked kernel (torch: peak RSS of
  the run; torchax and jax-tunix: the compiled loss + gradients' temporary bytes from
  XLA's memory analysis, benchmarks/probes/jax_loss_probe.py, compiled and never run).

    python benchmarks/probes/bench_train_execution.py [--skip-memory] [--only TEXT]

Runs the tiny scenario through the real CLI on each backend (xla-fsdpv2 and jax-tunix
where BENCH_PYTHON_XLA_FSDPV2 / BENCH_PYTHON_JAX_TUNIX name their interpreters; `--only`
keeps the runs whose label contains TEXT), then the memory probe in a fresh process.
Prints a table, then one JSON document.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

RUNS = {
    "torch eager": ["--backend", "torch"],
    "torch compiled (aot_eager)": [
        "--backend",
        "torch",
        "--set",
        "backend_options.torch.compile=true",
        "--set",
        "backend_options.torch.compile_backend=aot_eager",
    ],
    "gpu-fsdp 2 ranks (gloo)": ["--backend", "gpu-fsdp", "--set", "parallel.devices=2"],
    "xla-fsdpv2 4 devices": ["--backend", "xla-fsdpv2", "--set", "parallel.devices=4", "--set", "train.micro_batch=1"],
    "torchax 4 devices": ["--backend", "torchax", "--set", "parallel.devices=4", "--set", "train.micro_batch=1"],
    "jax-tunix 4 devices": [
        "--backend",
        "jax-tunix",
        "--set",
        "parallel.devices=4",
        "--set",
        "train.micro_batch=1",
        "--set",
        "train.lora.target_modules=[q_proj,o_proj,gate_proj,up_proj,down_proj]",
    ],
}
# Backends that run in their own environment: skipped where it is not named.
OWN_PYTHON = {"xla-fsdpv2": "BENCH_PYTHON_XLA_FSDPV2", "jax-tunix": "BENCH_PYTHON_JAX_TUNIX"}
SHORT = ["--set", "train.steps=4", "--set", "train.warmup_steps=1", "--set", "train.window_steps=2"]

PEAK = textwrap.dedent(
    """
    import json, resource, time, torch
    from backends.hf_common.loss import TokenLoss
    from backends.hf_common.model import hf_config
    from transformers import AutoModelForCausalLM
    torch.manual_seed(0)
    arch = dict(vocab_size=262144, hidden_size=16, intermediate_size=32, num_layers=1, num_heads=2,
                num_kv_heads=1, head_dim=8, max_position_embeddings=1024, sliding_window=512)
    model = AutoModelForCausalLM.from_config(hf_config(arch, "sdpa"), dtype=torch.float32)
    for p in model.parameters():
        p.requires_grad_(False)
    model.model.layers[0].mlp.down_proj.weight.requires_grad_(True)
    ids = torch.randint(3, 262144, (4, 512))
    mask = torch.ones_like(ids)
    found = {}
    # Chunked first: peak RSS only grows, so each kernel's peak is measured from the
    # high-water mark the one before it left.
    for kernel in ("chunked", "plain"):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        start = time.perf_counter()
        summed, _ = TokenLoss(model, kernel)(ids, mask, ids.clone())
        summed.backward()
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        found[kernel] = {"peak_bytes": after - before, "loss": summed.item(), "seconds": time.perf_counter() - start}
        del summed
    print(json.dumps(found))
    """
)


def loss_peaks() -> dict:
    """Peak resident memory each loss kernel adds (ru_maxrss), in a fresh process, at
    vocabulary 262,144 x sequence 512 x 4 rows."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", PEAK], capture_output=True, text=True, timeout=900, cwd=ROOT, env=env)
    if done.returncode:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def jax_loss_temps() -> dict:
    """Each JAX backend's compile-time temporary bytes for the loss and its gradients, per
    kernel, at the same size (benchmarks/probes/jax_loss_probe.py in the backend's interpreter;
    compiled by XLA, never run). A backend whose interpreter is missing is skipped."""
    from harness.run.registry import interpreter_for, worker_env

    found = {}
    for backend, variable in (("torchax", None), ("jax-tunix", "BENCH_PYTHON_JAX_TUNIX")):
        if variable and not os.environ.get(variable):
            found[backend] = {"skipped": f"{variable} is not set"}
            continue
        probe = ROOT / "benchmarks" / "probes" / "jax_loss_probe.py"
        command = [interpreter_for(backend), str(probe), backend, "memory"]
        env = {**worker_env(), "PYTHONPATH": str(ROOT)}
        done = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=ROOT, env=env)
        if done.returncode:
            found[backend] = {"failed": done.stderr[-500:]}
            continue
        found[backend] = json.loads(done.stdout.strip().splitlines()[-1])["temp_bytes"]
    return found


def run_facts(label: str, args: list[str], out: Path) -> dict:
    """One short tiny run; its host syncs per step and compile facts from the record."""
    for backend, variable in OWN_PYTHON.items():
        if backend in args and not os.environ.get(variable):
            return {"run": label, "skipped": f"{variable} is not set"}
    command = [sys.executable, "-m", "harness.cli", "run", "scenarios/tiny.yaml", "--no-progress"]
    done = subprocess.run(
        [*command, "--results-dir", str(out), *args, *SHORT], capture_output=True, text=True, cwd=ROOT
    )
    records = [json.loads(p.read_text()) for p in out.glob("*.json")]
    if done.returncode or not records or records[0]["status"] != "ok":
        return {"run": label, "failed": (done.stderr or "")[-500:]}
    raw = records[0]["raw"]
    execution = raw.get("execution", {})
    return {
        "run": label,
        "host_syncs_per_step_max": max(s["host_syncs"] for s in raw["loop"]["steps"]),
        "window_host_syncs": raw["loop"]["window"]["host_syncs"],
        "graph_breaks": execution.get("graph_breaks"),
        "loss_kernel": execution.get("loss_kernel"),
        "micro_batch": execution.get("micro_batch"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-memory", action="store_true", help="skip the loss-kernel memory probes (~3 min)")
    parser.add_argument("--only", default="", help="run only the runs whose label contains this text")
    args = parser.parse_args()
    chosen = [(label, a) for label, a in RUNS.items() if args.only in label]
    with tempfile.TemporaryDirectory() as tmp:
        runs = [run_facts(label, a, Path(tmp) / str(i)) for i, (label, a) in enumerate(chosen)]
    print(f"{'run':30} {'syncs/step':>10} {'window':>7} {'breaks':>7} {'loss':>8} {'micro':>6}")
    for r in runs:
        if "host_syncs_per_step_max" not in r:
            print(f"{r['run']:30} {r.get('skipped') or 'failed: ' + r['failed'][-80:]}")
            continue
        breaks = "-" if r["graph_breaks"] is None else r["graph_breaks"]
        print(
            f"{r['run']:30} {r['host_syncs_per_step_max']:>10} {r['window_host_syncs']:>7} {breaks:>7} "
            f"{r['loss_kernel'] or '-':>8} {r['micro_batch']:>6}"
        )
    memory = None if args.skip_memory else loss_peaks()
    if memory:
        ratio = memory["chunked"]["peak_bytes"] / memory["plain"]["peak_bytes"]
        for kernel, m in memory.items():
            print(
                f"loss {kernel:8} peak +{m['peak_bytes'] / 2**30:.2f} GiB in {m['seconds']:.1f} s, loss {m['loss']:.3f}"
            )
        print(f"chunked / plain peak memory: {ratio:.3f} (target <= 0.25)")
    jax_memory = None if args.skip_memory else jax_loss_temps()
    for backend, temps in (jax_memory or {}).items():
        if "plain" not in temps:
            print(f"loss {backend}: {temps.get('skipped') or 'failed: ' + temps['failed'][-80:]}")
            continue
        for kernel in ("chunked", "plain"):
            print(f"loss {backend} {kernel:8} compiled temp {temps[kernel] / 2**30:.2f} GiB (XLA memory analysis)")
        print(f"{backend} chunked / plain compiled temp: {temps['chunked'] / temps['plain']:.3f} (target <= 0.25)")
    print(json.dumps({"runs": runs, "loss_memory": memory, "jax_loss_temp_bytes": jax_memory}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
