"""jax.profiler capture for `harness.run.trace` (backends jax-tunix and torchax).

`jax.profiler.start_trace(dir)` .. `stop_trace()` writes an XSpace,
`<dir>/plugins/profile/<run>/<host>.xplane.pb`, the layout TensorBoard's profile plugin
(XProf) reads as one run; `jax.profiler.ProfileData.from_file` reads it too. Each step
is a `TraceAnnotation` `bench.step.N` (a TraceMe on the host's python line).
"""

from __future__ import annotations

from pathlib import Path

import jax

from harness.run.trace import XSpaceCapture


class JaxCapture(XSpaceCapture):
    tool = f"jax.profiler {jax.__version__}"
    # JAX's own event around each backend compile (jax._src.interpreters.pxla), the
    # same on every platform; the PjRt client's compile sits inside it.
    compile_events = ("backend_compile_and_load",)

    def __init__(self, directory: Path) -> None:
        super().__init__(directory, on_cpu=jax.devices()[0].platform == "cpu")

    def start(self) -> None:
        jax.profiler.start_trace(str(self.directory))

    def open_span(self, name: str):
        return jax.profiler.TraceAnnotation(name)

    def stop(self) -> None:
        jax.profiler.stop_trace()
