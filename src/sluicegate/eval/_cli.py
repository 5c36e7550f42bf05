"""``sluicegate eval``: parse the command line, then :func:`~sluicegate.eval.evaluate`."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._terminal import messages
from ._config import EVERY_SCORE, UsageError, parse_concurrency
from ._display import DISPLAYS
from ._format import read_run_record
from ._run import run_command

if TYPE_CHECKING:
    from ._compare import Comparison

__all__ = ["arguments", "handle", "register", "register_compare", "register_runs"]

_DESCRIPTION = """\
Run the next N tasks of an environment (a static set, a live feed or an
adaptive SampleSource), write every rollout to DIR/results.jsonl as it
finishes and a summary to DIR/run.json. The first SIGINT/SIGTERM drains
(in-flight rollouts finish), a second cancels. `sluicegate eval --resume DIR`
alone continues a run with the target and flags recorded in DIR/run.json.

exit status: 0 passed, 1 not passed (errors past --fail-on-error, a mean
below --min-score, nothing to evaluate, or the environment failed), 2 usage
error, 130 interrupted.
"""


def _concurrency(text: str) -> int | str:
    try:
        return parse_concurrency(text if text.strip().lower().startswith("auto") else int(text))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an integer >= 1, 'auto' or 'auto:MAX', got {text!r}"
        ) from None


def _count(minimum: int) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    return parse


def _seconds(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None


def _positive_seconds(text: str) -> float:
    value = _seconds(text)
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {text!r}")
    return value


def register(commands: Any) -> None:
    """Add the ``eval`` subcommand to the top-level parser's subcommands.

    Every flag defaults to None, so that a resume can tell the flags given
    from those to take from ``run.json``.
    """
    parser: argparse.ArgumentParser = commands.add_parser(
        "eval",
        help="run a bounded evaluation of an environment",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "target",
        metavar="TARGET",
        nargs="?",
        help="path/to/file.py:NAME or package.module:NAME: an object (or zero-argument "
        "factory) with `taskset` and async `run(task)`, optionally `score` and `serving`; "
        "with --resume, taken from run.json when left out",
    )
    add = parser.add_argument
    add(
        "-n",
        "--num-tasks",
        type=_count(1),
        metavar="N",
        help="tasks to run (required for streaming and infinite tasksets: the next N)",
    )
    add("-r", "--rollouts", type=_count(1), metavar="R", help="rollouts per task (default 1)")
    add(
        "-c",
        "--concurrency",
        type=_concurrency,
        metavar="C",
        help="rollouts in flight at most (default 32); 'auto' or 'auto:MAX' finds it "
        "from the upstream's overload errors (an adaptive window)",
    )
    add("--shuffle", type=int, metavar="SEED", help="shuffle a static set with this seed")
    add("--system-prompt", metavar="FILE", help="apply this file's text to every task")
    add(
        "--retries",
        type=_count(0),
        metavar="K",
        help="retry a failing rollout whole up to K times, with exponential backoff and jitter",
    )
    add(
        "--retry-on",
        action="append",
        metavar="NAME",
        help="retry only this exception: a builtin name (TimeoutError) or module:Name; "
        "repeatable (default: every Exception)",
    )
    add(
        "--timeout",
        type=_seconds,
        metavar="S",
        help="each attempt of a rollout runs at most S seconds (an expiry is a TimeoutError)",
    )
    add(
        "--fail-on-error",
        metavar="X",
        help="when errors fail the run: a count N stops it at the Nth error (0, the "
        "default, and 1 both stop at the first), a fraction in (0,1) fails it when "
        "errors exceed that share of the rollouts",
    )
    add(
        "--min-score",
        action="append",
        metavar="[NAME=]X",
        help="the run fails when a mean score is below X (every score), or the mean "
        "of NAME is below X; repeatable",
    )
    add(
        "--id", action="append", dest="ids", metavar="ID", help="run only this task id (repeatable)"
    )
    add(
        "--reduce",
        action="append",
        metavar="NAME",
        help="combine each task's rollouts with NAME (mean, max, min, median, mode, "
        "pass_at_K, at_least_K) into DIR/tasks.jsonl and run.json; repeatable",
    )
    add(
        "--pass-threshold",
        type=float,
        metavar="X",
        help="a rollout is correct for pass_at_K and at_least_K when its score is >= X "
        "(default 1.0)",
    )
    add(
        "-T",
        action="append",
        dest="task_args",
        metavar="KEY=VALUE",
        help="pass KEY=VALUE to the environment's factory as a keyword argument (VALUE "
        "read as JSON when it parses, else as text); repeatable, recorded for --resume",
    )
    add("-o", "--output", metavar="DIR", help="output directory (default runs/<UTC time>-<name>)")
    add(
        "--resume",
        metavar="DIR",
        help="continue the run in DIR: skip rollouts already ok, re-run the rest",
    )
    add(
        "--display",
        choices=DISPLAYS,
        help="progress display (default: rich on a terminal, plain otherwise)",
    )
    add(
        "--dask",
        metavar="ADDRESS",
        help="run each rollout on a Dask cluster: 'local' starts one on this machine for the "
        "run, else the scheduler's address (needs the dask extra; TARGET must not be a "
        "SampleSource)",
    )
    add(
        "--dask-timeout",
        type=_positive_seconds,
        metavar="S",
        help="with --dask ADDRESS: seconds to wait for the scheduler, when connecting and when "
        "reconnecting after losing it (default: Dask's distributed.comm.timeouts.connect, 30)",
    )
    add(
        "--loop",
        metavar="LOOP",
        help="the event loop the environment's code runs on: trio, or asyncio for an "
        "environment that calls asyncio-only clients (aiohttp, asyncpg, litellm...); default: "
        "the environment's `loop` attribute, else the run's own on --resume, else trio",
    )
    parser.add_argument(
        "--trace",
        action="store_true",
        help="record the run's timeline: DIR/trace.jsonl as it runs, DIR/trace.json at the end "
        "(see sluicegate plot, report and trace)",
    )
    parser.set_defaults(handler=handle)
    register_compare(commands)
    register_runs(commands)


def _min_score(texts: list[str]) -> dict[str, float]:
    floors = {}
    for text in texts:
        name, sep, number = text.rpartition("=")
        try:
            floors[name if sep else EVERY_SCORE] = float(number)
        except ValueError:
            raise UsageError(
                f"--min-score takes X or NAME=X with X a number, not {text!r}"
            ) from None
    return floors


def _task_args(texts: list[str]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    given: dict[str, str] = {}
    for text in texts:
        key, sep, value = text.partition("=")
        if not sep or not key:
            raise UsageError(f"-T takes KEY=VALUE, not {text!r}")
        if key in given:
            # The last would win silently: one of them is a slip.
            raise UsageError(
                f"-T {key} is given twice (-T {given[key]} and -T {text}): give it once"
            )
        given[key] = text
        try:
            found[key] = json.loads(value)
        except ValueError:
            found[key] = value
    return found


def _system_prompt(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--system-prompt: cannot read {path!r}: {exc}") from None


def arguments(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of :func:`~sluicegate.eval.evaluate` for parsed ``args``.

    With ``--resume``, every setting not given on the command line is the
    one recorded in ``run.json``; the ones given are passed on, and
    :func:`~sluicegate.eval.evaluate` refuses those that may not change.

    Raises:
        UsageError: for an unreadable ``--system-prompt`` file, a bad
            ``--min-score``, no ``TARGET`` without ``--resume``, or ``-o``
            and ``--resume`` naming different directories.
    """
    given: dict[str, Any] = {
        "num_tasks": args.num_tasks,
        "rollouts": args.rollouts,
        "concurrency": args.concurrency,
        "shuffle": args.shuffle,
        "system_prompt": None if args.system_prompt is None else _system_prompt(args.system_prompt),
        "ids": args.ids,
        "retries": args.retries,
        "retry_on": args.retry_on,
        "timeout": args.timeout,
        "fail_on_error": args.fail_on_error,
        "min_score": None if args.min_score is None else _min_score(args.min_score),
        "reduce": args.reduce,
        "pass_threshold": args.pass_threshold,
        "task_args": None if args.task_args is None else _task_args(args.task_args),
    }
    display = args.display or ("rich" if sys.stdout.isatty() else "plain")
    # For this session only: run.json records none of these but --trace, so a
    # resume may differ (a traced run stays traced).
    this_session: dict[str, Any] = {"display": display}
    if args.trace:
        this_session["trace"] = True
    if args.dask is not None:
        this_session["dask"] = args.dask
    if args.resume is None:
        if args.target is None:
            raise UsageError("TARGET is required (it may be left out only with --resume DIR)")
        settings = {key: value for key, value in given.items() if value is not None}
        return {"env": args.target, "output_dir": args.output, **this_session, **settings}
    if args.output is not None and Path(args.output) != Path(args.resume):
        raise UsageError("-o and --resume name different directories; --resume is enough")
    try:
        recorded = read_run_record(Path(args.resume)).config
    except UsageError:
        if args.target is None:
            raise
        # evaluate() says what is wrong: no run.json, or a taskset that
        # cannot be resumed at all.
        settings = {key: value for key, value in given.items() if value is not None}
    else:
        settings = {
            key: getattr(recorded, key) if value is None else value for key, value in given.items()
        }
        if recorded.trace:
            this_session["trace"] = True
    return {
        "env": args.target,
        "output_dir": args.resume,
        "resume": True,
        **this_session,
        **settings,
    }


