"""torch_xla.debug.profiler capture for `harness.run.trace` (backend xla-fsdpv2).

`xp.start_trace(dir)` .. `xp.stop_trace()` (a TSL profiler session in this process;
no profiler server needed) writes `<dir>/plugins/profile/<run>/<host>.xplane.pb`, which
TensorBoard's profile plugin (XProf) and `jax.profiler.ProfileData` read, and a Chrome
`.trace.json.gz` beside it. Each step is a bare TraceMe `bench.step.N`: `xp.Trace` would
also push an IR scope, and torch_xla refuses to sync (`Expecting scope to be empty`)
inside one, while the step's span must hold its sync.
"""

from __future__ import annotations

from pathlib import Path

import torch_xla
import torch_xla.debug.profiler as xp
import torch_xla.runtime as xr

from harness.run.trace import XSpaceCapture


class XlaCapture(XSpaceCapture):
    tool = f"torch_xla.debug.profiler {torch_xla.__version__}"
    # torch_xla's graph compile (one per CompileTime sample, what the backend counts);
    # the PjRt client's compile sits inside it.
    compile_events = ("XLAGraphExecutor::Compile",)

    def __init__(self, directory: Path) -> None:
        super().__init__(directory, on_cpu=xr.device_type() == "CPU")

    def start(self) -> None:
        xp.start_trace(str(self.directory))

    def open_span(self, name: str):
        return torch_xla._XLAC.profiler.TraceMe(name)

    def stop(self) -> None:
        xp.stop_trace()
