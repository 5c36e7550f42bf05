"""``sluicegate ledger ...`` and ``sluicegate campaign ...``: parse, then call the subpackage."""

from __future__ import annotations

import argparse
import sys
from decimal import Decimal, InvalidOperation
from typing import Any

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
    print(f"sluicegate: {message}", file=sys.stderr)
    return 2


# -- ledger ---------------------------------------------------------------------


def _ledger_init(args: argparse.Namespace) -> int:
    try:
        Ledger.create(args.path, args.limit)
    except LedgerError as exc:
        return _error(exc)
    print(f"created ledger {args.path} with global limit {format_money(args.limit)}")
    return 0


def _ledger_show(args: argparse.Namespace) -> int:
    try:
        ledger = Ledger(args.path)
        usages = ledger.scopes()
    except LedgerError as exc:
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
    return 0


def _ledger_raise(args: argparse.Namespace) -> int:
    try:
        Ledger(args.path).raise_limit(args.limit, args.reason)
    except LedgerError as exc:
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


def register(commands: Any) -> None:
    """Add the ``campaign`` and ``ledger`` subcommands to ``commands``.

    Args:
        commands: The top-level parser's subparsers object.
    """
    _register_ledger(commands)
    from ._campaign_cli import register_campaign

    register_campaign(commands)
