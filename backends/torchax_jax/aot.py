"""torchax's train step compiled ahead of time for a TPU topology (harness/projection/projection.py).

The backend's own pieces, with shapes only: the scenario's Hugging Face model and peft
LoRA (hf_common) built on torch's meta device (no weight in memory), cast to the plan's
dtypes, its tensors turned into `jax.ShapeDtypeStruct`s placed as the backend places
them (dim 0 over `fsdp` where it divides, rows over data x fsdp). The step is the
backend's two programs: the micro-batch's loss and gradients added to a donated carry
(`bench_grad_step`, run `accumulation` times a step, compiled once per length) and the
optax update (`bench_apply_step`, once a step, one shape whatever the length). Each
program's fit counts the state the backend keeps on device that it does not take: the
optimizer state beside the grad program, the frozen weights beside the update.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from backends import jax_common
from backends.hf_common.model import DTYPES as TORCH_DTYPES
from backends.jax_common import aot
from backends.jax_common.loss import resolve_kernel
from backends.torchax_jax.backend import (
    MESH_AXES,
    apply_step_function,
    checkpoint_if_planned,
    choose_attention,
    configure_jax,
    grad_step_function,
)
from backends.torchax_jax.loss import micro_batch_loss


def abstract_model(scenario, plan):
    """The model on the meta device: weights, frozen weights and buffers as shapes."""
    import torch

    from backends.hf_common.model import apply_lora, build_model, cast_to_plan

    with torch.device("meta"):
        model = cast_to_plan(apply_lora(build_model(scenario), scenario), plan.precision)
    return model


def _options(scenario):
    """The scenario's torchax options, validated as the backend's own are."""
    from backends.torchax_jax import BACKEND_INFO

    return BACKEND_INFO.options.model_validate(scenario.backend_options.get(BACKEND_INFO.name, {}))


def _struct(tensor):
    import jax
    from torchax.ops.mappings import t2j_dtype

    return jax.ShapeDtypeStruct(tuple(tensor.shape), t2j_dtype(tensor.dtype))


class AbstractStep:
    """The torchax step's programs over a mesh of the topology's devices."""

    def __init__(self, scenario, plan, devices) -> None:
        configure_jax(1)
        import torchax  # noqa: F401 - after the compat shim (configure_jax)

        self.scenario, self.plan = scenario, plan
        self.mesh = jax_common.mesh(devices[: plan.devices], plan.mesh, {axis: axis for axis in MESH_AXES})
        self.model = abstract_model(scenario, plan)
        # As the backend would on a TPU: its attention (splash splits rows over the mesh)
        # and, where the plan recomputes activations, its checkpointed decoder layers.
        choose_attention(self.model, _options(scenario).attention, "tpu", plan, scenario.sequence, self.mesh)
        checkpoint_if_planned(self.model, plan)
        params = dict(self.model.named_parameters())
        self.weights = {n: _struct(p) for n, p in params.items() if p.requires_grad}
        constants = {**{n: p for n, p in params.items() if not p.requires_grad}, **dict(self.model.named_buffers())}
        self.buffers = {n: _struct(t) for n, t in constants.items()}
        self.optimizer = jax_common.optax_optimizer(scenario.train, plan.lr)
        self.loss_kernel = resolve_kernel(_options(scenario).loss_kernel)

    def _sharding(self, spec=()):
        from jax.sharding import NamedSharding, PartitionSpec

        return NamedSharding(self.mesh, PartitionSpec(*spec))

    def _placed(self, tree):
        """As the backend places weights: dim 0 over fsdp where it divides."""
        import jax

        fsdp = self.plan.mesh["fsdp"]

        def place(a):
            split = fsdp > 1 and len(a.shape) and a.shape[0] % fsdp == 0
            return jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=self._sharding(("fsdp",) if split else ()))

        return jax.tree_util.tree_map(place, tree)

    def grad_program(self, seq_len: int) -> dict[str, Any]:
        import jax
        import jax.numpy as jnp

        weights = self._placed(self.weights)
        carry = (jax.ShapeDtypeStruct((), jnp.float32, sharding=self._sharding()), weights)
        rows = jax.ShapeDtypeStruct(
            (self.plan.rows_per_forward, seq_len), jnp.int32, sharding=self._sharding((MESH_AXES,))
        )
        out = jax.tree_util.tree_map(lambda a: a.sharding, carry)
        compute = TORCH_DTYPES[self.plan.precision.compute]
        loss = micro_batch_loss(self.model, self.loss_kernel, {}, compute)  # the backend's own loss
        jitted = jax.jit(grad_step_function(loss), donate_argnums=(6,), out_shardings=out)
        args = (weights, self._placed(self.buffers), rows, rows, rows, carry[0], carry)
        # The optimizer state stays on device across steps but is not this program's argument.
        kept = aot.per_device_bytes(self._placed(jax.eval_shape(self.optimizer.init, self.weights)))
        return aot.compile_facts("bench_grad_step", jitted, args, self.plan.accumulation, kept)

    def apply_program(self) -> dict[str, Any]:
        import jax

        weights = self._placed(self.weights)
        opt_state = self._placed(jax.eval_shape(self.optimizer.init, self.weights))
        # Outputs placed as the backend pins them (backend._apply_step): left to the
        # compiler, the updated weights and state came back replicated (an 8B model's
        # update then needed 44.9 GB of temporaries per v6e chip).
        shardings = partial(jax.tree_util.tree_map, lambda a: a.sharding)
        out = (shardings(weights), shardings(opt_state), (self._sharding(), shardings(weights)), self._sharding())
        jitted = jax.jit(apply_step_function(self.optimizer), donate_argnums=(0, 1, 2), out_shardings=out)
        # The frozen weights and buffers stay on device while the update runs without them.
        kept = aot.per_device_bytes(self._placed(self.buffers))
        return aot.compile_facts("bench_apply_step", jitted, (weights, weights, opt_state), 1, kept)


def compile_shapes(scenario, plan, devices, seq_lens: list[int]) -> list[list[dict[str, Any]]]:
    """Per length: [the micro-batch program, the update program]. The update has one
    shape whatever the length: compiled once, listed with every length."""
    step = AbstractStep(scenario, plan, devices)
    with step.mesh:
        apply = step.apply_program()
        return [[step.grad_program(n), apply] for n in seq_lens]
