"""``sluicegate journal show|errors|trim PATH|URL``: read or trim a journal, even while it runs.

PATH is a SQLite journal's file; a ``postgresql://`` URL names a Postgres journal
(its table ``sluicegate_journal``). Both are read through the same API.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import re
import sys
from typing import Any

from .._sqlite import display
from ._convert import converter
from ._journal import JournalEntry, JournalError, journal_at
from ._postgres import PostgresJournal

__all__ = ["register"]

LAST_ERRORS = 5
_WHERE = "the journal: its file, or a postgresql:// URL"


def _error(exc: Exception) -> int:
    if isinstance(exc, OSError) and exc.filename is not None:
        message = f"cannot read {exc.filename}: {exc.strerror}"
    else:
        message = str(exc)
    print(f"sluicegate: {message}", file=sys.stderr)
    return 2


def _named(address: str) -> str:
    """How the command names the journal at ``address``: a path, or a URL without its password."""
    journal = journal_at(address)
    return journal.label if isinstance(journal, PostgresJournal) else display(address)


def _when(entry: JournalEntry) -> str:
    return f"{entry.finished:%Y-%m-%d %H:%M:%S} UTC"


def _headline(entry: JournalEntry) -> str:
    message = entry.error_message or ""
    first = message.splitlines()[0] if message else ""
    return f"{entry.error_type}: {first}" if first else f"{entry.error_type}"


def _show(args: argparse.Namespace) -> int:
    try:
        journal = journal_at(args.path)
        counts = journal.counts()
        last = journal.errors(last=LAST_ERRORS)
        latest = journal.last_finished()
    except (OSError, JournalError, ValueError) as exc:
        return _error(exc)
    if args.json:
        document: dict[str, Any] = {
            **counts,
            "total": sum(counts.values()),
            "last_finished": converter.unstructure(latest),
            "last_errors": converter.unstructure(last),
        }
        print(json.dumps(document, indent=2))
        return 0
    total = sum(counts.values())
    print(f"journal {_named(args.path)}: {total:,} item(s)")
    width = len(f"{max(counts.values(), default=0):,}")
    for status, count in counts.items():
        print(f"  {status:<6} {count:>{width},}")
    if latest is not None:
        print(f"  last finished {latest:%Y-%m-%d %H:%M:%S} UTC")
    if last:
        shown = f"last {len(last)} of {counts['error']:,}" if counts["error"] > len(last) else "all"
        print(f"errors ({shown}; `sluicegate journal errors {_named(args.path)}` for tracebacks):")
        # Oldest first, newest last, as `journal errors` and --json list them.
        for entry in last:
            print(f"  {_when(entry)}  {entry.key}  {_headline(entry)}")
    return 0


def _errors(args: argparse.Namespace) -> int:
    if args.last is not None and args.last < 1:
        print(
            f"sluicegate journal errors: --last must be an integer >= 1, got {args.last}",
            file=sys.stderr,
        )
        return 2
    try:
        entries = journal_at(args.path).errors(last=args.last)
    except (OSError, JournalError, ValueError) as exc:
        return _error(exc)
    if args.json:
        print(json.dumps(converter.unstructure(entries), indent=2))
        return 0
    if not entries:
        print(f"no errors in {_named(args.path)}")
        return 0
    for number, entry in enumerate(entries):
        if number:
            print()
        print(f"{entry.key}: {_headline(entry)}")
        print(f"  {entry.attempts} attempt(s), finished {_when(entry)}")
        for line in (entry.traceback or "").rstrip("\n").splitlines():
            print(f"  {line}")
    return 0


# A number and an optional unit: "7", "7d", "12h", "1.5d", "90s".
_DURATION = re.compile(r"\s*(?P<number>[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(?P<unit>[a-z]*)\s*")
_UNITS = {"": 86400.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}


def _age(text: str) -> datetime.timedelta | None:
    """``--older-than``'s duration (days when no unit is given), or None if it is none."""
    found = _DURATION.fullmatch(text.lower())
    if found is None or found["unit"] not in _UNITS:
        return None
    seconds = float(found["number"]) * _UNITS[found["unit"]]
    # How far back a datetime can go from now: a longer age is no date.
    if not math.isfinite(seconds) or seconds > _OLDEST.total_seconds():
        return None
    return datetime.timedelta(seconds=seconds)


_OLDEST = datetime.datetime.now(datetime.UTC) - datetime.datetime.min.replace(tzinfo=datetime.UTC)


def _trim(args: argparse.Namespace) -> int:
    age = _age(args.older_than)
    if age is None:
        print(
            "sluicegate journal trim: --older-than must be a finite age >= 0 such as 7d, 12h,"
            f" 30m or 90s (a bare number is days), not {args.older_than!r}",
            file=sys.stderr,
        )
        return 2
    before = datetime.datetime.now(datetime.UTC) - age
    try:
        forgotten = journal_at(args.path).trim(before, errors=args.errors)
    except (OSError, JournalError, ValueError) as exc:
        return _error(exc)
    what = "item(s)" if args.errors else "successful item(s); errors kept"
    print(f"forgot {forgotten:,} {what} finished before {before:%Y-%m-%d %H:%M:%S} UTC")
    return 0


def register(commands: Any) -> None:
    """Add the ``journal`` subcommand to ``commands``.

    Args:
        commands: The top-level parser's subparsers object.
    """
    journal = commands.add_parser(
        "journal",
        help="read a service's journal (sluicegate.serve)",
        description="Read a service's journal (a SQLite file, or a postgresql:// URL for a"
        " Postgres journal); safe while services run.",
    )
    actions = journal.add_subparsers(dest="journal_command", metavar="ACTION", required=True)
    show = actions.add_parser("show", help="counts by status and the last errors, oldest first")
    show.add_argument("path", metavar="PATH", help=_WHERE)
    show.add_argument("--json", action="store_true", help='print {"ok": N, "error": M, ...}')
    show.set_defaults(handler=_show)
    errors = actions.add_parser("errors", help="the recorded errors (dead letters), tracebacks too")
    errors.add_argument("path", metavar="PATH", help=_WHERE)
    errors.add_argument(
        "--last", type=int, metavar="N", help="only the N most recent (N >= 1), oldest first"
    )
    errors.add_argument("--json", action="store_true", help="print them as a JSON list")
    errors.set_defaults(handler=_errors)
    trim = actions.add_parser(
        "trim",
        help="forget old items (they run again if fed again); errors are kept unless --errors",
    )
    trim.add_argument("path", metavar="PATH", help=_WHERE)
    trim.add_argument(
        "--older-than", required=True, metavar="AGE",
        help="forget items that finished more than AGE ago: 7d, 12h, 30m, 90s (a bare number"
        " is days)",
    )  # fmt: skip
    trim.add_argument("--errors", action="store_true", help="forget old errors (dead letters) too")
    trim.set_defaults(handler=_trim)
