"""torchax: PyTorch model, JAX training step.

The model (with peft LoRA) is built with torchax off, from the same seed as every other
backend, cast to the plan's dtypes, and its tensors become JAX arrays placed on a
(data, fsdp) mesh: weights split along dim 0 over `fsdp` (FSDP-style; XLA inserts the
gathers), every input's rows split over both axes, so each device computes its own
rows. The step is two jitted programs: one per micro-batch (forward through
`torch.func.functional_call`, the token-weighted loss, gradients added to a donated
accumulator), compiled once per micro-batch length, and one optax update per optimizer
step. One program taking all of a step's micro-batches would compile once per
*combination* of lengths, i.e. nearly every step under bucketed padding.

Attention (#36): by default jax.nn.dot_product_attention, causal, with no padding mask
(right-padded rows need none: backends/jax_common/attention.py), cuDNN's flash kernel on
a CUDA GPU with 16-bit compute; `backend_options.torchax.attention: masked` runs HF's
`model.attention` with the padding mask as before. The trained (LoRA) weights are fp32
master weights cast to the plan's compute dtype inside the step, as peft under autocast.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from backends import jax_common
from backends.hf_common.loss import causal_lm
from backends.hf_common.model import DTYPES as TORCH_DTYPES
from backends.hf_common.model import apply_lora, build_model, cast_to_plan, model_facts
from backends.hf_common.model import dtype_name as torch_dtype_name
from backends.jax_common import distributed
from backends.torchax_jax.compat import allow_removed_named_overloads
from harness.records.provenance import module_versions
from harness.run.backend import ModelFacts, Probe, StepBackend, WorkLog

# jit reports compilations as jit(<name>): the step's two programs, told apart from setup's.
GRAD_NAME = "bench_grad_step"
APPLY_NAME = "bench_apply_step"
MESH_AXES = ("data", "fsdp")


def configure_jax(cpu_devices: int) -> None:
    allow_removed_named_overloads()  # before torchax is imported (see compat.py)
    jax_common.request_cpu_devices(cpu_devices)


class DeferredLrLog(WorkLog):
    """A work log whose lr is a device scalar until the step's account is taken.

    The lr the optimizer applied lives on the device; reading it to the host inside the
    step would add a sync to the timed region. `StepRecorder.end` takes the account
    after its sync and after the clock has stopped, so the host read happens there."""

    def applied_lr(self, lr) -> None:
        self.lr = lr

    def take(self):
        if self.lr is not None:
            self.lr = float(self.lr)
        return super().take()


class TorchaxBackend(jax_common.JaxDeviceFacts, StepBackend):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.work = DeferredLrLog()
        self.last = None  # the last step's loss (a device array): what `sync` waits for

    @classmethod
    def probe(cls) -> Probe:
        configure_jax(1)  # a CPU is one device; runs ask for virtual ones (parallel.devices)
        return jax_common.probe_devices()

    # ------------------------------------------------------------------ setup
    def setup(self) -> ModelFacts:
        from backends.hf_common.model import architecture_of
        from backends.jax_common.attention import attention_memory_kind
        from backends.jax_common.loss import resolve_kernel, size_chunks_for, work_of

        self.loss_kernel = resolve_kernel(self.options.loss_kernel)
        # This host's share of the devices, then the job's other hosts joined (nothing
        # to join on one host): every process then sees every host's devices.
        configure_jax(self.plan.devices // self.plan.hosts)
        distributed.initialize(self.plan)
        import torchax

        self._listen_for_compiles()
        self.devices = self._plan_devices()
        self.mesh = self._mesh()
        model = cast_to_plan(apply_lora(build_model(self.scenario), self.scenario), self.plan.precision)
        self.attention = choose_attention(
            model, self.options.attention, self.devices[0].platform, self.plan, self.scenario.sequence, self.mesh
        )
        # The loss kernel's chunks by the memory model, for the device and this attention.
        config = causal_lm(model).config
        softcap = bool(getattr(config, "final_logit_softcapping", None))
        kind = attention_memory_kind(self.attention[0])
        size_chunks_for(self.devices, work_of(self.plan, self.scenario, architecture_of(config), kind, softcap))
        self.checkpointed_layers = checkpoint_if_planned(model, self.plan)
        facts = model_facts(model)
        self.env = torchax.default_env()
        self._place_model(model)
        self.optimizer = jax_common.optax_optimizer(self.scenario.train, self.plan.lr)
        self.opt_state = self._place(self.optimizer.init(self.weights))
        self.carry = self._zero_carry()
        self.seen = {}  # measured while jit traces the step: "compute", the logits' dtype
        self.row_shards = set()  # the distinct row blocks the devices were handed
        self.grad_fn, self.apply_fn = self._grad_step(), self._apply_step()
        return facts

    def _listen_for_compiles(self) -> None:
        self.compiles = jax_common.CompileCounter(GRAD_NAME, APPLY_NAME)
        self.compiles.ensure_listening()

    def _plan_devices(self) -> list:
        import jax

        found = jax.devices()
        if len(found) < self.plan.devices:
            raise ValueError(
                f"parallel.devices: {self.plan.devices} planned, JAX sees {len(found)} "
                f"({found[0].platform}; XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r})"
            )
        return found[: self.plan.devices]

    def _mesh(self):
        return jax_common.mesh(self.devices, self.plan.mesh, {axis: axis for axis in MESH_AXES})

    def _sharding(self, spec=()):
        from jax.sharding import NamedSharding, PartitionSpec

        return NamedSharding(self.mesh, PartitionSpec(*spec))

    def _weight_sharding(self, array):
        """FSDP-style: dim 0 split over `fsdp` where it divides; the rest (and all of
        it when fsdp is 1) replicated."""
        fsdp = self.plan.mesh["fsdp"]
        if fsdp > 1 and array.ndim and array.shape[0] % fsdp == 0:
            return self._sharding(("fsdp",))
        return self._sharding()

    def _put(self, array, sharding):
        """A host array (the same on every host) on the mesh. Over several hosts each
        process transfers only its own devices' blocks (distributed.put)."""
        import jax

        return jax.device_put(array, sharding) if self.plan.hosts == 1 else distributed.put(array, sharding)

    def _place(self, tree):
        import jax

        return jax.tree_util.tree_map(lambda a: self._put(a, self._weight_sharding(a)), tree)

    def _place_model(self, model: torch.nn.Module) -> None:
        """Trained weights, frozen weights and buffers as JAX arrays on the mesh, each
        converted from the host tensor straight to its shards. The module stays on the
        host, never read: `functional_call` substitutes every tensor (tied weights
        included), and an unsharded copy of the model on one device would only cost
        device memory."""
        from torchax.ops.mappings import t2j

        params = dict(model.named_parameters())
        self.weights = self._place({n: t2j(p.detach()) for n, p in params.items() if p.requires_grad})
        self.frozen_names = {n for n, p in params.items() if not p.requires_grad}
        constants = {**{n: params[n] for n in self.frozen_names}, **dict(model.named_buffers())}
        self.buffers = self._place({n: t2j(t.detach()) for n, t in constants.items()})
        self.model = model

    def _zero_carry(self):
        """(loss sum, gradient sum) of a step before its first micro-batch, placed like
        the weights (the accumulator the grad program donates and returns)."""
        import numpy as np

        zeros = {n: self._put(np.zeros(a.shape, a.dtype), a.sharding) for n, a in self.weights.items()}
        return self._put(np.zeros((), np.float32), self._sharding()), zeros

    def _shardings(self, tree):
        import jax

        return jax.tree_util.tree_map(lambda a: a.sharding, tree)

    # ------------------------------------------------------------------ the two programs
    def _grad_step(self):
        """jit(bench_grad_step): one micro-batch's loss and gradients, added to the
        donated carry. Its output shardings are pinned to the carry's, so the next
        call finds the shardings it was compiled for (else it would recompile)."""
        import jax

        from backends.torchax_jax.loss import micro_batch_loss

        compute = TORCH_DTYPES[self.plan.precision.compute]
        step = grad_step_function(micro_batch_loss(self.model, self.loss_kernel, self.seen, compute))
        return jax.jit(step, donate_argnums=(6,), out_shardings=self._shardings(self.carry))

    def _apply_step(self):
        """jit(bench_apply_step): the optax update of one optimizer step. It returns a
        zeroed carry for the next step (in the donated gradients' buffers) and the lr
        the update used, read from the optimizer state (not from the plan). The step's
        loss is not an argument: it is donated nowhere, so the caller can read it late."""
        import jax

        out = (
            self._shardings(self.weights),
            self._shardings(self.opt_state),
            self._shardings(self.carry),
            self._sharding(),
        )
        return jax.jit(apply_step_function(self.optimizer), donate_argnums=(0, 1, 2), out_shardings=out)

    # ------------------------------------------------------------------ steps
    def _rows(self, array):
        """A micro-batch input with its rows split over (data, fsdp): every device gets
        different rows (the plan makes rows_per_forward divide by data x fsdp). The
        distinct row blocks are counted over every host's devices, from the sharding."""
        sharding = self._sharding((MESH_AXES,))
        placed = self._put(array, sharding)
        self.row_shards = {str(index) for index in sharding.devices_indices_map(array.shape).values()}
        return placed

    def train_step(self, batch):
        import numpy as np

        normaliser = self._put(np.asarray(max(batch.num_loss_tokens, 1), np.float32), self._sharding())
        carry = self.carry
        for micro in batch.micro_batches:
            ids, mask, labels = (self._rows(a) for a in (micro.input_ids, micro.attention_mask, micro.labels))
            positions = None if micro.position_ids is None else self._rows(micro.position_ids.astype(np.int32))
            self.work.fed(micro.attention_mask)
            carry = self.grad_fn(self.weights, self.buffers, ids, mask, labels, normaliser, carry, positions)
        loss, grads = carry
        self.weights, self.opt_state, self.carry, lr = self.apply_fn(grads, self.weights, self.opt_state)
        self.work.applied_lr(lr)
        self.last = loss
        return loss

    def trace_capture(self, directory):
        from backends.jax_common.trace import JaxCapture

        return JaxCapture(directory)

    def host_sync_counter(self):
        from backends.jax_common.syncs import JaxHostSyncCounter

        return JaxHostSyncCounter()

    def sync(self) -> None:
        import jax

        if self.last is not None:
            jax.block_until_ready((self.last, self.weights, self.opt_state))

    def loss_value(self, loss) -> float:
        return float(loss)

    # ------------------------------------------------------------------ facts
    def done(self) -> dict[str, Any]:
        dtypes = {
            "trainable_params": _joined(a.dtype for a in self.weights.values()),
            "frozen_params": _joined(self.buffers[n].dtype for n in self.frozen_names),
            "optimizer_state": self._optimizer_state_dtype(),
            "compute": torch_dtype_name(self.seen["compute"]) if "compute" in self.seen else None,
        }
        return {"dtypes": {k: v for k, v in dtypes.items() if v}, "distinct_row_shards": len(self.row_shards)}

    def _optimizer_state_dtype(self) -> str | None:
        """The dtype of the optimizer's per-parameter state (moments; scalars such as
        the step count and the injected lr are not state of the weights)."""
        import jax

        leaves = jax.tree_util.tree_leaves(self.opt_state)
        return _joined(a.dtype for a in leaves if a.ndim > 0 and jax.numpy.issubdtype(a.dtype, jax.numpy.floating))

    def execution(self) -> dict[str, Any]:
        """Execution choices beyond the plan: the loss kernel (loss.py says why), and the
        attention HF's model runs (its `attn_implementation`, lowered by torchax)."""
        from backends.jax_common.attention import facts as attention_facts
        from backends.jax_common.loss import kernel_facts

        vocab = causal_lm(self.model).config.vocab_size
        trained = self.seen.get("trained_weights_compute") or set()
        return {
            **kernel_facts(self.loss_kernel, self.plan.rows_per_forward, vocab, self.scenario.sequence.max_length),
            "loss_kernel_choice": "default" if self.options.loss_kernel == "auto" else "pinned",
            **attention_facts(
                self.options.attention,
                *self.attention,
                masked_attention(self.model),
                self.scenario.sequence.padding == "packed",
            ),
            # The trained weights' matmuls: fp32 masters cast per step (loss.in_compute_dtype).
            "trained_weights_compute": "+".join(sorted(torch_dtype_name(d) for d in trained)) or None,
            # train.gradient_checkpointing: how many decoder layers run under jax.checkpoint (remat.py).
            "recomputed_decoder_layers": self.checkpointed_layers,
        }

    def extra_facts(self) -> dict[str, Any]:
        specs = [str(a.sharding.spec) for a in [*self.weights.values(), *self.buffers.values()]]
        return {
            **self.job_facts(),
            "devices": len(self.devices),
            "mesh": dict(self.mesh.shape),
            "num_params_total": len(specs),
            "num_params_sharded": sum("fsdp" in s for s in specs),
            "shardings": sorted(set(specs)),
            "other_compiles": self.compiles.other,
        }

    def versions(self) -> dict[str, str]:
        return module_versions("torch", "torchax", "jax", "optax", "transformers", "peft")


