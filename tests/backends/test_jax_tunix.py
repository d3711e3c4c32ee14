"""Backend `jax-tunix` for real: Tunix's Gemma 3, Qwix LoRA and PeftTrainer on JAX's CPU
backend with 4 virtual devices as a 2 x 2 (fsdp x tp) mesh. Tunix pins safetensors<0.8
(and so an older transformers), so it lives in its own environment:
BENCH_PYTHON_JAX_TUNIX names that interpreter (.ci/run makes it).

Every run must execute its plan (status ok: rows, tokens, lr per step, dtypes and the
devices doing distinct work all as planned). The LoRA targets leave out k_proj and
v_proj, which Tunix fuses into one adapter (refused unless fuse_kv_lora), so that the
trained parameters are peft's too; the padding matrix runs padding.yaml's fused layout,
which the fuse_kv_lora test reads.

Each run starts a worker and compiles Tunix's step (minutes on CI's 2 cores), so the
tests share module-scoped runs where one record answers several: the padding matrix
(3 runs), one 20-step run on repeated data (loss and step-time checks), a bf16 run and
a run from a Hugging Face checkpoint and a peft adapter (the PyTorch comparisons).
The step-lr check lives in tests/backends/test_parity.py (every backend, every step,
two schedules, jax-tunix accumulating 2 micro-batches)."""

from __future__ import annotations

import statistics

import pytest

from conftest import TINY, bench, records_in, stack_or_skip, write_scenario

pytestmark = pytest.mark.slow

# fsdp: -1 takes the 2 devices of 4 that tensor leaves. padding.yaml's cpu profile asks
# for 4 devices; tiny.yaml for one, so the runs on it ask for 4.
TENSOR_2 = ("--set", "parallel.tensor=2")
MESH_2X2 = ("--set", "parallel.devices=4", *TENSOR_2)
# peft's targets that Tunix adapts one by one, as peft does.
SEPARATE_TARGETS = ("--set", "train.lora.target_modules=[q_proj,o_proj,gate_proj,up_proj,down_proj]")


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


def new_buckets_after_warmup(record) -> int:
    """Buckets no warm-up step used: the most a bucketed run can compile after warm-up."""
    buckets = set(record["scenario"]["resolved"]["sequence"]["buckets"])
    warm = {n for s in record["raw"]["loop"]["steps"] if s["phase"] == "warmup" for n in s["seq_lens"]}
    return len(buckets - warm)


def ok(record) -> dict:
    """The record, once it says the run executed its plan."""
    assert record["status"] == "ok", record["failure"]["reason"]
    return record


def run_tiny(tmp_path, name: str, *sets: str, timeout: float = 900) -> dict:
    """tiny.yaml on jax-tunix with `--set` pairs; its one record, whatever its status
    (`ok` says why a run that should pass did not)."""
    done = bench(
        "run",
        str(write_scenario(tmp_path, TINY)),
        "--backend",
        "jax-tunix",
        "--results-dir",
        str(tmp_path / name),
        "--no-progress",
        *sets,
        timeout=timeout,
    )
    records = records_in(tmp_path / name)
    assert len(records) == 1, done.stderr + done.stdout
    return records[0]


def measured(record, key="time_s") -> list[float]:
    return [s[key] for s in record["raw"]["loop"]["steps"] if s["phase"] == "measure"]


