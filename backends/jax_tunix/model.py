"""The scenario's model in Tunix: its Gemma 3 built from the architecture fields (random
weights, sharded as they are made) or loaded from a local Hugging Face checkpoint, then
Qwix LoRA on the modules that correspond to the scenario's targets.

Names differ between the two stacks: Tunix fuses the key and value projections into one
`kv_einsum` (and all three into `qkv_einsum` when there are as many KV heads as query
heads), so targeting `k_proj` or `v_proj` puts one LoRA on both, its A shared: not
peft's two adapters (`fused_lora_targets`; the backend refuses them unless told).

Precision follows the run's plan: base weights stored in `frozen_params`, LoRA weights
in `trainable_params` (qwix makes them in the base weights' dtype; they are cast after),
and the forward pass run in `compute` (`in_compute_dtype`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from backends.hf_common.config_names import from_hf
from harness.run.backend import ModelFacts

# Hugging Face / peft module names -> Tunix Gemma 3 module names.
ATTENTION_TARGETS = {"q_proj": "q_einsum", "k_proj": "kv_einsum", "v_proj": "kv_einsum", "o_proj": "attn_vec_einsum"}
MLP_TARGETS = {"gate_proj", "up_proj", "down_proj"}
TUNIX_NAMES = {"q_einsum", "kv_einsum", "qkv_einsum", "attn_vec_einsum", *MLP_TARGETS}
DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}  # the plan's names -> numpy's


class ModelConfigError(ValueError):
    """The scenario asks for something the Tunix model cannot express."""


def architecture_from_hf_config(config: dict[str, Any]) -> dict[str, Any]:
    """Our architecture fields from a Hugging Face Gemma 3 `config.json` (text config,
    or the text part of a multimodal one)."""
    text = config.get("text_config", config)
    rope = text.get("rope_parameters") or {}
    return dict(
        family="gemma3",
        **from_hf(text),
        head_dim=text["head_dim"],
        sliding_window=text.get("sliding_window"),
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


def jnp_dtype(name: str):
    """The JAX dtype of one of the plan's dtype names (fp32, bf16, fp16)."""
    import jax.numpy as jnp

    return jnp.dtype(DTYPES[name])


def remat_policy(gradient_checkpointing: bool, option: str) -> str:
    """Tunix's remat policy (RematConfig's name, lower case) for the plan's
    `train.gradient_checkpointing` and the option `backend_options.jax-tunix.remat`:
    the plan says whether activations are recomputed, the option says which."""
    if option == "auto":
        return "block" if gradient_checkpointing else "none"
    if (option == "none") == gradient_checkpointing:
        plan = "true" if gradient_checkpointing else "false"
        raise ValueError(
            f"backend_options.jax-tunix.remat: {option} contradicts train.gradient_checkpointing: {plan} "
            "(none recomputes nothing; block and decoder recompute); use auto, or change the plan"
        )
    return option


