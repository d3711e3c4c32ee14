#!/usr/bin/env bash
# The device suite on a GPU host with no package index, as one prepared command (#36;
# docs/measurements/device-suite.md, "#36 JAX side and device suite"). Its runs, their order and
# budgets are benchmarks/device_suite.py's; see them anywhere with:
#
#   bash benchmarks/device_suite.sh --dry-run
#
# On the device machine, from the repository root, with the offline wheels in .whl/
# (here: `python -m harness.run.offline download .whl --python-version 3.12`, and
# `echo /.whl/ >> .git/info/exclude` so the folder travels only when carried):
#
#   device tool: run, carry [".whl"], timeout_s 600, command:
#     OUT=$OUT bash benchmarks/device_suite.sh
#
# The wheel folder is checked first: without it the script stops, saying the carry to
# pass. Every phase after the install runs whatever the one before did (no `set -e`).
# Each run's record is in $OUT/records.tgz (rewritten after every run) and its line in
# $OUT/runs.tsv the moment it ends, so a command cut at its limit still returns them.
# Back here, its GPU training records join the GPU calibration as they are once unpacked
# into the package (harness/projection/calibration_points/measured_gpu/README.md):
#   tar -xzf FILES_AT/records.tgz -C harness/projection/calibration_points/measured_gpu
# DEVICE_SUITE_TINY=1 DEVICE_SUITE_ONLY=N: run entry N alone with a tiny model (a CPU check
# of the $OUT writing); DEADLINE_S: seconds for the runs (default 480).
set -uo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
if [ "${1:-}" = "--dry-run" ]; then
  exec $py benchmarks/device_suite.py --dry-run
fi
OUT="${OUT:-$PWD/device-out}"
SITE="${SITE:-/tmp/site}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1

WHEELS="${WHEELS:-.whl}"  # the carried wheel folder (a test points it elsewhere)
if [ "${DEVICE_SUITE_TINY:-}" != "1" ] && ! ls "$WHEELS"/bench-*.whl >/dev/null 2>&1; then
  echo "device_suite: no wheel folder $WHEELS/ with bench's wheel in $PWD: build it where pip works" \
       "(python -m harness.run.offline download .whl --python-version 3.12; echo /.whl/ >> .git/info/exclude)" \
       "and call the device tool's run with carry: [\".whl\"]" | tee "$OUT/suite.log" >&2
  exit 2
fi

phase() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }
{
  if [ "${DEVICE_SUITE_TINY:-}" != "1" ]; then
    phase "machine"
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
    phase "offline install (no index) and import check"
    $py -m harness.run.offline install "$WHEELS" --target "$SITE"
    export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
    $py -m harness.run.offline check --target "$SITE"
    $py -c "import sys, torch, jax; print(sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'jax', jax.__version__, jax.devices())"
  fi
  phase "runs"
  $py benchmarks/device_suite.py run
  phase "report"
  $py -m harness.cli report "${RESULTS:-/tmp/bench-results}" -o "$OUT/report.md"
  phase "done"
} 2>&1 | tee -a "$OUT/suite.log"
