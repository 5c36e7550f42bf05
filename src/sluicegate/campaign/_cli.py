"""``sluicegate ledger ...`` and ``sluicegate campaign ...``: parse, then call the subpackage."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._convert import CampaignFileError
from ._errors import CampaignError
from ._ledger import Ledger, LedgerError, amount_problem, format_money, limit_text, scope_name

if TYPE_CHECKING:
    from ._state import Report

__all__ = ["register"]


def _money(text: str) -> Decimal:
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise argparse.ArgumentTypeError(f"not a decimal amount: {text!r}") from None
    if not value.is_finite() or value < 0:
        raise argparse.ArgumentTypeError(f"must be a non-negative amount: {text!r}")
    # Refused here, before any side effect, rather than by the ledger's SQLite.
    problem = amount_problem(value)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return value


def _error(message: object) -> int:
    if isinstance(message, OSError) and message.filename is not None:
        # The path and the reason, without Python's "[Errno N]" prefix.
        message = f"cannot use {message.filename}: {message.strerror}"
    print(f"sluicegate: {message}", file=sys.stderr)
    return 2


# -- ledger ---------------------------------------------------------------------


def _ledger_init(args: argparse.Namespace) -> int:
    try:
        Ledger.create(args.path, args.limit)
    except (LedgerError, OSError) as exc:
        return _error(exc)
    print(f"created ledger {args.path} with global limit {limit_text(args.limit)}")
    return 0


def _ledger_show(args: argparse.Namespace) -> int:
    try:
        ledger = Ledger(args.path)
        usages = ledger.scopes()
        changes = ledger.limit_changes()
    except (LedgerError, OSError) as exc:
        return _error(exc)
    header = ("scope", "limit", "reserved", "settled", "uncertain", "remaining")
    rows = [header] + [
        (
            scope_name(u.scope),
            format_money(u.limit),
            format_money(u.reserved),
            format_money(u.settled),
            format_money(u.uncertain),
            format_money(u.remaining),
        )
        for u in usages
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for row in rows:
        pairs = zip(row[1:], widths[1:], strict=True)
        cells = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in pairs]
        print("  ".join(cells).rstrip())
    # Who raised the cap, and why, is part of what the ledger is for.
    for old, new, reason in changes:
        if old is None:
            print(f"limit set to {format_money(new)}: {reason}")
        else:
            print(f"limit raised {format_money(old)} -> {format_money(new)}: {reason}")
    return 0


def _ledger_raise(args: argparse.Namespace) -> int:
    try:
        Ledger(args.path).raise_limit(args.limit, args.reason)
    except (LedgerError, OSError) as exc:
        return _error(exc)
    print(f"raised the global limit of {args.path} to {limit_text(args.limit)}")
    return 0


def _register_ledger(commands: Any, help: str) -> None:
    parser: argparse.ArgumentParser = commands.add_parser("ledger", help=help)
    sub = parser.add_subparsers(dest="ledger_command", metavar="ACTION", required=True)

    init = sub.add_parser("init", help="create a ledger with a global limit")
    init.add_argument("path", help="the SQLite file to create (refused if it exists)")
    init.add_argument("--limit", type=_money, required=True, help="global limit, e.g. 200.00")
    init.set_defaults(handler=_ledger_init)

    show = sub.add_parser("show", help="print every scope's limit, holds and room")
    show.add_argument("path", help="the ledger file")
    show.set_defaults(handler=_ledger_show)

    up = sub.add_parser("raise", help="raise the global limit, recording why")
    up.add_argument("path", help="the ledger file")
    up.add_argument("--limit", type=_money, required=True, help="the new, higher limit")
    up.add_argument("--reason", required=True, help="why the limit is raised")
    up.set_defaults(handler=_ledger_raise)


# -- campaign -------------------------------------------------------------------

# `campaign run` and `reconcile` exit with it when a candidate is uncertain.
_RECONCILE_STATUS = 3
_EXIT_STATUSES = """\
exit status of `campaign run`:
  0    stopped cleanly: target reached, panel or budget exhausted, or drained
       (by `campaign drain` or a first SIGINT/SIGTERM)
  2    refused to start: invalid plan or amount, missing plan, ledger or job
       function, stale code, another controller version, locked directory
  3    reconciliation required: a job's outcome is unknown (`campaign reconcile`)
  130  stopped by a second SIGINT/SIGTERM: running jobs were terminated
the other actions exit 0 on success and 2 when refused; `reconcile` exits 3
when an imported result leaves the candidate uncertain.
"""

_RUN_DESCRIPTION = f"""\
Run the plan's candidates, each in a fresh `python -I` process, until the
target is reached or nothing more can be admitted. Rerun the same command to
continue: finished candidates never run again, and children of a controller
that died are waited for. The first SIGINT/SIGTERM drains (running jobs
finish), a second stops the running jobs.

