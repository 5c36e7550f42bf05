"""The plot, the report and ``sluicegate trace`` on the awkward runs.

A resumed run whose first session was killed, a run of many slots with
drains and failures, odd rows, and files that are not what they claim.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from observe_runs import embedded, fields, png_size, samples, write_eval_run
from sluicegate import Timeline
from sluicegate._trace import TRACE, TRACE_LOG, recording
from sluicegate.cli import main
from sluicegate.report import plot, write_report


class Boom(Exception):
    pass


def killed_then_resumed(directory: Path) -> None:
    """Session 1: 30 slots, a drain, then killed with 3 runs going; session 2 fails."""

    async def first() -> None:
        timeline = Timeline(
            label=lambda n: None if n == 0 else f"task-{n}", log=directory / TRACE_LOG
        )
        for index in range(30):
            timeline.pulled(index, index)
            timeline.started(index)
        await trio.sleep(1)
        for index in range(27):
            timeline.finished(index, None)
        timeline.marked("drain")
        timeline.pulled(30, 30)  # taken as the drain landed, never run
        await trio.sleep(1)
        # SIGKILL: no close, no finish for items 27, 28 and 29.

    async def second() -> None:
        with recording(directory, label=str) as timeline:
            for index in range(3):
                timeline.pulled(index, index)
                timeline.started(index)
            await trio.sleep(2)
            timeline.finished(0, Boom())
            timeline.marked("failure")
            timeline.finished(1, CANCELLED)
            timeline.finished(2, CANCELLED)
            timeline.marked("close")

    clock = trio.testing.MockClock(autojump_threshold=0)
    trio.run(first, clock=clock)
    trio.run(second, clock=trio.testing.MockClock(autojump_threshold=0))


def cancelled() -> trio.Cancelled:
    caught: list[trio.Cancelled] = []

    async def main() -> None:
        with trio.CancelScope() as scope:
            scope.cancel()
            try:
                await trio.sleep_forever()
            except trio.Cancelled as exc:
                caught.append(exc)
                raise

    trio.run(main)
    return caught[0]


CANCELLED = cancelled()


def test_trace_of_a_killed_then_resumed_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    killed_then_resumed(tmp_path)
    first, second = Timeline.read(tmp_path)
    assert [span.index for span in first.unfinished()] == [27, 28, 29]
    # Item 30 was pulled and never started: a pull alone is not written to
    # the log (close() would have), so the killed session does not know it.
    assert [span.index for span in first.spans] == list(range(30))
    assert [span.outcome for span in second.spans] == ["error", "cancelled", "cancelled"]
    assert main(["trace", str(tmp_path), "--anomalies"]) == 1
    out = capsys.readouterr().out
    assert "3 run(s) started and never finished" in out
    assert all(f"task-{index}\n" in out for index in (27, 28, 29))
    assert main(["trace", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    # The log's last event in session 1 is the drain: a killed run's log
    # knows nothing after its last line.
    assert "session 1: 30 items over 1.000 s in 30 slots" in out
    assert "session 2: 3 items over 2.000 s in 3 slots" in out
    assert "  drain at 1.000 s" in out and "  failure at 2.000 s" in out

    events = json.loads((tmp_path / TRACE).read_text())["traceEvents"]
    unfinished = [e for e in events if e["ph"] == "X" and e["args"]["outcome"] == "unfinished"]
    # An unfinished run is drawn until the last event of its session.
    assert [(e["pid"], e["ts"], e["dur"]) for e in unfinished] == [(1, 0.0, 1e6)] * 3
    assert {e["pid"] for e in events if e["ph"] == "X" and e["args"]["outcome"] == "error"} == {2}


def test_plot_and_report_of_a_killed_then_resumed_run(tmp_path: Path) -> None:
    killed_then_resumed(tmp_path)
    width, height = png_size(plot(tmp_path, tmp_path / "t.png"))
    assert width > 900 and height > 500
    page = write_report(tmp_path).read_text(encoding="utf-8")
    assert "33 runs over 3 s in 2 sessions in 30 slots" in page
    assert "a later session starts" in page
    assert "30 slots</text>" in page  # too many rows to name each
    for what in ("drain at 1 s", "failure at", "close at"):
        assert what in page
    assert 'class="rollouts"' not in page  # a trace alone: no table


def test_report_of_odd_rows(tmp_path: Path) -> None:
    write_eval_run(tmp_path, 6, trace=False)
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    rows[0]["score"] = {"exact": 1.0, "f1": float("nan")}
    rows[1]["duration_s"] = 1234.5
    rows[1]["result"] = "Thing(size=1, parts=[..."
    rows[1]["encoding"] = {"result": {"repr": True, "truncated": True, "length": 99999}}
    rows[2]["duration_s"] = None
    rows[3]["error"] = {"type": "RuntimeError", "message": "x" * 500}
    rows[3]["status"] = "error"
    rows[4]["error"] = {"type": "KeyError", "message": "line one\nline two"}
    rows[4]["status"] = "error"
    rows[5]["status"] = "skipped"
    rows[5]["result"] = {"n": float("inf")}
    lines = [json.dumps(row) for row in rows] + ['{"rollout": 1}', "[1, 2]"]
    (tmp_path / "results.jsonl").write_text("\n".join(lines) + "\n")
    record = json.loads((tmp_path / "run.json").read_text())
    record.update(passed=None, stop_reason="failed", sessions=[{}, {}])
    (tmp_path / "run.json").write_text(json.dumps(record))

    page = write_report(tmp_path).read_text(encoding="utf-8")
    data = embedded(page, "rows-data")
    assert data["score"][0] == "exact=1, f1=nan"
    # JSON has no NaN: a score that is not finite is shown, and neither sorts nor filters.
    assert data["scores"]["exact"][0] == 1.0 and data["scores"]["f1"][0] is None
    assert data["duration"][1:3] == [1234.5, None]
    assert "2 line(s) that are not rows skipped" in page
    # The row's error is cut; the opened row has all of it.
    assert data["error"][3] == ("RuntimeError: " + "x" * 500)[:400]
    assert samples(page)[3]["errors"] == [{"type": "RuntimeError", "message": "x" * 500}]
    assert data["error"][4] == "KeyError: line one\nline two"
    # A result JSON cannot hold (a hand-edited row) is shown as its repr.
    assert fields(page, samples(page)[5])["result"] == ["{'n': inf}"]
    # How a value was written when not as itself.
    assert fields(page, samples(page)[1])["result"] == [
        "Thing(size=1, parts=[...",
        "its repr(), cut: the whole was 99,999 characters",
    ]
    assert '<span class="badge">failed</span>' in page
    assert "2 (resumed)" in page
    assert 'data-filter="skipped"' in page


def test_report_shows_odd_text_inert_and_keeps_every_row(tmp_path: Path) -> None:
    """A lone surrogate, a bidi override, a script end: each row still shown, none active."""
    write_eval_run(tmp_path, 4)
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    rows[0]["task_id"] = "bytes \udcff here"
    rows[1]["task_id"] = "abc\u202edcba"
    rows[2]["error"] = {
        "type": "OSError",
        "message": "bad \udc80 name </script><!--",
        "traceback": None,
    }
    rows[2]["status"] = "error"
    rows[3]["result"] = "zero\u200bwidth \ud800 tag\U000e0041"
    # eval writes such text as \u escapes; json.dumps does the same.
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    record = json.loads((tmp_path / "run.json").read_text())
    record["environment"] = "env \udcfe"
    (tmp_path / "run.json").write_text(json.dumps(record))

    page = write_report(tmp_path).read_bytes().decode("utf-8")  # strict: no surrogate written
    data = embedded(page, "rows-data")
    assert data["task"][:2] == ["bytes \\udcff here", "abc\\u202edcba"]
    assert data["error"][2] == "OSError: bad \\udc80 name </script><!--"
    assert fields(page, samples(page)[3])["result"] == ["zero\\u200bwidth \\ud800 tag\\U000e0041"]
    assert "\u202e" not in page and "\u200b" not in page
    assert "env \\udcfe" in page


def test_report_of_an_unreadable_run_json_and_a_broken_trace(tmp_path: Path) -> None:
    write_eval_run(tmp_path, 4)
    (tmp_path / "run.json").write_text("[1, 2, 3]")
    (tmp_path / TRACE_LOG).write_text("not a log\n")
    page = write_report(tmp_path).read_text(encoding="utf-8")
    assert "missing or unreadable" in page
    assert "The trace could not be read" in page
    assert len(embedded(page, "rows-data")["task"]) == 4


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('["s",0,0.0,0.0,0,null]\n["f",0,1.0,0]\n', "an event before the first header"),
        ("# a comment\n", "no header line"),
        (
            '{"sluicegate_trace": 1, "started_at": "2024-01-01T00:00:00+00:00", "pid": 1}\n'
            '["z",0]\n["m","close",1.0]\n',
            "unknown event kind 'z'",
        ),
    ],
)
def test_logs_that_are_not_ours(tmp_path: Path, text: str, message: str) -> None:
    log = tmp_path / "x.jsonl"
    log.write_text(text)
    with pytest.raises(ValueError, match=message):
        Timeline.read(log)


def test_a_chrome_trace_of_another_format(tmp_path: Path) -> None:
    other = {"traceEvents": [], "otherData": {"format": "other/2", "sessions": []}}
    (tmp_path / "t.json").write_text(json.dumps(other))
    with pytest.raises(ValueError, match="'other/2'"):
        Timeline.read(tmp_path / "t.json")


def test_a_log_on_a_full_disk_stops_logging_and_recording_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full")

    async def go() -> Timeline:
        timeline = Timeline(log="/dev/full")
        with caplog.at_level(logging.ERROR, logger="sluicegate"):
            timeline.pulled(0, 0)
            timeline.started(0)
            timeline.finished(0, None)
        timeline.close()
        return timeline

    timeline = trio.run(go)
    assert [span.outcome for span in timeline.spans] == ["ok"]
    assert "cannot write the event log /dev/full; stopped logging" in caplog.text


def unwritable(path: Path) -> None:
    """Make writing the file ``path`` fail for real, even as root: a directory stands there."""
    path.mkdir()


async def test_recording_logs_a_trace_it_cannot_write(
    autojump_clock: Any,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    unwritable(tmp_path / TRACE)
    with caplog.at_level(logging.ERROR, logger="sluicegate"), recording(tmp_path) as timeline:
        timeline.pulled(0, 0)
        timeline.started(0)
        timeline.finished(0, None)
    assert "could not write" in caplog.text
    assert (tmp_path / TRACE).is_dir()  # nothing replaced what stood there
    assert [span.outcome for span in Timeline.read(tmp_path)[0].spans] == ["ok"]


def test_trace_command_says_when_it_cannot_rebuild_the_trace(tmp_path: Path) -> None:
    write_eval_run(tmp_path, 3)
    (tmp_path / TRACE).unlink()
    # A full disk, for real: the command runs with a file-size limit of 0.
    limited = (
        "import resource, signal, sys; from sluicegate.cli import main; "
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
        "resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.RLIM_INFINITY)); "
        "sys.exit(main(sys.argv[1:]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", limited, "trace", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "3 items" in done.stdout
    assert f"could not write {tmp_path / TRACE}" in done.stderr
    assert not (tmp_path / TRACE).exists()


def test_plot_and_report_of_a_run_that_ran_nothing(tmp_path: Path) -> None:
    write_eval_run(tmp_path, 0, trace=False)

    async def nothing() -> None:
        with recording(tmp_path):
            pass

    trio.run(nothing)
    assert (tmp_path / TRACE_LOG).read_text() == ""
    (empty,) = Timeline.read(tmp_path)
    assert (empty.spans, empty.marks, empty.end) == ([], [], 0.0)
    assert png_size(plot(tmp_path, tmp_path / "t.png"))[0] > 900
    page = write_report(tmp_path).read_text(encoding="utf-8")
    assert "0 runs over 0 s in 0 slots: none." in page
    assert "No rollouts recorded" in page


def test_plot_of_several_scores_and_a_bare_run_json(tmp_path: Path) -> None:
    write_eval_run(tmp_path, 30)
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    for number, row in enumerate(rows):
        row["score"] = {"exact": float(number % 2), "f1": number / 30}
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (tmp_path / "run.json").write_text(json.dumps({"environment": "bare"}))
    width, _ = png_size(plot(tmp_path, tmp_path / "t.png"))
    assert width > 1100  # the score panel is there


async def test_report_of_a_resumed_run_counts_the_latest_row_of_each_rollout(
    tmp_path: Path, autojump_clock: Any
) -> None:
    from sluicegate import Task, Taskset
    from sluicegate.eval import evaluate

    outage = True

    class Env:
        taskset = Taskset.from_iterable([Task(input=n) for n in range(4)])

        async def run(self, task: Task) -> int:
            if outage and task.input % 2:
                raise ConnectionError("upstream down")
            return int(task.input)

        def score(self, task: Task, result: int) -> float:
            return 1.0

    out = tmp_path / "fo"
    first = await evaluate(Env(), output_dir=out, fail_on_error=10)
    assert first.errors == 2
    outage = False
    again = await evaluate(Env(), output_dir=out, resume=True)
    assert (again.passed, again.ok, again.errors) == (True, 4, 0)
    assert len((out / "results.jsonl").read_text().splitlines()) == 6

    page = write_report(out).read_text(encoding="utf-8")
    assert "<b>4</b><span>rollouts recorded</span>" in page
    assert "<b>4</b><span>ok</span>" in page
    assert "<span>error</span>" not in page
    assert "errors by type" not in page and 'data-filter="error"' not in page
    assert "upstream down" not in page
    assert "2 earlier row(s) of rollouts a resume ran again" in page
    assert len(embedded(page, "rows-data")["task"]) == 4


def test_anomalies_leave_out_runs_a_later_session_ran_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A killed session's unfinished runs, all run again by the resume: no anomaly left."""

    async def killed() -> None:
        timeline = Timeline(label=lambda n: f"t{n} #0", log=tmp_path / TRACE_LOG)
        for index in range(3):
            timeline.pulled(index, index)
            timeline.started(index)
        await trio.sleep(1)
        timeline.finished(0, None)
        # SIGKILL: t1 #0 and t2 #0 never finish.

    async def resumed(labels: list[str]) -> None:
        with recording(tmp_path, label=lambda n: labels[n]) as timeline:
            for index in range(len(labels)):
                timeline.pulled(index, index)
                timeline.started(index)
            await trio.sleep(1)
            for index in range(len(labels)):
                timeline.finished(index, None)

    trio.run(killed, clock=trio.testing.MockClock(autojump_threshold=0))
    trio.run(resumed, ["t1 #0"], clock=trio.testing.MockClock(autojump_threshold=0))
    (tmp_path / TRACE).unlink(missing_ok=True)
    assert main(["trace", str(tmp_path), "--anomalies"]) == 1
    out = capsys.readouterr().out
    assert "1 run(s) started and never finished" in out and "t2 #0" in out
    assert "t1 #0" not in out
    assert "(1 unfinished in an earlier session ran again in a later one)" in out

    trio.run(resumed, ["t2 #0"], clock=trio.testing.MockClock(autojump_threshold=0))
    assert main(["trace", str(tmp_path), "--anomalies"]) == 0
    out = capsys.readouterr().out
    assert "no anomalies: every run that started finished (2 unfinished in an earlier" in out


