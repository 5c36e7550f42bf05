"""How a campaign looks: the live view, plain log lines and the status summary.

User text (a job's reason, a class name) is shown verbatim, never read as
rich markup.
"""

from __future__ import annotations

import sys
from types import TracebackType
from typing import TYPE_CHECKING, TextIO

from ._ledger import format_money
from ._state import Report

if TYPE_CHECKING:
    from rich.console import Console, RenderableType

# rich is imported where it is used: every job's child process imports this
# package, and none of them draws anything.

__all__ = ["LiveView", "PlainView", "render"]

_STYLE = {
    "verified": "green",
    "generated_unverified": "yellow",
    "blocked": "red",
    "uncertain": "bold magenta",
    "running": "cyan",
    "pending": "dim",
    "prior_verified": "green dim",
}


def _classes(report: Report) -> str:
    parts = []
    names = sorted(set(report.running_by_class) | set(report.class_limits))
    for name in names:
        running = report.running_by_class.get(name, 0)
        limit = report.class_limits.get(name)
        label = "unclassed" if name == "-" else name
        parts.append(f"{label} {running}/{limit}" if limit is not None else f"{label} {running}")
    return ", ".join(parts)


def render(report: Report, *, rows: bool = False, controller: bool | None = True) -> RenderableType:
    """A summary of ``report``: running jobs per class, verified/target, spend/cap.

    Args:
        report: The campaign report.
        rows: Show every candidate, not only the running ones.
        controller: Whether a controller holds the output directory now. A
            report without a stop reason and without a controller was left
            by one that was stopped (a second signal, a kill): it is shown as
            ``interrupted``, not ``running``. None: it cannot be told here
            (no ``fcntl``), shown as ``running or interrupted``.
    """
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    if report.stop_reason is not None:
        state: str = report.stop_reason
    elif controller is None:
        state = "running or interrupted"
    elif not controller:
        state = "interrupted"
    else:
        state = "draining" if report.draining else "running"
    head = Text.assemble(
        (report.name, "bold"),
        f"  [{state}]  verified {report.verified}/{report.target}",
        f"  running {report.running}/{report.max_parallel}",
        f" ({_classes(report)})" if report.running or report.class_limits else "",
        f"  pending {len(report.pending)}",
        f"  spent {format_money(report.spent)} + held {format_money(report.held)}"
        f" / cap {format_money(report.cap)}",
    )
    shown = [r for r in report.rows if rows or r.status == "running"]
    if not shown:
        return head
    table = Table(box=None, pad_edge=False)
    for column in ("key", "class", "status", "cost", "reason"):
        table.add_column(column)
    for row in shown:
        # Text, not str: a job's reason is user text (an exception's message,
        # say), never rich markup.
        table.add_row(
            Text(row.key),
            Text(row.resource_class or "-"),
            Text(row.status, style=_STYLE.get(row.status, "")),
            Text(format_money(row.cost)),
            Text(row.reason or ""),
        )
    return Group(head, table)


class LiveView:
    """A rich live display kept current by :func:`~sluicegate.campaign.run_campaign`.

    Use it as a context manager and pass it as the ``observer``.
    """

    def __init__(self, console: Console | None = None) -> None:
        from rich.live import Live

        # Fixed. Redrawn on each report, so no refresh thread is needed.
        self._live = Live(console=console, auto_refresh=False)

    def __enter__(self) -> LiveView:
        self._live.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._live.__exit__(exc_type, exc, tb)

    def __call__(self, report: Report) -> None:
        self._live.update(render(report), refresh=True)


class PlainView:
    """One line per change of a candidate's status, fit for logs; an observer.

    The first line sums up where the run starts. Every change of a row from
    ``start`` (or, without one, from the first report) is a line of its own,
    so a result imported on resume gets one too; a row left ``running`` is
    not announced again (its child, adopted, gets a line when it ends).

    Args:
        file: Where the lines go (standard output by default).
        start: The report the run starts from (``report.json`` as found on a
            rerun), naming the rows an earlier controller left running.
    """

    def __init__(self, file: TextIO | None = None, *, start: Report | None = None) -> None:
        # Fixed.
        self._file = file
        self._start = start
        # key -> the status last shown, None before the first report; written
        # only by __call__.
        self._seen: dict[str, str] | None = None
        # Whether the draining line was shown; written only by __call__.
        # Invariant: the line is shown once, and stays shown.
        self._draining = False

    def __call__(self, report: Report) -> None:
        lines = []
        if self._seen is None:
            # Where the run starts (a rerun's finished rows included): one
            # line for all of it, and every row counts as seen.
            start = self._start or report
            self._seen = {row.key: row.status for row in start.rows}
            line = f"{report.name}: {len(start.pending)} pending"
            left = [row.key for row in start.rows if row.status == "running"]
            if left:
                line += f"; left running by an earlier controller: {', '.join(left)}"
            lines.append(line)
        for row in report.rows:
            if self._seen.get(row.key) == row.status:
                continue
            self._seen[row.key] = row.status
            if row.status == "pending":
                # Admitted, then given back before its child began.
                lines.append(f"{row.key}: pending again, its job never began")
            elif row.status == "running":
                where = f" [{row.resource_class}]" if row.resource_class else ""
                lines.append(f"{row.key}{where}: running")
            else:
                why = f" ({row.reason})" if row.reason else ""
                lines.append(f"{row.key}: {row.status}, cost {format_money(row.cost)}{why}")
        if report.draining and not self._draining:
            self._draining = True
            lines.append("draining: nothing more is admitted; running jobs finish")
        if lines:
            head = (
                f"verified {report.verified}/{report.target}, running {report.running}, "
                f"spent {format_money(report.spent)} + held {format_money(report.held)}"
            )
            out = self._file if self._file is not None else sys.stdout
            for line in lines:
                print(f"{report.updated[11:19]} {line}  ({head})", file=out, flush=True)
