"""torchax: PyTorch model, JAX training step.

The model (with peft LoRA) is built with torchax off, from the same seed as every other
backend, then moved to the JAX device. Trainable parameters are split from frozen weights
and buffers; `torchax.train.make_train_step` turns forward, loss (the same token-weighted
sum, over all micro-batches of the step), gradient and the optax update into one function
that `jax.jit` compiles, donating the weights and optimizer state. The attention mask is
applied (W5's write-up dropped it, which changes what is computed).
"""

from __future__ import annotations

import sys
from typing import Any

import torch

from backends import jax_common
from backends.hf_common.model import apply_lora, build_model, model_facts, token_loss_sum
from backends.torchax_jax.compat import allow_removed_named_overloads
from harness.backend import Backend, ModelFacts, Probe

STEP_NAME = "bench_train_step"  # jit reports compilations of it as jit(bench_train_step)


def configure_jax(cpu_devices: int) -> None:
    allow_removed_named_overloads()  # before torchax is imported (see compat.py)
    jax_common.request_cpu_devices(cpu_devices)


class TorchaxBackend(jax_common.JaxDeviceFacts, Backend):
    @classmethod
    def probe(cls) -> Probe:
        configure_jax(4)
        return jax_common.probe_devices()

    # ------------------------------------------------------------------ setup
    def setup(self) -> ModelFacts:
        configure_jax(self.options.cpu_devices)
        import jax
        import torchax

        self._listen_for_compiles()
        model = apply_lora(build_model(self.scenario), self.scenario).float()  # torchax still off
        facts = model_facts(model)
        self.devices = jax.devices()
        self.env = torchax.default_env()
        with self.env:
            model.to("jax")
        self.model = model
        self.weights = {n: p for n, p in model.named_parameters() if p.requires_grad}
        self.buffers = {**{n: p for n, p in model.named_parameters() if not p.requires_grad}, **dict(model.named_buffers())}
        self._place_on_mesh()
        self.step_fn = self._compiled_step()
        return facts

    def _listen_for_compiles(self) -> None:
        self.compiles = jax_common.CompileCounter(STEP_NAME)
        self.compiles.ensure_listening()

    def _place_on_mesh(self) -> None:
        """Weights and their optimizer state split along dim 0 over the mesh (FSDP-style;
        XLA inserts the gathers), batches split by rows. The optimizer state is placed
        before the first step, else step 2 recompiles (platform-notes.md)."""
        import jax
        import numpy as np
        from jax.sharding import Mesh, NamedSharding, PartitionSpec
        from torchax.interop import jax_view, torch_view

        self.mesh = Mesh(np.array(self.devices), ("fsdp",))
        self.replicated = NamedSharding(self.mesh, PartitionSpec())
        self.by_rows = NamedSharding(self.mesh, PartitionSpec("fsdp"))
        n = len(self.devices)

        def shard(array):  # FSDP-style: split dim 0 over the mesh where it divides
            spec = PartitionSpec("fsdp") if array.ndim and array.shape[0] % n == 0 else PartitionSpec()
            return jax.device_put(array, NamedSharding(self.mesh, spec))

        place = lambda tree: torch_view(jax.tree_util.tree_map(shard, jax_view(tree)))  # noqa: E731
        self.weights, self.buffers = place(self.weights), place(self.buffers)
        self.optimizer = self._optimizer()
        from torchax.interop import call_jax

        self.opt_state = place(call_jax(self.optimizer.init, self.weights))

    def _optimizer(self):
        return jax_common.optax_optimizer(self.scenario.train)

    def _compiled_step(self):
        import jax
        from torchax.interop import jax_view, torch_view
        from torchax.train import make_train_step

        model = self.model

        def model_fn(weights, buffers, args):
            return [torch.func.functional_call(model, {**weights, **buffers}, args=(),
                                               kwargs={"input_ids": ids, "attention_mask": mask, "use_cache": False}).logits
                    for ids, mask in args]

        def loss_fn(outputs, label):
            labels, normaliser = label
            return sum(token_loss_sum(logits, lab) for logits, lab in zip(outputs, labels)) / normaliser

        as_jax = jax_view(make_train_step(model_fn, loss_fn, self.optimizer))

        def bench_train_step(*args):  # named, so its compilations can be told apart
            return as_jax(*args)

        return torch_view(jax.jit(bench_train_step, donate_argnums=(0, 2)))

    def data_parallel_size(self) -> int:
        return 1  # every device sees its share of each micro-batch's rows (placed by rows)

    # ------------------------------------------------------------------ steps
    def _to_device(self, array):
        import jax
        from torchax.interop import torch_view

        rows = array.shape[0] if array.ndim else 0
        sharding = self.by_rows if rows and rows % len(self.devices) == 0 else self.replicated
        return torch_view(jax.device_put(array, sharding))

    def train_step(self, batch):
        import numpy as np

        args = tuple((self._to_device(m.input_ids), self._to_device(m.attention_mask)) for m in batch.micro_batches)
        labels = tuple(self._to_device(m.labels) for m in batch.micro_batches)
        normaliser = self._to_device(np.asarray(max(batch.num_loss_tokens, 1), dtype=np.float32))
        with self.env:
            loss, self.weights, self.opt_state = self.step_fn(self.weights, self.buffers, self.opt_state, args,
                                                              (labels, normaliser))
        self.last = loss
        return loss

    def sync(self) -> None:
        import jax
        from torchax.interop import jax_view

        if getattr(self, "last", None) is not None:
            jax.block_until_ready((jax_view(self.last), jax_view(self.weights)))

    def loss_value(self, loss) -> float:
        import numpy as np
        from torchax.interop import jax_view

        return float(np.asarray(jax_view(loss)))

    # ------------------------------------------------------------------ facts
    def extra_facts(self) -> dict[str, Any]:
        from torchax.interop import jax_view

        specs = [str(jax_view(t).sharding.spec) for t in [*self.weights.values(), *self.buffers.values()]]
        return {"devices": len(self.devices), "num_params_total": len(specs),
                "num_params_sharded": sum("fsdp" in s for s in specs), "shardings": sorted(set(specs))}

    def versions(self) -> dict[str, str]:
        import jax
        import optax
        import peft
        import torchax
        import transformers

        return {"python": sys.version.split()[0], "torch": torch.__version__, "torchax": torchax.__version__,
                "jax": jax.__version__, "optax": optax.__version__, "transformers": transformers.__version__,
                "peft": peft.__version__}
