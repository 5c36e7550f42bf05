"""``sluicegate report``: one self-contained HTML page about a run.

Everything is inline (CSS, script, SVG): the page opens from disk, offline,
in any browser. The summary, the configuration and the pictures are HTML
written here; the rollouts are data, embedded once as JSON in
``<script type="application/json">`` elements, that the page's script turns
into rows as they scroll into view, so a run of 100,000 rollouts paints as
fast as one of a hundred. Each rollout's whole sample (input, target,
result, explanation, every attempt's traceback) sits in a block of its own,
parsed only when one of its rows is opened.

Every piece of user text goes through :mod:`._text` first: made inert
(characters that could reorder the page or cannot be written become visible
``\\uXXXX``), then escaped for HTML or embedded as JSON that cannot end its
element. The script puts it back only as text, never as markup.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any, Final

import attrs

from .._trace import Timeline
from .._util import write_atomically
from .._version import __version__
from ..eval._display import resume_command
from ..eval._log import SessionLock
from ..eval._records import FieldEncoding
from ..eval._score import ScoreValue
from ..eval._stats import ScoreStats
from ._layout import COLOURS, MARKS, WINDOW_COLOUR, Placed, place
from ._run import Rollout, RunView, natural_key, read_run, rollout_label, task_stats
from ._svg import histograms_svg, timeline_svg
from ._text import embed_json, html_text

__all__ = [
    "CHUNK",
    "FIELDS",
    "REPORT",
    "finite",
    "page",
    "page_path",
    "row_facts",
    "sample_block",
    "sample_of",
    "score_text",
    "where",
    "write_report",
]

REPORT: Final = "report.html"
# Rollouts per block of embedded samples: opening a row parses one block.
CHUNK: Final = 500
# An error in the table's row is cut to this many characters (the whole of
# it, and the traceback, are in the opened row); the error-text filter
# searches this much.
_ERROR_HEAD: Final = 400
# The fields of a row shown when it is opened, in this order: by their name
# in a row (and in its encoding object), what the page calls them. A sample
# holds them by name; the page gets this once.
FIELDS: Final[Mapping[str, str]] = {
    "input": "input",
    "system_prompt": "system prompt",
    "target": "target",
    "result": "result",
    "metadata": "metadata",
    "score_metadata": "score metadata",
}
# The pages a report can be: written as HTML whatever the name says, so
# another suffix (``-o x.pdf``) is a mistake.
_SUFFIXES: Final = (".html", ".htm")

_text = html_text


def _asset(name: str) -> str:
    return (resources.files(__package__) / "_assets" / name).read_text(encoding="utf-8")


def page(
    title: str, header: str, body: str, *, data: Iterable[str] = (), late: Iterable[str] = ()
) -> str:
    """A whole page: ``<head>`` with the shared CSS, ``header``, ``body``, data, script, ``late``.

    ``title`` is plain text; ``header`` and ``body`` are HTML whose user
    text is already escaped; ``data`` and ``late`` are ``<script
    type="application/json">`` elements, the first read as the script
    starts, the second (the samples, most of a large page) after it: the
    script draws the first rows while the browser still reads them.
    """
    colours = "".join(f"--{name}: {colour}; " for name, colour in COLOURS.items())
    generated = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return "".join(
        [
            "<!DOCTYPE html>\n"
            '<html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            # No request leaves the page, whatever a run's text holds.
            '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
            "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">"
            f"<title>{_text(title)} · sluicegate report</title>"
            f"<style>:root {{ {colours}}}\n{_asset('report.css')}</style></head><body>",
            f"<header>{header}</header><main>{body}</main>",
            f"<footer>sluicegate {_text(__version__)} · generated {generated}</footer>",
            *data,
            f"<script>{_asset('report.js')}</script>",
            *late,
            "</body></html>\n",
        ]
    )


def page_path(run: Path, output: str | os.PathLike[str] | None, name: str) -> Path:
    """Where a page of ``run`` goes: ``output``, or ``name`` inside it (or inside ``run``).

    Checked before any work: ``run`` is a directory, the page is named as
    HTML and its folder exists.

    Raises:
        FileNotFoundError: ``run`` is not a directory, or the folder the page
            goes in does not exist (named: writing would name a hidden
            ``.partial`` file of its own instead).
        ValueError: ``output`` names a file that is not ``.html`` (or ``.htm``).
    """
    if not run.is_dir():
        raise FileNotFoundError(f"{run} is not a directory")
    path = Path(output) if output is not None else run
    if path.is_dir():
        path /= name
    elif path.suffix.lower() not in _SUFFIXES:
        raise ValueError(
            f"-o {path}: the page is HTML; name it {path.with_suffix('.html').name} "
            "or give a directory to write it in"
        )
    folder = path.parent
    if not folder.is_dir():
        raise FileNotFoundError(
            f"cannot write {path}: the folder {folder} does not exist (create it first)"
        )
    return path


def _json_block(element_id: str, data: Any) -> str:
    return f'<script type="application/json" id="{element_id}">{embed_json(data)}</script>'


# -- numbers as text -------------------------------------------------------------------


def _number(value: float) -> str:
    return f"{value:.4g}"


def score_text(score: ScoreValue) -> str:
    """A row's score as its cell shows it: ``0.75``, or ``exact=1, f1=0.5``."""
    if score is None:
        return ""
    if isinstance(score, Mapping):
        return ", ".join(f"{name}={_number(value)}" for name, value in score.items())
    return _number(score)


