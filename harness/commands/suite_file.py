"""`bench suite`: several scenario-on-backend runs as one command, then one report.

A suite file lists entries (a scenario, a backend, dotted overrides, a profile); every
entry is resolved and planned before any of them runs, so a mistake in the last entry
is refused in seconds, not after the first entry's hour. An entry marked `optional`
whose backend is not installed here is skipped, and the output says so with the
backend's own reason; any other unavailable backend is refused (exit 2). Then each
entry runs as `bench run` would, records land in one results directory, and one report
is written from that directory.

    name: accelerator-suite
    report: reports/accelerator-suite.html    # its extension is the format
    runs:
      - {scenario: ../gemma270m.yaml, backend: gpu-fsdp, profile: none, set: {parallel.devices: 1}}
      - {scenario: ../padding.yaml, backend: jax-tunix, optional: true}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError

from harness.basics.errors import BackendUnavailable, SpecError
from harness.records.result import RunRecord
from harness.run import registry
from harness.run.runner import RunRequest, SweepResult, run_sweep
from harness.scenario.loader import first_error, read_document
from harness.scenario.spec import Section


class SuiteEntry(Section):
    # The scenario file, relative to the suite file (so the suite runs from any folder).
    scenario: str = Field(min_length=1)
    # Always named: a suite compares backends, so "whichever is best here" has no place.
    backend: str = Field(min_length=1)
    # Dotted overrides, as `bench run --set KEY=VALUE`.
    set: dict[str, Any] = Field(default_factory=dict)
    # auto: the profile named after the device kind (cpu, cuda, tpu); none: as written.
    profile: str = "auto"
    # Skipped (saying why) where the backend is not installed, instead of refused.
    optional: bool = False
    label: str | None = None


class Suite(Section):
    # It names the default results directory (results/<name>): one word.
    name: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    description: str = ""
    runs: tuple[SuiteEntry, ...] = Field(min_length=1, max_length=200)
    # Where the one report goes; its extension (.html, .md, .csv) is its format.
    report: str = "reports/suite.html"


@dataclass
class EntryOutcome:
    index: int
    entry: SuiteEntry
    scenario_path: str
    skipped_reason: str | None = None  # an optional entry whose backend is not installed
    # A dry run's entry whose backend is not installed here: previewed (planned on this
    # host's CPU) instead of refused, so a TPU VM's suite can be read before the VM.
    not_installed: str | None = None
    result: SweepResult | None = None

    @property
    def label(self) -> str:
        return self.entry.label or f"{Path(self.entry.scenario).stem} on {self.entry.backend}"


@dataclass
class SuiteResult:
    suite: Suite
    outcomes: list[EntryOutcome] = field(default_factory=list)
    report_path: Path | None = None

    @property
    def failed(self) -> list[RunRecord | dict[str, Any]]:
        """Failed records (RunRecords), and this host's failed parts of multi-host jobs."""
        return [r for o in self.outcomes if o.result for r in o.result.failed]


def load_suite(path: str) -> Suite:
    from harness.basics.suggest import keys_of

    try:
        return Suite.model_validate(read_document(path))
    except ValidationError as exc:
        raise first_error(exc, path, keys_of(Suite)) from None


def _request(
    suite_path: str, index: int, entry: SuiteEntry, options: dict[str, Any], dry_run: bool, probed
) -> RunRequest:
    scenario = Path(suite_path).parent / entry.scenario
    return RunRequest(
        scenario_path=str(scenario),
        backend=entry.backend,
        overrides=dict(entry.set),
        profile=entry.profile,
        dry_run=dry_run,
        probed=probed,
        **options,
    )


