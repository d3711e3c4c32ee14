"""PyTorch/XLA SPMD + FSDPv2. Runs on a TPU, or on the CPU PJRT device with virtual
devices (a real XLA device: real graph compilation, real compile counters).

Order matters (W1): PJRT and SPMD are set up before the model is built; the model is
built with `eager` attention (`sdpa` inspects mask values on the host, adding compiles
and a device->host transfer every step); the clock stops only after `wait_device_ops()`.

Each forward-backward pass is its own graph (`torch_xla.sync()` after it), accumulating
into gradients that are zeroed in place, never freed: so a new sequence length compiles
one graph, not one per new combination of lengths within a step (what one graph per
step would do), and bucketed padding pays at most one compile per bucket. The optimizer
update is one more graph, compiled twice in the first steps (without, then with its
state): keep `train.warmup_steps` >= 2 here.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import numpy as np
import torch

from backends.hf_common.model import (
    PlannedSteps,
    apply_lora,
    build_model,
    build_optimizer,
    cast_to_plan,
    micro_batch_loss,
    model_facts,
    run_dtypes,
)
from harness.figures.accelerators import on_tpu_vm
from harness.records.provenance import cpu_name, module_versions
from harness.run.backend import CompileStats, MemoryFacts, ModelFacts, Probe, StepBackend, cpu_peak_memory


def configure_runtime(cpu_devices: int) -> None:
    """PJRT's device and virtual device count: read once, when torch_xla initialises."""
    os.environ.setdefault("PJRT_DEVICE", "TPU" if on_tpu_vm() else "CPU")
    if os.environ["PJRT_DEVICE"] == "CPU":
        os.environ.setdefault("CPU_NUM_DEVICES", str(cpu_devices))


def row_split_of(tensor) -> int:
    """How many ways a tensor's rows are split across devices, read from its SPMD
    sharding spec (e.g. `{devices=[4,1]0,1,2,3}`: 4); 1 when replicated."""
    import re

    import torch_xla

    spec = torch_xla._XLAC._get_xla_sharding_spec(tensor)
    match = re.search(r"devices=\[(\d+)", spec)
    return int(match.group(1)) if match and "replicated" not in spec else 1