def rewrite_rows(directory: Path, change: Any) -> None:
    """Apply ``change(number, row)`` to every row of ``directory``'s results.jsonl."""
    path = directory / "results.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for number, row in enumerate(rows):
        change(number, row)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


LONE = "bad\ud800id"


def write_run_with_lone_surrogates(directory: Path) -> None:
    """A run whose task ids and error messages hold lone surrogates, as eval writes them."""
    from observe_runs import Planned, record_trace

    write_eval_run(directory, 12, trace=False)

    def change(number: int, row: dict[str, Any]) -> None:
        if number == 0:
            row["task_id"] = LONE
        if row["error"] is not None:
            row["error"]["message"] = "message \udcff here"

    rewrite_rows(directory, change)
    plan = [
        Planned(LONE if n == 0 else f"t{n}", 0, 0.5, "oops \udcff" if n == 5 else None)
        for n in range(12)
    ]
    record_trace(directory, plan, 4)


def test_plot_and_the_report_pictures_of_a_run_with_lone_surrogates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_run_with_lone_surrogates(tmp_path)
    page = write_report(tmp_path).read_text(encoding="utf-8")
    timeline = page[page.index('<svg class="timeline"') :]
    assert "<title>bad\\ud800id #0 (item 0)" in timeline[: timeline.index("</svg>")]
    assert main(["plot", str(tmp_path), "-o", str(tmp_path / "t.svg")]) == 0
    assert main(["plot", str(tmp_path)]) == 0
    assert png_size(tmp_path / "timeline.png")[0] > 900


