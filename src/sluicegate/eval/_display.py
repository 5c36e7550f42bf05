"""Progress for ``sluicegate eval``: ``rich`` (a live bar), ``plain`` (log lines) or none.

A display only reads the :class:`~sluicegate.eval._tally.Tally` on its own
schedule; the run never calls into it per rollout, so ``--display none``
(no display object at all) costs nothing.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Protocol, TextIO

import attrs
import trio

from ._records import Counts
from ._tally import Tally

__all__ = ["Display", "PlainDisplay", "RichDisplay", "Summary", "make_display"]


@attrs.frozen
class Summary:
    """What the display says when the run is over."""

    stop_reason: str
    counts: Counts
    scores: Mapping[str, float]
    output: str
    elapsed: float
    error: str | None = None


class Display(Protocol):
    async def show(self, tally: Tally) -> None:
        """Show progress until cancelled."""

    def note(self, message: str) -> None:
        """Show a one-off message (a drain starting, say)."""

    def summary(self, summary: Summary) -> None:
        """Show the final summary."""


def _total(tally: Tally) -> str:
    if not tally.growing:
        return str(tally.planned)
    bound = f" (<= {tally.bound})" if tally.bound is not None else ""
    return f"{tally.planned}+{bound}"


def _rate(tally: Tally) -> tuple[float, float]:
    elapsed = trio.current_time() - tally.started
    done = tally.finished - tally.resumed
    return elapsed, (done / elapsed if elapsed > 0 else 0.0)


def _score_text(scores: Mapping[str, float]) -> str:
    return ", ".join(f"{key} {value:.4g}" for key, value in scores.items()) or "none"


class PlainDisplay:
    """One line per batch of completions, at most every ``interval`` seconds: fit for CI logs."""

    def __init__(self, file: TextIO | None = None, interval: float = 0.5) -> None:
        self._file = file if file is not None else sys.stdout
        self._interval = interval

    def _line(self, text: str) -> None:
        print(text, file=self._file, flush=True)

    async def show(self, tally: Tally) -> None:
        seen = tally.finished
        while True:
            await trio.sleep(self._interval)
            if tally.finished == seen:
                continue
            seen = tally.finished
            elapsed, rate = _rate(tally)
            self._line(
                f"[{elapsed:7.1f}s] {tally.finished}/{_total(tally)} done, "
                f"{tally.errors} errors, {tally.running}/{tally.concurrency} running, "
                f"{rate:.1f}/s"
            )

    def note(self, message: str) -> None:
        self._line(message)

    def summary(self, summary: Summary) -> None:
        counts = summary.counts
        resumed = f" ({counts.resumed} resumed)" if counts.resumed else ""
        self._line(
            f"{summary.stop_reason}: {counts.ok} ok{resumed}, {counts.error} errors, "
            f"{counts.planned} planned, in {summary.elapsed:.1f}s"
        )
        self._line(f"scores: {_score_text(summary.scores)}")
        if summary.error:
            self._line(f"error: {summary.error}")
        self._line(f"output: {summary.output}")


class RichDisplay:
    """A live progress bar with counts, rate and elapsed, then a summary table."""

    def __init__(self, interval: float = 0.25) -> None:
        from rich.console import Console

        self._console = Console()
        self._interval = interval

    def _render(self, tally: Tally) -> object:
        from rich.progress_bar import ProgressBar
        from rich.table import Table

        elapsed, rate = _rate(tally)
        # A growing total's bound, when known, says how far along the run is.
        total = tally.bound if tally.growing and tally.bound is not None else tally.planned
        grid = Table.grid(padding=(0, 2))
        grid.add_row(
            ProgressBar(
                total=total if total else None,
                completed=tally.finished,
                width=32,
                pulse=total == 0,
            ),
            f"{tally.finished}/{_total(tally)}",
            f"[red]{tally.errors} errors[/]" if tally.errors else "0 errors",
            f"{tally.running}/{tally.concurrency} in flight",
            f"{rate:.1f}/s",
            f"{elapsed:.1f}s",
        )
        return grid

    async def show(self, tally: Tally) -> None:
        from rich.live import Live

        # Refreshed from this trio task, not rich's thread, so the tally is read
        # between checkpoints only.
        with Live(console=self._console, auto_refresh=False, transient=True) as live:
            while True:
                live.update(self._render(tally), refresh=True)  # type: ignore[arg-type]
                await trio.sleep(self._interval)

    def note(self, message: str) -> None:
        self._console.print(message)

    def summary(self, summary: Summary) -> None:
        from rich.table import Table

        counts = summary.counts
        table = Table(title="sluicegate eval", show_header=False)
        table.add_column(style="bold")
        table.add_column()
        colour = {"completed": "green", "failed": "red"}.get(summary.stop_reason, "yellow")
        table.add_row("stop reason", f"[{colour}]{summary.stop_reason}[/]")
        table.add_row(
            "ok", f"{counts.ok}" + (f" ({counts.resumed} resumed)" if counts.resumed else "")
        )
        table.add_row("errors", str(counts.error))
        table.add_row("planned", str(counts.planned))
        for key, value in summary.scores.items():
            table.add_row(f"mean {key}", f"{value:.4g}")
        table.add_row("elapsed", f"{summary.elapsed:.1f}s")
        if summary.error:
            table.add_row("error", summary.error)
        table.add_row("output", summary.output)
        self._console.print(table)


def make_display(kind: str) -> Display | None:
    """The display for ``--display kind``; None for ``none``."""
    if kind == "rich":
        return RichDisplay()
    if kind == "plain":
        return PlainDisplay()
    return None