def grad_step_function(micro_batch_loss):
    """bench_grad_step (the name the compile counter counts): one micro-batch's loss and
    gradients of the torch-side `micro_batch_loss`, added to the donated carry."""
    import jax
    from torchax.interop import jax_view

    value_and_grad = jax.value_and_grad(jax_view(micro_batch_loss))

    def bench_grad_step(weights, buffers, ids, mask, labels, normaliser, carry, positions=None):
        loss, grads = value_and_grad(weights, buffers, ids, mask, labels, normaliser, positions)
        total, accumulated = carry
        return total + loss, jax.tree_util.tree_map(jax.numpy.add, accumulated, grads)

    return bench_grad_step


def apply_step_function(optimizer):
    """bench_apply_step: the optax update of one optimizer step, a zeroed carry for the
    next step (in the donated gradients' buffers) and the lr the update applied."""
    import jax
    import jax.numpy as jnp
    import optax

    def bench_apply_step(grads, weights, opt_state):
        updates, opt_state = optimizer.update(grads, opt_state, weights)
        weights = optax.apply_updates(weights, updates)
        zeros = jnp.zeros((), jnp.float32), jax.tree_util.tree_map(jnp.zeros_like, grads)
        return weights, opt_state, zeros, jax_common.applied_lr_array(opt_state)

    return bench_apply_step


