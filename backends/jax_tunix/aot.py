"""jax-tunix's train step compiled ahead of time for a TPU topology (harness/projection/projection.py).

The backend's own pieces, with shapes only: Tunix's Gemma 3 from the scenario's
architecture (`model.tunix_config`), Qwix LoRA on the scenario's targets
(`model.apply_lora`), the optax optimizer of the plan's learning rates in Tunix's
MultiSteps when the plan accumulates, all built under `nnx.eval_shape` (no weight in
memory) on a mesh of the topology's devices, sharded by Tunix's annotations. The step
is what PeftTrainer jits for each micro-batch: the harness's loss and model input
(trainer.py), gradients of the LoRA weights (every weight in a full fine-tune), the
optimizer's update; its rows split over the fsdp axis as the trainer splits them.
"""

from __future__ import annotations

from typing import Any

from backends import jax_common
from backends.jax_common import aot


def _optimizer(scenario, plan):
    import optax

    tx = jax_common.optax_optimizer(scenario.train, plan.lr)
    return optax.MultiSteps(tx, every_k_schedule=plan.accumulation) if plan.accumulation > 1 else tx


def abstract_state(scenario, plan, mesh):
    """(graphdef, abstract state) of (model, optimizer), built by shapes only."""
    from flax import nnx
    from tunix.models.gemma3 import model as gemma3

    from backends.jax_tunix import model as tunix_model

    remat = tunix_model.remat_policy(plan.gradient_checkpointing, _options(scenario).remat)
    config = tunix_model.tunix_config(
        tunix_model.scenario_architecture(scenario), tunix_model.stored_dtype(plan), remat
    )
    lora = plan.method == "lora"
    if lora:
        _refuse_fused_targets(scenario, plan, config)

    attention = _attention(scenario, plan, config)

    def make():
        model = gemma3.Gemma3(config, rngs=nnx.Rngs(params=scenario.train.seed))
        if lora:
            model = tunix_model.apply_lora(model, scenario.train, config, mesh, plan.precision.trainable_params)
        if attention != "masked":  # the backend's own attention choice, on a TPU (no cuDNN)
            from backends.jax_tunix.attention import use_dot_product_attention

            use_dot_product_attention(model, attention)
        return model, nnx.Optimizer(model, _optimizer(scenario, plan), wrt=nnx.LoRAParam if lora else nnx.Param)

    with mesh:
        model, optimizer = nnx.eval_shape(make)
    return nnx.split((model, optimizer)), lora


def _attention(scenario, plan, config) -> str:
    """The attention the backend would run on a TPU (jax_common/attention.py)."""
    from backends.jax_common.attention import resolve
    from backends.jax_tunix.backend import ATTENTION_FIELD

    wanted = _options(scenario).attention
    heads = (config.num_heads, config.num_kv_heads, config.head_dim)
    return resolve(wanted, ATTENTION_FIELD, "tpu", plan.precision.compute, *heads)[0]


def _options(scenario):
    """The scenario's jax-tunix options, validated as the backend's own are."""
    from backends.jax_tunix import BACKEND_INFO

    return BACKEND_INFO.options.model_validate(scenario.backend_options.get(BACKEND_INFO.name, {}))


def _refuse_fused_targets(scenario, plan, config) -> None:
    """The backend's own rule (JaxTunixBackend._check_lora_targets): peft's separate k/v
    adapters are refused unless the option `fuse_kv_lora` accepts Tunix's fused one."""
    from backends.jax_tunix.model import fused_lora_targets

    fused = fused_lora_targets(plan.lora_targets, config.num_heads == config.num_kv_heads)
    if fused and not _options(scenario).fuse_kv_lora:
        raise ValueError(
            f"train.lora.target_modules: {', '.join(fused)} share one fused einsum in Tunix's Gemma 3; drop "
            "them, or set backend_options.jax-tunix.fuse_kv_lora: true to compile the fused adapter instead"
        )


def _shardings(state, mesh):
    """Tunix's annotations where a variable has one; replicated elsewhere (optimizer
    scalars)."""
    import jax
    from flax import nnx
    from jax.sharding import NamedSharding, PartitionSpec

    specs = nnx.get_partition_spec(state)
    return jax.tree_util.tree_map(
        lambda s: NamedSharding(mesh, s if isinstance(s, PartitionSpec) else PartitionSpec()),
        specs,
        is_leaf=lambda x: isinstance(x, PartitionSpec) or x is None,
    )


def train_step_fn(graphdef, lora: bool, compute_dtype, loss_kernel: str):
    """PeftTrainer's step for one micro-batch, as a pure function of (state, batch), with
    the backend's own loss function (trainer.step_loss_fn) and loss kernel."""
    from flax import nnx

    from backends.jax_tunix.trainer import model_input, step_loss_fn

    loss_fn = step_loss_fn(compute_dtype, {}, loss_kernel)

    def tunix_train_step(state, batch):
        model, optimizer = nnx.merge(graphdef, state)
        grad_fn = nnx.value_and_grad(loss_fn, argnums=nnx.DiffState(0, nnx.LoRAParam) if lora else 0, has_aux=True)
        (loss, _), grads = grad_fn(model, **model_input(batch))
        optimizer.update(model, grads)
        return nnx.state((model, optimizer)), loss

    return tunix_train_step


def _batch(rows: int, seq_len: int, sharding) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp

    def of(shape, dtype):
        return jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)

    return {
        "input_tokens": of((rows, seq_len), jnp.int32),
        "input_mask": of((rows, seq_len), jnp.bool_),
        "attention_mask": of((rows, seq_len), jnp.bool_),
        "loss_scale": of((rows,), jnp.float32),
    }


def compile_shapes(scenario, plan, devices, seq_lens: list[int]) -> list[list[dict[str, Any]]]:
    """Per length: [the micro-batch's train step] (the optimizer update is inside it:
    optax.MultiSteps applies it every `accumulation` micro-batches)."""
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    from backends.jax_tunix.model import jnp_dtype

    mesh = jax_common.mesh(devices[: plan.devices], plan.mesh, {"fsdp": "fsdp", "tensor": "tp"})
    (graphdef, state), lora = abstract_state(scenario, plan, mesh)
    shardings = _shardings(state, mesh)
    from backends.jax_common.loss import resolve_kernel

    kernel = resolve_kernel(_options(scenario).loss_kernel)
    step = train_step_fn(graphdef, lora, jnp_dtype(plan.precision.compute), kernel)
    jitted = jax.jit(step, donate_argnums=(0,), out_shardings=(shardings, NamedSharding(mesh, PartitionSpec())))
    placed = aot.sharded(state, shardings)
    rows = NamedSharding(mesh, PartitionSpec("fsdp"))
    with mesh:
        return [
            [
                aot.compile_facts(
                    "tunix_train_step", jitted, (placed, _batch(plan.rows_per_forward, n, rows)), plan.accumulation
                )
            ]
            for n in seq_lens
        ]
