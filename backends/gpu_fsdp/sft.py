"""The `sft_trainer` mode: trl's SFTTrainer drives the steps, as in many users' own
scripts, over the harness's exact batches and the plan's learning rates (a LambdaLR
that returns plan.lr[k], handed to the Trainer with the optimizer); a callback
synchronises the device at every step boundary, so the recorded time is the executed
step, not the callback's dispatch. The rows the Trainer's data loader produced for each
step are counted as that step's work."""

from __future__ import annotations

import tempfile

import torch

from harness.run.loop import LoopResult, StepRecorder, recorder_for


def _callback(backend, recorder: StepRecorder):
    from transformers import TrainerCallback

    class SynchronisedStepTimer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            backend.sync()  # nothing of the previous step may leak into this one
            self.begun = recorder.begin()
            self.lr = backend.optimizer.param_groups[0]["lr"]  # what this step's update will use

        def on_step_end(self, args, state, control, **kwargs):
            index = state.global_step - 1
            for mask in backend.fed_by_step.pop(index, []):
                backend.work.fed(mask)
            backend.work.applied_lr(self.lr)
            recorder.end(self.begun, backend.batches.steps[index], loss=None)  # syncs

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "loss" in logs and recorder.samples:
                recorder.samples[state.global_step - 1].loss = float(logs["loss"])

    return SynchronisedStepTimer()


def _rows(plan, steps: int) -> list[dict[str, int]]:
    """One dataset row per row of every micro-batch, in the order they are consumed."""
    return [
        {"step": s, "micro": m, "row": r}
        for s, step in enumerate(plan.steps[:steps])
        for m, micro in enumerate(step.micro_batches)
        for r in range(micro.input_ids.shape[0])
    ]


def _collate(backend):
    def collate(rows):
        first = rows[0]
        micro = backend.batches.steps[first["step"]].micro_batches[first["micro"]]
        picked = [r["row"] for r in rows]
        arrays = {k: getattr(micro, k)[picked] for k in ("input_ids", "attention_mask", "labels")}
        backend.fed_by_step.setdefault(first["step"], []).append(arrays["attention_mask"])
        if not backend.fingerprints:
            backend.fingerprints.append(hash(arrays["input_ids"].tobytes()) & 0x7FFFFFFF)
        return {k: torch.from_numpy(a) for k, a in arrays.items()}

    return collate


def _planned_schedule(backend):
    """The plan's lr of every optimizer step, as the LambdaLR the Trainer steps."""
    from torch.optim.lr_scheduler import LambdaLR

    base = backend.scenario.train.optimizer.lr
    lrs = backend.plan.lr
    return LambdaLR(backend.optimizer, lambda k: lrs[min(k, len(lrs) - 1)] / base)


def _measure_compute_dtype(backend) -> None:
    """The dtype a frozen base linear layer's matmul produced. Not the logits: trl's
    SFTTrainer computes the loss through a fused LM head and returns none."""

    def hook(module, args, output):
        if backend.compute_dtype is None:
            backend.compute_dtype = output.dtype

    frozen = next(m for m in backend.model.modules() if isinstance(m, torch.nn.Linear) and not m.weight.requires_grad)
    frozen.register_forward_hook(hook)


def _config(backend, output_dir: str):
    from trl import SFTConfig

    s, train = backend.scenario, backend.scenario.train
    return SFTConfig(
        output_dir=output_dir,
        max_steps=backend.plan.steps,
        per_device_train_batch_size=backend.plan.micro_batch,
        gradient_accumulation_steps=backend.plan.accumulation,
        # The optimizer and its schedule are the plan's, handed over (optimizers=...).
        learning_rate=train.optimizer.lr,
        weight_decay=train.optimizer.weight_decay,
        max_grad_norm=train.grad_clip or 0.0,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=backend.device.type == "cpu",
        seed=train.seed,
        # The plan's fp32 exactly: transformers 5 turns bf16 autocast on by default where
        # the device supports it (the plan check caught that).
        bf16=False,
        fp16=False,
        dataloader_num_workers=0,
        remove_unused_columns=False,
        dataset_kwargs={"skip_prepare_dataset": True},
        gradient_checkpointing=s.train.gradient_checkpointing,
        disable_tqdm=True,
    )


def run_sft_trainer(backend) -> LoopResult:
    from datasets import Dataset
    from torch.utils.data import SequentialSampler
    from transformers import PreTrainedTokenizerFast
    from trl import SFTTrainer

    class InOrderSFTTrainer(SFTTrainer):
        """The harness's batch order, so every backend sees the same data."""

        def _get_train_sampler(self, *args, **kwargs):
            return SequentialSampler(self.train_dataset)

    batches = backend.batches
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=batches.tokenizer.tokenizer, pad_token="<pad>", eos_token="<eos>"
    )
    recorder = recorder_for(backend, backend.events.origin)  # traced when the scenario asks
    _measure_compute_dtype(backend)
    with tempfile.TemporaryDirectory(prefix="bench-sft-") as out:
        trainer = InOrderSFTTrainer(
            model=backend.model,
            args=_config(backend, out),
            train_dataset=Dataset.from_list(_rows(batches, backend.plan.steps)),
            data_collator=_collate(backend),
            processing_class=tokenizer,
            callbacks=[_callback(backend, recorder)],
            optimizers=(backend.optimizer, _planned_schedule(backend)),
        )
        trainer.train()
    return LoopResult(recorder.samples, None, 0, recorder)
