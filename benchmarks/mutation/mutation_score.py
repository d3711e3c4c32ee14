"""The mutation score of the last `mutmut run` (benchmarks/mutation/mutation.sh): killed over all
mutants less those argued equivalent in benchmarks/mutation/mutation_equivalent.txt, with every
other survivor listed. Exit status 1 below --min-score, or when an equivalent entry names
a mutant that is now killed or gone (the list is kept exact)."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EQUIVALENT = ROOT / "benchmarks" / "mutation" / "mutation_equivalent.txt"
KILLED = {"killed", "timeout", "caught by type check", "segfault"}  # a test or the runtime caught it


def statuses(mutmut: str) -> dict[str, str]:
    """mutant id -> mutmut's verdict, from `mutmut results --all true`."""
    out = subprocess.run([mutmut, "results", "--all", "true"], cwd=ROOT, capture_output=True, text=True, check=True)
    found = {}
    for line in out.stdout.splitlines():
        name, sep, status = line.strip().partition(": ")
        if sep and "__mutmut_" in name:
            found[name] = status.strip()
    return found


def equivalent() -> dict[str, str]:
    """mutant id -> why it cannot change any result (one per line: `ID  # reason`)."""
    entries = {}
    for line in EQUIVALENT.read_text().splitlines():
        mutant, _, why = line.partition("#")
        if mutant.strip():
            entries[mutant.strip()] = why.strip()
    return entries


def module_of(mutant: str) -> str:
    """`harness.gate.gate.x_check__mutmut_3` -> `harness.gate.gate`."""
    return re.split(r"\.x[_ǁ]", mutant, maxsplit=1)[0]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--min-score", type=float, default=0.90)
    parser.add_argument("--mutmut", default=str(Path(sys.executable).parent / "mutmut"))
    args = parser.parse_args()
    found = statuses(args.mutmut)
    # Only the entries of the modules this run mutated (a set, MUTATION_SET, runs some).
    mutated = {module_of(m) for m in found}
    argued = {m: why for m, why in equivalent().items() if module_of(m) in mutated}
    stale = [m for m in argued if found.get(m) not in (None, "survived", "no tests") or m not in found]
    alive = {m: s for m, s in found.items() if s not in KILLED and m not in argued}
    counted = len(found) - len(argued) + len(stale)
    killed = sum(s in KILLED for s in found.values())
    score = killed / counted if counted else 0.0
    print(f"mutants: {len(found)} ({dict(Counter(found.values()))})")
    print(f"argued equivalent: {len(argued) - len(stale)}; score: {killed} killed of {counted} = {score:.1%}")
    for mutant, status in sorted(alive.items()):
        print(f"  {status}: {mutant}")
    for mutant in stale:
        print(f"  stale equivalent entry (now {found.get(mutant, 'gone')}): {mutant}")
    return 0 if score >= args.min_score and not stale else 1


if __name__ == "__main__":
    sys.exit(main())
