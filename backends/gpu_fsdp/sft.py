"""The `sft_trainer` mode: trl's SFTTrainer drives the steps, as in many users' own
scripts, over the harness's exact batches; a callback synchronises the device at every
step boundary, so the recorded time is the executed step, not the callback's dispatch."""

from __future__ import annotations

import tempfile

import torch

from harness.loop import LoopResult, StepRecorder


def _callback(backend, recorder: StepRecorder):
    from transformers import TrainerCallback

    class SynchronisedStepTimer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            backend.sync()  # nothing of the previous step may leak into this one
            self.begun = recorder.begin()

        def on_step_end(self, args, state, control, **kwargs):
            recorder.end(self.begun, backend.plan.steps[state.global_step - 1], loss=None)  # syncs

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "loss" in logs and recorder.samples:
                recorder.samples[state.global_step - 1].loss = float(logs["loss"])

    return SynchronisedStepTimer()


def _rows(plan, steps: int) -> list[dict[str, int]]:
    """One dataset row per row of every micro-batch, in the order they are consumed."""
    return [{"step": s, "micro": m, "row": r}
            for s, step in enumerate(plan.steps[:steps])
            for m, micro in enumerate(step.micro_batches)
            for r in range(micro.input_ids.shape[0])]


def _collate(plan):
    def collate(rows):
        first = rows[0]
        micro = plan.steps[first["step"]].micro_batches[first["micro"]]
        picked = [r["row"] for r in rows]
        return {k: torch.from_numpy(getattr(micro, k)[picked]) for k in ("input_ids", "attention_mask", "labels")}

    return collate


def _config(backend, output_dir: str):
    from trl import SFTConfig

    s, train = backend.scenario, backend.scenario.train
    return SFTConfig(
        output_dir=output_dir, max_steps=train.steps, per_device_train_batch_size=train.micro_batch,
        gradient_accumulation_steps=train.global_batch // train.micro_batch,
        learning_rate=train.optimizer.lr, weight_decay=train.optimizer.weight_decay, optim="adamw_torch",
        adam_beta1=train.optimizer.betas[0], adam_beta2=train.optimizer.betas[1], adam_epsilon=train.optimizer.eps,
        lr_scheduler_type=train.schedule.name, warmup_steps=int(train.schedule.warmup_ratio * train.steps),
        max_grad_norm=train.grad_clip or 0.0, logging_steps=1, save_strategy="no", report_to=[],
        bf16=train.precision == "bf16", use_cpu=backend.device.type == "cpu", seed=train.seed,
        dataloader_num_workers=0, remove_unused_columns=False, dataset_kwargs={"skip_prepare_dataset": True},
        gradient_checkpointing=s.train.gradient_checkpointing, disable_tqdm=True,
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

    plan = backend.plan
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=plan.tokenizer.tokenizer, pad_token="<pad>", eos_token="<eos>")
    recorder = StepRecorder(backend, backend.events.origin)
    with tempfile.TemporaryDirectory(prefix="bench-sft-") as out:
        trainer = InOrderSFTTrainer(
            model=backend.model, args=_config(backend, out), train_dataset=Dataset.from_list(_rows(plan, backend.scenario.train.steps)),
            data_collator=_collate(plan), processing_class=tokenizer, callbacks=[_callback(backend, recorder)],
        )
        trainer.train()
    return LoopResult(recorder.samples, None, 0)
