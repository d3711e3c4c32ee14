"""The framework-light pieces of the JAX backends, in the project's own environment:
compile counting that survives a library clearing JAX's listeners, the mapping of a
scenario's model and LoRA targets onto Tunix's Gemma 3 (and which targets it fuses), and
how jax-tunix reports its work: the rows devices got, the lr read after each step."""

from __future__ import annotations

import pytest

from backends.jax_tunix.model import ModelConfigError, architecture_from_hf_config, lora_module_pattern


def test_compile_counter_counts_its_function_only_and_survives_listener_clearing():
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    from backends.jax_common import CompileCounter

    counter = CompileCounter("bench_probe_step")

    def bench_probe_step(x):
        return x * 2 + 1

    step = jax.jit(bench_probe_step)
    other = jax.jit(lambda x: x - 1)
    counter.ensure_listening()
    step(jnp.ones(3)).block_until_ready()
    other(jnp.ones(5)).block_until_ready()
    assert counter.snapshot().count == 1 and counter.other >= 1
    jax.monitoring.clear_event_listeners()  # what Tunix's PeftTrainer does when train() ends
    step(jnp.ones(4)).block_until_ready()
    assert counter.snapshot().count == 1  # cleared: this compile was missed
    counter.ensure_listening()
    counter.ensure_listening()  # twice must not count twice
    step(jnp.ones(6)).block_until_ready()
    assert counter.snapshot().count == 2
    step(jnp.ones(6)).block_until_ready()  # cached: no compile
    assert counter.snapshot().count == 2 and counter.snapshot().seconds > 0
    counter._forget()


def test_lora_targets_map_to_tunix_modules():
    hf = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    assert (
        lora_module_pattern(hf, fused_qkv=False)
        == ".*attn_vec_einsum|.*down_proj|.*gate_proj|.*kv_einsum|.*q_einsum|.*up_proj"
    )
    assert lora_module_pattern(("q_proj", "v_proj"), fused_qkv=True) == ".*qkv_einsum"
    assert lora_module_pattern(("q_einsum",), fused_qkv=False) == ".*q_einsum"


def test_unknown_lora_target_names_the_field():
    with pytest.raises(ModelConfigError, match=r"train\.lora\.target_modules: 'lm_head'"):
        lora_module_pattern(("q_proj", "lm_head"), fused_qkv=False)


def test_hf_gemma3_config_maps_to_architecture_fields():
    config = {
        "model_type": "gemma3_text",
        "vocab_size": 262144,
        "hidden_size": 640,
        "intermediate_size": 2048,
        "num_hidden_layers": 18,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "head_dim": 256,
        "sliding_window": 512,
        "query_pre_attn_scalar": 256,
        "tie_word_embeddings": True,
        "rope_parameters": {"full_attention": {"rope_theta": 1e6}, "sliding_attention": {"rope_theta": 1e4}},
    }
    from harness.scenario.presets import MODEL_PRESETS

    arch = architecture_from_hf_config({"text_config": config})
    expected = {k: v for k, v in MODEL_PRESETS["gemma-3-270m"].items() if k != "max_position_embeddings"}
    assert arch == expected


def test_device_facts_name_tpu_generation_gpu_and_chip_count():
    from types import SimpleNamespace

    from backends.jax_common import accelerator, memory
    from harness.figures.accelerators import catalog_key

    def chips(platform, kind, peaks):
        return [
            SimpleNamespace(
                platform=platform,
                device_kind=kind,
                memory_stats=lambda p=p: {"peak_bytes_in_use": p, "bytes_in_use": 1},
            )
            for p in peaks
        ]

    tpus = chips("tpu", "TPU v5 lite", [3, 9, 4, 5])
    acc = accelerator(tpus)
    assert acc == {"kind": "tpu", "name": "TPU v5 lite", "count": 4}
    assert catalog_key(acc["kind"], acc["name"]) == "tpu-v5e"
    peak = memory(tpus)
    assert peak.peak_bytes == 9 and peak.kind == "tpu_peak_bytes_in_use" and peak.per_rank_bytes == [3, 9, 4, 5]
    gpus = chips("gpu", "NVIDIA H100 80GB HBM3", [7])
    assert accelerator(gpus)["kind"] == "cuda" and catalog_key("cuda", accelerator(gpus)["name"]) == "h100-sxm"
    cpus = [SimpleNamespace(platform="cpu", device_kind="cpu", memory_stats=lambda: None)] * 4
    assert accelerator(cpus)["count"] == 1 and accelerator(cpus)["virtual_devices"] == 4
    assert memory(cpus).kind == "cpu_peak_rss" and memory(cpus).peak_bytes > 0