def tunix_config(arch: dict[str, Any], param_dtype: str, remat: str):
    """Tunix's `ModelConfig` for our architecture fields, its weights made in
    `param_dtype` (a plan dtype name), recomputing activations by `remat`
    (`remat_policy`); refuses what it cannot build."""
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
    return gemma3.ModelConfig(
        num_layers=arch["num_layers"],
        num_embed=arch["vocab_size"],
        embed_dim=arch["hidden_size"],
        hidden_dim=arch["intermediate_size"],
        num_heads=arch["num_heads"],
        head_dim=arch["head_dim"],
        num_kv_heads=arch["num_kv_heads"],
        sliding_window_size=arch.get("sliding_window"),
        local_base_frequency=int(arch.get("rope_local_theta", 1e4)),
        global_base_frequency=int(arch.get("rope_theta", 1e6)),
        query_pre_attn_norm=query_norm,
        remat_config=gemma3.RematConfig[remat.upper()],
        param_dtype=jnp_dtype(param_dtype),
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
            raise ModelConfigError(
                f"train.lora.target_modules: {target!r} has no Tunix Gemma 3 module (known: {known})"
            )
    return "|".join(f".*{name}" for name in sorted(set(names)))


def fused_lora_targets(targets: tuple[str, ...], fused_qkv: bool) -> list[str]:
    """The peft targets Tunix cannot adapt on their own: k_proj and v_proj live in one
    `kv_einsum`, so one LoRA (one A) adapts both, with fewer parameters than peft's two;
    with as many KV heads as query heads q_proj joins them in `qkv_einsum`."""
    fused = {"k_proj", "v_proj"} | ({"q_proj"} if fused_qkv else set())
    return [target for target in targets if target in fused]


def stored_dtype(plan) -> str:
    """The dtype the base model's weights are made in: the frozen dtype under LoRA; in a
    full fine-tune every weight is trained, so the trainable dtype (the master copy)."""
    return plan.precision.frozen_params if plan.method == "lora" else plan.precision.trainable_params


def build(scenario, plan, config, mesh, lora_init: str | None = None):
    """The base model of `config` (`tunix_config`, in `stored_dtype`) on the mesh, random
    or loaded, with LoRA in the plan's trainable dtype when the plan trains LoRA (started
    from the peft adapter in `lora_init` if given); every parameter is placed by Tunix's
    sharding annotations (fsdp and tp axes)."""
    from tunix.models.gemma3 import model as gemma3

    if scenario.model.init == "pretrained":
        from tunix.models.gemma3 import params_safetensors

        model = params_safetensors.create_model_from_safe_tensors(
            scenario.model.path, config, mesh=mesh, dtype=config.param_dtype
        )
    else:
        model = random_model(gemma3.Gemma3, config, mesh, config.param_dtype, scenario.train.seed)
    if plan.method == "lora":
        model = apply_lora(model, scenario.train, config, mesh, plan.precision.trainable_params, lora_init)
    return model


def random_model(model_class, config, mesh, dtype, seed: int, scale: float = 0.02):
    """The model with N(0, scale^2) weights that do not depend on how the mesh lays its
    devices out. Tunix's `create_dummy_model` draws one tensor per addressable shard, so
    its numbers change with the devices per process (and replicas of one weight differ);
    here every weight is drawn at its full shape (`draw_weights`) and each device gets
    its block of it: the same numbers on 1 process x 4 devices as on 2 processes x 2."""
    import jax
    from flax import nnx

    with mesh:
        abstract = nnx.eval_shape(lambda: model_class(config, rngs=nnx.Rngs(params=0)))
    graph_def, abstract_state = nnx.split(abstract)
    shapes = abstract_state.to_pure_dict()
    shardings = nnx.get_named_sharding(abstract_state, mesh).to_pure_dict()
    leaves, tree = jax.tree_util.tree_flatten(shapes)
    drawn = draw_weights(leaves, jax.tree_util.tree_leaves(shardings), seed, scale, dtype)
    return nnx.merge(graph_def, jax.tree_util.tree_unflatten(tree, drawn))


def draw_weights(leaves, shardings: list, seed: int, scale: float, dtype) -> list:
    """Leaf i as scale * N(0, 1) from numpy's generator seeded (seed, i), drawn on the host
    in fp32, cast to `dtype` (else the leaf's), and placed by `shardings[i]` (each
    process hands its own devices their blocks: `jax.make_array_from_callback`). No XLA
    program at all: drawing with JAX compiled one program per weight before #36 (~230
    for Gemma 3 270M), and one program for all of them still compiles one kernel per
    output array (XLA's CPU compiler: ~1 s each on the 2-core CPU);
    benchmarks/probes/tunix_setup_time.py measures the two."""
    import jax
    import numpy as np

    placed = []
    for i, (leaf, sharding) in enumerate(zip(leaves, shardings)):
        normal = np.random.default_rng([seed, i]).standard_normal(leaf.shape, dtype=np.float32)
        host = (normal * np.float32(scale)).astype(np.dtype(dtype or leaf.dtype))
        placed.append(jax.make_array_from_callback(leaf.shape, sharding, lambda index, host=host: host[index]))
    return placed


def apply_lora(model, train, config, mesh, dtype: str, init: str | None = None, lora_pass=None):
    """Qwix LoRA on the scenario's targets, started from the peft adapter in directory
    `init` if given (else qwix's init: random A, zero B), its weights cast to `dtype`
    (qwix makes them in the base weights' dtype) and placed by their sharding annotations.
    The modules are found by an abstract pass (`abstract_lora_model`), not qwix's eager one
    (`lora_pass` swaps it: benchmarks/probes/tunix_setup_time.py times the two)."""
    import jax
    from flax import nnx

    pattern = lora_module_pattern(train.lora.target_modules, config.num_heads == config.num_kv_heads)
    with mesh:
        model = (lora_pass or abstract_lora_model)(model, train.lora, pattern, train.seed + 1, mesh)
        if init is not None:
            load_peft_adapter(model, Path(init), train.lora)
        adapters = nnx.state(model, nnx.LoRAParam)
        nnx.update(model, jax.tree.map(lambda a: a.astype(jnp_dtype(dtype)), adapters))
        state = nnx.state(model)
        nnx.update(model, jax.lax.with_sharding_constraint(state, nnx.get_partition_spec(state)))
    return model


def lora_provider(lora, pattern: str, **initializers):
    """Qwix's LoRA provider for the plan's `train.lora` on the modules `pattern` matches."""
    import qwix

    return qwix.LoraProvider(
        module_path=pattern, rank=lora.rank, alpha=lora.alpha, dropout=lora.dropout, **initializers
    )


def eager_lora_model(model, lora, pattern: str, seed: int, mesh):
    """Qwix's own way (setup before #45 item 4): it runs the model once on a dummy input,
    op by op on the devices, creating each adapter as its module is first called."""
    import qwix
    from flax import nnx

    return qwix.apply_lora_to_model(
        model, lora_provider(lora, pattern), rngs=nnx.Rngs(seed), **sample_input(model, mesh)
    )


def abstract_lora_model(model, lora, pattern: str, seed: int, mesh):
    """The model `eager_lora_model` returns, the same adapters with the same numbers, with
    qwix's pass over the model run on shapes only (`nnx.eval_shape`: no operation runs).
    That pass records each adapter weight's initialisation in the order qwix made it;
    they are then made for real, each from the key qwix's `rngs` gave it (one key per
    weight in creation order, and one dropout key after each module's pair when dropout
    is on: qwix 0.1.8's einsum), and merged with the base model's own arrays."""
    import qwix
    from flax import nnx

    created = []
    rule = qwix.LoraRule(module_path=pattern, rank=lora.rank, alpha=lora.alpha)
    provider = lora_provider(
        lora,
        pattern,
        lora_a_initializer=_recording(created, "a", rule.lora_a_initializer),
        lora_b_initializer=_recording(created, "b", rule.lora_b_initializer),
    )
    sample = sample_input(model, mesh)
    abstract = nnx.eval_shape(
        lambda m, rngs: qwix.apply_lora_to_model(m, provider, rngs=rngs, **sample), model, nnx.Rngs(seed)
    )
    graphdef, state = nnx.split(abstract)
    adapters = _replayed_adapters(created, nnx.state(abstract, nnx.LoRAParam), nnx.Rngs(seed), lora.dropout > 0)
    base = dict(nnx.to_flat_state(nnx.state(model)))
    for path, variable in nnx.to_flat_state(state):
        variable.set_value(adapters[path] if path in adapters else base[path].get_value())
    return nnx.merge(graphdef, state)


def _recording(created: list, kind: str, initializer):
    """`initializer`, noting (module path, "a" or "b", initializer, shape, dtype) of each call."""
    from qwix._src.utils.flax_util import get_current_module_path

    def record(key, shape, dtype):
        created.append((tuple(get_current_module_path()), kind, initializer, tuple(shape), dtype))
        return initializer(key, shape, dtype)

    return record


def _replayed_adapters(created: list, abstract_adapters, rngs, dropout: bool) -> dict:
    """{path: array} of every adapter weight, made as qwix's eager pass made it."""
    from flax import nnx

    wanted = {path: variable.get_value() for path, variable in nnx.to_flat_state(abstract_adapters)}
    made = {}
    for module_path, kind, initializer, shape, dtype in created:
        paths = [p for p in wanted if p[:-1] == module_path and str(p[-1]).endswith(f"_lora_{kind}")]
        if len(paths) != 1:
            raise RuntimeError(f"qwix's LoRA pass: {len(paths)} '{kind}' adapters under {module_path}, not one")
        made[paths[0]] = initializer(rngs.params(), shape, dtype)
        if kind == "b" and dropout:
            rngs["dropout"]()
    if set(made) != set(wanted) or any(made[p].shape != wanted[p].shape for p in wanted):
        raise RuntimeError("qwix's abstract LoRA pass made other adapters than it recorded")
    return made


# peft's (block, module) in a Hugging Face Gemma 3 layer -> Tunix's (block, module, weight):
# the targets Tunix adapts one by one (k and v are fused, so no peft adapter maps there).
PEFT_LORA_WEIGHTS = {
    ("self_attn", "q_proj"): ("attn", "q_einsum", "w"),
    ("self_attn", "o_proj"): ("attn", "attn_vec_einsum", "w"),
    ("mlp", "gate_proj"): ("mlp", "gate_proj", "kernel"),
    ("mlp", "up_proj"): ("mlp", "up_proj", "kernel"),
    ("mlp", "down_proj"): ("mlp", "down_proj", "kernel"),
}
_PEFT_KEY = re.compile(r"layers\.(\d+)\.(self_attn|mlp)\.(\w+)\.lora_([AB])\.weight$")
LORA_INIT_FIELD = "backend_options.jax-tunix.lora_init"


def load_peft_adapter(model, directory: Path, lora) -> None:
    """Set the model's qwix LoRA weights to a peft adapter's (adapter_model.safetensors),
    so a run can start from the same adapter as a PyTorch run. peft keeps A as
    [rank, in] and B as [out, rank] of the unfused projection; qwix keeps A as [in...,
    rank] and B as [rank, out...] with Tunix's head axes split out of `in` or `out` in
    the same (head-major) order, so each is the transpose, reshaped. Every LoRA weight
    of the model must come from the adapter, and rank and alpha must be the run's."""
    from flax import nnx
    from safetensors.numpy import load_file

    config = json.loads((directory / "adapter_config.json").read_text())
    if (config.get("r"), config.get("lora_alpha")) != (lora.rank, lora.alpha):
        raise ModelConfigError(
            f"{LORA_INIT_FIELD}: the adapter has rank {config.get('r')}, alpha "
            f"{config.get('lora_alpha')}; the run has {lora.rank}, {lora.alpha} (train.lora)"
        )
    state = nnx.state(model, nnx.LoRAParam)
    wanted = {path for path, _ in nnx.to_flat_state(state)}
    loaded = set()
    for key, value in load_file(directory / "adapter_model.safetensors").items():
        path = _tunix_lora_path(key)
        if path not in wanted:
            raise ModelConfigError(
                f"{LORA_INIT_FIELD}: {key} has no LoRA weight in this run (train.lora.target_modules)"
            )
        variable = _state_at(state, path)
        variable.value = value.T.reshape(variable.value.shape).astype(variable.value.dtype)
        loaded.add(path)
    if wanted - loaded:
        missing = ", ".join(".".join(map(str, p)) for p in sorted(wanted - loaded, key=str)[:3])
        raise ModelConfigError(f"{LORA_INIT_FIELD}: the adapter has no weights for {missing} ...")
    nnx.update(model, state)


def _tunix_lora_path(key: str) -> tuple:
    """The qwix LoRA weight's path in the Tunix model for a peft adapter key."""
    match = _PEFT_KEY.search(key)
    if not match or (match[2], match[3]) not in PEFT_LORA_WEIGHTS:
        raise ModelConfigError(
            f"{LORA_INIT_FIELD}: {key} is not a LoRA weight Tunix trains on its own "
            f"(it has {', '.join(m for _, m in PEFT_LORA_WEIGHTS)})"
        )
    block, module, weight = PEFT_LORA_WEIGHTS[(match[2], match[3])]
    return ("layers", int(match[1]), block, module, f"{weight}_lora_{match[4].lower()}")


def _state_at(state, path: tuple):
    for key in path:
        state = state[key]
    return state


def in_compute_dtype(model, dtype):
    """The model with every floating weight cast to the compute dtype, the way AMP runs
    fp32 master weights in bf16: qwix adds each LoRA delta to the base matmul's output,
    so fp32 adapters on bf16 weights would otherwise lift the activations to fp32. Used
    inside the differentiated loss: gradients flow back through the cast in the stored
    dtype. A no-op where the weights are in `dtype` already."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    cast = jax.tree.map(lambda a: a.astype(dtype) if jnp.issubdtype(a.dtype, jnp.floating) else a, params)
    return nnx.merge(graphdef, cast, rest)


def final_hidden_states(model, tokens, positions, attention_mask):
    """The hidden states after Tunix's Gemma 3 final norm: what its LM head
    (`embedder.decode`, the tied embedding) turns into logits. Through the model's own
    `__call__` with Tunix's flag `output_hidden_states`, which sows them (nnx.Intermediate,
    `all_hidden_states`): Qwix applies LoRA by intercepting that `__call__`, so calling
    the layers one by one would run them without their adapters. The logits the call
    also returns are never used, so XLA drops them (dead code): the compiled loss holds
    no full logits (tests/backends/test_jax_loss_kernels.py compiles both kernels and
    compares their temporary memory). The sown value is popped again, so the model keeps
    no activation. Tunix's Gemma 3 has no final logit soft cap (nor has HF's Gemma 3:
    `final_logit_softcapping` is None)."""
    from flax import nnx

    model(tokens, positions, None, attention_mask, output_hidden_states=True)
    (hidden,) = nnx.pop(model, nnx.Intermediate)["all_hidden_states"].value
    return hidden


def logits_dtype(model, mesh, dtype) -> Any:
    """The dtype of the logits a forward pass in `dtype` produces, from shapes only
    (jax.eval_shape: nothing runs): what the model's matmuls compute in."""
    import jax
    from flax import nnx

    graphdef, state = nnx.split(model)
    sample = sample_input(model, mesh)

    def forward(state):
        logits, _ = in_compute_dtype(nnx.merge(graphdef, state), dtype)(
            sample["last_tokens"], sample["positions"], None, sample["attention_mask"]
        )
        return logits

    with mesh:
        return jax.eval_shape(forward, state).dtype