{_EXIT_STATUSES}"""

_DISPLAYS = ("rich", "plain", "none")


def _campaign_run(args: argparse.Namespace) -> int:
    import functools
    import logging
    import signal

    import trio

    from .._runner import Drain
    from .._signals import drain_on_signals
    from .._terminal import messages, output_console
    from ._launch import TERMINATE_GRACE_S
    from ._scheduler import run_campaign
    from ._view import LiveView, PlainView, render

    console = output_console()
    display = args.display or ("rich" if console.is_terminal else "plain")
    if args.undrain:
        _undrain(args.outdir)

    def on_signal(sig: signal.Signals, count: int) -> None:
        if count == 1:
            what = "draining; running jobs finish (signal again to stop them now)"
        elif count == 2:
            grace = f"{TERMINATE_GRACE_S:g} s"
            what = f"stopping the running jobs (SIGTERM, then SIGKILL after {grace})"
        else:
            what = "already stopping; waiting for the running jobs to end"
        print(f"sluicegate: {sig.name}: {what}", file=sys.stderr, flush=True)

    refusals = (CampaignError, CampaignFileError, LedgerError, OSError)
    refused: list[BaseException] = []

    async def run(drain: Drain) -> Report:
        go = functools.partial(
            run_campaign,
            args.plan,
            args.outdir,
            args.ledger,
            drain=drain,
            allow_upgrade=args.allow_upgrade,
            trace=args.trace,
        )
        if display == "rich":
            with LiveView(console) as view:
                return await go(observer=view)
        if display == "none":
            return await go()
        return await go(observer=PlainView(start=_found_report(args.outdir)))

    async def main() -> Report | None:
        drain = Drain()
        with trio.CancelScope() as stopped:
            signals = (signal.SIGINT, signal.SIGTERM)
            async with drain_on_signals(
                drain, signals=signals, cancel_scope=stopped, on_signal=on_signal
            ):
                try:
                    return await run(drain)
                except refusals as exc:
                    refused.append(exc)
        return None

    # The campaign says what a signal does itself (on_signal above).
    with messages("sluicegate campaign", level=logging.ERROR):
        report = trio.run(main)
    if refused:
        return _error(refused[0])
    if report is None:
        print("sluicegate: stopped; see `sluicegate campaign status`", file=sys.stderr)
        return 130
    if display != "none":
        console.print(render(report, rows=True))
    if report.stop_reason == "drained":
        _say_why_drained(args)
    if report.stop_reason == "reconciliation_required":
        keys = ", ".join(r.key for r in report.rows if r.status == "uncertain")
        print(
            f"sluicegate: uncertain: {keys}; resolve each with "
            f"`sluicegate campaign reconcile {args.outdir} KEY --as STATUS`",
            file=sys.stderr,
        )
        return _RECONCILE_STATUS
    return 0


def _undrain(outdir: Path) -> None:
    """``--undrain``: remove the drain file, saying so, before the run starts."""
    from ._outdir import DRAIN_FILE

    try:
        (outdir / DRAIN_FILE).unlink()
    except FileNotFoundError:
        return
    print(f"sluicegate: removed {outdir / DRAIN_FILE}: admitting again", file=sys.stderr)


def _drain_file(outdir: Path) -> str | None:
    """What ``OUTDIR/drain-request.json`` asks, if it is there."""
    from ._convert import load_json
    from ._outdir import DRAIN_FILE, DrainRequest

    path = outdir / DRAIN_FILE
    if not path.exists():
        return None
    try:
        request = load_json(path, DrainRequest)
        why = f" ({request.reason}, {request.requested})"
    except (CampaignFileError, OSError):
        why = ""
    return f"{path} asks to admit nothing{why}; it stays until removed, so a rerun admits nothing"


def _say_why_drained(args: argparse.Namespace) -> None:
    """Name the drain file that stopped the run, and how to go on; nothing for a signal."""
    asks = _drain_file(args.outdir)
    if asks is None:
        return  # drained by a signal: this invocation only
    again = " ".join(
        ["sluicegate campaign run", str(args.plan), str(args.outdir), "--ledger", str(args.ledger)]
    )
    print(f"sluicegate: drained: {asks} either. To continue: `{again} --undrain`", file=sys.stderr)


def _found_report(outdir: Path) -> Report | None:
    """The report a rerun starts from, if there is a readable one."""
    from ._outdir import read_report

    try:
        return read_report(outdir)
    except (CampaignError, CampaignFileError, OSError):
        return None


def _campaign_drain(args: argparse.Namespace) -> int:
    from ._outdir import DRAIN_POLL_S, request_drain

    try:
        path = request_drain(args.outdir, args.reason)
    except CampaignError as exc:
        return _error(exc)
    print(
        f"wrote {path}; a running controller sees it within {DRAIN_POLL_S} s and admits "
        "nothing more (running jobs finish); `campaign run ... --undrain` (or removing "
        "the file) admits again"
    )
    return 0


def _campaign_status(args: argparse.Namespace) -> int:
    from rich.text import Text

    from .._terminal import output_console
    from ._convert import dump_json
    from ._outdir import is_locked, read_report
    from ._view import render

    try:
        report = read_report(args.outdir)
        locked = is_locked(args.outdir)
    except (CampaignError, CampaignFileError, OSError) as exc:
        return _error(exc)
    if args.json:
        sys.stdout.write(dump_json(report))
        return 0
    console = output_console()
    console.print(render(report, rows=True, controller=locked))
    if locked is None:
        state = "whether a controller is running cannot be told here (no fcntl)"
    else:
        state = "a controller is running" if locked else "no controller is running"
    scope = f"; ledger scope {report.ledger_scope}" if report.ledger_scope else ""
    console.print(Text(f"{state}; report written {report.updated}{scope}"))
    asks = _drain_file(args.outdir)
    if asks is not None:
        console.print(Text(f"{asks} (`campaign run ... --undrain` admits again)"))
    return 0


def _campaign_reconcile(args: argparse.Namespace) -> int:
    from ._scheduler import reconcile

    try:
        report = reconcile(args.outdir, args.key, args.status, args.cost)
    except (CampaignError, CampaignFileError, LedgerError, OSError) as exc:
        return _error(exc)
    row = report.row(args.key)
    print(f"{args.key}: {row.status}, cost {format_money(row.cost)}")
    if row.status == "uncertain":
        print(f"sluicegate: {args.key} is still uncertain: {row.reason}", file=sys.stderr)
        return _RECONCILE_STATUS
    return 0


def _register_campaign(commands: Any, help: str) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "campaign",
        help=help,
        description="Run isolated batch jobs under resource classes, a target and a "
        "budget ledger (see docs/campaign.md).",
        epilog=_EXIT_STATUSES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="campaign_command", metavar="ACTION", required=True)
    outdir_help = "the campaign's output directory (the OUTDIR of `campaign run`)"

    run = sub.add_parser(
        "run",
        help="run or continue a campaign",
        description=_RUN_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("plan", type=Path, help="the plan (JSON)")
    run.add_argument("outdir", type=Path, help="the output directory; rerun to continue")
    run.add_argument("--ledger", type=Path, required=True, help="an existing budget ledger")
    shown = run.add_mutually_exclusive_group()
    shown.add_argument(
        "--display",
        choices=_DISPLAYS,
        help="rich: a live view; plain: a line per change; none: nothing but errors "
        "(default: rich on a terminal, plain otherwise)",
    )
    shown.add_argument(
        "--live", dest="display", action="store_const", const="rich", help="--display rich"
    )
    shown.add_argument(
        "--no-live", dest="display", action="store_const", const="plain", help="--display plain"
    )
    run.add_argument(
        "--allow-upgrade",
        action="store_true",
        help="continue a campaign started by another sluicegate version or source",
    )
    run.add_argument(
        "--undrain",
        action="store_true",
        help="remove OUTDIR/drain-request.json (left by `campaign drain`) first, so that "
        "the run admits jobs again",
    )
    run.add_argument(
        "--trace",
        action="store_true",
        help="record the jobs' timeline: OUTDIR/trace.jsonl as they run, OUTDIR/trace.json "
        "at the end (see sluicegate plot, report and trace)",
    )
    run.set_defaults(handler=_campaign_run)

    drain = sub.add_parser("drain", help="stop admission; running jobs finish")
    drain.add_argument("outdir", type=Path, help=outdir_help)
    drain.add_argument("--reason", default="drain requested", help="kept in the drain file")
    drain.set_defaults(handler=_campaign_drain)

    status = sub.add_parser("status", help="summarize the last report")
    status.add_argument("outdir", type=Path, help=outdir_help)
    status.add_argument("--json", action="store_true", help="print report.json as is")
    status.set_defaults(handler=_campaign_status)

    rec = sub.add_parser(
        "reconcile",
        help="resolve an uncertain candidate",
        description="Say what happened to an uncertain candidate, after looking at its "
        "logs and work directory (OUTDIR/jobs/KEY). Without --as, the result.json its "
        "child wrote after the controller lost sight of it is imported.",
    )
    rec.add_argument("outdir", type=Path, help=outdir_help)
    rec.add_argument("key", help="the uncertain candidate's key")
    rec.add_argument(
        "--as",
        dest="status",
        choices=["verified", "generated_unverified", "blocked"],
        help="what the job came to; a verified one counts toward the target "
        "(default: import the job's own late result.json)",
    )
    rec.add_argument(
        "--cost",
        type=_money,
        help="the dispatch reservation's actual cost (default: all of it); open stage "
        "reservations are settled in full",
    )
    rec.set_defaults(handler=_campaign_reconcile)


def register(commands: Any, help: Mapping[str, str]) -> None:
    """Add the ``campaign`` and ``ledger`` subcommands to ``commands``.

    Args:
        commands: The top-level parser's subparsers object.
        help: The one-line help of each (``"campaign"``, ``"ledger"``), as the
            top-level ``--help`` lists them.
    """
    _register_ledger(commands, help["ledger"])
    _register_campaign(commands, help["campaign"])
