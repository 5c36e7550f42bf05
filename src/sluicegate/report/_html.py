"""``sluicegate report``: one self-contained HTML page about a run.

Everything is inline (CSS, script, SVG): the page opens from disk, offline,
in any browser. Every piece of user text (task ids, error messages,
tracebacks, labels, score names) goes through :func:`html.escape`, and the
script reads it back only as text, never as markup.

The rollout table is rendered here rather than by the script, so the page
shows everything even with scripting off; the script only hides rows for the
status filter and the task-id search.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from html import escape
from pathlib import Path
from typing import Final

from .._trace import Timeline
from .._util import write_atomically
from .._version import __version__
from ._layout import COLOURS, MARKS
from ._run import Rollout, RunView, read_run
from ._svg import histograms_svg, timeline_svg

__all__ = ["REPORT", "write_report"]

REPORT: Final = "report.html"
# An error message longer than this is cut in the table's summary line (the
# whole of it is in the expanded part).
_SHORT: Final = 160
# Rows per chunk of the rollout table (see the CSS).
_CHUNK: Final = 200

_CSS: Final = """
:root { --ok: %(ok)s; --error: %(error)s; --cancelled: %(cancelled)s;
  --unfinished: %(unfinished)s; --line: #ddd; --muted: #666; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0;
  color: #222; background: #fff; }
header { padding: 16px 24px 8px; border-bottom: 1px solid var(--line); }
header h1 { font-size: 20px; margin: 0 0 4px; overflow-wrap: anywhere; }
main { padding: 8px 24px 40px; max-width: 1280px; }
h2 { font-size: 16px; margin: 24px 0 8px; }
.muted { color: var(--muted); }
.badge { display: inline-block; padding: 1px 8px; border-radius: 10px; font-weight: 600;
  font-size: 12px; color: #fff; background: var(--muted); vertical-align: 2px; }
.badge.pass { background: var(--ok); } .badge.fail { background: var(--error); }
.cards { display: flex; flex-wrap: wrap; gap: 10px; margin: 8px 0; }
.card { border: 1px solid var(--line); border-radius: 6px; padding: 8px 14px; min-width: 110px; }
.card b { display: block; font-size: 20px; }
.card span { color: var(--muted); font-size: 12px; }
table.kv td { padding: 2px 14px 2px 0; vertical-align: top; overflow-wrap: anywhere; }
table.kv td:first-child { color: var(--muted); white-space: nowrap; }
svg.timeline { width: 100%%; height: auto; max-width: 1100px; display: block; }
svg .lbl { font-size: 11px; fill: #555; }
.legend { display: flex; flex-wrap: wrap; gap: 14px; font-size: 12px; margin: 4px 0; }
.legend i { display: inline-block; width: 12px; height: 12px; border-radius: 2px;
  vertical-align: -2px; margin-right: 4px; }
.legend i.line { height: 0; border-top: 2px solid; border-radius: 0; vertical-align: 3px; }
.hists { display: flex; flex-wrap: wrap; gap: 16px; }
figure.hist { margin: 0; width: 290px; } figure.hist svg { width: 100%%; }
figure.hist figcaption { font-size: 12px; color: var(--muted); overflow-wrap: anywhere; }
.controls { display: flex; flex-wrap: wrap; gap: 8px; align-items: center; margin: 8px 0;
  position: sticky; top: 0; background: #fff; padding: 6px 0; z-index: 1; }
.controls button { font: inherit; padding: 3px 12px; border: 1px solid #bbb; background: #f7f7f7;
  border-radius: 14px; cursor: pointer; }
.controls button[aria-pressed="true"] { background: #333; color: #fff; border-color: #333; }
.controls input { font: inherit; padding: 3px 8px; min-width: 260px; border: 1px solid #bbb;
  border-radius: 4px; }
/* Rows are grids, not table rows, in chunks the browser skips laying out
   while they are off screen (content-visibility): 10,000 rows stay fast. */
.rollouts .r, .rollouts .rh { display: grid; grid-template-columns: minmax(0, 22fr)
  minmax(0, 7fr) minmax(0, 8fr) minmax(0, 12fr) minmax(0, 8fr) minmax(0, 9fr) minmax(0, 34fr); }
.rollouts .chunk { content-visibility: auto; contain-intrinsic-size: auto 6000px; }
.rollouts .r[hidden], .rollouts .chunk[hidden] { display: none; }
.rollouts .rh { background: #fafafa; font-weight: 600; }
.rollouts .r > *, .rollouts .rh > * { border-bottom: 1px solid var(--line); padding: 4px 8px;
  overflow-wrap: anywhere; }
.rollouts .num { text-align: right; font-variant-numeric: tabular-nums; }
.st { font-weight: 600; } .st.ok { color: var(--ok); } .st.error { color: var(--error); }
details summary { cursor: pointer; }
details pre, .err pre { margin: 6px 0 2px; padding: 8px; background: #f6f6f6; border-radius: 4px;
  overflow: auto; max-height: 420px; white-space: pre; font-size: 12px; }
.empty { padding: 16px; color: var(--muted); }
footer { color: var(--muted); font-size: 12px; padding: 12px 24px; }
"""

_SCRIPT: Final = """
(function () {
  "use strict";
  var table = document.getElementById("rollouts");
  if (!table) { return; }
  // Rows come in chunks that the browser leaves unrendered off screen; each
  // chunk is given the height its shown rows will take (about 30 px each).
  var chunks = Array.prototype.slice.call(table.querySelectorAll(".chunk"));
  var rows = [], chunkOf = [];
  chunks.forEach(function (chunk, number) {
    for (var row = chunk.firstElementChild; row; row = row.nextElementSibling) {
      rows.push(row);
      chunkOf.push(number);
    }
  });
  var statuses = rows.map(function (row) { return row.getAttribute("data-status"); });
  var ids = rows.map(function (row) { return row.getAttribute("data-task").toLowerCase(); });
  var buttons = Array.prototype.slice.call(document.querySelectorAll("[data-filter]"));
  var search = document.getElementById("search");
  var shown = document.getElementById("shown");
  var none = document.getElementById("none");
  var status = "all";
  function apply() {
    var query = search.value.trim().toLowerCase();
    var count = 0;
    var perChunk = chunks.map(function () { return 0; });
    for (var i = 0; i < rows.length; i++) {
      var show = (status === "all" || statuses[i] === status) &&
        (query === "" || ids[i].indexOf(query) !== -1);
      if (rows[i].hidden === show) { rows[i].hidden = !show; }
      if (show) { count++; perChunk[chunkOf[i]]++; }
    }
    chunks.forEach(function (chunk, number) {
      chunk.hidden = perChunk[number] === 0;
      chunk.style.containIntrinsicSize = perChunk[number] * 30 + "px";
    });
    shown.textContent = count + " of " + rows.length + " rollouts";
    none.hidden = count !== 0;
  }
  buttons.forEach(function (button) {
    button.addEventListener("click", function () {
      status = button.getAttribute("data-filter");
      buttons.forEach(function (other) {
        other.setAttribute("aria-pressed", String(other === button));
      });
      apply();
    });
  });
  var timer = 0;
  search.addEventListener("input", function () {
    clearTimeout(timer);
    timer = setTimeout(apply, rows.length > 2000 ? 120 : 0);
  });
  apply();
})();
"""


def _text(value: object) -> str:
    return escape(str(value), quote=True)


def _score(score: object) -> str:
    if score is None:
        return ""
    if isinstance(score, dict):
        return ", ".join(f"{name}={value:.4g}" for name, value in score.items())
    assert isinstance(score, float)
    return f"{score:.4g}"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    if seconds < 10:
        return f"{seconds:.3g} s"
    return f"{seconds:,.1f} s"


def _error_cell(rollout: Rollout) -> str:
    error = rollout.error
    if error is None:
        return ""
    head = f"{error.type}: {error.message}" if error.message else error.type
    short = head if len(head) <= _SHORT else head[: _SHORT - 1] + "…"
    if error.traceback:
        body = error.traceback
    elif len(head) > _SHORT or "\n" in head:
        body = head
    else:
        return f'<span class="err">{_text(head)}</span>'
    return f"<details><summary>{_text(short)}</summary><pre>{_text(body)}</pre></details>"


def _rows(rollouts: Iterable[Rollout]) -> Iterable[str]:
    for rollout in rollouts:
        status = _text(rollout.status)
        task = _text(rollout.task_id)
        yield (
            f'<div class="r" role="row" data-status="{status}" data-task="{task}">'
            f'<div role="cell">{task}</div>'
            f'<div role="cell" class="num">{rollout.rollout}</div>'
            f'<div role="cell" class="st {status}">{status}</div>'
            f'<div role="cell">{_text(_score(rollout.score))}</div>'
            f'<div role="cell" class="num">{rollout.attempts}</div>'
            f'<div role="cell" class="num">{_duration(rollout.duration_s)}</div>'
            f'<div role="cell">{_error_cell(rollout)}</div></div>\n'
        )


def _chunks(rows: Iterable[str], size: int = _CHUNK) -> Iterable[str]:
    """``rows`` in groups the browser can leave unrendered while off screen."""
    batch: list[str] = []
    for row in rows:
        batch.append(row)
        if len(batch) == size:
            yield f'<div class="chunk">{"".join(batch)}</div>'
            batch = []
    if batch:
        yield f'<div class="chunk">{"".join(batch)}</div>'


def _card(value: object, what: str) -> str:
    return f'<div class="card"><b>{_text(value)}</b><span>{_text(what)}</span></div>'


def _summary(run: RunView) -> str:
    parts = []
    summary = run.summary
    statuses = Counter(rollout.status for rollout in run.rollouts)
    cards = [_card(len(run.rollouts), "rollouts recorded")]
    cards.extend(_card(count, status) for status, count in sorted(statuses.items()))
    if summary is not None:
        for name in ("planned", "resumed", "abandoned", "cut_short"):
            if summary.counts.get(name):
                cards.append(_card(summary.counts[name], name.replace("_", " ")))
        cards.extend(_card(f"{mean:.4g}", f"mean {name}") for name, mean in summary.scores.items())
    parts.append(f'<div class="cards">{"".join(cards)}</div>')
    facts: list[tuple[str, str]] = []
    if summary is not None:
        if summary.environment:
            facts.append(("environment", summary.environment))
        facts.append(("stop reason", summary.stop_reason or "none yet (running, or killed)"))
        if summary.error:
            facts.append(("why", summary.error))
        if summary.passed is not None:
            facts.append(("passed", "yes" if summary.passed else "no"))
        facts.extend(("not passed", reason) for reason in summary.reasons)
        if summary.sessions > 1:
            facts.append(("sessions", f"{summary.sessions} (resumed)"))
        if summary.started_at:
            facts.append(("started", summary.started_at))
        if summary.ended_at:
            facts.append(("ended", summary.ended_at))
        if summary.concurrency is not None:
            facts.append(("concurrency", str(summary.concurrency)))
    else:
        facts.append(("run.json", "missing or unreadable"))
    if run.skipped:
        facts.append(("results.jsonl", f"{run.skipped} line(s) that are not rows skipped"))
    if run.superseded:
        facts.append(
            (
                "superseded",
                f"{run.superseded} earlier row(s) of rollouts a resume ran again, "
                "left out (they stay in results.jsonl)",
            )
        )
    errors = Counter(rollout.error.type for rollout in run.rollouts if rollout.error is not None)
    if errors:
        common = errors.most_common(8)
        facts.append(("errors by type", ", ".join(f"{name} ({count})" for name, count in common)))
    parts.append(
        '<table class="kv">'
        + "".join(f"<tr><td>{_text(key)}</td><td>{_text(value)}</td></tr>" for key, value in facts)
        + "</table>"
    )
    return "".join(parts)


def _legend() -> str:
    items = [
        f'<span><i style="background:{colour}"></i>{name}</span>'
        for name, colour in COLOURS.items()
    ]
    items.extend(
        f'<span><i class="line" style="border-color:{colour};border-top-style:{style}"></i>'
        f"{name}</span>"
        for name, (colour, style) in MARKS.items()
    )
    return f'<div class="legend">{"".join(items)}</div>'


def _timeline(timelines: Sequence[Timeline] | None, problem: str | None) -> str:
    if timelines is None:
        return f'<p class="muted">{_text(problem)}</p>'
    outcomes: Counter[str] = Counter()
    slots = 0
    for timeline in timelines:
        outcomes.update(span.outcome for span in timeline.spans)
        slots = max(slots, timeline.slots)
    total = sum(timeline.end for timeline in timelines)
    line = ", ".join(f"{count} {outcome}" for outcome, count in sorted(outcomes.items()))
    sessions = f" in {len(timelines)} sessions" if len(timelines) > 1 else ""
    return (
        f'<p class="muted">{sum(outcomes.values())} runs over {total:.3g} s{sessions} '
        f"in {slots} slots: {_text(line) or 'none'}.</p>" + _legend() + timeline_svg(timelines)
    )


def _table(run: RunView) -> str:
    if not run.rollouts:
        return '<p class="muted">No rollouts recorded (results.jsonl is missing or empty).</p>'
    statuses = Counter(rollout.status for rollout in run.rollouts)
    buttons = [
        f'<button type="button" data-filter="all" aria-pressed="true">'
        f"all ({len(run.rollouts)})</button>"
    ]
    buttons.extend(
        f'<button type="button" data-filter="{_text(status)}" aria-pressed="false">'
        f"{_text(status)} ({count})</button>"
        for status, count in sorted(statuses.items())
    )
    return (
        '<div class="controls">'
        + "".join(buttons)
        + '<input id="search" type="search" placeholder="search task id" '
        'aria-label="search task id" autocomplete="off">'
        '<span id="shown" class="muted"></span></div>'
        '<div class="rollouts" id="rollouts" role="table" aria-label="rollouts">'
        '<div class="rh" role="row"><div role="columnheader">task id</div>'
        '<div role="columnheader" class="num">rollout</div><div role="columnheader">status</div>'
        '<div role="columnheader">score</div><div role="columnheader" class="num">attempts</div>'
        '<div role="columnheader" class="num">duration</div><div role="columnheader">error</div>'
        '</div><div role="rowgroup">\n'
        + "".join(_chunks(_rows(run.rollouts)))
        + '</div></div><p id="none" class="empty" hidden>No rollout matches.</p>'
    )


def _read_trace(directory: Path) -> tuple[list[Timeline] | None, str | None]:
    try:
        return Timeline.read(directory), None
    except FileNotFoundError:
        return None, (
            "No trace in this directory: run with --trace (or pass a Timeline as trace=) "
            "to see the timeline."
        )
    except ValueError as exc:
        return None, f"The trace could not be read: {exc}"


def render(directory: Path) -> str:
    """The report page of ``directory``, as a string.

    Raises:
        FileNotFoundError: the directory holds neither an evaluation's files nor a trace.
    """
    run = read_run(directory)
    timelines, problem = _read_trace(directory)
    if not run.is_eval and timelines is None:
        raise FileNotFoundError(
            f"{directory} holds no run.json, results.jsonl or trace: nothing to report"
        )
    summary = run.summary
    title = (summary.environment if summary and summary.environment else None) or directory.name
    badge = ""
    if summary is not None and summary.passed is not None:
        badge = (
            '<span class="badge pass">passed</span>'
            if summary.passed
            else '<span class="badge fail">did not pass</span>'
        )
    elif summary is not None and summary.stop_reason:
        badge = f'<span class="badge">{_text(summary.stop_reason)}</span>'
    series = run.score_series()
    sections = []
    if run.is_eval:
        sections.append(f"<h2>Summary</h2>{_summary(run)}")
    sections.append(f"<h2>Timeline</h2>{_timeline(timelines, problem)}")
    if series:
        sections.append(f'<h2>Scores</h2><div class="hists">{histograms_svg(series)}</div>')
    if run.is_eval:
        sections.append(f"<h2>Rollouts</h2>{_table(run)}")
    generated = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        # No request leaves the page, whatever a run's text holds.
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">"
        f"<title>{_text(title)} · sluicegate report</title>"
        f"<style>{_CSS % COLOURS}</style></head><body>"
        f"<header><h1>{_text(title)} {badge}</h1>"
        f'<div class="muted">{_text(directory.resolve())}</div></header>'
        f"<main>{''.join(sections)}</main>"
        f"<footer>sluicegate {_text(__version__)} · generated {generated}</footer>"
        f"<script>{_SCRIPT}</script></body></html>"
    )


def write_report(
    directory: str | os.PathLike[str], output: str | os.PathLike[str] | None = None
) -> Path:
    """Write the HTML report of a run directory.

    Args:
        directory: An evaluation's run directory, or any directory with a trace.
        output: Where to write; default ``DIRECTORY/report.html``.

    Returns:
        The path written.

    Raises:
        FileNotFoundError: ``directory`` does not exist or holds nothing to report.
        OSError: the report cannot be written.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"{directory} is not a directory")
    page = render(directory)
    path = Path(output) if output is not None else directory / REPORT
    write_atomically(path, page + "\n")
    return path
