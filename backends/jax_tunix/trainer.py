"""Tunix's PeftTrainer, fed by the harness and observed at its documented extension points.

- Data: a `DataHooks` serves the harness's micro-batches (same tokens and padding as every
  other backend), one per trainer iteration; Tunix accumulates `gradient_accumulation_steps`
  of them into one optimizer step (optax.MultiSteps). Asking for the first micro-batch of a
  step is the previous step's end: that is where the harness's clock syncs and stops.
- Rows: the harness shards each micro-batch over the fsdp axis itself, with Tunix's own
  `shard_input` and the trainer's `data_sharding_axis`; the trainer sees the arrays are
  sharded already and keeps them, so the rows each device gets can be read off the very
  arrays the step runs on (backend.distinct_row_shards).
- Loss: the token-weighted sum over the whole step, like every backend. Each micro-batch
  returns k * (its loss sum) / (the step's loss tokens); MultiSteps averages the k
  gradients, which gives the gradient of sum / tokens. The same value comes back as aux.
  The forward pass runs in the plan's compute dtype (`model.in_compute_dtype`); the
  logits' dtype is recorded when the step is traced. The head and cross-entropy run by
  the option `loss_kernel`: chunked (never the full fp32 logits) or plain.
- `_post_process_train_step` (Tunix's hook for aux) keeps each micro-batch's loss, still
  on the device, and stamps when its dispatch returned.

Imported only inside the worker, after the CPU device count is set.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from tunix.sft import hooks, peft_trainer, sharding_utils
from tunix.sft import utils as sft_utils

from backends.jax_tunix.model import final_hidden_states, in_compute_dtype


def step_loss_fn(compute_dtype, seen: dict[str, Any], kernel: str) -> Callable:
    """The trainer's loss function, running the forward pass in `compute_dtype`, its head
    and cross-entropy by `kernel` (chunked or plain: backends/jax_common/loss.py). A
    closure, not a partial: nnx.value_and_grad resolves keyword arguments to positions."""
    token_losses = _chunked_token_losses if kernel == "chunked" else _plain_token_losses

    def step_loss(model, input_tokens, input_mask, positions, attention_mask, loss_scale):
        """Next-token cross-entropy on the trained tokens, summed, each row times its scale
        (the step's, on every row so that the scale shards with the rows). `input_mask`
        marks trained tokens (the harness's labels != -100). `seen["compute"]` gets the
        logits' dtype when the step is traced: what the model's matmuls produced."""
        model = in_compute_dtype(model, compute_dtype)
        loss = token_losses(model, input_tokens, input_mask, positions, attention_mask, loss_scale, seen)
        return loss, jax.lax.stop_gradient(loss)

    return step_loss


def _plain_token_losses(model, tokens, trained, positions, attention_mask, loss_scale, seen):
    """The model's own forward: its full logits, upcast to fp32 (the reference)."""
    logits, _ = model(tokens, positions, None, attention_mask)
    seen["compute"] = logits.dtype
    losses = optax.softmax_cross_entropy_with_integer_labels(logits[:, :-1].astype(jnp.float32), tokens[:, 1:])
    return jnp.sum(jnp.sum(losses * trained[:, 1:], axis=1) * loss_scale)


def _chunked_token_losses(model, tokens, trained, positions, attention_mask, loss_scale, seen):
    """The final hidden states, then the tied head (the embedding, as Tunix's
    `embedder.decode`) and cross-entropy a chunk of positions at a time."""
    from backends.jax_common.loss import chunked_loss_sum, next_token_targets

    hidden = final_hidden_states(model, tokens, positions, attention_mask)
    head = model.embedder.input_embedding.value
    seen["compute"] = jnp.result_type(hidden.dtype, head.dtype)
    targets, weights = next_token_targets(tokens, trained)
    return chunked_loss_sum(hidden, head, targets, weights * loss_scale[:, None])


def model_input(batch: dict[str, Any]) -> dict[str, Any]:
    """Positions and the causal attention mask from the padding mask, inside the step;
    packed rows bring their own positions (restarting at each example), and their mask
    keeps each example to itself (what Tunix's own masked attention then applies)."""
    valid = batch["attention_mask"]
    if "positions" in batch:
        positions = batch["positions"]
        mask = packed_causal_mask(positions)
    else:
        positions = sft_utils.build_positions_from_mask(valid)
        mask = sft_utils.make_causal_attn_mask(valid)
    return {
        "input_tokens": batch["input_tokens"],
        "input_mask": batch["input_mask"],
        "positions": positions,
        "attention_mask": mask,
        "loss_scale": batch["loss_scale"],
    }


def packed_causal_mask(positions) -> jax.Array:
    """[B, T, T] boolean: key at or before the query, in the query's example (segment
    ids from the packed positions; a row's tail of padding is a segment of its own, so no
    real token sees a padding key)."""
    from backends.jax_common.attention import segment_ids

    segments = segment_ids(positions)
    length = positions.shape[-1]
    causal = jnp.tril(jnp.ones((length, length), dtype=jnp.bool_))
    return causal[None] & (segments[:, :, None] == segments[:, None, :])


def trainer_input(micro, loss_scale: float) -> dict[str, np.ndarray]:
    """A harness micro-batch as Tunix's trainer takes it: host arrays with one entry per
    row, the loss scale included, so that every array splits over the rows alike; packed
    rows with their positions."""
    rows = micro.input_ids.shape[0]
    example = {
        "input_tokens": micro.input_ids.astype(np.int32),
        "input_mask": micro.labels != -100,
        "attention_mask": micro.attention_mask.astype(bool),
        "loss_scale": np.full(rows, loss_scale, dtype=np.float32),
    }
    if micro.position_ids is not None:
        example["positions"] = micro.position_ids.astype(np.int32)
    return example


def shard_rows(example: dict[str, np.ndarray], axes: tuple[str, ...]) -> dict[str, jax.Array]:
    """The example's rows split over `axes` of the current mesh, exactly as the trainer
    would split them (Tunix's `shard_input`), done here so the harness holds the arrays.
    `shard_input` replicates an array whose rows do not divide the axis, without a word:
    the backend counts the distinct row ranges of what it returns."""
    return sharding_utils.shard_input(example, axes)


class HarnessData(hooks.DataHooks):
    """Hands PeftTrainer the next micro-batch from `next_micro_batch()` (None ends training)."""

    def __init__(self, next_micro_batch: Callable[[], Any]) -> None:
        self.next_micro_batch = next_micro_batch

    def load_next_train_batch(self, train_ctx):
        return self.next_micro_batch()

    def load_next_eval_batch(self, train_ctx):
        return None


class ObservedPeftTrainer(peft_trainer.PeftTrainer):
    """PeftTrainer that keeps each micro-batch's loss (a device array) and the time its
    dispatch returned; nothing else about the trainer changes."""

    def __init__(self, *args, compute_dtype, loss_kernel: str, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.micro_losses: list[Any] = []
        self.dispatched_at: list[float] = []
        self.deferred_metrics: list[Any] = []  # Tunix's per-step metrics, written after the run
        self.seen: dict[str, Any] = {}  # what tracing the step saw: the logits' dtype
        self.with_loss_fn(step_loss_fn(compute_dtype, self.seen, loss_kernel), has_aux=True)
        self.with_gen_model_input_fn(model_input)

    def _post_process_train_step(self, aux: Any) -> None:
        self.dispatched_at.append(time.perf_counter())
        self.micro_losses.append(aux)

    def _write_train_metrics(self) -> None:
        """Tunix writes the previous step's metrics (loss, perplexity, lr, grad norm) at
        each optimizer step, reading them to the host: four device reads a step, and the
        host cannot run more than a step ahead of the device. Kept instead, and written
        when the trainer closes, after the run's steps: the same losses and grad norms
        (the lr Tunix logs beside them is read then: bench's record reads each step's)."""
        if self._buffered_train_metrics is not None:
            self._buffered_train_metrics.step += 1  # as Tunix numbers a written step
            self.deferred_metrics.append(self._buffered_train_metrics)
        self._buffered_train_metrics = None

    def close(self) -> None:
        self._write_train_metrics()  # the last step's
        for buffered in self.deferred_metrics:
            self._write_metrics(buffered)
        self.deferred_metrics = []
        super().close()


def new_trainer(
    model, optimizer, *, max_steps: int, accumulation: int, max_inflight: int, compute_dtype, loss_kernel: str
) -> ObservedPeftTrainer:
    config = peft_trainer.TrainingConfig(
        eval_every_n_steps=max_steps + 1,
        max_steps=max_steps,
        # None rather than 1: Tunix would wrap the optimizer in a one-step MultiSteps.
        gradient_accumulation_steps=accumulation if accumulation > 1 else None,
        max_inflight_computations=max_inflight,
        data_sharding_axis=("fsdp",),
        pbar_description=None,
    )
    return ObservedPeftTrainer(model, optimizer, config, compute_dtype=compute_dtype, loss_kernel=loss_kernel)
