"""Backend `jax-tunix` for real: Tunix's Gemma 3, Qwix LoRA and PeftTrainer on JAX's CPU
backend with 4 virtual devices as a 2 x 2 (fsdp x tp) mesh. Tunix pins safetensors<0.8
(and so an older transformers), so it lives in its own environment:
BENCH_PYTHON_JAX_TUNIX names that interpreter (.ci/run makes it)."""

from __future__ import annotations

import statistics

import pytest

from conftest import TINY, bench, records_in, stack_or_skip, write_scenario

pytestmark = pytest.mark.slow

# fsdp: -1 takes the 2 devices of 4 that tensor leaves (padding.yaml's strategy is
# fsdpv2, tiny.yaml's none: one device; both become the mesh).
MESH_2X2 = ("--set", "parallel.strategy=mesh", "--set", "parallel.mesh.tensor=2")


def new_lengths_after_warmup(record) -> int:
    """Micro-batch lengths first seen after warm-up. PeftTrainer runs each micro-batch as
    its own call of the jitted step, so each new length (not each new step) is a compile."""
    seen, new = set(), 0
    for step in record["raw"]["loop"]["steps"]:
        for length in step["seq_lens"]:
            if length not in seen and step["phase"] == "measure":
                new += 1
            seen.add(length)
    return new


def measured(record, key="time_s") -> list[float]:
    return [s[key] for s in record["raw"]["loop"]["steps"] if s["phase"] == "measure"]


@pytest.fixture(scope="module")
def padding_records(tmp_path_factory):
    stack_or_skip("jax-tunix", "tunix", ".ci/run builds .venv-jax")
    out = tmp_path_factory.mktemp("tunix") / "r"
    done = bench("run", "scenarios/padding.yaml", "--backend", "jax-tunix", "--set", "model.preset=tiny-gemma3",
                 *MESH_2X2, "--results-dir", str(out), "--no-progress", timeout=1500)
    assert done.returncode == 0, done.stderr + done.stdout
    return {r["scenario"]["resolved"]["sequence"]["padding"]: r for r in records_in(out)}


def test_padding_matrix_writes_three_records_with_compiles_and_step_times(padding_records):
    assert sorted(padding_records) == ["bucketed", "dynamic", "static"]
    for record in padding_records.values():
        assert record["status"] == "ok", record["failure"]
        assert record["backend"]["name"] == "jax-tunix" and record["accelerator"]["virtual_devices"] == 4
        assert record["metrics"]["num_compiles"] >= 1 and record["metrics"]["step_time_s"]["n"] == 6
        # global batch 4 over micro-batches of 1 row x 2 fsdp devices: Tunix accumulates 2
        assert record["raw"]["extra"]["grad_accumulation"] == 2
        assert all(len(s["seq_lens"]) == 2 for s in record["raw"]["loop"]["steps"])


def test_parameters_are_sharded_over_both_mesh_axes(padding_records):
    extra = padding_records["static"]["raw"]["extra"]
    assert extra["mesh"] == {"fsdp": 2, "tp": 2}
    assert extra["num_params_sharded_on_fsdp"] > 0 and extra["num_params_sharded_on_tp"] > 0
    assert "('tp', 'fsdp')" in extra["shardings"]  # the embedding, split over all 4 devices
    # What one device holds, measured from its shards: far from a full replica.
    assert extra["param_bytes_on_device_0"] < 0.4 * extra["param_bytes_total"]


def test_static_has_no_recompiles_dynamic_one_per_new_length_bucketed_at_most_buckets(padding_records):
    static, dynamic, bucketed = (padding_records[k] for k in ("static", "dynamic", "bucketed"))
    assert static["metrics"]["num_compiles"] == 1 and static["metrics"]["num_recompiles"] == 0
    expected = new_lengths_after_warmup(dynamic)
    assert expected > 0
    assert dynamic["metrics"]["num_recompiles"] == expected
    buckets = bucketed["scenario"]["resolved"]["sequence"]["buckets"]
    assert bucketed["metrics"]["num_recompiles"] <= len(buckets)


def test_padding_does_not_change_the_loss(padding_records):
    """Same examples, different padding: the masks must make the losses agree."""
    losses = {k: [s["loss"] for s in r["raw"]["loop"]["steps"]] for k, r in padding_records.items()}
    assert losses["dynamic"] == pytest.approx(losses["static"], abs=1e-4)
    assert losses["bucketed"] == pytest.approx(losses["static"], abs=1e-4)


def test_loss_falls_over_20_steps_on_repeated_data(tmp_path):
    stack_or_skip("jax-tunix", "tunix", ".ci/run builds .venv-jax")
    # Four examples and a global batch of four: every step sees the same data.
    done = bench("run", str(write_scenario(tmp_path, TINY)), "--backend", "jax-tunix", *MESH_2X2,
                 "--results-dir", str(tmp_path / "r"), "--no-progress", "--set", "train.steps=20",
                 "--set", "data.num_examples=4", "--set", "train.optimizer.lr=0.01", "--set", "train.window_steps=0",
                 timeout=900)
    assert done.returncode == 0, done.stderr + done.stdout
    (record,) = records_in(tmp_path / "r")
    losses = [s["loss"] for s in record["raw"]["loop"]["steps"]]
    assert len(losses) == 20
    assert losses[-1] < losses[0] - 0.5
    assert sum(losses[-5:]) < 0.95 * sum(losses[:5])


