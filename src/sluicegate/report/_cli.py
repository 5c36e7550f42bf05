"""The ``plot``, ``report`` and ``trace`` commands: argument parsing and output."""

from __future__ import annotations

import argparse
import gc
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from .._terminal import messages
from .._trace import TRACE, TRACE_LOG, Span, Timeline, write_chrome_trace

__all__ = ["register"]

EXIT_USAGE = 2


def register(commands: Any) -> None:
    """Add ``plot``, ``report`` and ``trace`` to the top-level parser's subcommands."""
    plot = commands.add_parser(
        "plot",
        help="draw a run's timeline (and scores) as an image",
        description="Draw the timeline of PATH (a trace.json, a trace.jsonl or a run "
        "directory): a row per window slot with a bar per run coloured by outcome, the "
        "drain and failure marked, runs in flight (and the window's size) below, and for "
        "an evaluation the score distribution beside it. A run recorded without --trace "
        "is drawn from results.jsonl: each rollout from its start for its duration, and "
        "the scores. Needs matplotlib: pip install 'sluicegate[plot]'.",
    )
    plot.add_argument("path", metavar="PATH", help="a trace.json, a trace.jsonl or a run directory")
    plot.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="the image to write; its suffix picks the format (.png, .svg, .pdf), .png "
        "when it has none, timeline.png inside it when it is a directory; default "
        "timeline.png in the run directory (or beside the trace)",
    )
    plot.set_defaults(handler=_plot)

    report = commands.add_parser(
        "report",
        help="write a self-contained HTML report of a run, or of two runs compared",
        description="Write RUN_DIR/report.html: the run's summary and configuration, its "
        "timeline (when it was recorded with --trace), the score distributions, the "
        "per-task reduced scores and a table of rollouts that sorts, filters and opens to "
        "each whole sample. Given two run directories, write one page comparing them "
        "(RUN_B against the baseline RUN_A) to RUN_B/compare.html. One file, no network: "
        "open it in any browser.",
    )
    report.add_argument(
        "directory",
        metavar="RUN_DIR",
        nargs="+",
        help="an evaluation's output directory; two to compare them (A, then B)",
    )
    report.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="the page to write, named .html (report.html or compare.html inside it when "
        "it is a directory); default RUN_DIR/report.html, or RUN_B/compare.html for two runs",
    )
    report.add_argument(
        "--open",
        action="store_true",
        help="open the page in your web browser once it is written (the BROWSER "
        "environment variable picks the browser, as in Python's webbrowser module)",
    )
    report.set_defaults(handler=_report)

    trace = commands.add_parser(
        "trace",
        help="summarize a run's trace, or list the runs that never finished",
        description=f"Summarize the trace of PATH (a run directory, its {TRACE_LOG} or "
        f"{TRACE}). A run directory whose run was killed has {TRACE_LOG} but no {TRACE}: "
        f"it is written from the log. exit status: 0, or with --anomalies 1 when some "
        f"runs started and never finished; 2 when there is no trace.",
    )
    trace.add_argument("path", metavar="PATH", help="a run directory, trace.jsonl or trace.json")
    trace.add_argument(
        "--anomalies",
        action="store_true",
        help="list the runs that started and never finished (what a kill or a hang leaves)",
    )
    trace.set_defaults(handler=_trace)