def masked_attention(model) -> str:
    """The attention of `attention: masked`: HF's implementation (model.attention) with
    the padding mask, as torchax lowers it. torchax 0.0.13 lowers torch's
    scaled_dot_product_attention to its own matmul + softmax reference
    (`_sdpa_reference`, torchax/ops/jtorch.py), never jax.nn.dot_product_attention."""
    implementation = causal_lm(model).config._attn_implementation
    return f"HF {implementation} attention with the padding mask, lowered by torchax to XLA matmul + softmax"


def checkpoint_if_planned(model, plan) -> int:
    """train.gradient_checkpointing: each decoder layer under jax.checkpoint
    (torchax_jax/remat.py; torch's own checkpointing would recompute nothing here, JAX
    differentiates the step); returns how many layers recompute (0: none)."""
    if not plan.gradient_checkpointing:
        return 0
    from backends.torchax_jax.remat import checkpoint_decoder_layers

    return checkpoint_decoder_layers(model)


def choose_attention(model, wanted: str, platform: str, plan, sequence, mesh=None) -> tuple[str, str | None]:
    """(implementation, why auto chose it) by the option `attention`
    (jax_common/attention.py), the model switched to it unless `masked`; splash splits
    its rows over `mesh`, and is refused where `sequence` gives lengths it cannot tile.
    Packed rows attend per example (segment ids); `masked` refuses them."""
    from backends.jax_common.attention import resolve, splash_lengths_refused
    from backends.torchax_jax.attention import FIELD, use_dot_product_attention

    packed = sequence.padding == "packed"
    if packed and wanted == "masked":
        raise ValueError(
            f"{FIELD}: masked runs HF's mask code, which finds packed examples by data-dependent checks "
            "of the position ids that jax.jit cannot trace; use auto or xla for sequence.padding packed"
        )
    config = causal_lm(model).config
    heads = (config.num_attention_heads, config.num_key_value_heads, config.head_dim)
    chosen = resolve(wanted, FIELD, platform, plan.precision.compute, *heads, packed)
    refused = splash_lengths_refused(sequence) if chosen[0] == "splash" else None
    if refused:
        raise ValueError(refused)
    if chosen[0] != "masked":
        use_dot_product_attention(model, chosen[0], mesh, packed)
    return chosen


def _joined(dtypes) -> str | None:
    """Distinct dtype names joined by '+' (as hf_common.parameter_dtypes does); None if none."""
    return "+".join(sorted({jax_common.dtype_name(d) for d in dtypes})) or None