def test_step_time_is_the_executed_step_not_the_dispatch(tmp_path):
    """A wider model does several times the device work per step: the recorded step time
    grows with it, while the time for the trainer's call to return (dispatch) barely
    moves and stays a small part of the step."""
    stack_or_skip("jax-tunix", "tunix", ".ci/run builds .venv-jax")
    wide = "{hidden_size: 512, intermediate_size: 2048, num_heads: 8, num_kv_heads: 2, head_dim: 64, query_pre_attn_scalar: 64}"
    records = {}
    # tiny.yaml's 2 window steps run on the tiny model: one sync after both.
    for name, extra in (("tiny", []), ("wide", ["--set", f"model.arch={wide}", "--set", "train.window_steps=0"])):
        done = bench("run", str(write_scenario(tmp_path, TINY)), "--backend", "jax-tunix", *MESH_2X2,
                     "--results-dir", str(tmp_path / name), "--no-progress", "--set", "train.steps=6", *extra,
                     timeout=900)
        assert done.returncode == 0, done.stderr + done.stdout
        (records[name],) = records_in(tmp_path / name)
    step = {k: statistics.median(measured(r)) for k, r in records.items()}
    dispatch = {k: statistics.median(r["raw"]["extra"]["dispatch_s"][r["scenario"]["resolved"]["train"]["warmup_steps"]:])
                for k, r in records.items()}
    step_growth, dispatch_growth = step["wide"] / step["tiny"], dispatch["wide"] / dispatch["tiny"]
    assert records["wide"]["raw"]["model"]["num_params"] > 10 * records["tiny"]["raw"]["model"]["num_params"]
    assert step_growth > 3, step
    assert dispatch_growth < step_growth / 2, (dispatch, step)
    assert dispatch["wide"] < 0.25 * step["wide"], (dispatch, step)
    window = records["tiny"]["raw"]["loop"]["window"]
    assert window["num_steps"] == 2 and len(window["losses"]) == 2 and window["num_compiles"] == 0
    assert step["tiny"] < window["time_s"] < 6 * step["tiny"]  # two executed steps, not two dispatches
    assert records["tiny"]["metrics"]["window_tokens_per_s_real"] > 0


def test_local_checkpoint_loads_and_matches_the_torch_backend(tmp_path):
    """Tunix's safetensors loader on a Hugging Face checkpoint saved here: with the same
    weights and batches, the first loss equals the PyTorch backend's."""
    stack_or_skip("jax-tunix", "tunix", ".ci/run builds .venv-jax")
    import torch
    from transformers import AutoModelForCausalLM

    from backends.hf_common.model import hf_config
    from harness.presets import MODEL_PRESETS

    torch.manual_seed(123)
    AutoModelForCausalLM.from_config(hf_config(MODEL_PRESETS["tiny-gemma3"], "eager")).save_pretrained(tmp_path / "model")
    scenario = TINY.replace("  preset: tiny-gemma3\n", f"  preset: null\n  init: pretrained\n  path: {tmp_path / 'model'}\n")
    path = write_scenario(tmp_path, scenario)
    first = {}
    for backend in ("torch", "jax-tunix"):
        done = bench("run", str(path), "--backend", backend, "--results-dir", str(tmp_path / backend), "--no-progress",
                     "--set", "train.steps=2", "--set", "train.warmup_steps=1", "--set", "train.window_steps=0",
                     "--set", "train.micro_batch=1", "--set", "sequence.max_length=256", timeout=900)
        assert done.returncode == 0, done.stderr + done.stdout
        (record,) = records_in(tmp_path / backend)
        first[backend] = record["raw"]["loop"]["steps"][0]["loss"]
    assert first["jax-tunix"] == pytest.approx(first["torch"], abs=1e-3)


TUNIX_PARAM_COUNTS = """
import json, sys
import jax
from flax import nnx
from tunix.models.gemma3 import model as gemma3
from backends.jax_tunix.model import tunix_config
from harness.presets import MODEL_PRESETS

counts = {}
for name in sys.argv[1:]:
    config = tunix_config(MODEL_PRESETS[name], "bf16", remat=False)
    shapes = nnx.eval_shape(lambda: gemma3.Gemma3(config, rngs=nnx.Rngs(0)))  # no memory
    counts[name] = sum(leaf.size for leaf in jax.tree.leaves(nnx.state(shapes)))
print(json.dumps(counts))
"""


def test_tunix_builds_the_same_architectures_as_transformers():
    """Every Gemma 3 preset, W3's 27B included, has exactly the parameter count of the
    transformers model the PyTorch backends build (shapes only, on neither side memory)."""
    stack_or_skip("jax-tunix", "tunix", ".ci/run builds .venv-jax")
    import json
    import subprocess

    import torch
    from transformers import AutoModelForCausalLM

    from backends.hf_common.model import hf_config
    from harness.presets import MODEL_PRESETS
    from harness.registry import interpreter_for, worker_env

    names = [n for n, arch in MODEL_PRESETS.items() if arch["family"] == "gemma3"]
    expected = {}
    for name in names:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(hf_config(MODEL_PRESETS[name], "eager"))
        expected[name] = sum(p.numel() for p in model.parameters())
    done = subprocess.run([interpreter_for("jax-tunix"), "-c", TUNIX_PARAM_COUNTS, *names], capture_output=True,
                          text=True, env=worker_env(), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == expected
    assert expected["gemma-3-27b"] > 27e9


def test_a_model_tunix_cannot_build_is_a_failed_record_naming_the_field(tmp_path):
    stack_or_skip("jax-tunix", "tunix", ".ci/run builds .venv-jax")
    done = bench("run", str(write_scenario(tmp_path, TINY)), "--backend", "jax-tunix", "--set", "model.preset=qwen2.5-3b",
                 "--results-dir", str(tmp_path / "r"), "--no-progress", timeout=600)
    assert done.returncode == 1
    (record,) = records_in(tmp_path / "r")
    assert record["status"] == "failed" and "model.preset" in record["failure"]["reason"]
    assert "Gemma 3" in record["failure"]["reason"]
