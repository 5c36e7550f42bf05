"""Progress for an evaluation: ``rich`` (a live bar), ``plain`` (log lines) or none.

A display only reads the :class:`~sluicegate.eval._tally.RunTally` on its own
schedule; the run never calls into it per rollout, so ``display="none"``
(no display object at all) costs nothing.

A display must never stop the work: when its output cannot be written (a
reader that went away, ``sluicegate eval ... | head -1``) it falls silent,
points standard output at ``/dev/null`` so the interpreter's last flush is
quiet too, and the run goes on. User text (score names, paths, error
messages) is shown verbatim, never read as markup.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol, TextIO

import attrs
import trio

from ._config import EvalConfig, UsageError
from ._records import Counts
from ._stats import ScoreStats
from ._tally import RunTally

if TYPE_CHECKING:
    from ._compare import Comparison

if TYPE_CHECKING:
    from rich.console import Console, RenderableType
    from rich.live import Live

__all__ = [
    "DISPLAYS",
    "Display",
    "PlainDisplay",
    "RichDisplay",
    "Summary",
    "comparison_text",
    "make_display",
    "stats_text",
]

DISPLAYS = ("rich", "plain", "none")


@attrs.frozen
class Summary:
    """What the display says when the run is over.

    Attributes:
        resume: The command that continues the run, when it can be continued.
        window: Where the window settled (``settled at 23 (auto:64), 2
            decreases``); None under ``-c N``.
    """

    stop_reason: str
    passed: bool
    reasons: tuple[str, ...]
    counts: Counts
    scores: Mapping[str, float]
    output: str
    elapsed: float
    abandoned: tuple[tuple[str, int], ...] = ()
    resume: str | None = None
    score_stats: Mapping[str, ScoreStats] = attrs.field(factory=dict)
    reduced: Mapping[str, ScoreStats] = attrs.field(factory=dict)
    window: str | None = None


def _kind(value: object) -> str:
    """What a ``-T`` value was read as, in a word."""
    if isinstance(value, str):
        return "text"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if value is None:
        return "null"
    return "a list" if isinstance(value, list) else "a mapping"


def task_args_text(args: Mapping[str, object]) -> str:
    """``-T slip=0.5 (a number), model='small' (text)``: each value as the factory gets it."""
    return "-T " + ", ".join(
        f"{key}={repr(value) if isinstance(value, str) else json.dumps(value)} ({_kind(value)})"
        for key, value in args.items()
    )


def header_text(name: str, config: EvalConfig, resume: bool) -> str:
    """The run's first line: what it evaluates, with which arguments, into where.

    The ``-T`` values appear as the factory receives them, so that a typo
    (``-T slip=O.5``, text, not a number) shows before the run does.
    """
    what = f"{name} ({config.target})" if config.target is not None else name
    parts = [f"{'resuming' if resume else 'evaluating'} {what}"]
    if config.task_args:
        parts.append(task_args_text(config.task_args))
    if config.num_tasks is not None:
        parts.append(f"-n {config.num_tasks}")
    parts.append(f"-r {config.rollouts}")
    given = f" ({_object(config.window_object)})" if config.window_object else ""
    parts.append(f"-c {config.concurrency}{given}")
    return ", ".join(parts) + f" -> {config.output}"


def _object(name: str) -> str:
    """``a Window object``, ``an AdaptiveWindow object``."""
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name} object"


def window_text(config: EvalConfig, start: int, end: int, decreases: int) -> str:
    """Where the window of a session settled, for the summary.

    ``settled at 23 (auto:64), 2 decreases`` under an adaptive window;
    ``8 throughout (a Window object)`` or ``ended at 4, from 8 (a Window
    object)`` under another window object.

    Args:
        start: Its size as the session started.
        end: Its size as the session ended.
        decreases: How many of the session's changes lowered it.
    """
    given = config.window_object
    if config.adaptive:
        how = f"{config.concurrency}, {_object(given)}" if given else str(config.concurrency)
        return f"settled at {end} ({how}), {_plural(decreases, 'decrease')}"
    what = _object(given or "window")
    if end == start:
        return f"{end} throughout ({what})"
    return f"ended at {end}, from {start} ({what})"


def resume_command(output: str) -> str:
    """The shell command that continues the run in ``output``."""
    return f"sluicegate eval --resume {shlex.quote(output)}"


class Display(Protocol):
    def header(self, text: str) -> None:
        """Say what the run is about to do, once, before it starts."""

    async def show(self, tally: RunTally) -> None:
        """Show progress until cancelled."""

    def summary(self, summary: Summary) -> None:
        """Show the final summary."""


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _total(tally: RunTally) -> str:
    if not tally.growing:
        return str(tally.planned)
    bound = f" (<= {tally.bound})" if tally.bound is not None else ""
    return f"{tally.planned}+{bound}"


def _rate(tally: RunTally) -> tuple[float, float]:
    elapsed = trio.current_time() - tally.began
    done = tally.finished - tally.resumed
    return elapsed, (done / elapsed if elapsed > 0 else 0.0)


def progress_line(tally: RunTally) -> str:
    """The run so far as a sentence: ``12/30 done, 2 errors, 4 running (of 4), 4.0/s, 3 s``."""
    elapsed, rate = _rate(tally)
    return (
        f"{tally.finished}/{_total(tally)} done, {_plural(tally.errors, 'error')}, "
        f"{tally.running} running (of {tally.concurrency}), {rate:.1f}/s, {elapsed:.0f} s"
    )


def stats_text(stats: ScoreStats | None) -> str:
    """A mean with its uncertainty, each number named.

    ``0.72 ± 0.058 standard error, 95% CI [0.6, 0.84] (n 60, 20 tasks, clustered)``;
    an interval that reaches past the values seen says so (see
    :attr:`ScoreStats.beyond_range`).
    """
    if stats is None:
        return "none"
    text = f"{stats.mean:.4g}"
    if stats.stderr is not None:
        text += f" ± {stats.stderr:.2g} standard error"
    if stats.ci95 is not None:
        text += f", 95% CI [{stats.ci95[0]:.4g}, {stats.ci95[1]:.4g}]"
        if stats.beyond_range:
            text += ", wider than the scores seen: too few tasks to place the mean closer"
    unit = f"n {stats.n}"
    if stats.clustered:
        unit += f", {stats.tasks} tasks, clustered"
    return f"{text} ({unit})"


def _means(summary: Summary) -> list[tuple[str, str]]:
    """``(name, text)`` per score (its mean, with its interval when known) and per reduced score."""
    rows = [
        (
            key,
            stats_text(summary.score_stats[key]) if key in summary.score_stats else f"{value:.4g}",
        )
        for key, value in summary.scores.items()
    ]
    rows.extend((key, stats_text(stats)) for key, stats in summary.reduced.items())
    return rows


def _mean_rows(summary: Summary) -> list[tuple[str, str]]:
    return [(f"mean {key}", text) for key, text in _means(summary)]


def _score_text(summary: Summary) -> str:
    return "; ".join(f"{key} {text}" for key, text in _means(summary)) or "none"


def _abandoned_text(summary: Summary) -> str:
    names = ", ".join(f"task {task_id} rollout {rollout}" for task_id, rollout in summary.abandoned)
    more = summary.counts.abandoned - len(summary.abandoned)
    return names + (f" and {more} more" if more > 0 else "")


def _count_rows(summary: Summary) -> list[tuple[str, str]]:
    counts = summary.counts
    return [
        ("ok", f"{counts.ok}" + (f" ({counts.resumed} resumed)" if counts.resumed else "")),
        ("errors", str(counts.error)),
        ("planned", str(counts.planned)),
    ]


def _detail_rows(summary: Summary) -> list[tuple[str, str]]:
    """What else the summary says, as (label, user text) pairs shared by both displays."""
    counts = summary.counts
    rows = []
    if summary.window is not None:
        rows.append(("window", summary.window))
    if counts.abandoned:
        rows.append(("abandoned", f"{counts.abandoned}: {_abandoned_text(summary)}"))
    if counts.cut_short:
        rows.append(("cut short", f"{counts.cut_short} (waiting to retry; a resume runs them)"))
    rows.extend(("not passed", reason) for reason in summary.reasons)
    rows.append(("output", summary.output))
    if summary.resume:
        rows.append(("resume with", summary.resume))
    # What a user does next with a run: look at it, and hold it against another.
    where = shlex.quote(summary.output)
    rows.append(("look with", f"sluicegate report {where}"))
    rows.append(("compare with", f"sluicegate compare BASELINE_DIR {where}"))
    return rows


class _Guarded:
    """Writes through ``write`` until the first failure, then never again."""

    def __init__(self, file: TextIO | None) -> None:
        self._file = file
        # Invariant: written by guard() only; False -> True once, never back.
        self.silent = False

    @property
    def file(self) -> TextIO:
        return self._file if self._file is not None else sys.stdout

    def guard(self, write: Callable[[], None], *, even_if_silent: bool = False) -> None:
        """Call ``write``; the first failure silences the display for good."""
        if self.silent and not even_if_silent:
            return
        try:
            write()
        except (OSError, ValueError):
            # A closed pipe (EPIPE), a full disk, a closed file: stop
            # displaying, keep evaluating.
            self.silent = True
            self._quiet_stdout()

    def _quiet_stdout(self) -> None:
        if self._file is not None:
            return
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        except (OSError, ValueError):
            pass


class PlainDisplay(_Guarded):
    """A sentence per batch of completions, at most every ``interval`` seconds: for CI logs."""

    def __init__(self, file: TextIO | None = None, interval: float = 0.5) -> None:
        super().__init__(file)
        self._interval = interval

    def _line(self, text: str) -> None:
        self.guard(lambda: print(text, file=self.file, flush=True))

    def header(self, text: str) -> None:
        self._line(text)

    async def show(self, tally: RunTally) -> None:
        seen = tally.finished
        while not self.silent:
            await trio.sleep(self._interval)
            if tally.finished != seen:
                seen = tally.finished
                self._line(progress_line(tally))

    def summary(self, summary: Summary) -> None:
        counts = summary.counts
        verdict = "passed" if summary.passed else "not passed"
        resumed = f" ({counts.resumed} resumed)" if counts.resumed else ""
        self._line(
            f"{summary.stop_reason}, {verdict}: {counts.ok} ok{resumed}, "
            f"{_plural(counts.error, 'error')}, {counts.planned} planned, "
            f"in {summary.elapsed:.1f} s"
        )
        self._line(f"scores: {_score_text(summary)}")
        for label, text in _detail_rows(summary):
            self._line(f"{label}: {text}")


class RichDisplay(_Guarded):
    """A live progress bar with counts, rate and elapsed, then a summary table."""

    def __init__(self, file: TextIO | None = None, interval: float = 0.25) -> None:
        super().__init__(file)
        self._interval = interval

    def header(self, text: str) -> None:
        from rich.console import Console
        from rich.text import Text

        self.guard(lambda: Console(file=self._file).print(Text(text, overflow="fold")))

    def _render(self, tally: RunTally) -> RenderableType:
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

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
            Text(f"{tally.finished}/{_total(tally)}"),
            Text(_plural(tally.errors, "error"), style="red" if tally.errors else ""),
            Text(f"{tally.running}/{tally.concurrency} in flight"),
            Text(f"{rate:.1f}/s"),
            Text(f"{elapsed:.1f} s"),
        )
        return grid

    async def show(self, tally: RunTally) -> None:
        from rich.console import Console

        bar = _LiveBar(Console(file=self._file), lambda: self._render(tally))
        stderr = sys.stderr
        if bar.console.is_terminal:
            # rich's own redirect would print messages on the bar's console,
            # standard output; they belong on standard error, above the bar.
            sys.stderr = _AboveBar(self, bar, stderr)
        # Refreshed from this trio task, not rich's thread, so the tally is read
        # between checkpoints only.
        self.guard(bar.start)
        try:
            while not self.silent:
                self.guard(bar.update)
                await trio.sleep(self._interval)
        finally:
            sys.stderr = stderr
            # Even when silent: stopping also gives sys.stdout back.
            self.guard(bar.stop, even_if_silent=True)

    def summary(self, summary: Summary) -> None:
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        table = Table(title="sluicegate eval", show_header=False)
        table.add_column(style="bold")
        table.add_column()
        colour = {"completed": "green", "failed": "red"}.get(summary.stop_reason, "yellow")
        table.add_row("stop reason", Text(summary.stop_reason, style=colour))
        table.add_row(
            "verdict",
            Text("passed", style="green") if summary.passed else Text("not passed", style="red"),
        )
        rows = [
            *_count_rows(summary),
            *_mean_rows(summary),
            ("elapsed", f"{summary.elapsed:.1f} s"),
            *_detail_rows(summary),
        ]
        for label, text in rows:
            # Folded, not cut short with an ellipsis: a path must stay whole.
            table.add_row(Text(label), Text(text, overflow="fold"))
        self.guard(lambda: Console(file=self._file).print(table))


class _LiveBar:
    """A transient rich ``Live`` that can be taken down and put up again.

    A new ``Live`` each time it is put up: a restarted one would first
    erase as many lines as it last had, the message printed meanwhile
    included.
    """

    def __init__(self, console: Console, render: Callable[[], RenderableType]) -> None:
        self.console = console
        self._render = render
        # Invariant: written by start() and stop() only, under _lock; a Live
        # while the bar is up.
        self._live: Live | None = None
        # Messages may come from a worker thread (a load() that warns).
        self._lock = threading.RLock()

    def start(self) -> None:
        from rich.live import Live

        with self._lock:
            if self._live is None:
                live = Live(
                    self._render(),
                    console=self.console,
                    auto_refresh=False,
                    transient=True,
                    redirect_stderr=False,
                )
                live.start(refresh=True)
                self._live = live

    def update(self) -> None:
        with self._lock:
            if self._live is not None:
                self._live.update(self._render(), refresh=True)

    def stop(self) -> None:
        with self._lock:
            live, self._live = self._live, None
            if live is not None:
                live.stop()


class _AboveBar:
    """Stands in for ``sys.stderr`` while a live bar is shown on a terminal.

    Each line goes to the real standard error, with the bar taken down
    before it and put up again after, so messages land above the bar and
    ``2>file`` gets every one of them.
    """

    def __init__(self, display: _Guarded, bar: _LiveBar, stderr: TextIO) -> None:
        self._display = display
        self._bar = bar
        self._stderr = stderr
        # Invariant: written by write() and flush() only; never holds a newline.
        self._partial = ""

    def write(self, text: str) -> int:
        self._partial += text
        if "\n" in self._partial:
            lines, _, self._partial = self._partial.rpartition("\n")
            self._emit(lines + "\n")
        return len(text)

    def flush(self) -> None:
        if self._partial:
            self._emit(self._partial + "\n")
            self._partial = ""

    def _emit(self, text: str) -> None:
        self._display.guard(self._bar.stop)
        try:
            self._stderr.write(text)
            self._stderr.flush()
        finally:
            self._display.guard(self._bar.start)

    def __getattr__(self, name: str) -> object:
        return getattr(self._stderr, name)


def make_display(kind: str) -> Display | None:
    """The display for ``display=kind``; None for ``none``.

    Raises:
        TypeError: ``kind`` is not text.
        UsageError: for text that is not one of :data:`DISPLAYS`.
    """
    if not isinstance(kind, str):
        raise TypeError(f"display must be one of {', '.join(DISPLAYS)}, not {kind!r}")
    if kind == "rich":
        return RichDisplay()
    if kind == "plain":
        return PlainDisplay()
    if kind == "none":
        return None
    raise UsageError(f"display must be one of {', '.join(DISPLAYS)}, not {kind!r}")


def _interval(stats: ScoreStats | None, signed: bool = False) -> str:
    if stats is None:
        return "-"
    sign = "+" if signed else ""
    text = f"{stats.mean:{sign}.4f}"
    if stats.ci95 is not None:
        text += f" [{stats.ci95[0]:{sign}.3f}, {stats.ci95[1]:{sign}.3f}]"
    return text


def _value(value: float) -> str:
    return f"{value:.4g}"


def _changed_tasks(comparison: Comparison) -> list[tuple[str, str]]:
    """Each changed task once, worst first, with its scores side by side: ``(task, text)``."""
    by_task: dict[str, list[str]] = {}
    for task in comparison.errored_b:
        by_task[task] = ["every rollout errored in B"]
    for change in comparison.changed:
        by_task.setdefault(change.task_id, []).append(
            f"{change.name} {_value(change.a)} -> {_value(change.b)} ({change.delta:+.4g})"
        )
    for task in comparison.errored_a:
        by_task.setdefault(task, []).append("every rollout errored in A")
    return [(task, ", ".join(texts)) for task, texts in by_task.items()]


def comparison_text(comparison: Comparison, changed: int = 20) -> str:
    """``sluicegate compare``'s text: the settings that differ, a table of scores with
    their verdicts, then the changed tasks, worst first, each once."""
    from ._compare import VERDICT_WORDS

    lines = [f"A: {comparison.run_a}", f"B: {comparison.run_b}"]
    if comparison.settings:
        lines.append(
            "settings that differ: "
            + "; ".join(
                f"{name} {a} in A, {b} in B" for name, (a, b) in comparison.settings.items()
            )
        )
    lines += [
        f"tasks: {comparison.shared} in both, {len(comparison.only_a)} only in A, "
        f"{len(comparison.only_b)} only in B",
        "",
    ]
    table = [
        ("score", "A mean [95% CI]", "B mean [95% CI]", "B - A paired [95% CI]", "tasks", "verdict")
    ]
    for score in comparison.scores:
        paired = score.difference
        table.append(
            (
                score.name,
                _interval(score.a),
                _interval(score.b),
                _interval(paired, signed=True),
                str(paired.n) if paired is not None else "0",
                VERDICT_WORDS[score.verdict],
            )
        )
    widths = [max(len(row[column]) for row in table) for column in range(len(table[0]))]
    lines.extend(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in table
    )
    tasks = _changed_tasks(comparison)
    if tasks:
        lines += ["", f"changed tasks ({len(tasks)}, worst first):"]
        lines.extend(f"  {task}  {text}" for task, text in tasks[:changed])
        if len(tasks) > changed:
            lines.append(f"  ... and {len(tasks) - changed} more (--json lists all)")
    else:
        lines += ["", "no task changed"]
    return "\n".join(lines) + "\n"