def run_suite(suite_path: str, progress, options: dict[str, Any], dry_run: bool = False) -> SuiteResult:
    """Resolve and plan every entry (probing each backend once), then, unless a dry run,
    run them in order. `options`: RunRequest's shared fields (results_dir,
    interpreters, force, timeout_s, prices_file, command)."""
    suite = load_suite(suite_path)
    if options.get("results_dir") is None:
        options = {**options, "results_dir": Path("results") / suite.name}
    check_entries(suite, suite_path)
    available = _probe(suite, options.get("interpreters", {}))
    result = SuiteResult(suite)
    for i, entry in enumerate(suite.runs):
        outcome = EntryOutcome(i, entry, str(Path(suite_path).parent / entry.scenario))
        probed = available[entry.backend]
        probe = probed.probe
        if not probe.available:
            reason = f"{entry.backend} is not available here: {probe.reason}"
            if entry.optional:
                outcome.skipped_reason = reason
            elif dry_run:
                outcome.not_installed = reason
            else:
                raise SpecError(
                    suite_path,
                    f"runs.{i}.backend",
                    f"{reason} (mark the entry optional: true to skip it where not installed)",
                )
            probed = preview_probe(probed) if dry_run else None
        if probed is not None:
            # The dry run of every entry before any work: scenario, overrides, options, plan.
            outcome.result = run_sweep(_request(suite_path, i, entry, options, True, probed), progress)
        result.outcomes.append(outcome)
    if dry_run:
        return result
    for outcome in result.outcomes:
        if outcome.skipped_reason is None:
            outcome.result = run_sweep(
                _request(suite_path, outcome.index, outcome.entry, options, False, available[outcome.entry.backend]),
                progress,
            )
    result.report_path = _write_report(suite, options["results_dir"])
    return result


def check_entries(suite: Suite, suite_path: str) -> None:
    """What needs no backend: the report's format, each entry's backend name and scenario
    file (a SpecError naming the suite's field)."""
    from reports.render import output_format

    try:
        output_format(suite.report, None)  # a report it could not write is refused now, not at the end
    except SpecError as exc:
        raise SpecError(suite_path, "report", str(exc)) from None
    for i, entry in enumerate(suite.runs):
        try:
            registry.get(entry.backend)
        except BackendUnavailable as exc:
            raise SpecError(suite_path, f"runs.{i}.backend", str(exc)) from None
        if not (Path(suite_path).parent / entry.scenario).is_file():
            raise SpecError(
                suite_path,
                f"runs.{i}.scenario",
                f"no such scenario file: "
                f"{Path(suite_path).parent / entry.scenario} (paths are relative to the suite file)",
            )


def validate_suite(suite_path: str) -> tuple[Suite, int]:
    """`bench validate` of a suite file: the suite's fields, then each entry's scenario
    with its overrides (and its named profile) as `bench run` would resolve it; no
    backend is probed. Returns the suite and its number of runs."""
    from harness.scenario.loader import resolve_runs

    suite = load_suite(suite_path)
    check_entries(suite, suite_path)
    runs = 0
    for i, entry in enumerate(suite.runs):
        scenario = str(Path(suite_path).parent / entry.scenario)
        named = entry.profile if entry.profile not in ("auto", "none") else None
        try:
            resolved = resolve_runs(scenario, dict(entry.set), named)
            for run in resolved:
                registry.validate_backend_options(run.scenario, scenario)
        except SpecError as exc:
            raise SpecError(suite_path, f"runs.{i}", str(exc)) from None
        runs += len(resolved)
    return suite, runs


def preview_probe(probed):
    """A stand-in for a backend that is not installed here, for a dry run's preview: one
    device of this host's CPU, so the entry's scenario, overrides and plan are checked
    and shown; the real devices come from the backend's probe where it is installed."""
    from harness.run.backend import Probe
    from harness.run.registry import ProbeResult

    stand_in = Probe(True, "preview", device_kind="cpu", device_name="this host (preview)", device_count=1)
    return ProbeResult(probed.name, probed.python, stand_in)


def _probe(suite: Suite, interpreters: dict[str, str]) -> dict[str, Any]:
    names = list(dict.fromkeys(entry.backend for entry in suite.runs))
    probes = registry.probe_all(names, interpreters)
    return {p.name: p for p in probes}


def _write_report(suite: Suite, results_dir: Path) -> Path | None:
    """One report of every record in the suite's results directory (resumed runs'
    earlier records included: they are the suite's too)."""
    from harness.records.store import is_results_dir, load_records
    from reports.model import build
    from reports.render import output_format, write

    records = load_records([results_dir]).records if is_results_dir(results_dir) else []
    if not records:
        return None
    path, fmt = output_format(suite.report, None)
    return write(build(records), path, fmt)
