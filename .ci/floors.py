"""Hold the project to its floors; ``.ci/run`` and the nox sessions call this.

``python .ci/floors.py coverage``
    After ``coverage run -m pytest`` and ``coverage combine``: at least 95% of
    lines and 90% of branches, each on its own (coverage's ``fail_under``
    mixes the two into one figure). Lists the modules below either floor.

``python .ci/floors.py types``
    ``pyright --verifytypes sluicegate --ignoreexternal``: at least 95% of
    the exported symbols have a known type. Lists the exported symbols that
    are not. Types from other packages (Hypothesis's are incomplete in
    pyright's eyes) are not held against sluicegate.

Run from the repository root. Exits 1 when a figure is below its floor.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

LINES_FLOOR = 95.0
BRANCHES_FLOOR = 90.0
TYPED_FLOOR = 95.0


def percent(part: int, whole: int) -> float:
    return 100.0 * part / whole if whole else 100.0


def check_coverage() -> bool:
    import coverage

    measured = coverage.Coverage()
    measured.load()
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "coverage.json"
        measured.json_report(outfile=str(report))
        data = json.loads(report.read_text(encoding="utf-8"))
    below = []
    for path, entry in sorted(data["files"].items()):
        summary = entry["summary"]
        lines = percent(summary["covered_lines"], summary["num_statements"])
        branches = percent(summary["covered_branches"], summary["num_branches"])
        if lines < LINES_FLOOR or branches < BRANCHES_FLOOR:
            below.append(f"  {path}: {lines:.1f}% lines, {branches:.1f}% branches")
    if below:
        print("modules below a floor:", *below, sep="\n")
    totals = data["totals"]
    lines = percent(totals["covered_lines"], totals["num_statements"])
    branches = percent(totals["covered_branches"], totals["num_branches"])
    print(
        f"coverage: {lines:.2f}% of {totals['num_statements']} lines (floor {LINES_FLOOR:g}%), "
        f"{branches:.2f}% of {totals['num_branches']} branches (floor {BRANCHES_FLOOR:g}%)"
    )
    return lines >= LINES_FLOOR and branches >= BRANCHES_FLOOR


def check_types() -> bool:
    # pyright exits 1 for anything short of 100%; the floor is judged here.
    done = subprocess.run(
        ["pyright", "--verifytypes", "sluicegate", "--ignoreexternal", "--outputjson"],
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        completeness = json.loads(done.stdout)["typeCompleteness"]
    except (ValueError, KeyError):
        print(done.stdout, done.stderr, sep="\n")
        print("types: pyright gave no report")
        return False
    for symbol in completeness["symbols"]:
        if symbol["isExported"] and not symbol["isTypeKnown"]:
            kind = "ambiguous" if symbol["isTypeAmbiguous"] else "unknown"
            print(f"  {symbol['name']}: {kind}")
            for diagnostic in symbol["diagnostics"]:
                print(f"      {diagnostic['message']}")
    counts = completeness["exportedSymbolCounts"]
    exported = sum(counts.values())
    typed = percent(counts["withKnownType"], exported)
    print(
        f"types: {typed:.1f}% of {exported} exported symbols have a known type "
        f"(floor {TYPED_FLOOR:g}%): {counts['withAmbiguousType']} ambiguous, "
        f"{counts['withUnknownType']} unknown"
    )
    return typed >= TYPED_FLOOR


def main(argv: list[str]) -> int:
    checks = {"coverage": check_coverage, "types": check_types}
    if len(argv) != 1 or argv[0] not in checks:
        print(f"usage: python .ci/floors.py {{{'|'.join(checks)}}}", file=sys.stderr)
        return 2
    return 0 if checks[argv[0]]() else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
