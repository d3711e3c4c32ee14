#!/usr/bin/env bash
# Mutation check of the formula modules (harness/figures/metrics.py, harness/figures/cost.py,
# harness/gate/gate.py, reports/stats.py, reports/compare.py, reports/factors.py, and the
# projection's: harness/projection/projection.py, harness/projection/fine_tune.py, harness/projection/tpu_plan.py,
# harness/figures/accelerators.py): mutmut
# (pinned in pyproject's `mutation` extra, configured in [tool.mutmut]) changes one thing
# at a time in them and runs their fast tests; a mutant no test fails is a survivor.
# Run from the repository root:
#
#   bash benchmarks/mutation/mutation.sh                  # fresh run, 2 workers, then the score
#   MUTATION_CHILDREN=1 bash benchmarks/mutation/mutation.sh
#   KEEP=1 bash benchmarks/mutation/mutation.sh           # reuse mutants/: only what changed is rerun
#   MUTATION_SET=tpu_vs_gpu bash benchmarks/mutation/mutation.sh   # another set of modules
#
# MUTATION_SET=NAME runs the [tool.mutmut] of benchmarks/mutation/sets/NAME.toml instead of
# pyproject's, in a copy of the checkout (.mutation-NAME/, the working tree as it is:
# uncommitted tests count), with the same virtual environment.
#
# The score is killed / (all mutants - those argued equivalent in
# benchmarks/mutation/mutation_equivalent.txt); the survivors are listed, and the exit status is 1
# below MUTATION_MIN_SCORE (default 0.90). 22 min (fresh, final tests) to 54 min (many survivors) on 2 shared cores; not in CI's default run.
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV="${MUTATION_VENV:-.venv-mutation}"
[[ "$VENV" = /* ]] || VENV="$PWD/$VENV"  # absolute: the set's copy runs elsewhere
if [ ! -x "$VENV/bin/mutmut" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  # Core dependencies and the test runner only: the formula tests need no ML framework.
  "$VENV/bin/python" -m pip install -q -e '.[mutation]'
fi
if [ -n "${MUTATION_SET:-}" ]; then
  set_file="benchmarks/mutation/sets/$MUTATION_SET.toml"
  [ -f "$set_file" ] || { echo "MUTATION_SET: no $set_file" >&2; exit 2; }
  work=".mutation-$MUTATION_SET"
  mkdir -p "$work"
  git ls-files -co --exclude-standard | tar -cf - -T - | tar -xf - -C "$work"
  "$VENV/bin/python" benchmarks/mutation/mutation_set.py "$set_file" "$work/pyproject.toml"
  cd "$work"
fi
[ "${KEEP:-0}" = 1 ] || rm -rf mutants
start=$(date +%s)
"$VENV/bin/mutmut" run --max-children "${MUTATION_CHILDREN:-2}" > mutants-run.log 2>&1 || true
echo "mutmut run: $(( $(date +%s) - start )) s (log: mutants-run.log)"
"$VENV/bin/python" benchmarks/mutation/mutation_score.py --mutmut "$VENV/bin/mutmut" --min-score "${MUTATION_MIN_SCORE:-0.90}"
