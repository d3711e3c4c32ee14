"""torch_xla.debug.profiler capture for `harness.trace` (backend xla-fsdpv2).

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

from harness.trace import XLA_CPU_THUNKS, XLA_DEVICE_MODULES, span_name


class XlaCapture:
    tool = f"torch_xla.debug.profiler {torch_xla.__version__}"
    # torch_xla's graph compile (one per CompileTime sample, what the backend counts);
    # the PjRt client's compile sits inside it.
    compile_events = ("XLAGraphExecutor::Compile",)

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.span = None
        # The executed XLA programs (harness.trace): the CPU PJRT runtime's thunk events,
        # or a device plane's "XLA Modules".
        self.programs = XLA_CPU_THUNKS if xr.device_type() == "CPU" else XLA_DEVICE_MODULES

    def start(self) -> None:
        xp.start_trace(str(self.directory))

    def step_begin(self, index: int) -> None:
        self.span = torch_xla._XLAC.profiler.TraceMe(span_name(index))
        self.span.__enter__()

    def step_end(self) -> None:
        self.span.__exit__(None, None, None)
        self.span = None

    def stop(self) -> None:
        xp.stop_trace()

    def files(self) -> list[Path]:
        return sorted(self.directory.glob("plugins/profile/*/*.xplane.pb"))
