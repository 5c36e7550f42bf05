"""How long ``sluicegate report`` takes, against how long ``sluicegate eval`` took to write the run.

    python bench/report.py [--quick] [--rollouts N] [--repeats N]

One run directory of 100,000 rollouts (``--quick``: 10,000), 10 per task,
written by ``sluicegate eval --trace`` from a no-op environment: the same
``results.jsonl``, ``run.json`` and trace that the report then reads. The
time eval takes to write them is the yardstick, measured in the same run, so
that a loaded machine moves both alike. Then each way of writing the report,
in turn, repeat by repeat, each in a process of its own as a user runs it:

* ``sluicegate report``, the command;
* ``write_report()`` from Python, which leaves the garbage collector on (the
  command turns it off: the objects of a report hold no cycles, and
  collecting them again and again is work thrown away);
* ``sluicegate report A B``, the comparison of the run with a copy of itself
  whose scores all changed (every task a change).

Each row gives the median wall-clock and CPU time and the wall-clock time
as a share of eval's. The target (docs/performance.md): the report of
100,000 rollouts in at most 5 s.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import sluicegate

TARGET_S = 5.0
PER_TASK = 10

ENVIRONMENT = """
from sluicegate import Task, Taskset


class Env:
    def __init__(self, tasks):
        self.taskset = Taskset.from_iterable(
            Task(input={"question": f"what is {n} * 7?"}, target=str(n * 7), id=f"task-{n}")
            for n in range(tasks)
        )

    async def run(self, task):
        return {"answer": task.target}

    def score(self, task, result):
        return (int(task.id[5:]) % 100) / 100
"""


def timed(argv: list[str]) -> tuple[float, float]:
    """Run ``argv``; its wall-clock and CPU (user + system) seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def write_run(scratch: Path, rollouts: int) -> tuple[Path, tuple[float, float]]:
    (scratch / "env.py").write_text(ENVIRONMENT, encoding="utf-8")
    run = scratch / "run"
    tasks = rollouts // PER_TASK
    argv = [
        *(sys.executable, "-m", "sluicegate", "eval", f"{scratch / 'env.py'}:Env"),
        *("-T", f"tasks={tasks}", "-r", str(PER_TASK), "-c", "64", "--trace"),
        *("-o", str(run), "--display", "none"),
    ]
    return run, timed(argv)


def changed_copy(run: Path, scratch: Path) -> Path:
    """The run again with every score moved: a comparison where every task changed."""
    other = scratch / "changed"
    other.mkdir()
    shutil.copy(run / "run.json", other / "run.json")
    with (
        (run / "results.jsonl").open(encoding="utf-8") as source,
        (other / "results.jsonl").open("w", encoding="utf-8") as target,
    ):
        for line in source:
            row = json.loads(line)
            row["score"] = 1 - row["score"]
            target.write(json.dumps(row) + "\n")
    return other


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10,000 rollouts, for a smoke test")
    parser.add_argument("--rollouts", type=int, default=None, help="rollouts in the run")
    parser.add_argument("--repeats", type=int, default=3, help="repeats of each report (>= 1)")
    args = parser.parse_args()
    rollouts = args.rollouts or (10_000 if args.quick else 100_000)
    repeats = max(1, args.repeats)
    load = os.getloadavg()
    print(
        f"sluicegate {sluicegate.__version__} report bench: "
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, "
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs, load {load[0]:.2f}"
        f"{', QUICK (too small for the target to mean much)' if args.quick else ''}"
    )
    with tempfile.TemporaryDirectory() as name:
        scratch = Path(name)
        run, (eval_wall, eval_cpu) = write_run(scratch, rollouts)
        other = changed_copy(run, scratch)
        size = (run / "results.jsonl").stat().st_size / 1e6
        print(
            f"{rollouts:,} rollouts ({rollouts // PER_TASK:,} tasks x {PER_TASK}), "
            f"results.jsonl {size:.0f} MB, with a trace; median of {repeats}"
        )
        page = scratch / "page.html"
        cases = {
            "sluicegate report": [
                *(sys.executable, "-m", "sluicegate", "report", str(run), "-o", str(page)),
            ],
            "write_report() (collector on)": [
                sys.executable,
                "-c",
                "import sys; from sluicegate.report import write_report; "
                "write_report(sys.argv[1], sys.argv[2])",
                str(run),
                str(page),
            ],
            "sluicegate report A B (all changed)": [
                *(sys.executable, "-m", "sluicegate", "report", str(run), str(other)),
                *("-o", str(scratch / "compare.html")),
            ],
        }
        times: dict[str, list[tuple[float, float]]] = {case: [] for case in cases}
        for _ in range(repeats):
            for case, argv in cases.items():
                times[case].append(timed(argv))
        written = page.stat().st_size / 1e6
    print(f"  {'case':<38} {'wall s':>7} {'cpu s':>7} {'of eval':>8}")
    print(f"  {'sluicegate eval --trace (the yardstick)':<38} {eval_wall:7.2f} {eval_cpu:7.2f}")
    for case, seen in times.items():
        wall = statistics.median(wall for wall, _ in seen)
        cpu = statistics.median(cpu for _, cpu in seen)
        print(f"  {case:<38} {wall:7.2f} {cpu:7.2f} {wall / eval_wall:7.0%}")
    report = statistics.median(wall for wall, _ in times["sluicegate report"])
    print(f"report.html {written:.0f} MB", end="")
    if rollouts >= 100_000:
        verdict = "met" if report <= TARGET_S else "MISSED"
        print(f"; target <= {TARGET_S:.0f} s at 100,000 rollouts: {verdict}", end="")
    print()


if __name__ == "__main__":
    main()