def finite(value: object) -> float | None:
    """``value`` as a float when it is a finite number, else None (JSON has no NaN)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


# -- the rollouts as data --------------------------------------------------------------


def _note(encoding: FieldEncoding | None) -> str:
    """How a field was written, when not as its plain JSON value, as a short phrase."""
    if encoding is None:
        return ""
    what = "its repr()" if encoding.repr else "its JSON text"
    if encoding.truncated:
        return f"{what}, cut: the whole was {encoding.length:,} characters"
    return what


def _errors(rollout: Rollout) -> list[dict[str, str]]:
    every = [*rollout.earlier_errors, rollout.error]
    found = []
    for error in every:
        if error is None:
            continue
        named = {"type": error.type, "message": error.message}
        if error.traceback is not None:
            named["traceback"] = error.traceback
        found.append(named)
    return found


def sample_of(rollout: Rollout, slot: str | None) -> dict[str, Any]:
    """What an opened row shows beyond its cells, by name; empty parts are left out.

    ``fields`` maps a field's name (a key of :data:`FIELDS`) to its value:
    a string is shown as it is, anything else as indented JSON. ``notes``
    says, by the same names, how a value was written when not as itself (a
    repr, or cut). Then ``explanation``, ``errors`` (each attempt's that
    failed: ``type``, ``message``, ``traceback``), ``started`` and ``slot``.
    The strings are made inert with the whole block (:func:`embed_json`).
    """
    encoding = rollout.encoding
    values = (
        rollout.input,
        rollout.system_prompt,
        rollout.target,
        rollout.result,
        rollout.metadata,
        rollout.score_metadata,
    )
    fields: dict[str, Any] = {}
    notes: dict[str, str] = {}
    for name, value in zip(FIELDS, values, strict=True):
        # An ok row's result is shown even when it is None.
        if value is None and not (name == "result" and rollout.status == "ok"):
            continue
        fields[name] = value
        note = _note(encoding.get(name)) if encoding else ""
        if note:
            notes[name] = note
    sample: dict[str, Any] = {"fields": fields}
    if notes:
        sample["notes"] = notes
    if rollout.explanation is not None:
        sample["explanation"] = str(rollout.explanation)
    if rollout.error is not None or rollout.earlier_errors:
        sample["errors"] = _errors(rollout)
    if rollout.started_at is not None:
        sample["started"] = rollout.started_at
    if slot is not None:
        sample["slot"] = slot
    return sample


def row_facts(rollout: Rollout) -> dict[str, Any]:
    """What a row's cells show, by name.

    ``score`` (as text), ``duration``, ``attempts``, ``rollout`` and
    ``status``. The report sends these as columns; the comparison page
    with each sample.
    """
    return {
        "score": score_text(rollout.score),
        "duration": finite(rollout.duration_s),
        "attempts": rollout.attempts,
        "rollout": rollout.rollout,
        "status": rollout.status,
    }


def sample_block(element_id: str, block: list[dict[str, Any]]) -> str:
    """A ``<script type="application/json">`` element of samples (:func:`sample_of`'s)."""
    try:
        return _json_block(element_id, block)
    except ValueError:
        # A value JSON cannot hold (NaN in a hand-edited row): shown as its repr.
        for sample in block:
            fields = sample["fields"]
            for name, value in fields.items():
                if not isinstance(value, str):
                    fields[name] = repr(value)
        return _json_block(element_id, block)


def _slots(placed: Placed | None) -> dict[str, str]:
    """The slot each labelled run ran in, by label (its latest session's when run again)."""
    slots: dict[str, str] = {}
    if placed is None:
        return slots
    several = placed.traced > 1
    for span, session in zip(placed.spans, placed.session, strict=True):
        if span.label is not None and span.slot is not None:
            where = f"slot {span.slot}"
            slots[span.label] = f"{where} of session {session + 1}" if several else where
    return slots


@attrs.frozen
class _Rows:
    """What one pass over the rollouts gathers for the page.

    Attributes:
        data: The table's columns, one list per column, as the page's script reads them.
        blocks: The samples, as ``<script type="application/json">`` elements.
        statuses: The rollouts counted by status.
        rows_of: Each rollout's row, by the label its run has in a trace.
    """

    data: dict[str, Any]
    blocks: list[str]
    statuses: Counter[str]
    rows_of: dict[str, int]


def _error_head(rollout: Rollout) -> str:
    error = rollout.error
    if error is None:
        return ""
    head = f"{error.type}: {error.message}" if error.message else error.type
    return head[:_ERROR_HEAD]


def _score_column(rollouts: Sequence[Rollout], name: str) -> list[float | None]:
    return [
        finite(score.get(name) if isinstance(score, dict) else score if name == "score" else None)
        for score in (rollout.score for rollout in rollouts)
    ]


def _rows_data(run: RunView, slots: Mapping[str, str]) -> _Rows:
    """The table's columns and the blocks of samples.

    A column at a time (a list comprehension each): a report of 100,000
    rows spends half as long here as with one loop appending to them all.
    """
    rollouts = run.rollouts
    names: dict[str, None] = {}
    for rollout in rollouts:
        score = rollout.score
        if isinstance(score, dict):
            names.update(dict.fromkeys(score))
        elif score is not None:
            names["score"] = None
    task = [rollout.task_id for rollout in rollouts]
    number = [rollout.rollout for rollout in rollouts]
    status = [rollout.status for rollout in rollouts]
    labels = [rollout_label(*key) for key in zip(task, number, strict=True)]
    # A block at a time: 100,000 samples alive at once cost the garbage
    # collector more than their encoding.
    blocks = [
        sample_block(
            f"sample-{count}",
            [
                sample_of(rollout, slots.get(label) if slots else None)
                for rollout, label in zip(
                    rollouts[start : start + CHUNK], labels[start : start + CHUNK], strict=True
                )
            ],
        )
        for count, start in enumerate(range(0, len(rollouts), CHUNK))
    ]
    data = {
        "task": task,
        "rollout": number,
        "status": status,
        "attempts": [rollout.attempts for rollout in rollouts],
        "duration": [finite(rollout.duration_s) for rollout in rollouts],
        "error": [_error_head(rollout) for rollout in rollouts],
        "score": [score_text(rollout.score) for rollout in rollouts],
        "chunk": CHUNK,
        "fields": FIELDS,
        "scores": {name: _score_column(rollouts, name) for name in names},
    }
    rows_of = dict(zip(labels, range(len(labels)), strict=True))
    return _Rows(data=data, blocks=blocks, statuses=Counter(status), rows_of=rows_of)


# -- the summary -----------------------------------------------------------------------


def _card(value: object, what: str, detail: str = "") -> str:
    more = f"<small>{_text(detail)}</small>" if detail else ""
    return f'<div class="card"><b>{_text(value)}</b><span>{_text(what)}</span>{more}</div>'


def _stats_card(name: str, stats: ScoreStats, unit: str) -> str:
    detail = f"over {stats.n:,} {unit}"
    if stats.clustered:
        detail = f"task-weighted, {detail} of {stats.tasks:,} tasks"
    if stats.ci95 is not None:
        low, high = stats.ci95
        detail = f"95% CI {_number(low)} to {_number(high)}, {detail}"
    return _card(_number(stats.mean), f"mean {name}", detail)


def _mean_text(stats: ScoreStats) -> str:
    """A score's mean as the histogram's caption names it (the card's number)."""
    return f"{_number(stats.mean)} (task-weighted)" if stats.clustered else _number(stats.mean)


def _unended(run: RunView, running: bool) -> str:
    """What the page says of a run whose latest session has not written its end.

    Killed (no session holds the directory): what it planned and how far
    it got, from ``run.json``'s settings and the rows, and the command that
    resumes it. Still running: that the page shows its rows so far.
    """
    summary = run.summary
    assert summary is not None
    recorded = len(run.rollouts)
    ok = sum(1 for rollout in run.rollouts if rollout.status == "ok")
    seen = len({rollout.task_id for rollout in run.rollouts})
    holds = f"results.jsonl holds {recorded:,} rollouts ({ok:,} ok) of {seen:,} tasks"
    if running:
        return (
            f'<p class="killed"><b>Running.</b> A session is running it now: this page '
            f"shows what it had written when the page was made; {holds}.</p>"
        )
    config = summary.config
    rollouts = config.get("rollouts")
    tasks = config.get("num_tasks")
    per_task = rollouts if isinstance(rollouts, int) and not isinstance(rollouts, bool) else 1
    planned = summary.counts.get("planned", 0)
    if isinstance(tasks, int) and not isinstance(tasks, bool):
        plan = f"{tasks:,} tasks \u00d7 {per_task:,} rollouts ({tasks * per_task:,} rollouts)"
    elif planned:
        plan = f"{planned:,} rollouts so far ({per_task:,} per task)"
    else:
        plan = f"{per_task:,} rollout{'s' if per_task != 1 else ''} of every task of its taskset"
    target = config.get("target")
    if isinstance(target, str):
        resume = (
            f"Resume it with <code>{_text(resume_command(str(run.directory)))}</code>: "
            "only the rollouts without an ok row run again."
        )
    else:
        resume = (
            "Resume it by calling <code>evaluate()</code> again with the same environment, "
            f"<code>output_dir={_text(repr(str(run.directory)))}</code> and "
            "<code>resume=True</code>."
        )
    return (
        '<p class="killed"><b>Killed.</b> Its last session never wrote its end to run.json, '
        f"and no session holds it. It planned {_text(plan)}; {holds}. {resume}</p>"
    )


def _summary(
    run: RunView, statuses: Counter[str], stats: Mapping[str, ScoreStats], running: bool
) -> str:
    summary = run.summary
    cards = [_card(f"{len(run.rollouts):,}", "rollouts recorded")]
    cards.extend(_card(f"{count:,}", status) for status, count in sorted(statuses.items()))
    if summary is not None:
        for name in ("planned", "resumed", "abandoned", "cut_short"):
            if summary.counts.get(name):
                cards.append(_card(f"{summary.counts[name]:,}", name.replace("_", " ")))
    cards.extend(_stats_card(name, found, "rollouts") for name, found in stats.items())
    facts: list[tuple[str, str]] = []
    if summary is not None:
        if summary.environment:
            facts.append(("environment", summary.environment))
        unended = "none yet: running" if running else "none: killed"
        facts.append(("stop reason", summary.stop_reason or unended))
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
        if summary.version:
            facts.append(("written by", f"sluicegate {summary.version}"))
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
    killed = _unended(run, running) if summary is not None and not run.ended else ""
    return f'{killed}<div class="cards">{"".join(cards)}</div>{_facts(facts)}'


def _facts(facts: Iterable[tuple[str, str]]) -> str:
    return (
        '<table class="kv">'
        + "".join(f"<tr><th>{_text(key)}</th><td>{_text(value)}</td></tr>" for key, value in facts)
        + "</table>"
    )


def _setting(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=repr)


def _configuration(run: RunView) -> str:
    """Every setting ``run.json`` records, each ``-T`` argument on a line of its own."""
    config = run.summary.config if run.summary is not None else {}
    facts: list[tuple[str, str]] = []
    for key, value in config.items():
        if key == "task_args" and isinstance(value, Mapping) and value:
            facts.extend((f"-T {name}", _setting(argument)) for name, argument in value.items())
        else:
            facts.append((str(key), _setting(value)))
    if not facts:
        return '<p class="muted">run.json records no configuration.</p>'
    return _facts(facts)


def _reduced(run: RunView) -> tuple[str, str | None]:
    """The per-task reduced table's section and its data, when the run reduced.

    Its tasks in natural order (``t2`` before ``t10``).
    """
    tasks = sorted(run.tasks, key=lambda task: natural_key(task.task_id))
    if not tasks:
        return "", None
    names: dict[str, None] = {}
    for task in tasks:
        names.update(dict.fromkeys(task.reduced))
    rows: list[dict[str, Any]] = []
    columns: dict[str, dict[str, list[float]]] = {name: {} for name in names}
    for task in tasks:
        values = [finite(task.reduced.get(name)) for name in names]
        for name, value in zip(names, values, strict=True):
            if value is not None:
                columns[name][task.task_id] = [value]
        rows.append({"task": task.task_id, "rollouts": task.rollouts, "values": values})
    recorded = run.summary.reduced if run.summary is not None else {}
    cards = []
    for name, by_task in columns.items():
        stats = recorded.get(name)
        if stats is None or stats.n != len(by_task):
            stats = task_stats(by_task)
        if stats is not None:
            cards.append(_stats_card(name, stats, "tasks"))
    section = (
        f'<div class="cards">{"".join(cards)}</div>'
        '<div class="tablewrap tall"><table id="tasks" class="grid"></table>'
        '<button type="button" id="tasks-more" class="edge" hidden></button></div>'
    )
    return section, _json_block("tasks-data", {"names": list(names), "rows": rows})


# -- the timeline and the table --------------------------------------------------------


def _legend(window: bool) -> str:
    items = [
        f'<span><i style="background:{colour}"></i>{name}</span>'
        for name, colour in COLOURS.items()
    ]
    items.extend(
        f'<span><i class="line" style="border-color:{colour};border-top-style:{style}"></i>'
        f"{name}</span>"
        for name, (colour, style) in MARKS.items()
    )
    if window:
        items.append(
            f'<span><i class="line" style="border-color:{WINDOW_COLOUR}"></i>window size</span>'
        )
    return f'<div class="legend">{"".join(items)}</div>'


def _timeline(
    placed: Placed | None, problem: str | None, run: RunView, rows_of: Mapping[str, int]
) -> str:
    if placed is None:
        return f'<p class="muted">{_text(problem)}</p>'
    total = placed.elapsed
    outcomes = placed.outcomes
    line = ", ".join(f"{count} {outcome}" for outcome, count in sorted(outcomes.items()))
    sessions = f" in {placed.traced} sessions" if placed.traced > 1 else ""
    hint = " Click a run's bar to open its row." if run.rollouts else ""
    # A session run without --trace left no timeline: the picture says so.
    recorded = run.summary.sessions if run.summary is not None else None
    return (
        f'<p class="muted">{sum(outcomes.values())} runs over {total:.3g} s{sessions} '
        f"in {placed.slots} slots: {_text(line) or 'none'}.{hint}</p>"
        + _legend(bool(placed.window))
        + timeline_svg(placed, sessions=recorded, rows_of=rows_of)
    )


_COLUMNS: Final = (
    ("task", "task id", ""),
    ("rollout", "rollout", "num"),
    ("status", "status", ""),
    ("score", "score", ""),
    ("attempts", "attempts", "num"),
    ("duration", "duration", "num"),
    ("error", "error", ""),
)


def _table(run: RunView, statuses: Counter[str]) -> str:
    if not run.rollouts:
        return '<p class="muted">No rollouts recorded (results.jsonl is missing or empty).</p>'
    buttons = [
        f'<button type="button" data-filter="all" aria-pressed="true">'
        f"all ({len(run.rollouts)})</button>"
    ]
    buttons.extend(
        f'<button type="button" data-filter="{_text(status)}" aria-pressed="false">'
        f"{_text(status)} ({count})</button>"
        for status, count in sorted(statuses.items())
    )
    # Not a table to assistive technology (the rows are disclosure widgets):
    # the headers are sort buttons that say their order in their name.
    headers = "".join(
        f'<div class="{kind}" data-sort="{key}" data-order="none">'
        f'<button type="button" aria-label="{name}: sort">{name}</button></div>'
        if key != "error"
        else f"<div>{name}</div>"
        for key, name, kind in _COLUMNS
    )
    return (
        '<div class="rollouts" id="rollouts" role="region" aria-label="rollouts">'
        '<div class="sticky">'
        '<div class="controls" role="search">'
        + "".join(buttons)
        + '<input id="search" type="search" placeholder="search task id" '
        'aria-label="search task id" autocomplete="off">'
        '<input id="errsearch" type="search" placeholder="search error text" '
        'aria-label="search error text" autocomplete="off">'
        '<span class="range"><select id="score-name" aria-label="score to filter and sort by">'
        "</select>"
        '<input id="score-min" type="number" step="any" placeholder="min" '
        'aria-label="lowest score shown">'
        '<input id="score-max" type="number" step="any" placeholder="max" '
        'aria-label="highest score shown"></span>'
        '<span id="shown" class="muted" role="status"></span></div>'
        f'<div class="rh" role="group" aria-label="columns">{headers}</div></div>'
        '<button type="button" id="earlier" class="edge" hidden></button>'
        '<div id="rows"></div>'
        '<button type="button" id="later" class="edge" hidden></button>'
        '</div><p id="none" class="empty" hidden>No rollout matches.</p>'
        '<noscript><p class="muted">The rollouts are listed by the page\'s script: '
        "allow scripts for this file to see them.</p></noscript>"
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


def where(directory: Path, output: Path) -> str:
    """``directory`` as seen from the folder ``output`` is written in."""
    relative = Path(os.path.relpath(directory.resolve(), output.resolve().parent))
    return "this folder" if relative == Path(".") else relative.as_posix()


def render(directory: Path, output: Path) -> str:
    """The report page of ``directory``, to be written at ``output``, as a string.

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
    running = summary is not None and not run.ended and SessionLock.held(directory)
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
    elif summary is not None:
        badge = f'<span class="badge killed">{"running" if running else "killed"}</span>'
    placed = place(timelines) if timelines is not None else None
    rows = _rows_data(run, _slots(placed)) if run.rollouts else None
    statuses = rows.statuses if rows is not None else Counter[str]()
    groups = run.score_groups()
    stats = run.score_stats(groups)
    sections = []
    data = []
    if run.is_eval:
        sections.append(f"<h2>Summary</h2>{_summary(run, statuses, stats, running)}")
        sections.append(
            f'<details class="section"><summary><h2>Configuration</h2></summary>'
            f"{_configuration(run)}</details>"
        )
    rows_of = rows.rows_of if rows is not None else {}
    sections.append(f"<h2>Timeline</h2>{_timeline(placed, problem, run, rows_of)}")
    series = run.score_series()
    if series:
        means = {name: _mean_text(found) for name, found in stats.items()}
        sections.append(f'<h2>Scores</h2><div class="hists">{histograms_svg(series, means)}</div>')
    reduced, tasks = _reduced(run)
    if tasks is not None:
        sections.append(f"<h2>Tasks</h2>{reduced}")
        data.append(tasks)
    if run.is_eval:
        sections.append(f"<h2>Rollouts</h2>{_table(run, statuses)}")
    if rows is not None:
        data.append(_json_block("rows-data", rows.data))
    header = (
        f"<h1>{_text(title)} {badge}</h1>"
        f'<div class="muted">run directory: <code>{_text(where(directory, output))}</code></div>'
    )
    return page(
        title, header, "".join(sections), data=data, late=rows.blocks if rows is not None else ()
    )


def write_report(
    directory: str | os.PathLike[str], output: str | os.PathLike[str] | None = None
) -> Path:
    """Write the HTML report of a run directory.

    Args:
        directory: An evaluation's run directory, or any directory with a trace.
        output: Where to write: a ``.html`` file, or a directory to write
            ``report.html`` in; default ``DIRECTORY/report.html``.

    Returns:
        The path written.

    Raises:
        FileNotFoundError: ``directory`` does not exist or holds nothing to
            report, or the folder ``output`` goes in does not exist.
        ValueError: ``output`` names a file that is not ``.html`` (or ``.htm``).
        OSError: the report cannot be written.
    """
    directory = Path(directory)
    path = page_path(directory, output, REPORT)
    write_atomically(path, render(directory, path))
    return path