def test_tunix_fuses_k_and_v_and_q_too_with_as_many_kv_heads():
    from backends.jax_tunix.model import fused_lora_targets

    seven = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    assert fused_lora_targets(seven, fused_qkv=False) == ["k_proj", "v_proj"]
    assert fused_lora_targets(seven, fused_qkv=True) == ["q_proj", "k_proj", "v_proj"]
    assert fused_lora_targets(("q_proj", "o_proj", "down_proj"), fused_qkv=False) == []
    assert fused_lora_targets(("q_proj",), fused_qkv=True) == ["q_proj"]


def test_distinct_row_shards_counts_row_ranges_not_devices():
    """A 2 x 2 (fsdp x tp) mesh holds 4 rows as 2 ranges (each twice, over tp); a
    replicated array is 1 range on every device."""
    from types import SimpleNamespace

    from backends.jax_tunix.backend import distinct_row_shards

    def held(*row_slices):
        index = {f"device{i}": (rows, slice(None)) for i, rows in enumerate(row_slices)}
        return SimpleNamespace(shape=(4, 16), sharding=SimpleNamespace(devices_indices_map=lambda shape: index))

    assert distinct_row_shards(held(slice(0, 2), slice(0, 2), slice(2, 4), slice(2, 4))) == 2
    assert distinct_row_shards(held(slice(None), slice(None), slice(None), slice(None))) == 1
    assert distinct_row_shards(held(slice(0, 4), slice(None))) == 1  # the same rows, spelled two ways


def test_work_log_reads_the_lr_from_the_optimizer_only_after_a_step():
    """The lr is read back when the step's account is taken (after the sync), and only
    when micro-batches were fed since the last account."""
    import numpy as np

    from backends.jax_tunix.backend import OptimizerWorkLog

    reads = []
    log = OptimizerWorkLog(lambda: reads.append(1) or 0.25)
    assert log.take() == ({"rows": 0, "tokens_real": 0, "tokens_padded": 0}, None) and not reads
    log.fed(np.array([[1, 1, 0], [1, 0, 0]]))
    log.fed(np.array([[1, 1, 1], [1, 1, 0]]))
    assert log.take() == ({"rows": 4, "tokens_real": 8, "tokens_padded": 12}, 0.25) and len(reads) == 1


def test_peft_adapter_keys_map_to_qwix_lora_weights():
    from backends.jax_tunix.model import _tunix_lora_path

    prefix = "base_model.model.model.layers.3"
    assert _tunix_lora_path(f"{prefix}.self_attn.q_proj.lora_A.weight") == ("layers", 3, "attn", "q_einsum", "w_lora_a")
    assert _tunix_lora_path(f"{prefix}.self_attn.o_proj.lora_B.weight") == (
        "layers",
        3,
        "attn",
        "attn_vec_einsum",
        "w_lora_b",
    )
    assert _tunix_lora_path(f"{prefix}.mlp.down_proj.lora_A.weight") == (
        "layers",
        3,
        "mlp",
        "down_proj",
        "kernel_lora_a",
    )
    with pytest.raises(ModelConfigError, match=r"backend_options\.jax-tunix\.lora_init: .*k_proj"):
        _tunix_lora_path(f"{prefix}.self_attn.k_proj.lora_A.weight")