def sample_input(model, mesh) -> dict[str, Any]:
    """Tunix's dummy decode input, with as many rows as the fsdp axis so that the
    activations' sharding constraints divide evenly."""
    import jax.numpy as jnp

    rows = mesh.shape["fsdp"]
    sample = model.get_model_input()
    return {
        **sample,
        "last_tokens": jnp.ones((rows, 1), jnp.int32),
        "positions": jnp.zeros((rows, 1), jnp.int32),
        "attention_mask": jnp.ones((rows, 1, 1), jnp.bool_),
    }


def parameter_dtypes(model) -> dict[str, str]:
    """The dtypes the weights are really stored in: frozen (the Params that are not
    LoRA's) and trainable (LoRA's; every Param in a full fine-tune), several joined by '+'."""
    from flax import nnx

    from backends.jax_common import dtype_name

    def names(kind) -> str:
        return "+".join(sorted({dtype_name(a.dtype) for a in _arrays(nnx.state(model, kind))}))

    if names(nnx.LoRAParam):
        return {
            "frozen_params": names(nnx.All(nnx.Param, nnx.Not(nnx.LoRAParam))),
            "trainable_params": names(nnx.LoRAParam),
        }
    return {"trainable_params": names(nnx.Param)}


def model_facts(model, config) -> ModelFacts:
    from flax import nnx

    def count(kind) -> int:
        return sum(v.size for v in _arrays(nnx.state(model, kind)))

    # LoRAParam is a Param: the base weights are the Params that are not LoRA's.
    frozen, trainable = count(nnx.All(nnx.Param, nnx.Not(nnx.LoRAParam))), count(nnx.LoRAParam)
    lora = trainable > 0
    return ModelFacts(
        num_params=frozen + trainable,
        num_embedding_params=config.num_embed * config.embed_dim,
        num_trainable_params=trainable if lora else frozen,
        num_layers=config.num_layers,
        num_heads=config.num_heads,
        head_dim=config.head_dim,
        hidden_size=config.embed_dim,
        vocab_size=config.num_embed,
        architecture=architecture_built(model, config),
    )


def architecture_built(model, config) -> dict[str, Any]:
    """The built model's architecture, for the FLOPs convention (harness.figures.metrics): the
    sizes from Tunix's config and each layer's attention window from its layer (Tunix
    cycles its own local/global pattern), so a loaded checkpoint is counted as built."""
    from tunix.models.gemma3.model import AttentionType

    return {
        "vocab_size": config.num_embed,
        "hidden_size": config.embed_dim,
        "intermediate_size": config.hidden_dim,
        "num_layers": config.num_layers,
        "num_heads": config.num_heads,
        "num_kv_heads": config.num_kv_heads,
        "head_dim": config.head_dim,
        "layer_windows": [
            config.sliding_window_size if layer.attn.attn_type == AttentionType.LOCAL_SLIDING else None
            for layer in model.layers
        ],
    }


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
