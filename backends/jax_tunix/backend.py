"""Backend `jax-tunix`: the scenario's Gemma 3 in Tunix, LoRA from Qwix, trained by
Tunix's PeftTrainer on an fsdp x tp mesh (W3's JAX stack).

The trainer owns the loop, so the harness observes it (trainer.py): each step's clock
starts when the trainer asks for the step's first micro-batch and stops after a
`block_until_ready` on the step's outputs (trainable weights, optimizer state, losses),
taken when the trainer asks for the next step's data. The figure is the executed step,
never the dispatch; the dispatch time is kept beside it (`extra.dispatch_s`) to show the
difference. Compilations of Tunix's `_train_step` come from JAX's monitoring events.

The run's plan is executed as stated or refused in setup: the mesh is `plan.mesh`
(fsdp x tp), the weights are stored and computed in the plan's dtypes, the optimizer
steps through `plan.lr` (read back from its state after each step: `OptimizerWorkLog`),
and peft's separate k_proj / v_proj adapters, which Tunix's fused `kv_einsum` cannot
express, are refused unless the option `fuse_kv_lora` accepts the fused adapter.
"""

from __future__ import annotations

import time
from importlib import metadata
from typing import Any

from backends import jax_common
from backends.jax_common import distributed
from harness.records.provenance import module_versions
from harness.run.backend import LoopBackend, ModelFacts, Probe, WorkLog
from harness.run.loop import LoopResult, WindowSample, recorder_for

STEP_NAME = "_train_step"  # Tunix jits PeftTrainer._train_step: events say jit(_train_step)
# The path before #36 (attention: masked): Attention.block in tunix/models/gemma3/model.py.
MASKED_ATTENTION = "Tunix's own einsums + softmax with the padding mask (xla)"
ATTENTION_FIELD = "backend_options.jax-tunix.attention"


def distinct_row_shards(array) -> int:
    """How many different row ranges the devices holding a sharded `array` got: 1 when
    every device has all the rows, the fsdp axis size when the rows are split over it."""
    indices = array.sharding.devices_indices_map(array.shape).values()
    return len({index[0].indices(array.shape[0]) for index in indices})


class OptimizerWorkLog(WorkLog):
    """The work log of a trainer whose optimizer keeps the lr it applied on the device:
    the lr is read from the optimizer state when the step's account is taken.
    `StepRecorder.end` takes it after the sync, with the step's clock stopped, so the
    device-to-host read adds no sync to the timed step."""

    def __init__(self, read_lr) -> None:
        super().__init__()
        self.read_lr = read_lr

    def take(self):
        if self.rows:  # an optimizer step ran since the last account
            self.applied_lr(self.read_lr())
        return super().take()


