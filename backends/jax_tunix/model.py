"""The scenario's model in Tunix: its Gemma 3 built from the architecture fields (random
weights, sharded as they are made) or loaded from a local Hugging Face checkpoint, then
Qwix LoRA on the modules that correspond to the scenario's targets.

Names differ between the two stacks: Tunix fuses the key and value projections into one
`kv_einsum` (and all three into `qkv_einsum` when there are as many KV heads as query
heads), so targeting `k_proj` or `v_proj` puts LoRA on both.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.backend import ModelFacts

# Hugging Face / peft module names -> Tunix Gemma 3 module names.
ATTENTION_TARGETS = {"q_proj": "q_einsum", "k_proj": "kv_einsum", "v_proj": "kv_einsum", "o_proj": "attn_vec_einsum"}
MLP_TARGETS = {"gate_proj", "up_proj", "down_proj"}
TUNIX_NAMES = {"q_einsum", "kv_einsum", "qkv_einsum", "attn_vec_einsum", *MLP_TARGETS}


class ModelConfigError(ValueError):
    """The scenario asks for something the Tunix model cannot express."""


def architecture_from_hf_config(config: dict[str, Any]) -> dict[str, Any]:
    """Our architecture fields from a Hugging Face Gemma 3 `config.json` (text config,
    or the text part of a multimodal one)."""
    text = config.get("text_config", config)
    rope = text.get("rope_parameters") or {}
    return dict(
        family="gemma3", vocab_size=text["vocab_size"], hidden_size=text["hidden_size"],
        intermediate_size=text["intermediate_size"], num_layers=text["num_hidden_layers"],
        num_heads=text["num_attention_heads"], num_kv_heads=text["num_key_value_heads"],
        head_dim=text["head_dim"], sliding_window=text.get("sliding_window"),
        query_pre_attn_scalar=text.get("query_pre_attn_scalar", text["head_dim"]),
        rope_theta=rope.get("full_attention", {}).get("rope_theta", text.get("rope_theta", 1e6)),
        rope_local_theta=rope.get("sliding_attention", {}).get("rope_theta", text.get("rope_local_base_freq", 1e4)),
        tie_embeddings=text.get("tie_word_embeddings", True),
    )


def scenario_architecture(scenario) -> dict[str, Any]:
    spec = scenario.model
    if spec.init == "pretrained":
        config_path = Path(spec.path) / "config.json"
        if not config_path.is_file():
            raise ModelConfigError(f"model.path: no config.json in {spec.path}")
        arch = architecture_from_hf_config(json.loads(config_path.read_text()))
        if spec.arch is not None:
            arch.update(spec.arch.model_dump(exclude_none=True))
        return arch
    return spec.architecture()


def tunix_config(arch: dict[str, Any], precision: str, remat: bool):
    """Tunix's `ModelConfig` for our architecture fields; refuses what it cannot build."""
    import jax.numpy as jnp
    from tunix.models.gemma3 import model as gemma3

    if arch.get("family", "gemma3") != "gemma3":
        raise ModelConfigError(f"model.preset: jax-tunix builds Gemma 3 models; {arch.get('family')!r} is not one")
    if arch.get("tie_embeddings", True) is False:
        raise ModelConfigError("model.arch.tie_embeddings: Tunix's Gemma 3 always ties the LM head to the embedding")
    norm = gemma3.QueryPreAttentionNormalisation
    scalar = arch.get("query_pre_attn_scalar", arch["head_dim"])
    if scalar == arch["head_dim"]:
        query_norm = norm.BY_ONE_OVER_SQRT_HEAD_DIM
    elif scalar == arch["hidden_size"] // arch["num_heads"]:
        query_norm = norm.BY_ONE_OVER_SQRT_EMBED_DIM_DIV_NUM_HEADS
    else:
        raise ModelConfigError(f"model.arch.query_pre_attn_scalar: {scalar} is neither head_dim nor hidden/heads")
    dtype = {"fp32": jnp.float32, "bf16": jnp.bfloat16, "fp16": jnp.float16}[precision]
    return gemma3.ModelConfig(
        num_layers=arch["num_layers"], num_embed=arch["vocab_size"], embed_dim=arch["hidden_size"],
        hidden_dim=arch["intermediate_size"], num_heads=arch["num_heads"], head_dim=arch["head_dim"],
        num_kv_heads=arch["num_kv_heads"], sliding_window_size=arch.get("sliding_window"),
        local_base_frequency=int(arch.get("rope_local_theta", 1e4)),
        global_base_frequency=int(arch.get("rope_theta", 1e6)),
        query_pre_attn_norm=query_norm,
        remat_config=gemma3.RematConfig.BLOCK if remat else gemma3.RematConfig.NONE,
        param_dtype=dtype,
    )