@pytest.fixture(scope="module")
def padding_records(tmp_path_factory):
    stack_or_skip("jax-tunix", "tunix", ".ci/run builds .venv-jax")
    out = tmp_path_factory.mktemp("tunix") / "r"
    done = bench(
        "run",
        "scenarios/padding.yaml",
        "--backend",
        "jax-tunix",
        "--set",
        "model.preset=tiny-gemma3",
        *TENSOR_2,  # padding.yaml's own targets: k/v as Tunix's fused adapter (fuse_kv_lora)
        "--set",
        "train.micro_batch=1",  # padding.yaml's auto would fit a step in one pass
        # 1 warm-up + 1 measured step of 2 micro-batches each: dynamic padding meets 4
        # lengths, 2 of them after warm-up (each a compile, ~the cell's whole cost, so
        # the fewest that still shows one compile per new length); bucketed uses 2 of
        # its 3 buckets in warm-up and none new after.
        "--set",
        "train.steps=2",
        "--set",
        "train.warmup_steps=1",
        "--results-dir",
        str(out),
        "--no-progress",
        timeout=1500,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    assert "refused" not in done.stderr  # packed rows too (#45: segment ids)
    return {r["scenario"]["resolved"]["sequence"]["padding"]: r for r in records_in(out)}


def test_padding_matrix_writes_four_records_with_compiles_and_step_times(padding_records):
    assert sorted(padding_records) == ["bucketed", "dynamic", "packed", "static"]
    for record in padding_records.values():
        ok(record)
        assert record["backend"]["name"] == "jax-tunix" and record["accelerator"]["virtual_devices"] == 4
        assert record["metrics"]["num_compiles"] >= 1 and record["metrics"]["measured_steps"] == 1
        # Step-time statistics are over the measured steps that compiled nothing (none
        # under dynamic padding, where every new length compiles).
        calm = [s for s in record["raw"]["loop"]["steps"] if s["phase"] == "measure" and s["num_compiles"] == 0]
        assert (record["metrics"]["step_time_s"] or {"n": 0})["n"] == len(calm)
        # global batch 4 over micro-batches of 1 row x 2 fsdp devices: Tunix accumulates 2
        assert record["raw"]["extra"]["grad_accumulation"] == 2
        assert all(len(s["seq_lens"]) == 2 for s in record["raw"]["loop"]["steps"])
        # Rows split over the 2 fsdp devices, read from the sharded inputs; every step's
        # rows, tokens and lr as planned (status ok says so; spelled out here).
        assert record["raw"]["done"]["distinct_row_shards"] == 2
        assert all(
            s["done"]["rows"] == 4 and s["done"]["tokens_real"] == s["tokens_real"]
            for s in record["raw"]["loop"]["steps"]
        )


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
    # Each bucket is one compile, the first time any micro-batch is padded to it.
    assert bucketed["metrics"]["num_recompiles"] == new_lengths_after_warmup(bucketed)
    assert bucketed["metrics"]["num_recompiles"] <= new_buckets_after_warmup(bucketed)


def test_padding_does_not_change_the_loss(padding_records):
    """Same examples, different padding: the masks must make the losses agree."""
    losses = {k: [s["loss"] for s in r["raw"]["loop"]["steps"]] for k, r in padding_records.items()}
    assert losses["dynamic"] == pytest.approx(losses["static"], abs=1e-4)
    assert losses["bucketed"] == pytest.approx(losses["static"], abs=1e-4)
    assert losses["packed"] == pytest.approx(losses["static"], abs=1e-4)


def test_packed_rows_run_per_example_on_both_fsdp_shards_without_recompiles(padding_records):
    """Packed rows over 2 fsdp shards (a pass's packed rows rounded to a multiple of 2):
    one compile, none after; the record says the attention kept each example apart."""
    packed = padding_records["packed"]
    assert packed["metrics"]["num_compiles"] == 1 and packed["metrics"]["num_recompiles"] == 0
    assert packed["raw"]["done"]["distinct_row_shards"] == 2
    attention = packed["raw"]["execution"]["attention"]
    assert attention.endswith("packed rows: per example, by segment ids as a dense block-diagonal mask"), attention


@pytest.fixture(scope="module")
def repeated_data_record(tmp_path_factory):
    """20 steps (2 warm-up, 18 measured) and tiny.yaml's 2 window steps on a 2 x 2 mesh:
    four examples and a global batch of four, so every step sees the same data (the
    loss must fall) and the same padded shape (static: the step times compare)."""
    stack_or_skip("jax-tunix", "tunix", ".ci/run builds .venv-jax")
    return run_tiny(
        tmp_path_factory.mktemp("repeated"),
        "r",
        *MESH_2X2,
        *SEPARATE_TARGETS,
        "--set",
        "train.steps=20",
        "--set",
        "data.num_examples=4",
        "--set",
        "train.optimizer.lr=0.01",
    )


@pytest.mark.serial
def test_loss_falls_over_20_steps_on_repeated_data(repeated_data_record):
    record = ok(repeated_data_record)
    losses = [s["loss"] for s in record["raw"]["loop"]["steps"]]
    assert len(losses) == 20
    assert losses[-1] < losses[0] - 0.5
    assert sum(losses[-5:]) < 0.95 * sum(losses[:5])


@pytest.fixture(scope="module")
def bf16_record(tmp_path_factory):
    """bf16, 2 micro-batches per optimizer step (8 rows = 2 rows x 2 fsdp devices x 2):
    Tunix's MultiSteps accumulates them. Two steps: the dtypes are read from the weights
    and the optimizer state, the same after any step."""
    stack_or_skip("jax-tunix", "tunix", ".ci/run builds .venv-jax")
    return run_tiny(
        tmp_path_factory.mktemp("bf16"),
        "r",
        "--set",
        "parallel.devices=2",
        *SEPARATE_TARGETS,
        "--set",
        "train.precision=bf16",
        "--set",
        "train.global_batch=8",
        "--set",
        "train.steps=2",
        "--set",
        "train.warmup_steps=1",
        "--set",
        "train.window_steps=0",
    )


def test_bf16_stores_frozen_weights_in_bf16_and_trains_fp32_lora(bf16_record):
    record = ok(bf16_record)
    assert record["raw"]["done"]["dtypes"] == {
        "frozen_params": "bf16",
        "trainable_params": "fp32",
        "compute": "bf16",
        "optimizer_state": "fp32",
    }
    assert record["raw"]["done"]["distinct_row_shards"] == 2
    assert record["raw"]["extra"]["grad_accumulation"] == 2
    assert all(s["loss"] > 0 for s in record["raw"]["loop"]["steps"])


def test_k_and_v_targets_are_refused_naming_the_field(tmp_path):
    """tiny.yaml's targets are peft's seven, k_proj and v_proj included: Tunix cannot
    train them as separate adapters, so the run fails before any work, naming the field."""
    stack_or_skip("jax-tunix", "tunix", ".ci/run builds .venv-jax")
    done = bench(
        "run",
        str(write_scenario(tmp_path, TINY)),
        "--backend",
        "jax-tunix",
        "--results-dir",
        str(tmp_path / "r"),
        "--no-progress",
        timeout=600,
    )
    assert done.returncode == 1
    (record,) = records_in(tmp_path / "r")
    assert record["status"] == "failed" and record["failure"]["kind"] == "error"
    assert record["failure"]["reason"].startswith("ValueError: train.lora.target_modules: k_proj, v_proj")
    assert "fuse_kv_lora" in record["failure"]["reason"]


def test_fuse_kv_lora_trains_the_fused_adapter_and_says_so(padding_records):
    """With the option (padding.yaml sets it for jax-tunix) the fused k/v adapter trains;
    the record says why its trainable count is not peft's (the plan check then leaves
    the count out)."""
    record = ok(padding_records["static"])
    done = record["raw"]["done"]
    assert "k_proj, v_proj" in done["trainable_params_deviation"]
    # One A (hidden x rank) for k and v instead of two, per layer: 2 layers x 64 x 8 fewer.
    planned = 2 * 8 * ((64 + 64) * 2 + (64 + 16) * 2 + (64 + 128) * 3)
    assert done["trainable_params"] == planned - 2 * 64 * 8
    assert any("fuse_kv_lora" in note for note in record["raw"]["notes"])


@pytest.mark.serial
def test_step_time_is_the_executed_step_not_the_dispatch(tmp_path, repeated_data_record):
    """A wider model does several times the device work per step: the recorded step time
    grows with it, while the time for the trainer's call to return (dispatch) takes
    little of the added time and stays a small part of the step."""
    wide = "{hidden_size: 512, intermediate_size: 2048, num_heads: 8, num_kv_heads: 2, head_dim: 64, query_pre_attn_scalar: 64}"
    # The tiny model: the shared run's 18 measured steps, then tiny.yaml's 2 window steps
    # (one sync after both). The wide one: 1 warm-up step (its compile) and 3 measured,
    # the same static 512-token rows; a median of 3 is the least that outvotes one outlier.
    wide_sets = ("--set", f"model.arch={wide}", "--set", "train.window_steps=0")
    steps = ("--set", "train.steps=4", "--set", "train.warmup_steps=1")
    records = {
        "tiny": ok(repeated_data_record),
        "wide": ok(run_tiny(tmp_path, "wide", *MESH_2X2, *SEPARATE_TARGETS, *steps, *wide_sets)),
    }
    step = {k: statistics.median(measured(r)) for k, r in records.items()}
    dispatch = {
        k: statistics.median(r["raw"]["extra"]["dispatch_s"][r["scenario"]["resolved"]["train"]["warmup_steps"] :])
        for k, r in records.items()
    }
    assert records["wide"]["raw"]["model"]["num_params"] > 10 * records["tiny"]["raw"]["model"]["num_params"]
    assert step["wide"] / step["tiny"] > 3, step
    # The extra device work lands in the step time, not in the dispatch. (On a 2-core host
    # the dispatching thread shares the cores with the 4 devices' threads, so dispatch
    # grows a few-fold too; a ratio of growths is noise there, the added seconds are not.)
    assert dispatch["wide"] - dispatch["tiny"] < 0.2 * (step["wide"] - step["tiny"]), (dispatch, step)
    assert dispatch["wide"] < 0.25 * step["wide"], (dispatch, step)
    window = records["tiny"]["raw"]["loop"]["window"]
    assert window["num_steps"] == 2 and len(window["losses"]) == 2 and window["num_compiles"] == 0
    assert window["done"]["rows"] == 2 * 4 and window["done"]["tokens_real"] == window["tokens_real"]
    assert step["tiny"] < window["time_s"] < 6 * step["tiny"]  # two executed steps, not two dispatches
    assert records["tiny"]["metrics"]["window_tokens_per_s_real"] > 0


def torch_losses_from_adapter(scenario_text: str, adapter) -> list[float]:
    """The PyTorch backend's step losses with its LoRA weights replaced by the peft
    adapter's before the first step (the backend has no option for that: in-process;
    the host-sync counter's wrappers are taken off afterwards, for the worker's later tests)."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    from backends.torch_common import syncs as torch_syncs
    from harness.data.batches import build_batches
    from harness.plan.plan import resolve
    from harness.run.registry import get, options_for
    from harness.run.worker import EventSink
    from harness.scenario.loader import document_from_text, validate

    scenario = validate(document_from_text(scenario_text, "s.yaml"), "s.yaml")
    info = get("torch")
    plan = resolve(scenario, "cpu", 1, info.capabilities)
    backend = info.load()(scenario, plan, options_for(info, scenario), EventSink(None))
    backend.setup()
    result = set_peft_model_state_dict(backend.model, load_file(adapter / "adapter_model.safetensors"))
    assert not result.unexpected_keys
    backend.batches = build_batches(scenario, plan.rows_per_forward)
    try:
        return [step.loss for step in backend.run().steps]
    finally:
        torch_syncs.uninstall()


ADAPTER_TARGETS = ["q_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def save_checkpoint_and_adapter(directory) -> None:
    """A random tiny Gemma 3 saved as a Hugging Face checkpoint (`model`), and a peft
    adapter on it with non-zero LoRA weights on both A and B (`adapter`)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from backends.hf_common.model import hf_config
    from harness.scenario.presets import MODEL_PRESETS

    torch.manual_seed(123)
    model = AutoModelForCausalLM.from_config(hf_config(MODEL_PRESETS["tiny-gemma3"], "eager"))
    model.save_pretrained(directory / "model")
    config = LoraConfig(r=8, lora_alpha=16, target_modules=ADAPTER_TARGETS, task_type="CAUSAL_LM")
    adapter = get_peft_model(model, config)
    with torch.no_grad():
        for name, weight in adapter.named_parameters():
            if "lora_" in name:
                weight.normal_(0.0, 0.05)
    adapter.save_pretrained(directory / "adapter")


def checkpoint_scenario(model_path) -> str:
    """tiny.yaml from the checkpoint: five steps (1 warm-up) of 4 rows, 1 row a pass."""
    edits = {
        "  preset: tiny-gemma3\n": f"  preset: null\n  init: pretrained\n  path: {model_path}\n",
        "  lora: {rank: 8, alpha: 16}\n": f"  lora: {{rank: 8, alpha: 16, target_modules: [{', '.join(ADAPTER_TARGETS)}]}}\n",
        "  steps: 8\n": "  steps: 5\n",
        "  warmup_steps: 2\n": "  warmup_steps: 1\n",
        "  window_steps: 2\n": "  window_steps: 0\n",
        "  micro_batch: 2\n": "  micro_batch: 1\n",
        "  max_length: 512\n": "  max_length: 256\n",
    }
    scenario = TINY
    for old, new in edits.items():
        assert old in scenario
        scenario = scenario.replace(old, new)
    return scenario


@pytest.fixture(scope="module")
def from_checkpoint(tmp_path_factory):
    """The same checkpoint and adapter trained 5 steps on the same batches by the PyTorch
    backend (in-process) and by jax-tunix (`bench run`: Tunix's safetensors loader for
    the base weights, `lora_init` mapping the adapter onto qwix's LoRA weights)."""
    stack_or_skip("jax-tunix", "tunix", ".ci/run builds .venv-jax")
    tmp = tmp_path_factory.mktemp("checkpoint")
    save_checkpoint_and_adapter(tmp)
    scenario = checkpoint_scenario(tmp / "model")
    torch_losses = torch_losses_from_adapter(scenario, tmp / "adapter")
    done = bench(
        "run",
        str(write_scenario(tmp, scenario)),
        "--backend",
        "jax-tunix",
        "--results-dir",
        str(tmp / "tunix"),
        "--no-progress",
        "--set",
        f"backend_options.jax-tunix.lora_init={tmp / 'adapter'}",
        timeout=900,
    )
    records = records_in(tmp / "tunix")
    assert len(records) == 1, done.stderr + done.stdout
    return {"torch": torch_losses, "jax-tunix": [s["loss"] for s in ok(records[0])["raw"]["loop"]["steps"]]}


def test_local_checkpoint_loads_and_matches_the_torch_backend(from_checkpoint):
    """Tunix's safetensors loader on a Hugging Face checkpoint saved here: with the same
    weights (base and adapter) and batches, the first loss, before any update, equals
    the PyTorch backend's."""
    assert from_checkpoint["jax-tunix"][0] == pytest.approx(from_checkpoint["torch"][0], abs=1e-3)


def test_five_steps_from_the_same_nonzero_adapter_match_the_torch_backend(from_checkpoint):
    """Identical base weights (a Hugging Face checkpoint) and identical non-zero LoRA
    weights on q, o, gate, up and down (a peft adapter: peft loads it for PyTorch,
    `lora_init` maps it onto qwix's LoRA weights for Tunix): five AdamW steps on the same
    batches give the same losses. Checks the forward pass with LoRA active, the gradients
    through it, clipping, the optimizer and the lr, not only the first loss."""
    torch_losses, tunix_losses = from_checkpoint["torch"], from_checkpoint["jax-tunix"]
    assert len(torch_losses) == len(tunix_losses) == 5
    assert torch_losses[-1] < torch_losses[0] - 0.01  # the weights moved: a trajectory, not one point
    # Measured: equal to ~2e-6 at every step.
    assert tunix_losses == pytest.approx(torch_losses, abs=1e-4), (tunix_losses, torch_losses)


TUNIX_PARAM_COUNTS = """
import json, sys
import jax
from flax import nnx
from tunix.models.gemma3 import model as gemma3
from backends.jax_tunix.model import tunix_config
from harness.scenario.presets import MODEL_PRESETS

counts = {}
for name in sys.argv[1:]:
    config = tunix_config(MODEL_PRESETS[name], "bf16", remat="none")
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
    from harness.run.registry import interpreter_for, worker_env
    from harness.scenario.presets import MODEL_PRESETS

    names = [n for n, arch in MODEL_PRESETS.items() if arch["family"] == "gemma3"]
    expected = {}
    for name in names:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(hf_config(MODEL_PRESETS[name], "eager"))
        expected[name] = sum(p.numel() for p in model.parameters())
    done = subprocess.run(
        [interpreter_for("jax-tunix"), "-c", TUNIX_PARAM_COUNTS, *names],
        capture_output=True,
        text=True,
        env=worker_env(),
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == expected
    assert expected["gemma-3-27b"] > 27e9


def test_a_model_tunix_cannot_build_is_a_failed_record_naming_the_field(tmp_path):
    stack_or_skip("jax-tunix", "tunix", ".ci/run builds .venv-jax")
    done = bench(
        "run",
        str(write_scenario(tmp_path, TINY)),
        "--backend",
        "jax-tunix",
        "--set",
        "model.preset=qwen2.5-3b",
        "--results-dir",
        str(tmp_path / "r"),
        "--no-progress",
        timeout=600,
    )
    assert done.returncode == 1
    (record,) = records_in(tmp_path / "r")
    assert record["status"] == "failed" and "model.preset" in record["failure"]["reason"]
    assert "Gemma 3" in record["failure"]["reason"]


# Qwix's eager pass (`eager_lora_model`, the way before #45 item 4) against the backend's
# abstract one, on tiny-gemma3 over a 2 x 2 mesh: every weight's path, type, shape, dtype,
# sharding metadata and value; the loss before and after one SGD step on the adapters
# (after it, the loss depends on A: B starts at zero); and whether a forward pass ran on
# real weights during setup (Gemma3.__call__ patched to note whether its weights were traced).
TUNIX_LORA_PASSES = """
import json, os, sys
# Added to the flags the worker environment passes down (the tests' LLVM level 0), not in their place.
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4").strip()
from types import SimpleNamespace
import jax, jax.numpy as jnp, numpy as np
from flax import nnx
from tunix.models.gemma3 import model as gemma3
from backends.jax_common import mesh as make_mesh
from backends.jax_tunix import model as tm
from harness.scenario.presets import MODEL_PRESETS

concrete_calls = []
forward = gemma3.Gemma3.__call__
def noting(self, *args, **kwargs):  # real weights: the pass runs; traced ones: shapes only
    concrete_calls.append(not isinstance(self.embedder.input_embedding[...], jax.core.Tracer))
    return forward(self, *args, **kwargs)
gemma3.Gemma3.__call__ = noting

config = tm.tunix_config(MODEL_PRESETS["tiny-gemma3"], "fp32", "none")
mesh = make_mesh(jax.devices()[:4], {"fsdp": 2, "tensor": 2}, {"fsdp": "fsdp", "tensor": "tp"})
base = tm.random_model(gemma3.Gemma3, config, mesh, config.param_dtype, 0)
tokens = jnp.asarray(np.random.default_rng(0).integers(0, config.num_embed, (2, 8)), jnp.int32)
positions = jnp.broadcast_to(jnp.arange(8), (2, 8))
mask = jnp.broadcast_to(jnp.tril(jnp.ones((8, 8), jnp.bool_)), (2, 8, 8))

def loss(model):
    logits, _ = model(tokens[:, :-1], positions[:, :-1], None, mask[:, :-1, :-1])
    logp = jax.nn.log_softmax(logits.astype(jnp.float32))
    return -jnp.take_along_axis(logp, tokens[:, 1:, None], -1).mean()

def losses(model):
    model.set_attributes(qwix_rngs=nnx.Rngs(7))  # dropout's keys (qwix unsets them after setup)
    first = loss(model)
    grads = nnx.grad(loss, argnums=nnx.DiffState(0, nnx.LoRAParam))(model)
    adapters = nnx.state(model, nnx.LoRAParam)
    nnx.update(model, jax.tree.map(lambda p, g: p - 0.5 * g, adapters, grads))
    return [float(first), float(loss(model))]

def weights(model):
    return {p: v for p, v in nnx.to_flat_state(nnx.state(model))}

def passes(dropout):
    lora = SimpleNamespace(rank=4, alpha=8.0, dropout=dropout,
                           target_modules=("q_proj", "o_proj", "gate_proj", "up_proj", "down_proj"))
    train = SimpleNamespace(lora=lora, seed=0)
    pattern = tm.lora_module_pattern(lora.target_modules, False)
    concrete_calls[:] = []
    with mesh:
        old = tm.eager_lora_model(base, lora, pattern, 1, mesh)
        eager_calls, concrete_calls[:] = list(concrete_calls), []
        new = tm.abstract_lora_model(base, lora, pattern, 1, mesh)
        tm.apply_lora(base, train, config, mesh, "fp32")
        setup_calls = list(concrete_calls)
        old_w, new_w = weights(old), weights(new)
        same = sorted(old_w) == sorted(new_w) and all(
            type(old_w[p]) is type(new_w[p]) and old_w[p].get_metadata() == new_w[p].get_metadata()
            and old_w[p][...].dtype == new_w[p][...].dtype
            and np.array_equal(np.asarray(old_w[p][...]), np.asarray(new_w[p][...])) for p in old_w)
        return {
            "eager_calls": eager_calls, "setup_calls": setup_calls, "identical_weights": same,
            "adapters": {".".join(map(str, p)): list(v[...].shape) for p, v in old_w.items() if isinstance(v, nnx.LoRAParam)},
            "abstract_adapters": {".".join(map(str, p)): list(v[...].shape) for p, v in new_w.items() if isinstance(v, nnx.LoRAParam)},
            "losses_eager": losses(old), "losses_abstract": losses(new),
        }

# Both dropouts in one interpreter: the second reuses the first's op-by-op compiles.
print(json.dumps({d: passes(float(d)) for d in sys.argv[1:]}))
"""


@pytest.fixture(scope="module")
def lora_passes():
    """TUNIX_LORA_PASSES without and with LoRA dropout, in one jax-tunix interpreter."""
    stack_or_skip("jax-tunix", "tunix", ".ci/run builds .venv-jax")
    import json
    import subprocess

    from harness.run.registry import interpreter_for, worker_env

    done = subprocess.run(
        [interpreter_for("jax-tunix"), "-c", TUNIX_LORA_PASSES, "0.0", "0.1"],
        capture_output=True,
        text=True,
        env=worker_env(),
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("dropout", ["0.0", "0.1"])
def test_abstract_lora_pass_makes_qwix_eager_adapters_without_running_the_model(lora_passes, dropout):
    """Setup's LoRA pass runs on shapes only, yet gives the model qwix's eager pass gives:
    the same adapter paths, shapes and numbers (dropout draws keys between them), and the
    same loss before and after one step; the eager pass runs the model on real arrays."""
    found = lora_passes[dropout]
    assert found["eager_calls"] == [True]  # the probe sees qwix's eager forward pass
    assert found["setup_calls"] and not any(found["setup_calls"])  # traced calls only
    assert found["adapters"] == found["abstract_adapters"]
    assert len(found["adapters"]) == 2 * 5 * MODEL_LAYERS
    assert found["identical_weights"]
    assert found["losses_eager"] == pytest.approx(found["losses_abstract"], rel=1e-6)
    assert found["losses_eager"][0] != pytest.approx(found["losses_eager"][1], rel=1e-6)


MODEL_LAYERS = 2  # tiny-gemma3's