def _fail(command: str, message: str) -> int:
    print(f"sluicegate {command}: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def _plot(args: argparse.Namespace) -> int:
    from ._plot import WITHOUT_TRACE, PlotUnavailable, draw

    path = Path(args.path)
    if args.output is not None:
        output = Path(args.output)
    else:
        output = (path if path.is_dir() else path.parent) / "timeline.png"
    with messages("sluicegate plot"):
        try:
            drawn = draw(path, output)
        except PlotUnavailable as exc:
            return _fail("plot", str(exc))
        except (OSError, ValueError) as exc:
            return _fail("plot", _reason(exc, path))
    print(f"wrote {drawn.path}")
    if not drawn.traced:
        print(WITHOUT_TRACE)
    return 0


def _report(args: argparse.Namespace) -> int:
    directories = args.directory
    if len(directories) > 2:
        return _fail("report", f"give one run directory, or two to compare; got {len(directories)}")
    # This process writes one page and ends. The page's objects (a row, a
    # sample, a span per rollout) hold no cycles, and the collector would
    # walk them again and again as they pile up: 15% of a 100,000-rollout
    # report (bench/report.py).
    gc.disable()
    with messages("sluicegate report"):
        try:
            if len(directories) == 2:
                from ._compare import write_comparison

                written = write_comparison(directories[0], directories[1], args.output)
            else:
                from ._html import write_report

                written = write_report(directories[0], args.output)
        except (OSError, ValueError) as exc:
            return _fail("report", _reason(exc, Path(directories[-1])))
    print(f"wrote {written}")
    if args.open:
        return _open(written)
    return 0


def _open(page: Path) -> int:
    """Show ``page`` in the user's browser (webbrowser's choice: $BROWSER, else the desktop's)."""
    import webbrowser

    try:
        opened = webbrowser.open(page.resolve().as_uri())
    except webbrowser.Error:
        opened = False
    if not opened:
        print(
            f"sluicegate report: no web browser could be started: open {page} yourself "
            "(or set BROWSER to the command that starts one)",
            file=sys.stderr,
        )
        return 1
    return 0


def _reason(exc: BaseException, path: Path) -> str:
    """One line naming the path and what is wrong, without ``[Errno N]``."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.filename or path}: {exc.strerror}"
    return str(exc)


def _printable(text: str | None) -> str:
    """A label as it can be shown on a terminal: control characters escaped."""
    if text is None:
        return "-"
    return text if text.isprintable() else repr(text)


def _trace(args: argparse.Namespace) -> int:
    path = Path(args.path)
    with messages("sluicegate trace"):
        try:
            timelines = Timeline.read(path)
        except (OSError, ValueError) as exc:
            return _fail("trace", _reason(exc, path))
    if path.is_dir() and not (path / TRACE).exists():
        try:
            write_chrome_trace(path / TRACE, timelines)
            print(f"wrote {path / TRACE} from {path / TRACE_LOG}")
        except OSError as exc:
            print(
                f"sluicegate trace: could not write {path / TRACE}: {exc.strerror}",
                file=sys.stderr,
            )
    if args.anomalies:
        return _list_unfinished(timelines)
    for number, timeline in enumerate(timelines, 1):
        _describe(timeline, number if len(timelines) > 1 else None)
    return 0


def _describe(timeline: Timeline, session: int | None) -> None:
    spans = timeline.spans
    counts: dict[str, int] = {}
    for span in spans:
        counts[span.outcome] = counts.get(span.outcome, 0) + 1
    started = timeline.started_at.isoformat(timespec="seconds") if timeline.started_at else "-"
    head = f"session {session}: " if session is not None else ""
    outcomes = ", ".join(f"{count} {outcome}" for outcome, count in sorted(counts.items()))
    print(
        f"{head}{len(spans)} items over {timeline.end:.3f} s in {timeline.slots} slots, "
        f"started {started}: {outcomes or 'nothing recorded'}"
    )
    for mark in timeline.marks:
        print(f"  {mark.what} at {mark.time:.3f} s")


def _list_unfinished(timelines: list[Timeline]) -> int:
    found: list[tuple[int, Timeline, Span]] = []
    superseded = 0
    # Labels a later session started: a resume runs what a killed session
    # left unfinished again, under the same label, so that run is history.
    later: set[str] = set()
    for number, timeline in reversed(list(enumerate(timelines, 1))):
        for span in reversed(timeline.unfinished()):
            if span.label is not None and span.label in later:
                superseded += 1
            else:
                found.append((number, timeline, span))
        later.update(
            span.label
            for span in timeline.spans
            if span.label is not None and span.started is not None
        )
    found.reverse()
    again = (
        f" ({superseded} unfinished in an earlier session ran again in a later one)"
        if superseded
        else ""
    )
    if not found:
        print(f"no anomalies: every run that started finished{again}")
        return 0
    print(f"{len(found)} run(s) started and never finished:")
    print(f"{'session':>7}  {'item':>6}  {'slot':>4}  {'started (UTC)':<15}  {'ran for':>9}  label")
    for number, timeline, span in found:
        assert span.started is not None
        at = "-"
        if timeline.started_at is not None:
            wall = timeline.started_at + timedelta(seconds=span.started)
            at = wall.strftime("%H:%M:%S.%f")[:-3]
        print(
            f"{number:>7}  {span.index:>6}  {span.slot:>4}  {at:<15}  "
            f"{timeline.end - span.started:>8.3f}s  {_printable(span.label)}"
        )
    print(f"(ran for: until the last event the trace recorded){again}")
    return 1
