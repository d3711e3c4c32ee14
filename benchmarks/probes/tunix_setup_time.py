"""How long does jax-tunix's setup take, before and after #36 and #45? Answer: docs/measurements/device-suite.md (#36, #45 item 4).
jax-tunix's model setup at W1's real dimensions (Gemma 3 270M, 262,144-entry
vocabulary), before and after #36: the random weights drawn by one jit per weight (the
code before #36, copied below as `random_model_per_weight`) against numpy's generator on
the host, placed by sharding (`backends.jax_tunix.model.random_model`). One run of each,
in the jax-tunix interpreter, on one device of whatever JAX sees (the CPU here):

    PYTHONPATH=. $BENCH_PYTHON_JAX_TUNIX benchmarks/probes/tunix_setup_time.py [frozen dtype, default bf16]

With `lora` first, times the rest of setup instead, before and after #45 item 4: Qwix's
eager pass over the model (`eager_lora_model`) against the abstract one the backend now
runs (`abstract_lora_model`), each inside the backend's `apply_lora` and followed by the
logits-dtype check, `runs` times each (alternating; default 3), each in a fresh process
(cold, as a run's worker does it once), medians reported:

    PYTHONPATH=. $BENCH_PYTHON_JAX_TUNIX benchmarks/probes/tunix_setup_time.py lora [runs] [frozen dtype]

Also checks that both draw N(0, 0.02^2) weights of the same shapes and dtypes (the
numbers differ: another generator), then times the rest of setup once (Qwix LoRA on W1's targets, the logits-dtype check), which is the same
code either way. Prints a table and one JSON line last. W1's plan stores the frozen
weights in bf16 (train.precision: bf16); the cpu profile runs fp32."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "scenarios" / "gemma270m.yaml"


def random_model_per_weight(model_class, config, mesh, dtype, seed: int, scale: float = 0.02):
    """jax_tunix.model.random_model as it was before #36 (commit 5bac0bf): the same
    numbers, one jitted program (one compile) per weight."""
    import functools

    import jax
    from flax import nnx

    with mesh:
        abstract = nnx.eval_shape(lambda: model_class(config, rngs=nnx.Rngs(params=0)))
    graph_def, abstract_state = nnx.split(abstract)
    shapes = abstract_state.to_pure_dict()
    shardings = nnx.get_named_sharding(abstract_state, mesh).to_pure_dict()
    paths = [path for path, _ in jax.tree_util.tree_flatten_with_path(shapes)[0]]
    index = {path: i for i, path in enumerate(paths)}

    def make(path, leaf, sharding):
        @functools.partial(jax.jit, out_shardings=sharding)
        def draw():
            key = jax.random.fold_in(jax.random.key(seed), index[path])
            return scale * jax.random.normal(key, leaf.shape, dtype=dtype or leaf.dtype)

        return draw()

    return nnx.merge(graph_def, jax.tree_util.tree_map_with_path(make, shapes, shardings))


def timed(make):
    import jax
    from flax import nnx

    begun = time.perf_counter()
    model = make()
    jax.block_until_ready(nnx.state(model))
    took = time.perf_counter() - begun
    print(f"  {took:.1f} s", file=sys.stderr, flush=True)
    return model, took


def main(frozen: str = "bf16") -> dict:
    import jax
    import numpy as np
    from flax import nnx
    from tunix.models.gemma3 import model as gemma3

    from backends.jax_common import mesh as make_mesh
    from backends.jax_tunix import model as tunix_model
    from harness.scenario.loader import resolve_runs

    scenario = resolve_runs(SCENARIO)[0].scenario
    arch = tunix_model.scenario_architecture(scenario)
    config = tunix_model.tunix_config(arch, frozen, "none")
    mesh = make_mesh(jax.devices()[:1], {"fsdp": 1, "tensor": 1}, {"fsdp": "fsdp", "tensor": "tp"})
    seed = scenario.train.seed
    before, before_s = timed(lambda: random_model_per_weight(gemma3.Gemma3, config, mesh, config.param_dtype, seed))
    after, after_s = timed(lambda: tunix_model.random_model(gemma3.Gemma3, config, mesh, config.param_dtype, seed))
    old_leaves, new_leaves = jax.tree.leaves(nnx.state(before)), jax.tree.leaves(nnx.state(after))
    same_shapes = [(a.shape, a.dtype) for a in old_leaves] == [(b.shape, b.dtype) for b in new_leaves]
    stds = [float(np.std(np.asarray(leaf, np.float32))) for leaf in (old_leaves[0], new_leaves[0])]
    del before
    plan = SimpleNamespace(method="lora", precision=SimpleNamespace(trainable_params="fp32"))
    begun = time.perf_counter()
    model = tunix_model.apply_lora(after, scenario.train, config, mesh, plan.precision.trainable_params)
    tunix_model.logits_dtype(model, mesh, tunix_model.jnp_dtype(frozen))
    rest_s = time.perf_counter() - begun
    return {
        "device": f"{jax.devices()[0].platform} ({jax.devices()[0].device_kind})",
        "frozen_dtype": frozen,
        "weights": len(new_leaves),
        "params": int(sum(a.size for a in new_leaves)),
        "same_shapes_and_dtypes": same_shapes,
        "first_weight_std_before_after": [round(v, 5) for v in stds],
        "init_before_s": round(before_s, 2),
        "init_after_s": round(after_s, 2),
        "init_ratio": round(before_s / after_s, 2),
        "rest_of_setup_s": round(rest_s, 2),
        "setup_before_s": round(before_s + rest_s, 2),
        "setup_after_s": round(after_s + rest_s, 2),
        "setup_ratio": round((before_s + rest_s) / (after_s + rest_s), 2),
    }


def lora_pass_times(runs: int = 3, frozen: str = "bf16") -> dict:
    """Setup with qwix's eager pass and with the abstract one, `runs` times each
    (alternating), each in a fresh process: cold, as the backend's worker runs it once."""
    import statistics
    import subprocess

    times = {"eager": [], "abstract": []}
    for _ in range(runs):
        for name in times:
            done = subprocess.run(
                [sys.executable, __file__, "lora-once", name, frozen], capture_output=True, text=True, check=True
            )
            times[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
    rest = {name: statistics.median(t["rest_s"] for t in found) for name, found in times.items()}
    weights = statistics.median(t["weights_s"] for found in times.values() for t in found)
    return {
        **{k: v for k, v in times["eager"][0].items() if k not in ("rest_s", "weights_s", "pass")},
        "runs": runs,
        "weights_s": [t["weights_s"] for found in times.values() for t in found],
        "rest_eager_s": [t["rest_s"] for t in times["eager"]],
        "rest_abstract_s": [t["rest_s"] for t in times["abstract"]],
        "rest_median_before_s": round(rest["eager"], 2),
        "rest_median_after_s": round(rest["abstract"], 2),
        "setup_median_before_s": round(weights + rest["eager"], 2),
        "setup_median_after_s": round(weights + rest["abstract"], 2),
        "setup_ratio": round((weights + rest["eager"]) / (weights + rest["abstract"]), 2),
    }


def lora_pass_once(name: str, frozen: str = "bf16") -> dict:
    """W1's random weights, then the rest of setup (`apply_lora` with the pass `name`, the
    logits-dtype check) timed once in this process."""
    import jax
    from tunix.models.gemma3 import model as gemma3

    from backends.jax_common import mesh as make_mesh
    from backends.jax_tunix import model as tunix_model
    from harness.scenario.loader import resolve_runs

    scenario = resolve_runs(SCENARIO)[0].scenario
    config = tunix_model.tunix_config(tunix_model.scenario_architecture(scenario), frozen, "none")
    mesh = make_mesh(jax.devices()[:1], {"fsdp": 1, "tensor": 1}, {"fsdp": "fsdp", "tensor": "tp"})
    seed = scenario.train.seed
    base, weights_s = timed(lambda: tunix_model.random_model(gemma3.Gemma3, config, mesh, config.param_dtype, seed))
    lora_pass = {"eager": tunix_model.eager_lora_model, "abstract": tunix_model.abstract_lora_model}[name]
    begun = time.perf_counter()
    model = tunix_model.apply_lora(base, scenario.train, config, mesh, "fp32", lora_pass=lora_pass)
    tunix_model.logits_dtype(model, mesh, tunix_model.jnp_dtype(frozen))
    jax.block_until_ready(jax.tree.leaves(nnx_state(model)))
    return {
        "device": f"{jax.devices()[0].platform} ({jax.devices()[0].device_kind})",
        "frozen_dtype": frozen,
        "lora_targets": list(scenario.train.lora.target_modules),
        "pass": name,
        "weights_s": round(weights_s, 2),
        "rest_s": round(time.perf_counter() - begun, 2),
    }


def nnx_state(model):
    from flax import nnx

    return nnx.state(model)


if __name__ == "__main__" and sys.argv[1:2] == ["lora-once"]:
    print(json.dumps(lora_pass_once(*sys.argv[2:4])))
elif __name__ == "__main__" and sys.argv[1:2] == ["lora"]:
    print(json.dumps(lora_pass_times(*[int(a) for a in sys.argv[2:3]], *sys.argv[3:4])))
elif __name__ == "__main__":
    found = main(*sys.argv[1:2])
    print(f"{'':24}{'before (s)':>12}{'after (s)':>12}{'ratio':>8}")
    print(f"{'random weights':24}{found['init_before_s']:>12}{found['init_after_s']:>12}{found['init_ratio']:>8}")
    print(
        f"{'setup (+ LoRA, check)':24}{found['setup_before_s']:>12}{found['setup_after_s']:>12}{found['setup_ratio']:>8}"
    )
    print(json.dumps(found))
