"""What does the harness's step loop cost? Answer: docs/measurements/overhead-and-step-loop.md, "Harness overhead".
The harness-timed loop of the `torch` backend
against a bare transformers + peft loop, on the same model, weights and batches.

Both loops run in this one process, interleaved in blocks (bare, harness, bare, ...)
so that machine noise hits both alike; the figure is the ratio of median step times
measured in the same run, never an absolute time compared across runs.

    python benchmarks/probes/bench_overhead.py [--steps 12] [--blocks 4] [--preset tiny-gemma3]

Prints a readable table, then one JSON document. Target: overhead within 3%.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def scenario_for(preset: str, steps: int):
    from harness.scenario.spec import Scenario

    return Scenario.model_validate(
        {
            "name": "overhead",
            "model": {"preset": preset},
            "sequence": {"max_length": 256, "padding": "static"},
            "train": {
                "global_batch": 4,
                "micro_batch": 4,
                "steps": steps,
                "warmup_steps": 1,
                "precision": "fp32",
                "optimizer": {"lr": 1e-4},
                "schedule": {"name": "constant"},
            },
        }
    )


def harness_backend(scenario):
    from backends.torch_eager import TorchOptions
    from backends.torch_eager.backend import TorchBackend
    from harness.data.batches import build_batches
    from harness.plan.plan import build
    from harness.run.worker import EventSink

    plan = build(scenario, "cpu", 1)
    backend = TorchBackend(scenario, plan, TorchOptions(), EventSink(None))
    backend.setup()
    backend.batches = build_batches(scenario, plan.rows_per_forward)
    return backend


def bare_steps(model, optimizer, batches) -> list[float]:
    """The loop a user writes by hand: HF loss, backward, clip, step; loss read each step."""
    import torch

    times = []
    for batch in batches:
        micro = batch.micro_batches[0]
        start = time.perf_counter()
        out = model(
            input_ids=torch.from_numpy(micro.input_ids),
            attention_mask=torch.from_numpy(micro.attention_mask),
            labels=torch.from_numpy(micro.labels),
            use_cache=False,
        )
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
        out.loss.item()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--blocks", type=int, default=4)
    parser.add_argument("--preset", default="tiny-gemma3")
    args = parser.parse_args()

    from harness.run.loop import run_steps

    scenario = scenario_for(args.preset, args.steps)
    backend = harness_backend(scenario)  # same seed: same weights for both loops
    bare, harnessed = [], []
    for _ in range(args.blocks):
        bare += bare_steps(backend.model, backend.optimizer, backend.batches.steps)
        harnessed += [s.time_s for s in run_steps(backend).steps]
    result = {
        "preset": args.preset,
        "steps_per_block": args.steps,
        "blocks": args.blocks,
        "bare_median_s": statistics.median(bare),
        "harness_median_s": statistics.median(harnessed),
    }
    result["overhead_ratio"] = result["harness_median_s"] / result["bare_median_s"]
    print(f"{'loop':<10}{'median step (s)':>18}")
    print(f"{'bare':<10}{result['bare_median_s']:>18.4f}")
    print(f"{'harness':<10}{result['harness_median_s']:>18.4f}")
    print(f"ratio harness/bare: {result['overhead_ratio']:.3f} (target <= 1.03)")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
