"""``sluicegate report RUN_A RUN_B``: one HTML page comparing two runs.

The numbers are :func:`sluicegate.eval.compare_runs`'s, the same that
``sluicegate compare`` prints: the settings that differ; per score both
means with their intervals, the paired difference with its own and the
verdict in the same words (:data:`~sluicegate.eval._compare.VERDICT_WORDS`);
the tasks that changed, worst first, each once with its changes side by
side (a task every rollout of which errored in one run is a change); the
tasks only one run has, counted apart. The
page adds what a terminal cannot: each changed task opens to its samples in
both runs, side by side (embedded as JSON and drawn by the report's script,
like the report's rows), drawn once however many of its scores changed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Final

from .._util import write_atomically
from ..eval._compare import VERDICT_WORDS, Comparison, ScoreComparison, compare_runs
from ..eval._stats import ScoreStats
from ._html import (
    CHUNK,
    FIELDS,
    page,
    page_path,
    row_facts,
    sample_block,
    sample_of,
    where,
)
from ._run import Rollout, RunView, natural_key, read_run
from ._text import embed_json, html_text

__all__ = ["COMPARE", "write_comparison"]

COMPARE: Final = "compare.html"
# Task ids listed one by one when only one run has them; the rest are counted.
_LISTED: Final = 200
# A task's change when every rollout of it errored in one run.
_ERRORED: Final = "every rollout errored"

_text = html_text


def _number(value: float) -> str:
    return f"{value:.4g}"


def _stats(stats: ScoreStats | None, signed: bool = False) -> str:
    if stats is None:
        return '<span class="muted">-</span>'
    mean = f"{stats.mean:+.4g}" if signed else _number(stats.mean)
    interval = ""
    if stats.ci95 is not None:
        low, high = stats.ci95
        interval = f' <span class="muted">[{_number(low)}, {_number(high)}]</span>'
    return f"{mean}{interval}"


def _verdict(score: ScoreComparison) -> str:
    """The verdict in the words ``sluicegate compare`` prints (one wording, eval's)."""
    found = score.verdict
    kind = found if found in ("worse", "better") else "muted"
    return f'<span class="{kind}">{_text(VERDICT_WORDS[found])}</span>'


def _scores(comparison: Comparison) -> str:
    if not comparison.scores:
        return '<p class="muted">Neither run has a score.</p>'
    rows = "".join(
        f"<tr><td>{_text(score.name)}</td><td>{_stats(score.a)}</td><td>{_stats(score.b)}</td>"
        f"<td>{_stats(score.difference, signed=True)}</td><td>{_verdict(score)}</td></tr>"
        for score in comparison.scores
    )
    return (
        '<div class="tablewrap"><table class="grid scores">'
        "<tr><th>score</th><th>A: mean [95% CI]</th><th>B: mean [95% CI]</th>"
        "<th>B \u2212 A, paired [95% CI]</th><th></th></tr>"
        f"{rows}</table></div>"
    )


def _only(ids: Sequence[str], run: str) -> str:
    if not ids:
        return ""
    ids = sorted(ids, key=natural_key)
    listed = ", ".join(_text(task) for task in ids[:_LISTED])
    more = f", and {len(ids) - _LISTED} more" if len(ids) > _LISTED else ""
    return (
        f"<details><summary>{len(ids):,} task(s) only in {run}</summary>"
        f'<p class="u">{listed}{more}</p></details>'
    )


def _samples(
    view: RunView, tasks: Iterable[str], prefix: str
) -> tuple[dict[str, list[int]], list[str]]:
    """The rows of ``tasks`` in ``view`` as blocks of samples, and each task's indices in them.

    Each sample is the report's (:func:`~._html.sample_of`) with ``row``:
    what the report's row shows of it (:func:`~._html.row_facts`).
    """
    wanted = set(tasks)
    by_task: dict[str, list[Rollout]] = {}
    for rollout in view.rollouts:
        if rollout.task_id in wanted:
            by_task.setdefault(rollout.task_id, []).append(rollout)
    indices: dict[str, list[int]] = {}
    entries: list[dict[str, Any]] = []
    for task, rollouts in by_task.items():
        rollouts.sort(key=lambda rollout: rollout.rollout)
        indices[task] = list(range(len(entries), len(entries) + len(rollouts)))
        entries.extend(
            {**sample_of(rollout, None), "row": row_facts(rollout)} for rollout in rollouts
        )
    blocks = [
        sample_block(f"{prefix}{number}", entries[start : start + CHUNK])
        for number, start in enumerate(range(0, len(entries), CHUNK))
    ]
    return indices, blocks


def _changes(
    comparison: Comparison, in_a: dict[str, list[int]], in_b: dict[str, list[int]]
) -> list[dict[str, Any]]:
    """One entry per changed task, its changes side by side, worst first (as compare lists them).

    First the tasks every rollout of which errored in B (and not in A), then
    the tasks whose values changed (``comparison.changed`` comes worst
    first, so a task stands where its worst change does), then those every
    rollout of which errored in A. ``rows_a`` and ``rows_b`` are the task's
    samples in each run.
    """
    entries: dict[str, dict[str, Any]] = {}

    def entry(task: str) -> list[dict[str, Any]]:
        if task not in entries:
            entries[task] = {
                "task": task,
                "scores": [],
                "rows_a": in_a.get(task, []),
                "rows_b": in_b.get(task, []),
            }
        found: list[dict[str, Any]] = entries[task]["scores"]
        return found

    for task in comparison.errored_b:
        entry(task).append({"name": "status", "a": "ok", "b": _ERRORED, "delta": "", "worse": True})
    for change in comparison.changed:
        entry(change.task_id).append(
            {
                "name": change.name,
                "a": _number(change.a),
                "b": _number(change.b),
                "delta": f"{change.delta:+.4g}",
                "worse": change.delta < 0,
            }
        )
    for task in comparison.errored_a:
        entry(task).append(
            {"name": "status", "a": _ERRORED, "b": "ok", "delta": "", "worse": False}
        )
    return list(entries.values())


def _settings(comparison: Comparison) -> str:
    """The settings that differ between the runs, as ``sluicegate compare`` names them."""
    if not comparison.settings:
        return ""
    rows = "".join(
        f"<tr><td>{_text(name)}</td><td>{_text(a)}</td><td>{_text(b)}</td></tr>"
        for name, (a, b) in comparison.settings.items()
    )
    return (
        "<h2>Settings that differ</h2>"
        '<div class="tablewrap"><table class="grid settings">'
        f"<tr><th>setting</th><th>A</th><th>B</th></tr>{rows}</table></div>"
    )


def render_comparison(
    comparison: Comparison, view_a: RunView, view_b: RunView, output: Path
) -> str:
    """The comparison page, to be written at ``output``, as a string."""
    name_a = where(comparison.run_a, output)
    name_b = where(comparison.run_b, output)
    tasks = {change.task_id for change in comparison.changed}
    tasks.update(comparison.errored_a, comparison.errored_b)
    in_a, blocks_a = _samples(view_a, tasks, "a-sample-")
    in_b, blocks_b = _samples(view_b, tasks, "b-sample-")
    changes = _changes(comparison, in_a, in_b)
    data = {
        "names": [f"A: {name_a}", f"B: {name_b}"],
        "chunk": CHUNK,
        "fields": FIELDS,
        "changes": changes,
    }
    worse = sum(1 for entry in changes if any(score["worse"] for score in entry["scores"]))
    shared = (
        f"<p>{comparison.shared:,} task(s) in both runs: the differences pair them. "
        f"{len(comparison.only_a):,} only in A and {len(comparison.only_b):,} only in B "
        "are counted apart.</p>" + _only(comparison.only_a, "A") + _only(comparison.only_b, "B")
    )
    listing = (
        f'<p class="muted">{len(changes):,} task(s) changed, {worse:,} for the worse in some '
        "score; worst regression first. Open one to see its samples in both runs side by "
        "side.</p>"
        '<div class="changes" id="changes" aria-label="changed tasks">'
        '<div class="head"><span>task id</span><span>score</span><span class="num">A</span>'
        '<span class="num">B</span><span class="num">B \u2212 A</span></div></div>'
        '<button type="button" id="changes-more" class="edge" hidden></button>'
        if changes
        else '<p class="muted">No shared task changed its value.</p>'
    )
    body = (
        f"{_settings(comparison)}<h2>Scores</h2>{_scores(comparison)}"
        f"<h2>Tasks</h2>{shared}<h2>Changed tasks</h2>{listing}"
    )
    header = (
        "<h1>B against A</h1>"
        f'<div class="muted">A (the baseline): <code>{_text(name_a)}</code> \u00b7 '
        f"B: <code>{_text(name_b)}</code></div>"
    )
    data_blocks = [f'<script type="application/json" id="compare-data">{embed_json(data)}</script>']
    return page(
        f"{name_b} against {name_a}", header, body, data=data_blocks, late=[*blocks_a, *blocks_b]
    )


def write_comparison(
    run_a: str | os.PathLike[str],
    run_b: str | os.PathLike[str],
    output: str | os.PathLike[str] | None = None,
) -> Path:
    """Write one HTML page comparing run B against run A (the baseline).

    Args:
        run_a: The baseline's run directory.
        run_b: The candidate's run directory.
        output: Where to write: a ``.html`` file, or a directory to write
            ``compare.html`` in; default ``RUN_B/compare.html``.

    Returns:
        The path written.

    Raises:
        FileNotFoundError: a directory does not exist, or the folder
            ``output`` goes in does not.
        ValueError: a directory holds no run, or ``output`` names a file
            that is not ``.html`` (or ``.htm``).
        OSError: the page cannot be written.
    """
    a, b = Path(run_a), Path(run_b)
    if not a.is_dir():
        raise FileNotFoundError(f"{a} is not a directory")
    path = page_path(b, output, COMPARE)
    comparison = compare_runs(a, b)
    text = render_comparison(comparison, read_run(a), read_run(b), path)
    write_atomically(path, text)
    return path
