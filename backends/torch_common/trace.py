"""torch.profiler capture for `harness.run.trace` (backends torch and gpu-fsdp).

The profiler runs from `start` to `stop` (no schedule: the harness picks the window),
recording CPU ops, and CUDA kernels on a GPU. Each step is a `record_function` span
`bench.step.N`. The trace is exported as gzipped Chrome JSON, `rank<R>.pt.trace.json.gz`
(one file per process of a multi-rank run): Perfetto opens it, and so does TensorBoard's
PyTorch profiler plugin (it looks for `*.pt.trace.json.gz`).
"""

from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

import torch

from harness.run.trace import Programs, SpanCapture


class TorchCapture(SpanCapture):
    tool = f"torch.profiler {torch.__version__}"
    # What dynamo records for each frame it compiles (torch._dynamo.convert_frame,
    # dynamo_timed); an eager run compiles nothing.
    compile_events = ("_compile.compile_inner (dynamo_timed)",)

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.path = self.directory / f"rank{int(os.environ.get('RANK', '0'))}.pt.trace.json.gz"
        activities = [torch.profiler.ProfilerActivity.CPU]
        # The step's executed work, as the profiler records it: on a GPU its kernels and
        # copies (CUPTI's own timestamps); on the CPU the ops themselves (no asynchronous
        # device: an op's time is its execution).
        self.programs = Programs(categories=("cpu_op",))
        if torch.cuda.is_available():
            activities.append(torch.profiler.ProfilerActivity.CUDA)
            self.programs = Programs(categories=("kernel", "gpu_memcpy", "gpu_memset"))
        self.profiler = torch.profiler.profile(activities=activities)

    def start(self) -> None:
        self.profiler.start()

    def open_span(self, name: str):
        return torch.profiler.record_function(name)

    def stop(self) -> None:
        self.profiler.stop()
        self.directory.mkdir(parents=True, exist_ok=True)
        plain = self.path.with_suffix("")  # .pt.trace.json
        self.profiler.export_chrome_trace(str(plain))
        with open(plain, "rb") as source, gzip.open(self.path, "wb") as target:
            shutil.copyfileobj(source, target)
        plain.unlink()

    def files(self) -> list[Path]:
        return [self.path] if self.path.exists() else []
