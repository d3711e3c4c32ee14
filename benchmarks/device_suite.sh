#!/usr/bin/env bash
# The accelerator suite on a GPU host with no package index, as one prepared command
# (docs/measurements.md, "The accelerator suite on an H100"). Run from the repository root
# with the offline wheels in .whl/ (`python -m harness.offline download .whl
# --python-version 3.12` on a machine with internet):
#
#   OUT=/some/dir SUITE_BUDGET_S=400 RUN_TIMEOUT_S=110 bash benchmarks/device_suite.sh
#
# Every phase runs whatever the one before it did (no `set -e`): a backend that fails
# still leaves the others' records, and the report and the records' archive are always
# written. The whole suite is bounded (SUITE_BUDGET_S) and so is each run (RUN_TIMEOUT_S):
# a run cut short is a failed record saying so, the rest goes on.
set -uo pipefail
OUT="${OUT:-$PWD/device-out}"
RESULTS="${RESULTS:-/tmp/bench-results}"
SITE="${SITE:-/tmp/site}"
mkdir -p "$OUT" "$RESULTS"
export PYTHONUNBUFFERED=1
py=python3

phase() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }
{
  phase "machine"
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
  $py -c "import sys, torch, jax, transformers, peft; print(sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'jax', jax.__version__, jax.devices(), 'transformers', transformers.__version__, 'peft', peft.__version__)"

  phase "offline install (no index) and import check"
  $py -m harness.offline install .whl --target "$SITE"
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
  $py -m harness.offline check --target "$SITE"

  phase "backends"
  $py -m harness.cli backends

  phase "suite (budget ${SUITE_BUDGET_S:-400} s, ${RUN_TIMEOUT_S:-110} s a run)"
  timeout --signal=INT --kill-after=20 "${SUITE_BUDGET_S:-400}" \
    $py -m harness.cli suite scenarios/suites/accelerator.yaml --results-dir "$RESULTS" \
      --timeout "${RUN_TIMEOUT_S:-110}" --no-progress
  echo "suite exit: $?"

  phase "report and records"
  $py -m harness.cli report "$RESULTS" -o "$OUT/report.html"
  $py -m harness.cli report "$RESULTS" -o "$OUT/report.md"
  $py -m harness.cli show "$RESULTS" > "$OUT/show.txt" 2>&1
  tar czf "$OUT/records.tgz" -C "$RESULTS" .
  phase "done"
} 2>&1 | tee "$OUT/suite.log"