class JaxTunixBackend(jax_common.JaxDeviceFacts, LoopBackend):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.work = OptimizerWorkLog(self._applied_lr)
        self.trainer = None
        self.row_shards: set[int] = set()  # distinct row ranges per micro-batch, as fed
        self.fused_targets: list[str] = []  # peft targets trained as Tunix's fused adapter
        self.dispatch_s: list[float] = []  # per measured step: issue to the trainer's dispatch

    @classmethod
    def probe(cls) -> Probe:
        import qwix  # noqa: F401 - part of what "available" means
        import tunix  # noqa: F401

        return jax_common.probe_devices()

    # ------------------------------------------------------------------ setup
    def setup(self) -> ModelFacts:
        # Before JAX starts (a no-op off the CPU): this host's share of the devices, then
        # the job's other hosts joined (nothing to join on one host).
        jax_common.request_cpu_devices(self.plan.devices // self.plan.hosts)
        distributed.initialize(self.plan)
        import jax

        from backends.jax_common.attention import attention_memory_kind
        from backends.jax_common.loss import resolve_kernel, size_chunks_for, work_of
        from backends.jax_tunix import model as tunix_model

        self.compiles = jax_common.CompileCounter(STEP_NAME)
        self.compiles.ensure_listening()
        self.devices = jax.devices()[: self.plan.devices]
        if len(self.devices) != self.plan.devices:
            raise ValueError(f"parallel.devices: {self.plan.devices} planned, JAX sees {len(jax.devices())}")
        self.mesh = self._mesh(self.devices)
        self.loss_kernel = resolve_kernel(self.options.loss_kernel)
        self.remat = tunix_model.remat_policy(self.plan.gradient_checkpointing, self.options.remat)
        arch = tunix_model.scenario_architecture(self.scenario)
        config = tunix_model.tunix_config(arch, tunix_model.stored_dtype(self.plan), self.remat)
        self._check_lora_targets(config)
        self.model = tunix_model.build(self.scenario, self.plan, config, self.mesh, self.options.lora_init)
        self.config = config
        self._choose_attention(config)
        # The loss kernel's chunks by the memory model, for the device and this attention.
        size_chunks_for(self.devices, work_of(self.plan, self.scenario, arch, attention_memory_kind(self.attention[0])))
        self.compute_dtype = tunix_model.jnp_dtype(self.plan.precision.compute)
        made = tunix_model.logits_dtype(self.model, self.mesh, self.compute_dtype)
        if jax_common.dtype_name(made) != self.plan.precision.compute:
            raise ValueError(
                f"train.precision: {self.plan.precision.name} computes in {self.plan.precision.compute}; "
                f"Tunix's Gemma 3 produced {jax_common.dtype_name(made)} logits"
            )
        return tunix_model.model_facts(self.model, self.config)

    def _choose_attention(self, config) -> None:
        """The attention kernel by the option `attention` (jax_common/attention.py): every
        layer switched to jax.nn.dot_product_attention unless `masked` is asked for."""
        from backends.jax_common import attention

        self.attention = attention.resolve(
            self.options.attention,
            ATTENTION_FIELD,
            self.devices[0].platform,
            self.plan.precision.compute,
            config.num_heads,
            config.num_kv_heads,
            config.head_dim,
            self.packed,
        )
        if self.attention[0] != "masked":
            from backends.jax_tunix.attention import use_dot_product_attention

            use_dot_product_attention(self.model, self.attention[0], self.packed)

    @property
    def packed(self) -> bool:
        """sequence.padding: packed (several examples a row, attended per example)."""
        return self.scenario.sequence.padding == "packed"

    def _mesh(self, devices: list):
        """fsdp x tp from the plan's mesh, as Tunix's sharding annotations name the axes
        (the data axis is refused by the capabilities). Classic Auto axes: qwix's eager
        pass breaks on the Explicit default (platform-notes.md)."""
        return jax_common.mesh(devices, self.plan.mesh, {"fsdp": "fsdp", "tensor": "tp"})

    def _check_lora_targets(self, config) -> None:
        """Refuse peft targets that Tunix fuses (`model.fused_lora_targets`): the plan's
        trainable parameters are peft's separate adapters, which this run would not train,
        unless the option `fuse_kv_lora` accepts the fused adapter (the record says so)."""
        from backends.jax_tunix.model import fused_lora_targets

        if self.plan.method != "lora":
            return
        self.fused_targets = fused_lora_targets(self.plan.lora_targets, config.num_heads == config.num_kv_heads)
        if self.fused_targets and not self.options.fuse_kv_lora:
            raise ValueError(
                f"train.lora.target_modules: {', '.join(self.fused_targets)} share one fused einsum in Tunix's "
                "Gemma 3 (one LoRA, its A shared), not peft's separate adapters; drop them, or set "
                "backend_options.jax-tunix.fuse_kv_lora: true to train the fused adapter instead"
            )

    # ------------------------------------------------------------------ steps
    def run(self) -> LoopResult:
        from backends.jax_tunix import trainer as tunix_trainer

        plan = self.plan
        batches = self.batches.steps[: plan.total_steps]
        self.trainer = tunix_trainer.new_trainer(
            self.model,
            jax_common.optax_optimizer(self.scenario.train, plan.lr),
            max_steps=len(batches),
            accumulation=plan.accumulation,
            max_inflight=self.options.max_inflight_steps,
            compute_dtype=self.compute_dtype,
            loss_kernel=self.loss_kernel,
        )
        feed = TrainerFeed(self, batches, measured=plan.steps)
        self.trainer.with_data_hooks(tunix_trainer.HarnessData(feed.next_micro_batch))
        with self.mesh:  # PeftTrainer reads the mesh from the classic context
            self.trainer.train([])
        # Tunix clears every monitoring listener when train() ends; listen again so
        # anything compiled later (another train() on this model) is still counted.
        self.compiles.ensure_listening()
        return feed.result()

    def feed(self, micro, loss_scale: float):
        """One micro-batch as the trainer takes it, its rows already split over the fsdp
        axis the way the trainer splits them; logged as fed, with how many devices got
        distinct rows (read from the sharded array)."""
        from backends.jax_tunix.trainer import shard_rows, trainer_input

        example = trainer_input(micro, loss_scale)
        if self.plan.hosts > 1:  # each host transfers its own devices' rows (shard_rows keeps them)
            example = distributed.rows_to_devices(example, self.mesh, self.trainer.config.data_sharding_axis)
        example = shard_rows(example, self.trainer.config.data_sharding_axis)
        self.work.fed(micro.attention_mask)
        self.row_shards.add(distinct_row_shards(example["input_tokens"]))
        return example

    def _applied_lr(self) -> float:
        """The lr of the last optimizer step, from the state of the optimizer inside
        Tunix's MultiSteps (it steps once per `accumulation` micro-batches)."""
        return jax_common.applied_lr(self.trainer.optimizer.opt_state)

    def trace_capture(self, directory):
        from backends.jax_common.trace import JaxCapture

        return JaxCapture(directory)

    def host_sync_counter(self):
        from backends.jax_common.syncs import JaxHostSyncCounter

        return JaxHostSyncCounter()

    def sync(self) -> None:
        """Block until the device has produced every output issued so far: the trainable
        weights, the optimizer state and the last loss."""
        import jax
        from flax import nnx

        if self.trainer is None or not self.trainer.micro_losses:
            return
        jax.block_until_ready(
            (nnx.state(self.trainer.model), nnx.state(self.trainer.optimizer), self.trainer.micro_losses[-1])
        )

    def loss_value(self, loss) -> float:
        """A step's loss: the mean of its micro-batches' scaled sums (see trainer.py)."""
        import numpy as np

        return float(np.mean([np.asarray(part) for part in loss]))

    # ------------------------------------------------------------------ facts
    def done(self) -> dict[str, Any]:
        """Dtypes read from the weights and the optimizer state, the compute dtype as the
        step was traced, and how many devices got distinct rows, read from the sharded
        inputs (the fewest over all micro-batches)."""
        from backends.jax_tunix.model import parameter_dtypes

        dtypes = {**parameter_dtypes(self.model), "optimizer_state": self._optimizer_state_dtype()}
        if "compute" in self.trainer.seen:
            dtypes["compute"] = jax_common.dtype_name(self.trainer.seen["compute"])
        done = {
            "dtypes": {k: v for k, v in dtypes.items() if v},
            "distinct_row_shards": min(self.row_shards) if self.row_shards else 0,
        }
        if self.fused_targets:
            done["trainable_params_deviation"] = (
                f"backend_options.jax-tunix.fuse_kv_lora: {', '.join(self.fused_targets)} trained as Tunix's fused "
                "einsum with one shared LoRA A, not peft's separate adapters: fewer trainable parameters"
            )
        return done

    def _optimizer_state_dtype(self) -> str:
        """The dtypes of the optimizer's per-parameter state (moments, accumulated
        gradients), not its scalars (step counts, the lr)."""
        import jax
        from flax import nnx

        state = nnx.state(self.trainer.optimizer, nnx.optimizer.OptState)
        return "+".join(
            sorted(
                {jax_common.dtype_name(a.dtype) for a in jax.tree.leaves(state) if hasattr(a, "dtype") and a.ndim > 0}
            )
        )

    def execution(self) -> dict[str, Any]:
        """Execution choices beyond the plan (trainer.py says why each)."""
        from backends.jax_common.attention import facts as attention_facts
        from backends.jax_common.loss import kernel_facts

        return {
            "trainer": "tunix PeftTrainer",
            "trainer_metrics": "written when the trainer closes (no per-step host reads)",
            "max_inflight_steps": self.options.max_inflight_steps,
            **kernel_facts(
                self.loss_kernel, self.plan.rows_per_forward, self.config.num_embed, self.scenario.sequence.max_length
            ),
            "loss_kernel_choice": "default" if self.options.loss_kernel == "auto" else "pinned",
            # Tunix's RematConfig, from train.gradient_checkpointing and the option remat.
            "remat": self.remat,
            **attention_facts(self.options.attention, *self.attention, MASKED_ATTENTION, self.packed),
        }

    def extra_facts(self) -> dict[str, Any]:
        from backends.jax_tunix.model import sharding_facts

        return {
            **self.job_facts(),
            "mesh": dict(self.mesh.shape),
            **sharding_facts(self.model),
            "grad_accumulation": self.plan.accumulation,
            "max_inflight_steps": self.options.max_inflight_steps,
            "dispatch_s": self.dispatch_s,
            "distinct_row_shards_seen": sorted(self.row_shards),
            "other_compiles": self.compiles.other,
        }

    def versions(self) -> dict[str, str]:
        import qwix

        return {
            **module_versions("jax", "jaxlib", "flax", "optax"),
            "tunix": metadata.version("google-tunix"),
            "qwix": getattr(qwix, "__version__", metadata.version("qwix")),
        }

    def notes(self) -> list[str]:
        mesh = dict(self.mesh.shape)
        notes = [
            f"Tunix PeftTrainer on a {mesh['fsdp']} x {mesh['tp']} (fsdp x tp) mesh of "
            f"{len(self.devices)} {self.devices[0].platform} device(s)",
            "random weights from Tunix's own initialiser: not the same numbers as the PyTorch backends' init"
            if self.scenario.model.init == "random"
            else f"weights loaded from {self.scenario.model.path}",
        ]
        if self.options.lora_init:
            notes.append(f"LoRA weights started from the peft adapter in {self.options.lora_init}")
        if self.fused_targets:
            notes.append(
                f"fuse_kv_lora: {', '.join(self.fused_targets)} map to Tunix's fused einsum: one LoRA on "
                "them (A shared), so fewer trainable parameters than peft's separate adapters"
            )
        return notes


class TrainerFeed:
    """Feeds the trainer one micro-batch at a time and turns its loop into harness steps.

    The trainer asks for data at the start of every iteration. When it asks for the first
    micro-batch of a step, the previous step is over: sync, stop its clock (StepRecorder),
    start the next. Steps past `measured` form the window: no sync until the trainer asks
    for data after the last one.
    """

    def __init__(self, backend: JaxTunixBackend, batches, measured: int) -> None:
        self.backend = backend
        self.batches = batches
        self.measured = min(measured, len(batches))
        self.queue = [(i, micro) for i, step in enumerate(batches) for micro in step.micro_batches]
        self.position = 0
        self.recorder = recorder_for(backend, backend.events.origin)  # traced when the scenario asks
        self.open_step: tuple[int, Any, int] | None = None  # (index, begun, first loss index)
        self.window_begun: tuple[float, int, int] | None = None
        self.window: WindowSample | None = None
        # Host waits from a step's start to its end (the trainer's work between our data
        # hooks included), the timing's own sync excluded: counted as the loop counts them.
        self.syncs = backend.host_sync_counter()

    def next_micro_batch(self):
        at_boundary = self.position == len(self.queue) or self.queue[self.position][0] != self._current_step()
        if at_boundary:
            self._boundary()
        if self.position == len(self.queue):
            return None
        index, micro = self.queue[self.position]
        self.position += 1
        batch = self.batches[index]
        return self.backend.feed(micro, len(batch.micro_batches) / max(batch.num_loss_tokens, 1))

    def _current_step(self) -> int | None:
        return self.queue[self.position - 1][0] if self.position else None

    def _boundary(self) -> None:
        trainer = self.backend.trainer
        if self.open_step is not None:
            index, begun, first = self.open_step
            dispatched = trainer.dispatched_at[-1] - begun[0]
            self.syncs.active = False
            sample = self.recorder.end(begun, self.batches[index], trainer.micro_losses[first:])
            sample.host_syncs = self.syncs.take()
            self.backend.dispatch_s.append(dispatched)
            self.open_step = None
        next_index = self.queue[self.position][0] if self.position < len(self.queue) else len(self.batches)
        if next_index < self.measured:
            self.open_step = (next_index, self.recorder.begin(), len(trainer.micro_losses))
            self.syncs.active = True
        elif next_index == self.measured and self.window_begun is None and self.measured < len(self.batches):
            self.backend.sync()
            self.window_begun = (time.perf_counter(), self.backend.compile_stats().count, len(trainer.micro_losses))
            self.syncs.active = True
        elif next_index == len(self.batches) and self.window_begun is not None:
            self._end_window()

    def _end_window(self) -> None:
        self.syncs.active = False
        host_syncs = self.syncs.take()
        self.backend.sync()
        start, compiles, first = self.window_begun
        elapsed = time.perf_counter() - start
        done, _ = self.backend.work.take()
        window = self.batches[self.measured :]
        losses = self.backend.trainer.micro_losses[first:]
        per_step = len(window[0].micro_batches)
        self.window = WindowSample(
            num_steps=len(window),
            time_s=elapsed,
            tokens_real=sum(b.tokens_real for b in window),
            tokens_padded=sum(b.tokens_padded for b in window),
            num_compiles=self.backend.compile_stats().count - compiles,
            losses=[self.backend.loss_value(losses[i : i + per_step]) for i in range(0, len(losses), per_step)],
            done=done,
            host_syncs=host_syncs,
        )

    def result(self) -> LoopResult:
        if len(self.recorder.samples) != self.measured:
            raise RuntimeError(f"the trainer ran {len(self.recorder.samples)} of {self.measured} measured steps")
        return LoopResult(self.recorder.samples, self.window, self.recorder.setup_compiles, self.recorder)
