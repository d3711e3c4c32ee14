"""Eager PyTorch on the CPU or one CUDA GPU: the reference every other backend is
compared against (same weights, same batches, same loss)."""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from backends.hf_common import model as hf
from backends.torch_common import execution, flex
from backends.torch_common.attention import StepKernels, attention_facts, resolve_attention, sdpa_context
from harness.records.provenance import cpu_name, module_versions
from harness.run.backend import CompileStats, MemoryFacts, ModelFacts, Probe, StepBackend, cpu_peak_memory


class TorchBackend(StepBackend):
    @classmethod
    def probe(cls) -> Probe:
        return hf.cuda_or_cpu_probe("")

    def setup(self) -> ModelFacts:
        self.device = self._device()
        if self.options.cpu_threads:
            torch.set_num_threads(self.options.cpu_threads)
        precision = self.plan.precision
        if precision.name == "fp16" and self.device.type != "cuda":
            raise ValueError("train.precision: fp16 needs a CUDA device on the torch backend; use fp32 or bf16")
        self.attention = resolve_attention(self.scenario.model.attention, self.device)
        self.compile = execution.compile_on(self.options, self.device)
        model = hf.apply_lora(hf.build_model(self.scenario, self.attention), self.scenario)
        self.flex_facts = flex.setup(model, self.options, self.attention, self.device, self.scenario, "torch")
        if self.plan.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.model = hf.cast_to_plan(model, precision).to(self.device)
        # Created after the cast and the move: the optimizer holds the final tensors.
        self.fused_optimizer = execution.use_fused_optimizer(self.device, self.scenario)
        self.optimizer = hf.build_optimizer(self.model, self.scenario, fused=self.fused_optimizer)
        self.loss = execution.loss_module(self.model, self.options, self.device, "torch", self.plan, self.scenario)
        self.loss_of = execution.compile_loss(self.loss, self.options) if self.compile else self.loss
        self.compile_events = 0  # micro-batches during which dynamo compiled a new graph
        self.steps = hf.PlannedSteps(self.optimizer, self.plan, self.work)
        # Autocast runs the matmuls in the compute dtype (the trained fp32 master
        # weights included), the way AMP training does.
        self.autocast_dtype = None if precision.compute == "fp32" else hf.DTYPES[precision.compute]
        self.attention_facts = attention_facts(
            self.loss, self.options, self.device, self._autocast, self.scenario, "torch"
        )
        self.loss.recomputed_chunks = 0  # the probe's are not the run's
        self.step_kernels = StepKernels()  # the attention kernels the step itself ran
        self.compute_dtype = None  # measured: the dtype the first forward's logits came out in
        self.scaler = torch.amp.GradScaler("cuda") if precision.name == "fp16" else None
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        return hf.model_facts(self.model)

    def _device(self) -> torch.device:
        wanted = self.options.device
        if wanted == "cuda" or (wanted == "auto" and torch.cuda.is_available()):
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")

    def _autocast(self):
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)

    def train_step(self, batch) -> torch.Tensor:
        total = hf.micro_batch_loss(self, batch, self._place, self._loss_sum, self._backward)
        self._optimizer_step()
        return total

    def _place(self, i: int, micro):
        return micro.attention_mask, *execution.place(micro, self.device, self.attention)

    def _loss_sum(self, i: int, ids, mask, labels, positions):
        graphs = execution.unique_graphs() if self.compile else 0
        with self._autocast(), sdpa_context(self.options.sdpa_kernel):
            summed = self.step_kernels.around(
                lambda: self.loss_of(ids, mask, labels, positions), execution.unique_graphs if self.compile else int
            )
        if self.compile:
            self.compile_events += execution.unique_graphs() > graphs
        return summed

    def _backward(self, i: int, loss) -> None:
        (self.scaler.scale(loss) if self.scaler else loss).backward()

    def _optimizer_step(self) -> None:
        if self.scaler is None:
            self.steps.step(self.model, self.scenario.train.grad_clip)
            return
        # fp16: unscale before clipping, and let the scaler skip steps with inf gradients.
        self.steps.set_lr()
        self.scaler.unscale_(self.optimizer)
        if self.scenario.train.grad_clip:
            torch.nn.utils.clip_grad_norm_(
                [p for p in self.model.parameters() if p.requires_grad], self.scenario.train.grad_clip
            )
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)

    def trace_capture(self, directory):
        from backends.torch_common.trace import TorchCapture

        return TorchCapture(directory)

    def compile_stats(self) -> CompileStats:
        """A micro-batch that compiled anything counts one compilation (as XLA counts a
        new program); seconds from dynamo's own timers."""
        if not self.compile:
            return CompileStats()
        return CompileStats(self.compile_events, execution.compile_seconds())

    def compile_cache(self) -> dict[str, Any] | None:
        return execution.compile_cache(self.options, self.compile)

    def host_sync_counter(self):
        from backends.torch_common.syncs import HostSyncCounter

        return HostSyncCounter(self.device)

    def execution(self) -> dict[str, Any]:
        return {
            **execution.execution_facts(
                self.loss, self.options, self.device, self.fused_optimizer, self.compile, self.attention_facts
            ),
            **self.flex_facts,
            **self.step_kernels.facts(self.loss.attention),
            "choices": execution.choices(self.options, self.scenario),
        }

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        # CPU eager: every op has finished when it returns; nothing to wait for.

    def loss_value(self, loss: torch.Tensor) -> float:
        return float(loss.item())

    def done(self) -> dict[str, Any]:
        return {"dtypes": hf.run_dtypes(self.model, self.optimizer, self.compute_dtype), "distinct_row_shards": 1}

    def memory(self) -> MemoryFacts:
        if self.device.type == "cuda":
            return MemoryFacts(
                torch.cuda.max_memory_allocated(self.device),
                "cuda_max_allocated",
                reserved_bytes=torch.cuda.max_memory_reserved(self.device),
            )
        return cpu_peak_memory()

    def accelerator(self) -> dict[str, Any]:
        if self.device.type == "cuda":
            return {"kind": "cuda", "name": torch.cuda.get_device_name(self.device), "count": 1}
        return {"kind": "cpu", "name": cpu_name(), "count": 1, "threads": torch.get_num_threads()}

    def versions(self) -> dict[str, str]:
        found = module_versions("torch", "transformers", "peft", "numpy")
        if self.device.type == "cuda":
            found.update(hf.cuda_versions())
        return found
