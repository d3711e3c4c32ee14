"""PyTorch/XLA SPMD + FSDPv2. Runs on a TPU, or on the CPU PJRT device with virtual
devices (a real XLA device: real graph compilation, real compile counters).

Order matters (W1): PJRT and SPMD are set up before the model is built; the model is
built with `eager` attention (`sdpa` inspects mask values on the host, adding compiles
and a device->host transfer every step); every step ends in one graph execution
(`torch_xla.sync()`), and the clock stops only after `wait_device_ops()`.
"""

from __future__ import annotations

import functools
import os
import resource
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from backends.hf_common.model import (
    apply_lora, build_model, build_optimizer, model_facts, optimizer_step, token_loss_sum,
)
from harness.backend import Backend, CompileStats, MemoryFacts, ModelFacts, Probe
from harness.provenance import cpu_name


def on_tpu_vm() -> bool:
    return Path("/dev/accel0").exists() or Path("/dev/vfio/0").exists()


def configure_runtime(cpu_devices: int) -> None:
    """PJRT's device and virtual device count: read once, when torch_xla initialises."""
    os.environ.setdefault("PJRT_DEVICE", "TPU" if on_tpu_vm() else "CPU")
    if os.environ["PJRT_DEVICE"] == "CPU":
        os.environ.setdefault("CPU_NUM_DEVICES", str(cpu_devices))


class XlaBackend(Backend):
    @classmethod
    def probe(cls) -> Probe:
        configure_runtime(4)
        import torch_xla.runtime as xr

        kind = "tpu" if os.environ["PJRT_DEVICE"] == "TPU" else "cpu"
        name = os.environ.get("TPU_ACCELERATOR_TYPE", "TPU") if kind == "tpu" else cpu_name()
        return Probe(True, "" if kind == "tpu" else "no TPU: the CPU PJRT device", kind, name,
                     xr.global_runtime_device_count())

    # ------------------------------------------------------------------ setup
    def setup(self) -> ModelFacts:
        configure_runtime(self.options.cpu_devices)
        import torch_xla
        import torch_xla.distributed.spmd as xs
        import torch_xla.runtime as xr

        if self.scenario.model.attention != "eager":
            raise ValueError("model.attention: xla-fsdpv2 needs eager attention (sdpa reads masks on the host)")
        xr.use_spmd()  # before the model exists: SPMD decides how it is placed
        self.device = torch_xla.device()
        self.mesh = self._mesh(xr.global_runtime_device_count(), xs)
        model = apply_lora(build_model(self.scenario), self.scenario)
        dtype = torch.bfloat16 if self.scenario.train.precision == "bf16" and self.on_tpu else torch.float32
        model = self._wrap(model.to(dtype).to(self.device), xs)
        self.model = model
        self.optimizer, self.schedule = build_optimizer(model, self.scenario)
        return model_facts(model)

    @property
    def on_tpu(self) -> bool:
        return os.environ.get("PJRT_DEVICE") == "TPU"

    def _mesh(self, devices: int, xs):
        spec = self.scenario.parallel.mesh
        tensor = spec.get("tensor", 1)
        fsdp = spec.get("fsdp", -1)
        fsdp = devices // tensor if fsdp == -1 else fsdp
        if fsdp * tensor != devices:
            raise ValueError(f"parallel.mesh: fsdp x tensor = {fsdp} x {tensor} does not cover {devices} devices")
        mesh = xs.Mesh(np.arange(devices), (fsdp, tensor), ("fsdp", "tensor"))
        xs.set_global_mesh(mesh)
        self.fsdp_size = fsdp
        return mesh

    def _wrap(self, model: torch.nn.Module, xs) -> torch.nn.Module:
        """FSDPv2 around every decoder layer (checkpointed through the wrapper if asked),
        then the root; the logits are sharded along the batch."""
        from torch_xla.distributed.fsdp.wrap import transformer_auto_wrap_policy
        from torch_xla.distributed.fsdp import checkpoint_module
        from torch_xla.experimental.spmd_fully_sharded_data_parallel import SpmdFullyShardedDataParallel as FSDPv2

        layer_classes = {type(m) for m in model.modules() if type(m).__name__.endswith("DecoderLayer")}
        policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls=layer_classes)

        def shard_output(output, mesh):  # a Tensor or a ModelOutput, depending on the wrapper level
            logits = output.logits if hasattr(output, "logits") else output
            xs.mark_sharding(logits, mesh, ("fsdp", None, None))

        wrapper = None
        if self.scenario.train.gradient_checkpointing:
            wrapper = lambda m, *a, **k: FSDPv2(checkpoint_module(m), *a, **k)  # noqa: E731
        return FSDPv2(model, mesh=self.mesh, shard_output=shard_output, auto_wrap_policy=policy,
                      auto_wrapper_callable=wrapper)

    def data_parallel_size(self) -> int:
        return self.fsdp_size

    # ------------------------------------------------------------------ steps
    def train_step(self, batch) -> torch.Tensor:
        import torch_xla
        import torch_xla.distributed.spmd as xs

        self.model.train()
        normaliser = max(batch.num_loss_tokens, 1)
        total = torch.zeros((), device=self.device)
        for micro in batch.micro_batches:
            tensors = []
            for array in (micro.input_ids, micro.attention_mask, micro.labels):
                t = torch.from_numpy(array).to(self.device)
                xs.mark_sharding(t, self.mesh, ("fsdp", None))  # rows split over the fsdp axis
                tensors.append(t)
            ids, mask, labels = tensors
            logits = self.model(input_ids=ids, attention_mask=mask, use_cache=False).logits
            loss = token_loss_sum(logits, labels) / normaliser
            loss.backward()
            total += loss.detach()
        optimizer_step(self.model, self.optimizer, self.schedule, self.scenario.train.grad_clip)
        torch_xla.sync()  # the step is one graph, launched now, asynchronously
        return total

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
        return MemoryFacts(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "cpu_peak_rss")

    def accelerator(self) -> dict[str, Any]:
        import torch_xla.runtime as xr

        devices = xr.global_runtime_device_count()
        if self.on_tpu:
            return {"kind": "tpu", "name": os.environ.get("TPU_ACCELERATOR_TYPE", "TPU"), "count": devices}
        return {"kind": "cpu", "name": cpu_name(), "count": 1, "virtual_devices": devices}

    def extra_facts(self) -> dict[str, Any]:
        import torch_xla

        specs = [torch_xla._XLAC._get_xla_sharding_spec(p) for p in self.model.parameters()]
        return {"mesh": {"fsdp": self.fsdp_size, "tensor": self.scenario.parallel.mesh.get("tensor", 1)},
                "num_params_total": len(specs),
                # FSDPv2 splits each parameter along its largest dim: [4,1], [1,4] or [4].
                "num_params_sharded_on_fsdp": sum(s.startswith("{devices=[") and "replicated" not in s for s in specs),
                "sharding_specs": sorted(set(specs))[:8]}

    def versions(self) -> dict[str, str]:
        import peft
        import torch_xla
        import transformers

        return {"python": sys.version.split()[0], "torch": torch.__version__, "torch_xla": torch_xla.__version__,
                "transformers": transformers.__version__, "peft": peft.__version__}

    def notes(self) -> list[str]:
        return [f"SPMD FSDPv2 over a {self.fsdp_size}-device fsdp axis ({os.environ.get('PJRT_DEVICE')} PJRT)"]
