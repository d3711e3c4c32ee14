"""What `bench plan` / `--dry-run` print above each run's execution plan: the choices
the plan itself does not show, so two runs that differ in any of them never print the
same text: the backend, the profile applied (and what it changed), the tasks (serve
included), the sequence's padding, the attention kernel, the backend's options."""

from __future__ import annotations

import json
from typing import Any


def run_lines(run, backend: str | None) -> list[tuple[str, str]]:
    """(field, value) lines of one resolved run (harness.scenario.loader.ResolvedRun)."""
    from harness.scenario.spec import tasks_of

    scenario = run.scenario
    lines = [("backend", backend)] if backend else []
    lines += [("profile", profile_text(run.profile)), ("tasks", ", ".join(tasks_of(scenario)))]
    if "train" in tasks_of(scenario):
        lines += [
            ("sequence", sequence_text(scenario.sequence)),
            ("attention", scenario.model.attention),
            ("backend options", options_text(scenario.backend_options.get(backend or "", {}))),
        ]
    if "serve" in tasks_of(scenario):
        lines.append(("serve", serve_text(scenario.serve)))
    return lines


def profile_text(profile: dict[str, Any] | None) -> str:
    if not profile:
        return "none: the file as written"
    changes = ", ".join(f"{k}={_value(v)}" for k, v in profile["overrides"].items())
    return f"{profile['name']} applied (reduced: {changes})" if changes else f"{profile['name']} applied"


def sequence_text(sequence) -> str:
    buckets = f" (buckets {', '.join(map(str, sequence.buckets))})" if sequence.padding == "bucketed" else ""
    return f"max_length {sequence.max_length}, padding {sequence.padding}{buckets}"


def options_text(options: dict[str, Any]) -> str:
    return ", ".join(f"{k}: {_value(v)}" for k, v in options.items()) or "none (the backend's defaults)"


def serve_text(serve) -> str:
    load = serve.load
    if load.concurrency is not None:
        how = f"closed loop, {load.concurrency} in flight"
    elif load.request_rate is not None:
        how = f"open loop, {load.request_rate:g} requests/s"
    elif load.ramp is not None:
        how = f"open loop, a ramp {load.ramp.start_rate:g} -> {load.ramp.end_rate:g} requests/s"
    else:
        how = "closed loop, 1 in flight"
    extra = ", a sweep" if serve.sweep else (", an SLO search" if serve.slo_search else "")
    return (
        f"engine {serve.engine}, {serve.num_requests} requests (+{serve.warmup_requests} warm-up), "
        f"{serve.output_tokens} output tokens each, {how}{extra}"
    )


def _value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)