def test_report_of_a_run_with_lone_surrogates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_run_with_lone_surrogates(tmp_path)
    assert main(["report", str(tmp_path)]) == 0, capsys.readouterr().err
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "bad\\ud800id" in page


def test_plot_and_report_of_scores_whose_range_overflows_a_float(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from sluicegate.report._svg import histograms_svg

    write_eval_run(tmp_path, 20, error_every=0)

    def change(number: int, row: dict[str, Any]) -> None:
        row["score"] = {0: 1.5e308, 1: -1.5e308}.get(number, 0.0)

    rewrite_rows(tmp_path, change)
    assert main(["plot", str(tmp_path)]) == 0, capsys.readouterr().err
    assert png_size(tmp_path / "timeline.png")[0] > 1100  # the score panel is there
    svg = histograms_svg({"big": [1.5e308, -1.5e308, 0.0, 0.0]}, {})
    assert "<title>-1.5e+308 to -1.35e+308: 1</title>" in svg
    assert "<title>1.35e+308 to 1.5e+308: 1</title>" in svg
    assert ": 2</title>" in svg
    assert main(["report", str(tmp_path)]) == 0, capsys.readouterr().err


def test_the_report_says_when_its_timeline_shows_fewer_sessions_than_the_run_had(
    tmp_path: Path,
) -> None:
    write_eval_run(tmp_path, 10)
    page = write_report(tmp_path).read_text(encoding="utf-8")
    assert "sessions (the traced ones)" not in page
    record = json.loads((tmp_path / "run.json").read_text())
    record["sessions"] = [{}, {}]  # the resume ran without --trace
    (tmp_path / "run.json").write_text(json.dumps(record))
    page = write_report(tmp_path).read_text(encoding="utf-8")
    assert "timeline of 1 of 2 sessions (the traced ones)" in page