def lora_module_pattern(targets: tuple[str, ...], fused_qkv: bool) -> str:
    """Qwix's module-path regex for the scenario's LoRA targets (HF or Tunix names)."""
    names = []
    for target in targets:
        if target in ATTENTION_TARGETS:
            names.append("qkv_einsum" if fused_qkv and target != "o_proj" else ATTENTION_TARGETS[target])
        elif target in TUNIX_NAMES:
            names.append(target)
        else:
            known = ", ".join(sorted({*ATTENTION_TARGETS, *TUNIX_NAMES}))
            raise ModelConfigError(f"train.lora.target_modules: {target!r} has no Tunix Gemma 3 module (known: {known})")
    return "|".join(f".*{name}" for name in sorted(set(names)))


def build(scenario, mesh):
    """The base model on the mesh (random or loaded), with LoRA when the scenario asks;
    every parameter is placed by Tunix's sharding annotations (fsdp and tp axes)."""
    import jax
    from flax import nnx
    from tunix.models.dummy_model_creator import create_dummy_model
    from tunix.models.gemma3 import model as gemma3

    train = scenario.train
    config = tunix_config(scenario_architecture(scenario), train.precision, train.gradient_checkpointing)
    if scenario.model.init == "pretrained":
        from tunix.models.gemma3 import params_safetensors

        model = params_safetensors.create_model_from_safe_tensors(scenario.model.path, config, mesh=mesh,
                                                                  dtype=config.param_dtype)
    else:
        model = create_dummy_model(gemma3.Gemma3, config, mesh=mesh, dtype=config.param_dtype, random_seed=train.seed)
    if train.method == "lora":
        import qwix

        lora = train.lora
        provider = qwix.LoraProvider(
            module_path=lora_module_pattern(lora.target_modules, config.num_heads == config.num_kv_heads),
            rank=lora.rank, alpha=lora.alpha, dropout=lora.dropout,
        )
        with mesh:  # qwix traces the model once to find the modules; it needs the mesh
            model = qwix.apply_lora_to_model(model, provider, rngs=nnx.Rngs(train.seed + 1),
                                             **sample_input(model, mesh))
            state = nnx.state(model)
            nnx.update(model, jax.lax.with_sharding_constraint(state, nnx.get_partition_spec(state)))
    return model, config


def sample_input(model, mesh) -> dict[str, Any]:
    """Tunix's dummy decode input, with as many rows as the fsdp axis so that the
    activations' sharding constraints divide evenly."""
    import jax.numpy as jnp

    rows = mesh.shape["fsdp"]
    sample = model.get_model_input()
    return {**sample,
            "last_tokens": jnp.ones((rows, 1), jnp.int32), "positions": jnp.zeros((rows, 1), jnp.int32),
            "attention_mask": jnp.ones((rows, 1, 1), jnp.bool_)}


def model_facts(model, config) -> ModelFacts:
    from flax import nnx

    def count(kind) -> int:
        return sum(v.size for v in _arrays(nnx.state(model, kind)))

    # LoRAParam is a Param: the base weights are the Params that are not LoRA's.
    frozen, trainable = count(nnx.All(nnx.Param, nnx.Not(nnx.LoRAParam))), count(nnx.LoRAParam)
    lora = trainable > 0
    return ModelFacts(
        num_params=frozen + trainable, num_embedding_params=config.num_embed * config.embed_dim,
        num_trainable_params=trainable if lora else frozen, num_layers=config.num_layers,
        num_heads=config.num_heads, head_dim=config.head_dim, hidden_size=config.embed_dim,
        vocab_size=config.num_embed,
    )


def sharding_facts(model) -> dict[str, Any]:
    """Where each parameter lives: its partition spec, and what fraction of all
    parameter bytes one device holds (1.0 unsharded; ~1/devices fully sharded)."""
    import jax
    from flax import nnx

    arrays = list(_arrays(nnx.state(model)))
    specs = [tuple(a.sharding.spec) if hasattr(a.sharding, "spec") else () for a in arrays]
    axes = lambda spec: {name for entry in spec if entry for name in (entry if isinstance(entry, tuple) else (entry,))}  # noqa: E731
    first = jax.devices()[0]
    on_first = sum(s.data.nbytes for a in arrays for s in a.addressable_shards if s.device == first)
    return {
        "num_params_total": len(arrays),
        "num_params_sharded_on_fsdp": sum("fsdp" in axes(s) for s in specs),
        "num_params_sharded_on_tp": sum("tp" in axes(s) for s in specs),
        "param_bytes_total": sum(a.nbytes for a in arrays),
        "param_bytes_on_device_0": on_first,
        "shardings": sorted({str(s) for s in specs}),
    }


def _arrays(state):
    import jax

    return [leaf for leaf in jax.tree.leaves(state) if hasattr(leaf, "sharding")]
