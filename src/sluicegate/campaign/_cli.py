"""``sluicegate ledger ...`` and ``sluicegate campaign ...``: parse, then call the subpackage."""

from __future__ import annotations

import argparse
import sys
from decimal import Decimal, InvalidOperation
from typing import Any

from ._convert import CampaignFileError
from ._ledger import Ledger, LedgerError, format_money, scope_name

__all__ = ["register"]


def _money(text: str) -> Decimal:
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise argparse.ArgumentTypeError(f"not a decimal amount: {text!r}") from None
    if not value.is_finite() or value < 0:
        raise argparse.ArgumentTypeError(f"must be a non-negative amount: {text!r}")
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
    print(f"created ledger {args.path} with global limit {format_money(args.limit)}")
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
    print(f"raised the global limit of {args.path} to {format_money(args.limit)}")
    return 0


def _register_ledger(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "ledger", help="create, inspect or raise a budget ledger"
    )
    sub = parser.add_subparsers(dest="ledger_command", metavar="ACTION", required=True)

    init = sub.add_parser("init", help="create a ledger with a global limit")
    init.add_argument("path", help="the SQLite file to create (refused if it exists)")
    init.add_argument("--limit", type=_money, required=True, help="global limit, e.g. 200.00")
    init.set_defaults(handler=_ledger_init)

    show = sub.add_parser("show", help="print every scope's limit, holds and room")
    show.add_argument("path")
    show.set_defaults(handler=_ledger_show)

    up = sub.add_parser("raise", help="raise the global limit, recording why")
    up.add_argument("path")
    up.add_argument("--limit", type=_money, required=True, help="the new, higher limit")
    up.add_argument("--reason", required=True, help="why the limit is raised")
    up.set_defaults(handler=_ledger_raise)


# -- campaign -------------------------------------------------------------------

# Exit statuses of `campaign run`: 0 stopped cleanly (target reached, panel
# exhausted, drained or budget exhausted), 3 reconciliation required, 2 refused
# to start.
_RECONCILE_STATUS = 3


def _campaign_run(args: argparse.Namespace) -> int:
    import signal

    import trio
    from rich.console import Console

    from .._runner import Drain
    from ._report import Report
    from ._scheduler import CampaignError, run_campaign
    from ._view import LiveView, render

    console = Console()
    live = args.live if args.live is not None else console.is_terminal

    async def watch_signals(drain: Drain, scope: trio.CancelScope) -> None:
        # First signal: drain (running jobs finish); second: stop now, which
        # terminates the children and leaves them uncertain.
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as received:
            async for signum in received:
                name = signal.Signals(signum).name
                if not drain.requested:
                    print(
                        f"sluicegate: {name}: draining; running jobs finish "
                        "(signal again to stop them now)",
                        file=sys.stderr,
                    )
                    drain.request(name)
                else:
                    scope.cancel()
                    return

    refusals = (CampaignError, CampaignFileError, LedgerError, OSError)
    refused: list[BaseException] = []

    async def main() -> Report | None:
        drain = Drain()
        report: Report | None = None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch_signals, drain, nursery.cancel_scope)
            try:
                if live:
                    with LiveView(console) as view:
                        report = await run_campaign(
                            args.plan, args.outdir, args.ledger, observer=view, drain=drain
                        )
                else:
                    report = await run_campaign(args.plan, args.outdir, args.ledger, drain=drain)
            except refusals as exc:
                # Caught here, not around the nursery, to report it as itself.
                refused.append(exc)
            nursery.cancel_scope.cancel()
        return report

    report = trio.run(main)
    if refused:
        return _error(refused[0])
    if report is None:
        print("sluicegate: stopped; see `sluicegate campaign status`", file=sys.stderr)
        return 130
    console.print(render(report, rows=True))
    if report.stop_reason == "reconciliation_required":
        keys = ", ".join(r.key for r in report.rows if r.status == "uncertain")
        print(
            f"sluicegate: uncertain: {keys}; resolve each with "
            f"`sluicegate campaign reconcile {args.outdir} KEY --as STATUS`",
            file=sys.stderr,
        )
        return _RECONCILE_STATUS
    return 0


def _campaign_drain(args: argparse.Namespace) -> int:
    from ._scheduler import DRAIN_POLL_S, CampaignError, request_drain

    try:
        path = request_drain(args.outdir, args.reason)
    except CampaignError as exc:
        return _error(exc)
    print(
        f"wrote {path}; a running controller sees it within {DRAIN_POLL_S} s and admits "
        "nothing more (running jobs finish); remove it to admit again"
    )
    return 0


def _campaign_status(args: argparse.Namespace) -> int:
    from rich.console import Console

    from ._convert import dump_json
    from ._scheduler import CampaignError, is_locked, read_report
    from ._view import render

    try:
        report = read_report(args.outdir)
    except (CampaignError, CampaignFileError, OSError) as exc:
        return _error(exc)
    if args.json:
        sys.stdout.write(dump_json(report))
        return 0
    console = Console()
    locked = is_locked(args.outdir)
    console.print(render(report, rows=True, controller=locked))
    state = "a controller is running" if locked else "no controller is running"
    console.print(f"{state}; report written {report.updated}")
    return 0


def _campaign_reconcile(args: argparse.Namespace) -> int:
    from ._scheduler import CampaignError, reconcile

    try:
        report = reconcile(args.outdir, args.key, args.status, args.cost)
    except (CampaignError, CampaignFileError, LedgerError, OSError) as exc:
        return _error(exc)
    row = report.row(args.key)
    print(f"{args.key}: {row.status}, cost {format_money(row.cost)}")
    return 0


def _register_campaign(commands: Any) -> None:
    from pathlib import Path

    parser: argparse.ArgumentParser = commands.add_parser(
        "campaign", help="run isolated batch jobs under classes, a target and a budget"
    )
    sub = parser.add_subparsers(dest="campaign_command", metavar="ACTION", required=True)

    run = sub.add_parser("run", help="run or continue a campaign")
    run.add_argument("plan", type=Path, help="the plan (JSON)")
    run.add_argument("outdir", type=Path, help="the output directory; rerun to continue")
    run.add_argument("--ledger", type=Path, required=True, help="an existing budget ledger")
    run.add_argument(
        "--live",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show a live view (default: when stdout is a terminal)",
    )
    run.set_defaults(handler=_campaign_run)

    drain = sub.add_parser("drain", help="stop admission; running jobs finish")
    drain.add_argument("outdir", type=Path)
    drain.add_argument("--reason", default="drain requested")
    drain.set_defaults(handler=_campaign_drain)

    status = sub.add_parser("status", help="summarize the last report")
    status.add_argument("outdir", type=Path)
    status.add_argument("--json", action="store_true", help="print report.json as is")
    status.set_defaults(handler=_campaign_status)

    rec = sub.add_parser("reconcile", help="resolve an uncertain candidate")
    rec.add_argument("outdir", type=Path)
    rec.add_argument("key")
    rec.add_argument(
        "--as",
        dest="status",
        required=True,
        choices=["verified", "generated_unverified", "blocked"],
    )
    rec.add_argument("--cost", type=_money, help="the dispatch's actual cost (default: all of it)")
    rec.set_defaults(handler=_campaign_reconcile)


def register(commands: Any) -> None:
    """Add the ``campaign`` and ``ledger`` subcommands to ``commands``.

    Args:
        commands: The top-level parser's subparsers object.
    """
    _register_ledger(commands)
    _register_campaign(commands)
