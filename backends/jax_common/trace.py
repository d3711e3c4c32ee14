"""jax.profiler capture for `harness.trace` (backends jax-tunix and torchax).

`jax.profiler.start_trace(dir)` .. `stop_trace()` writes an XSpace,
`<dir>/plugins/profile/<run>/<host>.xplane.pb`, the layout TensorBoard's profile plugin
(XProf) reads as one run; `jax.profiler.ProfileData.from_file` reads it too. Each step
is a `TraceAnnotation` `bench.step.N` (a TraceMe on the host's python line).
"""

from __future__ import annotations

from pathlib import Path

import jax

from harness.trace import XLA_CPU_THUNKS, XLA_DEVICE_MODULES, span_name


class JaxCapture:
    tool = f"jax.profiler {jax.__version__}"
    # JAX's own event around each backend compile (jax._src.interpreters.pxla), the
    # same on every platform; the PjRt client's compile sits inside it.
    compile_events = ("backend_compile_and_load",)

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.span = None
        # The executed XLA programs (harness.trace): the CPU PJRT runtime's thunk events,
        # or a device plane's "XLA Modules".
        self.programs = XLA_CPU_THUNKS if jax.devices()[0].platform == "cpu" else XLA_DEVICE_MODULES

    def start(self) -> None:
        jax.profiler.start_trace(str(self.directory))

    def step_begin(self, index: int) -> None:
        self.span = jax.profiler.TraceAnnotation(span_name(index))
        self.span.__enter__()

    def step_end(self) -> None:
        self.span.__exit__(None, None, None)
        self.span = None

    def stop(self) -> None:
        jax.profiler.stop_trace()

    def files(self) -> list[Path]:
        return sorted(self.directory.glob("plugins/profile/*/*.xplane.pb"))
