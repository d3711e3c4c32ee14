"""Backend `jax-tunix`: the scenario's Gemma 3 in Tunix, LoRA from Qwix, trained by
Tunix's PeftTrainer on an fsdp x tp mesh (W3's JAX stack).

The trainer owns the loop, so the harness observes it (trainer.py): each step's clock
starts when the trainer asks for the step's first micro-batch and stops after a
`block_until_ready` on the step's outputs (trainable weights, optimizer state, losses),
taken when the trainer asks for the next step's data. The figure is the executed step,
never the dispatch; the dispatch time is kept beside it (`extra.dispatch_s`) to show the
difference. Compilations of Tunix's `_train_step` come from JAX's monitoring events.
"""

from __future__ import annotations

import sys
import time
from importlib import metadata
from typing import Any

from backends import jax_common
from harness.backend import Backend, ModelFacts, Probe
from harness.loop import LoopResult, StepRecorder, WindowSample

STEP_NAME = "_train_step"  # Tunix jits PeftTrainer._train_step: events say jit(_train_step)


class JaxTunixBackend(jax_common.JaxDeviceFacts, Backend):
    @classmethod
    def probe(cls) -> Probe:
        jax_common.request_cpu_devices(4)
        import qwix  # noqa: F401 - part of what "available" means
        import tunix  # noqa: F401

        return jax_common.probe_devices()

    # ------------------------------------------------------------------ setup
    def setup(self) -> ModelFacts:
        jax_common.request_cpu_devices(self.options.cpu_devices)
        import jax

        from backends.jax_tunix import model as tunix_model

        self.compiles = jax_common.CompileCounter(STEP_NAME)
        self.compiles.ensure_listening()
        # parallel.strategy none means one device (spec.py); any sharded strategy means
        # the mesh, which is how JAX expresses FSDP (fsdp axis) and tensor parallelism.
        self.devices = jax.devices()[:1] if self.scenario.parallel.strategy == "none" else jax.devices()
        self.mesh = self._mesh(self.devices)
        self.model, self.config = tunix_model.build(self.scenario, self.mesh)
        self.trainer = None
        return tunix_model.model_facts(self.model, self.config)

    def _mesh(self, devices: list):
        """fsdp x tp from `parallel.mesh` (-1: the devices left over), as Tunix's sharding
        annotations name the axes. Classic Auto axes: qwix's eager pass breaks on the
        Explicit default (platform-notes.md)."""
        import numpy as np
        from jax.sharding import Mesh

        if len(devices) == 1:
            return Mesh(np.array(devices).reshape(1, 1), ("fsdp", "tp"))
        spec = self.scenario.parallel.mesh
        if spec.get("data", 1) != 1:
            raise ValueError("parallel.mesh.data: jax-tunix shards data over the fsdp axis; set data to 1")
        tensor = spec.get("tensor", 1)
        fsdp = spec.get("fsdp", -1)
        fsdp = len(devices) // tensor if fsdp == -1 else fsdp
        if fsdp < 1 or fsdp * tensor != len(devices):
            raise ValueError(f"parallel.mesh: fsdp x tensor = {fsdp} x {tensor} does not cover {len(devices)} devices")
        return Mesh(np.array(devices).reshape(fsdp, tensor), ("fsdp", "tp"))

    def data_parallel_size(self) -> int:
        return self.mesh.shape["fsdp"]  # the trainer splits each micro-batch's rows over fsdp

    # ------------------------------------------------------------------ steps
    def run(self) -> LoopResult:
        from backends.jax_tunix import trainer as tunix_trainer

        train = self.scenario.train
        batches = self.plan.steps[: train.steps + train.window_steps]
        accumulation = len(batches[0].micro_batches)
        self.trainer = tunix_trainer.new_trainer(
            self.model, jax_common.optax_optimizer(train), max_steps=len(batches),
            accumulation=accumulation, max_inflight=self.options.max_inflight_steps,
        )
        feed = TrainerFeed(self, batches, measured=train.steps)
        self.trainer.with_data_hooks(tunix_trainer.HarnessData(feed.next_micro_batch))
        with self.mesh:  # PeftTrainer reads the mesh from the classic context
            self.trainer.train([])
        # Tunix clears every monitoring listener when train() ends; listen again so
        # anything compiled later (another train() on this model) is still counted.
        self.compiles.ensure_listening()
        return feed.result()

    def train_step(self, batch):
        raise NotImplementedError("jax-tunix steps run inside Tunix's PeftTrainer (see run)")

    def sync(self) -> None:
        """Block until the device has produced every output issued so far: the trainable
        weights, the optimizer state and the last loss."""
        import jax
        from flax import nnx

        if self.trainer is None or not self.trainer.micro_losses:
            return
        jax.block_until_ready((nnx.state(self.trainer.model), nnx.state(self.trainer.optimizer),
                               self.trainer.micro_losses[-1]))

    def loss_value(self, loss) -> float:
        """A step's loss: the mean of its micro-batches' scaled sums (see trainer.py)."""
        import numpy as np

        return float(np.mean([np.asarray(part) for part in loss]))

    # ------------------------------------------------------------------ facts
    def extra_facts(self) -> dict[str, Any]:
        from backends.jax_tunix.model import sharding_facts

        return {"mesh": dict(self.mesh.shape), **sharding_facts(self.model),
                "grad_accumulation": len(self.plan.steps[0].micro_batches),
                "max_inflight_steps": self.options.max_inflight_steps,
                "dispatch_s": getattr(self, "dispatch_s", []),
                "other_compiles": self.compiles.other}

    def versions(self) -> dict[str, str]:
        import flax
        import jax
        import jaxlib
        import optax
        import qwix

        return {"python": sys.version.split()[0], "jax": jax.__version__, "jaxlib": jaxlib.__version__,
                "flax": flax.__version__, "optax": optax.__version__,
                "tunix": metadata.version("google-tunix"), "qwix": getattr(qwix, "__version__", metadata.version("qwix"))}

    def notes(self) -> list[str]:
        mesh = dict(self.mesh.shape)
        notes = [f"Tunix PeftTrainer on a {mesh['fsdp']} x {mesh['tp']} (fsdp x tp) mesh of {self.devices[0].platform} devices"
                 + (" (parallel.strategy: none)" if self.scenario.parallel.strategy == "none" else ""),
                 "random weights from Tunix's own initialiser: not the same numbers as the PyTorch backends' init"
                 if self.scenario.model.init == "random" else f"weights loaded from {self.scenario.model.path}"]
        targets = set(self.scenario.train.lora.target_modules)
        if self.scenario.train.method == "lora" and targets & {"k_proj", "v_proj"}:
            notes.append("k_proj/v_proj map to Tunix's fused kv_einsum: one LoRA on both (A shared), "
                         "so fewer trainable parameters than peft's separate adapters")
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
        self.recorder = StepRecorder(backend, backend.events.origin)
        self.open_step: tuple[int, Any, int] | None = None  # (index, begun, first loss index)
        self.window_begun: tuple[float, int, int] | None = None
        self.window: WindowSample | None = None
        backend.dispatch_s = []

    def next_micro_batch(self):
        from backends.jax_tunix.trainer import trainer_input

        at_boundary = self.position == len(self.queue) or self.queue[self.position][0] != self._current_step()
        if at_boundary:
            self._boundary()
        if self.position == len(self.queue):
            return None
        index, micro = self.queue[self.position]
        self.position += 1
        batch = self.batches[index]
        scale = len(batch.micro_batches) / max(batch.num_loss_tokens, 1)
        return trainer_input(micro, scale)

    def _current_step(self) -> int | None:
        return self.queue[self.position - 1][0] if self.position else None

    def _boundary(self) -> None:
        trainer = self.backend.trainer
        if self.open_step is not None:
            index, begun, first = self.open_step
            dispatched = trainer.dispatched_at[-1] - begun[0]
            self.recorder.end(begun, self.batches[index], trainer.micro_losses[first:])
            self.backend.dispatch_s.append(dispatched)
            self.open_step = None
        next_index = self.queue[self.position][0] if self.position < len(self.queue) else len(self.batches)
        if next_index < self.measured:
            self.open_step = (next_index, self.recorder.begin(), len(trainer.micro_losses))
        elif next_index == self.measured and self.window_begun is None and self.measured < len(self.batches):
            self.backend.sync()
            self.window_begun = (time.perf_counter(), self.backend.compile_stats().count, len(trainer.micro_losses))
        elif next_index == len(self.batches) and self.window_begun is not None:
            self._end_window()

    def _end_window(self) -> None:
        self.backend.sync()
        start, compiles, first = self.window_begun
        elapsed = time.perf_counter() - start
        window = self.batches[self.measured:]
        losses = self.backend.trainer.micro_losses[first:]
        per_step = len(window[0].micro_batches)
        self.window = WindowSample(
            num_steps=len(window), time_s=elapsed,
            tokens_real=sum(b.tokens_real for b in window), tokens_padded=sum(b.tokens_padded for b in window),
            num_compiles=self.backend.compile_stats().count - compiles,
            losses=[self.backend.loss_value(losses[i:i + per_step]) for i in range(0, len(losses), per_step)],
        )

    def result(self) -> LoopResult:
        if len(self.recorder.samples) != self.measured:
            raise RuntimeError(f"the trainer ran {len(self.recorder.samples)} of {self.measured} measured steps")
        return LoopResult(self.recorder.samples, self.window, self.recorder.setup_compiles)
