"""FSDP2 over torchrun ranks. Every rank runs this; rank 0 reports.

Parallelism is applied in a fixed order (torchtitan's habit): LoRA, activation
checkpointing, `fully_shard` per decoder layer, then the root, then torch.compile. The
plan's micro_batch is per rank: every forward pass of the plan holds micro_batch x ranks
rows and rank r takes rows [r*micro, (r+1)*micro). The loss is the same token-weighted
sum as the single-process backend, so their loss curves must agree. With a data axis
the mesh is 2-D (data x fsdp): HSDP, replicated across data, sharded within fsdp.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist

from backends.hf_common.model import (
    DTYPES,
    PlannedSteps,
    apply_lora,
    build_model,
    build_optimizer,
    cast_to_plan,
    cuda_or_cpu_probe,
    cuda_versions,
    micro_batch_loss,
    model_facts,
    run_dtypes,
)
from backends.torch_common import execution, flex
from backends.torch_common.attention import StepKernels, attention_facts, resolve_attention, sdpa_context
from harness.records.provenance import cpu_name, module_versions
from harness.run.backend import CompileStats, MemoryFacts, ModelFacts, Probe, StepBackend, cpu_peak_memory
from harness.run.loop import run_steps


class FsdpBackend(StepBackend):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.per_rank_times: list[list[float]] | None = None  # every rank's step times, after run
        self.fed_by_step: dict[int, list] = {}  # sft_trainer mode: rows collated, by step

    @classmethod
    def probe(cls) -> Probe:
        return cuda_or_cpu_probe("no GPU: runs over gloo on the CPU")

    # ------------------------------------------------------------------ setup
    def setup(self) -> ModelFacts:
        self.rank, self.world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
        if self.world != self.plan.devices:
            raise RuntimeError(f"launched {self.world} ranks for a plan of {self.plan.devices} devices")
        self.device = self._device()
        dist.init_process_group("nccl" if self.device.type == "cuda" else "gloo")
        self.attention = resolve_attention(self.scenario.model.attention, self.device)
        # auto: on on CUDA in the harness's loop; off under trl's Trainer (its own loop).
        self.compile = execution.compile_on(self.options, self.device) and not (
            self.options.mode == "sft_trainer" and self.options.compile == "auto"
        )
        model = apply_lora(build_model(self.scenario, self.attention), self.scenario)  # same seed on every rank
        self.compute_dtype = None  # measured: the dtype of the first forward's logits
        self.compile_events = 0
        self.fingerprints: list[int] = []  # of the rows this rank fed: distinct work, checked
        if self.options.mode == "sft_trainer":
            return self._setup_for_trainer(model)
        if self.plan.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.flex_facts = flex.setup(model, self.options, self.attention, self.device, self.scenario, "gpu-fsdp")
        self.model = cast_to_plan(model, self.plan.precision).to(self.device)
        # The loss module holds the model and the LM head's loss: FSDP's root, so its
        # hooks gather the embedding, final norm and head for the loss too.
        self.loss = self._shard(
            execution.loss_module(self.model, self.options, self.device, "gpu-fsdp", self.plan, self.scenario)
        )
        self.fused_optimizer = execution.use_fused_optimizer(self.device, self.scenario)
        self.optimizer = build_optimizer(self.model, self.scenario, fused=self.fused_optimizer)
        self.steps = PlannedSteps(self.optimizer, self.plan, self.work)
        facts = model_facts(self.model)  # DTensor numel is the global size
        if self.compile:
            execution.compile_loss(self.loss, self.options)
        self.attention_facts = attention_facts(
            self.loss, self.options, self.device, self._autocast, self.scenario, "gpu-fsdp"
        )
        self.loss.recomputed_chunks = 0  # the probe's are not the run's
        self.step_kernels = StepKernels()  # the attention kernels the step itself ran
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        return facts

    def _setup_for_trainer(self, model: torch.nn.Module) -> ModelFacts:
        """The Trainer builds its own optimizer and schedule from the scenario's values."""
        if self.world > 1:
            raise ValueError(
                "backend_options.gpu-fsdp.mode: sft_trainer runs on one process in this version "
                "(parallel.devices must be 1)"
            )
        if self.compile:
            raise ValueError("backend_options.gpu-fsdp.compile: not supported with mode sft_trainer")
        if self.plan.window_steps:
            raise ValueError(
                "train.window_steps: the sft_trainer mode syncs at every step boundary (its "
                "callbacks); it has no unsynchronised window: set it to 0"
            )
        if self.plan.precision.name != "fp32":
            raise ValueError(
                f"train.precision: {self.plan.precision.name} in mode sft_trainer would be the "
                "Trainer's autocast over fp32 weights, not the plan's policy: use mode loop"
            )
        self.model = cast_to_plan(model, self.plan.precision).to(self.device)
        self.optimizer = build_optimizer(self.model, self.scenario)
        self.num_sharded_layers = 0
        return model_facts(self.model)

    def _autocast(self):
        """Unsharded (one device), autocast runs the matmuls in the plan's compute dtype,
        as the torch backend does; sharded, FSDP's mixed-precision policy does it."""
        import contextlib

        compute = self.plan.precision.compute
        if self.sharded or compute == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=DTYPES[compute])

    def _device(self) -> torch.device:
        if self.options.device == "cuda" or (self.options.device == "auto" and torch.cuda.is_available()):
            local = int(os.environ.get("LOCAL_RANK", 0))
            torch.cuda.set_device(local)
            return torch.device("cuda", local)
        return torch.device("cpu")

    def _mixed_precision(self):
        """FSDP2 casts the gathered parameters to the plan's compute dtype for forward and
        backward, and reduce-scatters gradients in its grad-reduce dtype."""
        from torch.distributed.fsdp import MixedPrecisionPolicy

        precision = self.plan.precision
        return MixedPrecisionPolicy(param_dtype=DTYPES[precision.compute], reduce_dtype=DTYPES[precision.grad_reduce])

    def _shard(self, model: torch.nn.Module) -> torch.nn.Module:
        """fully_shard each decoder layer, then the root. full_shard frees the gathered
        parameters after forward; shard_grad_op keeps them until backward (ZeRO-2). On
        one device there is nothing to shard: the model runs unwrapped (FSDP's hooks and
        copies would only slow it) and the record says so."""
        self.sharded = self.world > 1
        if not self.sharded:
            self.num_sharded_layers = 0
            return model
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        data, fsdp = self.plan.mesh["data"], self.plan.mesh["fsdp"]
        mesh = (
            init_device_mesh(self.device.type, (data, fsdp), mesh_dim_names=("data", "fsdp"))
            if data > 1
            else init_device_mesh(self.device.type, (fsdp,), mesh_dim_names=("fsdp",))
        )
        reshard = self.plan.sharding == "full_shard"
        policy = self._mixed_precision()
        layers = [m for m in model.modules() if type(m).__name__.endswith("DecoderLayer")]
        for layer in layers:
            fully_shard(layer, mesh=mesh, reshard_after_forward=reshard, mp_policy=policy)
        fully_shard(model, mesh=mesh, reshard_after_forward=reshard, mp_policy=policy)
        self.num_sharded_layers = len(layers)
        return model

    # ------------------------------------------------------------------ steps
    def _my_rows(self, micro):
        """This rank's share of a forward pass's rows: plan.micro_batch (the plan made the
        pass micro_batch x ranks rows), or of packed rows, as many as the pass packs
        into (a multiple of the ranks: harness/data/batches.py fixed_packed_rows)."""
        rows = micro.input_ids.shape[0] // self.plan.data_parallel
        return micro.rows(self.rank * rows, (self.rank + 1) * rows)

    def train_step(self, batch) -> torch.Tensor:
        last = len(batch.micro_batches) - 1

        def place(i: int, micro):
            mine = self._my_rows(micro)
            if not self.fingerprints:
                self.fingerprints.append(hash(mine.input_ids.tobytes()) & 0x7FFFFFFF)
            return mine.attention_mask, *execution.place(mine, self.device, self.attention)

        def loss_sum(i: int, ids, mask, labels, positions):
            if self.sharded:
                self.loss.set_requires_gradient_sync(i == last)  # reduce-scatter once per step
            graphs_before = self._compiled_graphs()
            with self._autocast(), sdpa_context(self.options.sdpa_kernel):
                summed = self.step_kernels.around(
                    lambda: self.loss(ids, mask, labels, positions), self._compiled_graphs
                )
            self.compile_events += self._compiled_graphs() > graphs_before
            return summed

        def backward(i: int, loss) -> None:
            (loss * self.world).backward()  # FSDP averages gradients over ranks; the loss sums them

        total = micro_batch_loss(self, batch, place, loss_sum, backward)
        self.steps.step(self.model, self.scenario.train.grad_clip)
        return total

    def trace_capture(self, directory):
        from backends.torch_common.trace import TorchCapture

        return TorchCapture(directory)

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def loss_value(self, loss: torch.Tensor) -> float:
        """Every rank's share of the loss, summed (a collective: called on all ranks)."""
        summed = loss.detach().clone()
        dist.all_reduce(summed)
        return float(summed.item())

    def run(self):
        """The harness's loop, then each step's time set to the slowest rank's."""
        if self.options.mode == "sft_trainer":
            from backends.gpu_fsdp.sft import run_sft_trainer

            return run_sft_trainer(self)
        result = run_steps(self)
        own = [s.time_s for s in result.steps] + ([result.window.time_s] if result.window else [])
        per_rank = self._gather(own)
        slowest = [max(ts) for ts in zip(*per_rank)]
        for sample, seconds in zip(result.steps, slowest):
            sample.time_s = seconds
        if result.window:
            result.window.time_s = slowest[-1]
        self.per_rank_times = per_rank
        self._sum_work_over_ranks(result)
        return result

    def _sum_work_over_ranks(self, result) -> None:
        """Each rank counted the rows it fed; the step's work is their sum."""
        accounts = [s.done for s in result.steps] + ([result.window.done] if result.window else [])
        keys = ("rows", "tokens_real", "tokens_padded")
        mine = [float(a[k]) for a in accounts for k in keys]
        summed = [sum(column) for column in zip(*self._gather(mine))]
        for i, account in enumerate(accounts):
            account.update({k: int(summed[i * len(keys) + j]) for j, k in enumerate(keys)})

    def _gather(self, values: list[float]) -> list[list[float]]:
        mine = torch.tensor(values, dtype=torch.float64, device=self.device)
        everyone = [torch.zeros_like(mine) for _ in range(self.world)]
        dist.all_gather(everyone, mine)
        return [t.tolist() for t in everyone]

    # ------------------------------------------------------------------ facts
    def _compiled_graphs(self) -> int:
        """Graphs dynamo has compiled so far (FSDP's hooks split one model into several)."""
        return execution.unique_graphs() if self.compile else 0

    def compile_stats(self) -> CompileStats:
        """Compilations counted as XLA counts programs: a forward pass that compiled
        anything (one new shape) is one, however many graphs FSDP's hooks cut it into;
        the graph count is kept in the extra facts. Seconds: dynamo's own timers of
        every compilation (tracing, AOT autograd, the backend; the lazily compiled
        backward graphs too)."""
        seconds = execution.compile_seconds() if self.compile else 0.0
        return CompileStats(count=self.compile_events, seconds=seconds)

    def compile_cache(self) -> dict[str, Any] | None:
        return execution.compile_cache(self.options, self.compile)

    def host_sync_counter(self):
        from backends.torch_common.syncs import HostSyncCounter

        return HostSyncCounter(self.device)

    def execution(self) -> dict[str, Any]:
        if self.options.mode == "sft_trainer":
            return {"mode": "sft_trainer: trl's SFTTrainer executes the steps (its own loss and optimizer)"}
        return {
            **execution.execution_facts(
                self.loss, self.options, self.device, self.fused_optimizer, self.compile, self.attention_facts
            ),
            **self.flex_facts,
            **self.step_kernels.facts(self.loss.attention),
            "choices": execution.choices(self.options, self.scenario),
            "fsdp": f"FSDP2 over {self.world} ranks, {self.plan.sharding}"
            if self.sharded
            else "not wrapped: one device, nothing to shard",
        }

    def done(self) -> dict[str, Any]:
        """Dtypes of this rank's shards and of its optimizer state; the ranks that fed
        distinct rows, from a fingerprint of each rank's first rows (gathered)."""
        prints = self._gather([float(self.fingerprints[0] if self.fingerprints else -1)])
        return {
            "dtypes": run_dtypes(self.model, self.optimizer, self.compute_dtype),
            "distinct_row_shards": len({p[0] for p in prints if p[0] >= 0}),
        }

    def memory(self) -> MemoryFacts:
        if self.device.type == "cuda":
            mine, kind = torch.cuda.max_memory_allocated(self.device), "cuda_max_allocated"
        else:
            cpu = cpu_peak_memory()
            mine, kind = cpu.peak_bytes, cpu.kind
        per_rank = [int(r[0]) for r in self._gather([float(mine)])]
        return MemoryFacts(max(per_rank), kind, per_rank_bytes=per_rank)

    def accelerator(self) -> dict[str, Any]:
        """Every host's devices: cost bills `count` (all GPUs; on CPUs one machine per
        host, however many gloo ranks share it)."""
        job = {"hosts": self.plan.hosts, "processes": self.world, "devices": self.world}
        if self.device.type == "cuda":
            return {"kind": "cuda", "name": torch.cuda.get_device_name(self.device), "count": self.world, **job}
        return {"kind": "cpu", "name": cpu_name(), "count": self.plan.hosts, **job}

    def _per_rank_hosts(self) -> list[str]:
        """The host name each rank ran on (a collective: every rank calls it)."""
        import socket

        names: list[Any] = [None] * self.world
        dist.all_gather_object(names, socket.gethostname())
        return names

    def extra_facts(self) -> dict[str, Any]:
        from torch.distributed.tensor import DTensor

        params = [p for p in self.model.parameters()]
        sharded = [p for p in params if isinstance(p, DTensor)]
        local = sum(p.to_local().numel() for p in sharded)
        return {
            "world_size": self.world,
            "backend": dist.get_backend(),
            "sharding": self.plan.sharding,
            "num_sharded_layers": self.num_sharded_layers,
            "num_dtensor_params": len(sharded),
            "num_params_total": len(params),
            "placements": sorted({str(p.placements) for p in sharded}),
            "local_param_fraction_rank0": local / max(1, sum(p.numel() for p in sharded)),
            "per_rank_step_time_s": self.per_rank_times,
            "per_rank_host": self._per_rank_hosts(),
            "mode": self.options.mode,
            "compile": self.compile,
            "compiled_graphs": self._compiled_graphs(),
        }

    def versions(self) -> dict[str, str]:
        found = module_versions("torch", "transformers", "peft")
        if self.options.mode == "sft_trainer":
            import trl

            found["trl"] = trl.__version__
        if self.device.type == "cuda":
            found.update(cuda_versions())
        return found

    def notes(self) -> list[str]:
        return [f"FSDP2 over {self.world} rank(s), {self.plan.sharding}, {dist.get_backend()}"]

    def teardown(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
