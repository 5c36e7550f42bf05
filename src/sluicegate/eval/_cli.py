"""``sluicegate eval``: argument parsing, then :func:`~sluicegate.eval._run.evaluate`."""

from __future__ import annotations

import argparse
import functools
import sys
import traceback
import warnings
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import trio

from ._config import DISPLAYS, ErrorBudget, EvalConfig, UsageError
from ._run import evaluate
from ._target import canonical_target, resolve_target

__all__ = ["config_from_args", "handle", "register"]

_DESCRIPTION = """\
Run the next N tasks of an environment (a static set, a live feed or an
adaptive SampleSource), write every rollout to DIR/results.jsonl as it
finishes and a summary to DIR/run.json. The first SIGINT/SIGTERM drains
(in-flight rollouts finish), a second cancels.

exit status: 0 passed, 1 the --fail-on-error threshold was crossed (or the
environment failed), 2 usage error, 130 interrupted.
"""


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


def register(commands: Any) -> None:
    """Add the ``eval`` subcommand to the top-level parser's subcommands."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "eval",
        help="run a bounded evaluation of an environment",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "target",
        metavar="TARGET",
        help="path/to/file.py:NAME or package.module:NAME: an object (or zero-argument "
        "factory) with `taskset` and async `run(task)`, optionally `score` and `serving`",
    )
    parser.add_argument(
        "-n",
        "--num-tasks",
        type=_count(0),
        metavar="N",
        help="tasks to run (required for streaming and infinite tasksets: the next N)",
    )
    parser.add_argument(
        "-r", "--rollouts", type=_count(1), default=1, metavar="R", help="rollouts per task"
    )
    parser.add_argument(
        "-c",
        "--concurrency",
        type=_count(1),
        default=32,
        metavar="C",
        help="rollouts in flight at most (default 32)",
    )
    parser.add_argument(
        "--shuffle", type=int, metavar="SEED", help="shuffle a static set with this seed"
    )
    parser.add_argument(
        "--system-prompt", metavar="FILE", help="apply this file's text to every task"
    )
    parser.add_argument(
        "--retries",
        type=_count(0),
        default=0,
        metavar="K",
        help="retry a failing rollout whole up to K times, with backoff",
    )
    parser.add_argument(
        "--fail-on-error",
        default="0",
        metavar="X",
        help="when errors fail the run: a count N stops it at the Nth error (0, the "
        "default, and 1 both stop at the first), a fraction in (0,1) fails it when "
        "errors exceed that share of the rollouts",
    )
    parser.add_argument(
        "--id",
        action="append",
        dest="ids",
        default=[],
        metavar="ID",
        help="run only this task id (repeatable)",
    )
    parser.add_argument(
        "-o", "--output", metavar="DIR", help="output directory (default runs/<UTC time>-<name>)"
    )
    parser.add_argument(
        "--resume",
        metavar="DIR",
        help="continue the run in DIR: skip rollouts already ok, re-run the rest",
    )
    parser.add_argument(
        "--display",
        choices=DISPLAYS,
        help="progress display (default: rich on a terminal, plain otherwise)",
    )
    parser.set_defaults(handler=handle)


def _default_output(name: str) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    base = Path("runs") / f"{stamp}-{name}"
    candidate, suffix = base, 1
    while candidate.exists():
        suffix += 1
        candidate = base.with_name(f"{base.name}-{suffix}")
    return candidate


def config_from_args(args: argparse.Namespace, name: str) -> EvalConfig:
    """Build the run's config from parsed arguments.

    Args:
        args: What the ``eval`` parser returned.
        name: The environment's name, for the default output directory.

    Raises:
        UsageError: for a bad ``--fail-on-error``, an unreadable
            ``--system-prompt`` file, or ``-o`` and ``--resume`` naming
            different directories.
    """
    ErrorBudget.parse(args.fail_on_error)
    prompt = None
    if args.system_prompt is not None:
        try:
            prompt = Path(args.system_prompt).read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(
                f"--system-prompt: cannot read {args.system_prompt!r}: {exc}"
            ) from None
    if args.resume is not None:
        if args.output is not None and Path(args.output) != Path(args.resume):
            raise UsageError("-o and --resume name different directories; --resume is enough")
        output = Path(args.resume)
    elif args.output is not None:
        output = Path(args.output)
    else:
        output = _default_output(name)
    display = args.display
    if display is None:
        display = "rich" if sys.stdout.isatty() else "plain"
    return EvalConfig(
        target=canonical_target(args.target),
        num_tasks=args.num_tasks,
        rollouts=args.rollouts,
        concurrency=args.concurrency,
        shuffle=args.shuffle,
        system_prompt_file=args.system_prompt,
        system_prompt=prompt,
        retries=args.retries,
        fail_on_error=args.fail_on_error,
        ids=tuple(args.ids),
        output=str(output),
        display=display,
        resume=args.resume is not None,
    )


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    # A user reading a terminal wants the message, not the line of sluicegate
    # that issued it.
    print(f"sluicegate eval: warning: {message}", file=sys.stderr)


def handle(args: argparse.Namespace) -> int:
    """Run ``sluicegate eval`` for parsed ``args``; returns the exit status."""
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning
            env = resolve_target(args.target)
            config = config_from_args(args, env.name)
            outcome = trio.run(functools.partial(evaluate, config, env, signals=True))
    except UsageError as exc:
        print(f"sluicegate eval: error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        # The environment failed before its first rollout (a load() raising,
        # say): its traceback is what the user needs to see.
        traceback.print_exc()
        print(f"sluicegate eval: failed: {exc!r}", file=sys.stderr)
        return 1
    if outcome.record.error and outcome.record.stop_reason == "failed":
        print(f"sluicegate eval: failed: {outcome.record.error}", file=sys.stderr)
    return outcome.exit_status