class XlaBackend(StepBackend):
    @classmethod
    def probe(cls) -> Probe:
        configure_runtime(1)  # a CPU is one device; runs ask for virtual ones (parallel.devices)
        import torch_xla.runtime as xr

        kind = "tpu" if os.environ["PJRT_DEVICE"] == "TPU" else "cpu"
        name = os.environ.get("TPU_ACCELERATOR_TYPE", "TPU") if kind == "tpu" else cpu_name()
        memory = _tpu_memory() if kind == "tpu" else None
        return Probe(
            True,
            "" if kind == "tpu" else "no TPU: the CPU PJRT device",
            kind,
            name,
            xr.global_runtime_device_count(),
            memory,
        )

    # ------------------------------------------------------------------ setup
    def setup(self) -> ModelFacts:
        configure_runtime(self.plan.devices)
        import torch_xla
        import torch_xla.distributed.spmd as xs
        import torch_xla.runtime as xr

        if self.scenario.model.attention not in ("eager", "auto"):  # auto is eager here
            raise ValueError("model.attention: xla-fsdpv2 needs eager attention (sdpa reads masks on the host)")
        xr.use_spmd()  # before the model exists: SPMD decides how it is placed
        self.device = torch_xla.device()
        self.mesh = self._mesh(xr.global_runtime_device_count(), xs)
        model = apply_lora(build_model(self.scenario), self.scenario)
        if self.plan.method == "full" and self.plan.precision.compute != self.plan.precision.trainable_params:
            raise ValueError(
                f"train.precision: {self.plan.precision.name} for a full fine-tune needs autocast over "
                "fp32 master weights, which this backend does not run; use fp32 or LoRA"
            )
        model = self._wrap(cast_to_plan(model, self.plan.precision).to(self.device), xs)
        self.model = model
        self.optimizer = build_optimizer(model, self.scenario)
        self.steps = PlannedSteps(self.optimizer, self.plan, self.work)
        self.compute_dtype = None  # measured: the dtype of the first forward's logits
        self.row_split = None  # measured: how many ways the input rows were sharded
        return model_facts(model)

    @property
    def on_tpu(self) -> bool:
        return os.environ.get("PJRT_DEVICE") == "TPU"

    def _mesh(self, devices: int, xs):
        """The plan's fsdp axis over all devices (the plan refused any other axis)."""
        fsdp = self.plan.mesh["fsdp"]
        if fsdp != devices:
            raise RuntimeError(f"the runtime has {devices} devices for a plan of {fsdp}")
        mesh = xs.Mesh(np.arange(devices), (fsdp, 1), ("fsdp", "tensor"))
        xs.set_global_mesh(mesh)
        self.fsdp_size = fsdp
        return mesh

    def _wrap(self, model: torch.nn.Module, xs) -> torch.nn.Module:
        """FSDPv2 around every decoder layer (checkpointed through the wrapper if asked),
        then the root; the logits are sharded along the batch."""
        from torch_xla.distributed.fsdp import checkpoint_module
        from torch_xla.distributed.fsdp.wrap import transformer_auto_wrap_policy
        from torch_xla.experimental.spmd_fully_sharded_data_parallel import SpmdFullyShardedDataParallel as FSDPv2

        layer_classes = {type(m) for m in model.modules() if type(m).__name__.endswith("DecoderLayer")}
        policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls=layer_classes)

        def shard_output(output, mesh):  # a Tensor or a ModelOutput, depending on the wrapper level
            logits = output.logits if hasattr(output, "logits") else output
            xs.mark_sharding(logits, mesh, ("fsdp", None, None))

        wrapper = None
        if self.plan.gradient_checkpointing:
            wrapper = lambda m, *a, **k: FSDPv2(checkpoint_module(m), *a, **k)  # noqa: E731
        return FSDPv2(
            model, mesh=self.mesh, shard_output=shard_output, auto_wrap_policy=policy, auto_wrapper_callable=wrapper
        )

    # ------------------------------------------------------------------ steps
    def train_step(self, batch) -> torch.Tensor:
        import torch_xla
        import torch_xla.distributed.spmd as xs

        def place(i: int, micro):
            tensors = []
            for array in (micro.input_ids, micro.attention_mask, micro.labels):
                t = torch.from_numpy(array).to(self.device)
                xs.mark_sharding(t, self.mesh, ("fsdp", None))  # rows split over the fsdp axis
                tensors.append(t)
            self.row_split = self.row_split or row_split_of(tensors[0])
            return micro.attention_mask, *tensors

        # One graph per forward-backward (a sync after each): compiled once per length.
        total = micro_batch_loss(self, batch, place, after=lambda i: torch_xla.sync())
        # Gradients zeroed in place, not freed: every pass after the first step sees the
        # same graph inputs (accumulate into existing gradients).
        self.steps.step(self.model, self.scenario.train.grad_clip, keep_grads=True)
        torch_xla.sync()  # the update is one graph, launched now, asynchronously
        return total

    def trace_capture(self, directory):
        from backends.xla_fsdpv2.trace import XlaCapture

        return XlaCapture(directory)

    def sync(self) -> None:
        import torch_xla.core.xla_model as xm

        xm.wait_device_ops()

    def loss_value(self, loss: torch.Tensor) -> float:
        return float(loss.item())

    def compile_stats(self) -> CompileStats:
        import torch_xla.debug.metrics as met

        data = met.metric_data("CompileTime")
        if not data:
            return CompileStats()
        count, total_ns, _ = data
        return CompileStats(count=int(count), seconds=total_ns / 1e9)

    # ------------------------------------------------------------------ facts
    def memory(self) -> MemoryFacts:
        if self.on_tpu:
            import torch_xla.core.xla_model as xm

            info = xm.get_memory_info(self.device)
            peak = info.get("peak_bytes_used") or info.get("bytes_used")
            return MemoryFacts(int(peak), "tpu_peak_bytes_used" if "peak_bytes_used" in info else "tpu_bytes_used")
        return cpu_peak_memory()

    def accelerator(self) -> dict[str, Any]:
        import torch_xla.runtime as xr

        devices = xr.global_runtime_device_count()
        if self.on_tpu:
            return {"kind": "tpu", "name": os.environ.get("TPU_ACCELERATOR_TYPE", "TPU"), "count": devices}
        return {"kind": "cpu", "name": cpu_name(), "count": 1, "virtual_devices": devices}

    def host_sync_counter(self):
        from backends.torch_common.syncs import HostSyncCounter

        return HostSyncCounter(self.device)

    def compile_cache(self) -> dict[str, Any]:
        """torch_xla caches compiled graphs on disk only after
        `torch_xla.runtime.initialize_cache`, which bench never calls: every graph of a
        run is compiled (and counted) in it."""
        return {"persistent": False, "what": "torch_xla persistent cache (initialize_cache not called)"}

    def done(self) -> dict[str, Any]:
        dtypes = run_dtypes(self.model, self.optimizer, self.compute_dtype)
        return {"dtypes": dtypes, "distinct_row_shards": self.row_split}

    def extra_facts(self) -> dict[str, Any]:
        import torch_xla

        specs = [torch_xla._XLAC._get_xla_sharding_spec(p) for p in self.model.parameters()]
        return {
            "mesh": {"fsdp": self.fsdp_size, "tensor": 1},
            "num_params_total": len(specs),
            # FSDPv2 splits each parameter along its largest dim: [4,1], [1,4] or [4].
            "num_params_sharded_on_fsdp": sum(s.startswith("{devices=[") and "replicated" not in s for s in specs),
            "sharding_specs": sorted(set(specs))[:8],
        }

    def versions(self) -> dict[str, str]:
        return module_versions("torch", "torch_xla", "transformers", "peft")

    def notes(self) -> list[str]:
        return [f"SPMD FSDPv2 over a {self.fsdp_size}-device fsdp axis ({os.environ.get('PJRT_DEVICE')} PJRT)"]


def _tpu_memory() -> int | None:
    """One TPU's memory limit, from the runtime (bytes_limit, or kb_total on older ones)."""
    import torch_xla
    import torch_xla.core.xla_model as xm

    info = xm.get_memory_info(torch_xla.device())
    return info.get("bytes_limit") or (info["kb_total"] * 1024 if "kb_total" in info else None)