@contextlib.contextmanager
def _dask_timeout(args: argparse.Namespace) -> Iterator[None]:
    """``--dask-timeout`` in force for the run: set where the connection is made."""
    if args.dask_timeout is None:
        yield
        return
    if args.dask is None or args.dask == "local":
        raise UsageError("--dask-timeout needs --dask ADDRESS: it is how long to wait for it")
    try:
        from ._dask import CONNECT_TIMEOUT
    except ImportError:
        raise UsageError("--dask needs Dask distributed: pip install 'sluicegate[dask]'") from None
    token = CONNECT_TIMEOUT.set(args.dask_timeout)
    try:
        yield
    finally:
        CONNECT_TIMEOUT.reset(token)


def handle(args: argparse.Namespace) -> int:
    """Run ``sluicegate eval`` for parsed ``args``; returns the exit status."""
    with messages("sluicegate eval"):
        try:
            settings = arguments(args)
            with _dask_timeout(args):
                report = run_command({**settings, "signals": True}, args.loop)
        except UsageError as exc:
            print(f"sluicegate eval: error: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print("sluicegate eval: interrupted", file=sys.stderr)
            return 130
        except BaseExceptionGroup as group:
            if group.subgroup(KeyboardInterrupt) is None:
                raise
            print("sluicegate eval: interrupted", file=sys.stderr)
            return 130
    if report.stop_reason == "failed":
        print(f"sluicegate eval: failed: {report.error}", file=sys.stderr)
    elif report.stop_reason == "completed" and not report.passed:
        for reason in report.reasons:
            print(f"sluicegate eval: not passed: {reason}", file=sys.stderr)
    return report.exit_status


_COMPARE = """\
Compare run B with run A (the baseline) over the tasks both ran: the
settings that differ between them; for each score (and each reduced score
both wrote to tasks.jsonl), both means with their 95% intervals, the paired
difference B - A with its own, and the verdict it gives; then each task whose
value changed, worst first. Tasks in only one run are counted apart.

exit status: 0; with --fail-on-regression X, 1 when some score's whole 95%
interval of B - A lies below -X, when some shared task errored on every
rollout in B but not in A, or when no score could be judged (fewer than two
shared tasks); 2 when a directory holds no run, or both name the same run.
"""


def register_compare(commands: Any) -> None:
    """Add the ``compare`` subcommand to the top-level parser's subcommands."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "compare",
        help="compare two evaluation runs, task by task",
        description=_COMPARE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("run_a", metavar="RUN_A", help="the baseline run's directory")
    parser.add_argument("run_b", metavar="RUN_B", help="the run compared with it")
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON")
    parser.add_argument(
        "--fail-on-regression",
        type=_margin_text,
        metavar="X",
        help="exit 1 when a score got worse by more than X (>= 0) at 95%% confidence",
    )
    parser.add_argument(
        "--changed",
        type=_count(0),
        default=20,
        metavar="N",
        help="list at most N changed tasks in the text output (default 20)",
    )
    parser.set_defaults(handler=handle_compare)


def _margin_text(text: str) -> float | str:
    # Checked with the comparison's own words (see handle_compare), not argparse's.
    try:
        return float(text)
    except ValueError:
        return text


def _gate(comparison: Comparison, margin: float) -> list[str]:
    """Why ``--fail-on-regression margin`` does not pass, one sentence each."""
    found = []
    for score in comparison.regressions(margin):
        assert score.difference is not None and score.difference.ci95 is not None
        high = score.difference.ci95[1]
        found.append(
            f"regression: {score.name} B - A is below -{margin:g} at 95% confidence "
            f"(interval ends at {high:+.4g})"
        )
    if comparison.errored_b:
        found.append(
            f"regression: {len(comparison.errored_b)} shared task(s) errored on every rollout "
            f"in B but not in A: {', '.join(comparison.errored_b[:5])}"
        )
    if not comparison.judged:
        # As eval refuses to pass having evaluated nothing.
        paired = max((s.difference.n for s in comparison.scores if s.difference), default=0)
        found.append(
            f"nothing compared: {paired} shared task(s) have a score in both runs, and a "
            f"paired interval needs 2 or more"
        )
    return found


def handle_compare(args: argparse.Namespace) -> int:
    """Run ``sluicegate compare`` for parsed ``args``; returns the exit status."""
    from ._compare import check_margin, compare_runs
    from ._display import comparison_text

    try:
        margin = None if args.fail_on_regression is None else check_margin(args.fail_on_regression)
        comparison = compare_runs(args.run_a, args.run_b)
    except (TypeError, ValueError) as exc:
        print(f"sluicegate compare: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(comparison.to_json(), indent=2, ensure_ascii=False, allow_nan=False))
    else:
        print(comparison_text(comparison, changed=args.changed), end="")
    if margin is None:
        return 0
    reasons = _gate(comparison, margin)
    for reason in reasons:
        print(f"sluicegate compare: {reason}", file=sys.stderr)
    return 1 if reasons else 0


_RUNS = """\
List the evaluation runs under DIR (default runs/, where sluicegate eval
writes them), newest first, one line each: the run, its status (passed,
failed, interrupted, killed, or running), tasks x rollouts, its scores with
their 95% intervals, how long its sessions ran, and the command that resumes
it when it can be resumed. DIR may also be one run's directory.
"""


def register_runs(commands: Any) -> None:
    """Add the ``runs`` subcommand to the top-level parser's subcommands."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "runs",
        help="list the evaluation runs under runs/ (or DIR), newest first",
        description=_RUNS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("directory", metavar="DIR", nargs="?", default="runs", help="default: runs")
    parser.add_argument("--json", action="store_true", help="print the runs as JSON")
    parser.set_defaults(handler=handle_runs)


def handle_runs(args: argparse.Namespace) -> int:
    """Run ``sluicegate runs`` for parsed ``args``; returns the exit status."""
    from ._runs import find_runs, line_text, runs_json

    root = Path(args.directory)
    if not root.is_dir():
        print(
            f"sluicegate runs: error: {root} is not a directory (sluicegate eval writes its "
            f"runs under runs/ unless -o says otherwise: give that DIR)",
            file=sys.stderr,
        )
        return 2
    try:
        lines = find_runs(root)
    except OSError as exc:
        print(f"sluicegate runs: error: cannot list {root}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(runs_json(lines), indent=2, ensure_ascii=False, allow_nan=False))
        return 0
    if not lines:
        print(f"no evaluation runs in {root}")
        return 0
    rows = [["run", "status", "size", "scores: mean [95% CI]", "ran for"]]
    rows.extend(line_text(line) for line in lines)
    width = [max(len(row[column]) for row in rows) for column in range(5)]
    for row in rows:
        cells = [cell.ljust(size) for cell, size in zip(row[:5], width, strict=True)]
        print("  ".join([*cells, *row[5:]]).rstrip())
    return 0
