"""``sluicegate plot``: a run's timeline (and score distribution) as an image, with matplotlib."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import attrs

from .._trace import Timeline
from ._errors import ReportError
from ._layout import (
    COLOURS,
    MARKS,
    WINDOW_COLOUR,
    Placed,
    flight_columns,
    place,
    place_rows,
    score_bins,
)
from ._run import RunView, read_run
from ._text import inert

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["WITHOUT_TRACE", "Drawn", "PlotUnavailable", "draw", "plot"]

# The runs in flight are drawn at about the image's width in pixels.
_COLUMNS = 1200


class PlotUnavailable(ReportError, ImportError):
    """matplotlib is not installed: the ``plot`` extra brings it."""


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as exc:
        raise PlotUnavailable(
            "sluicegate plot needs matplotlib, which the 'plot' extra installs: "
            "pip install 'sluicegate[plot]'"
        ) from exc
    # A file is all we draw: no window, no display needed.
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _image_path(output: Path) -> Path:
    """Where an image asked for as ``output`` goes (matplotlib would add
    ``.png`` to a bare name itself, leaving the caller to name the wrong file)."""
    if output.is_dir():
        return output / "timeline.png"
    return output if output.suffix else output.with_name(output.name + ".png")


def plot(path: str | os.PathLike[str], output: str | os.PathLike[str]) -> Path:
    """Draw the timeline of ``path`` (a trace, an event log or a run directory) into ``output``.

    One row per slot with a bar per run, coloured by how it ended; drain,
    failure and close as vertical lines; the runs in flight below (and the
    window object's size, when the trace recorded one). For an evaluation's
    run directory, the score distribution beside it. A run directory
    recorded without a trace is drawn from ``results.jsonl``: each rollout
    from its start for its duration, in lanes (the fewest rows where none
    overlap; the trace's slots are the window's own), and its scores. The
    image format follows ``output``'s suffix (``.png``, ``.svg``, ``.pdf``):
    an existing directory gets ``timeline.png`` inside it, and a name
    without a suffix gets ``.png``.

    Returns:
        The path written: ``output``, or what it became as above.

    Raises:
        PlotUnavailable: matplotlib is not installed.
        FileNotFoundError: ``path`` holds no trace and no evaluation's rows.
        ValueError: ``path`` is not a sluicegate trace.
    """
    return draw(path, output).path


@attrs.frozen
class Drawn:
    """What :func:`draw` wrote.

    Attributes:
        path: The image.
        traced: Whether it was drawn from a trace (else from ``results.jsonl``).
    """

    path: Path
    traced: bool


def draw(path: str | os.PathLike[str], output: str | os.PathLike[str]) -> Drawn:
    """:func:`plot`, saying whether the picture came from a trace (``sluicegate plot`` says so)."""
    plt = _pyplot()
    path, output = Path(path), _image_path(Path(output))
    run = read_run(path) if path.is_dir() else None
    try:
        placed = place(Timeline.read(path))
        traced = True
    except FileNotFoundError:
        if run is None or not run.rollouts:
            raise
        placed, traced = place_rows(run.rollouts), False
    scores = run.score_series() if run is not None else {}
    # Names are text: `$^ vs ^$` in an environment or a score's name is not TeX.
    with plt.rc_context({"text.parse_math": False}):
        _draw(plt, path, output, placed, run, scores, traced)
    return Drawn(output, traced)


# What a trace adds to a picture drawn from results.jsonl alone.
WITHOUT_TRACE: Final = (
    "no trace: drawn from results.jsonl; --trace adds the window's slots, "
    "the drain and failure marks and the window size"
)


def _draw(
    plt: Any,
    path: Path,
    output: Path,
    placed: Placed,
    run: RunView | None,
    scores: dict[str, list[float]],
    traced: bool,
) -> None:
    figure = plt.figure(figsize=(12 if scores else 10, 5.5), layout="constrained")
    grid = figure.add_gridspec(
        2, 2 if scores else 1, height_ratios=(3, 1), width_ratios=(3, 1) if scores else None
    )
    slots = figure.add_subplot(grid[0, 0])
    flight = figure.add_subplot(grid[1, 0], sharex=slots)
    _draw_timeline(slots, flight, placed, "slot" if traced else "lane")
    title = _title(path, run, placed.traced if traced else None)
    figure.suptitle(inert(title if traced else f"{title}\n{WITHOUT_TRACE}"))
    if scores:
        _draw_scores(figure.add_subplot(grid[:, 1]), scores)
    output.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(output, dpi=110)
    plt.close(figure)


def _title(path: Path, run: RunView | None, traced: int | None) -> str:
    name = path.name or str(path)
    if run is not None and run.summary is not None:
        summary = run.summary
        parts = [summary.environment or name]
        if summary.stop_reason:
            parts.append(summary.stop_reason)
        if summary.passed is not None:
            parts.append("passed" if summary.passed else "did not pass")
        if traced is not None and traced < summary.sessions:
            # A session run without --trace left no timeline: the picture
            # must not pass for the whole run.
            parts.append(f"timeline of {traced} of {summary.sessions} sessions (the traced ones)")
        return " · ".join(parts)
    return name


def _draw_timeline(slots: Axes, flight: Axes, placed: Placed, row: str) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    bars: dict[tuple[int, str], list[tuple[float, float]]] = {}
    for span, start, end in zip(placed.spans, placed.starts, placed.ends, strict=True):
        assert span.slot is not None
        bars.setdefault((span.slot, span.outcome), []).append((start, end - start))
    # A hairline between neighbouring runs while there are few enough to see.
    edge = (
        {"edgecolor": "white", "linewidth": 0.6}
        if len(placed.spans) <= 60 * max(placed.slots, 1)
        else {"linewidth": 0}
    )
    for (slot, outcome), ranges in bars.items():
        slots.broken_barh(ranges, (slot - 0.4, 0.8), facecolors=COLOURS[outcome], **edge)
    handles: list[Any] = [
        Patch(color=colour, label=outcome)
        for outcome, colour in COLOURS.items()
        if any(key[1] == outcome for key in bars)
    ]
    for axes in (slots, flight):
        for mark in placed.marks:
            colour, style = MARKS.get(mark.what, ("#000000", "solid"))
            axes.axvline(mark.time, color=colour, linestyle=style, linewidth=1.2)
        for start in placed.sessions:
            axes.axvline(start, color="#bbbbbb", linewidth=3)
    handles.extend(
        Line2D([], [], color=colour, linestyle=style, label=what)
        for what, (colour, style) in MARKS.items()
        if any(mark.what == what for mark in placed.marks)
    )
    rows = max(placed.slots, 1)
    slots.set_ylim(rows - 0.5, -0.5)
    slots.set_ylabel(row)
    if rows <= 16:
        slots.set_yticks(range(rows), [f"{row} {slot}" for slot in range(rows)])
    if handles:
        slots.legend(
            handles=handles,
            loc="lower right",
            bbox_to_anchor=(1.0, 1.0),
            fontsize="small",
            ncols=8,
            frameon=False,
        )
    slots.tick_params(labelbottom=False)
    if placed.in_flight:
        highs = flight_columns(placed.in_flight, placed.end, _COLUMNS)
        width = placed.end / _COLUMNS
        times = [column * width for column in range(_COLUMNS + 1)]
        highs.append(highs[-1])
        flight.step(times, highs, where="post", color="#333333", linewidth=1)
        flight.fill_between(times, highs, step="post", color="#333333", alpha=0.15)
    top = rows
    if placed.window:
        # The window object's size, a step line over the runs in flight.
        times = [time for time, _ in placed.window] + [placed.end]
        sizes = [size for _, size in placed.window]
        sizes.append(sizes[-1])
        flight.step(times, sizes, where="post", color=WINDOW_COLOUR, linewidth=1.4, label="window")
        flight.legend(loc="upper right", fontsize="small", frameon=False)
        top = max(top, *sizes)
    flight.yaxis.set_major_locator(MaxNLocator(integer=True, nbins=4))
    flight.set_ylim(0, max(top, 1) * 1.1)
    flight.set_ylabel("in flight")
    flight.set_xlabel("seconds")
    flight.set_xlim(0, max(placed.end, 1e-6))


# Past this, matplotlib's axis (its margins, its ticks) overflows a float.
_HUGE = 1e300


def _draw_scores(axes: Axes, scores: dict[str, list[float]]) -> None:
    names = list(scores)[:6]
    magnitude = max(abs(value) for name in names for value in scores[name])
    # Finite scores may span more than a float can (±1.5e308): drawn in
    # units of a power of ten then, which the axis label names.
    unit = 10.0 ** math.floor(math.log10(magnitude)) if magnitude > _HUGE else 1.0
    for name in names:
        # Binned here: matplotlib's own binning overflows on such a range too.
        edges, counts = score_bins(scores[name], 20)
        axes.stairs(counts, [edge / unit for edge in edges], linewidth=1.5, label=inert(name))
    axes.set_title("scores")
    axes.set_xlabel("score" if unit == 1.0 else f"score (x {unit:.0e})")
    axes.set_ylabel("rollouts")
    if len(names) > 1:
        axes.legend(fontsize="small")
