"""``sluicegate campaign ...``: exit statuses, messages, status output and the live view."""

from __future__ import annotations

import functools
import io
import json
import signal
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import attrs
import pytest
import trio
from rich.console import Console

from sluicegate.campaign import LiveView, read_report, render
from sluicegate.campaign._outdir import DRAIN_POLL_S
from sluicegate.cli import main
from test_campaign import (
    PATIENCE_S,
    Env,
    gated,
    kill_controller_once_running,
    wait_for_files,
    wait_for_gone,
)


@pytest.fixture
def env(tmp_path: Path) -> Env:
    return Env(tmp_path)


def run(env: Env, *extra: str) -> int:
    paths = [str(env.plan_path), str(env.out), "--ledger", str(env.ledger_path)]
    return main(["campaign", "run", *paths, *extra])


def test_run_status_reconcile(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    env.write_plan(
        [
            {"key": "a", "resource_class": "gpu", "options": {"cost": "0.5"}},
            {"key": "b", "options": {"uncertain": True}},
            {"key": "c"},
        ],
        max_parallel=1,
        class_limits={"gpu": 2},
    )
    assert run(env, "--no-live") == 3
    captured = capsys.readouterr()
    assert "reconciliation_required" in captured.out
    assert "uncertain: b" in captured.err and "campaign reconcile" in captured.err

    assert main(["campaign", "status", str(env.out)]) == 0
    out = capsys.readouterr().out
    assert "verified 1/3" in out and "no controller is running" in out
    assert f"ledger scope {'/'.join(env.scope())}" in " ".join(out.split())
    assert main(["campaign", "status", str(env.out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["stop_reason"] == "reconciliation_required"

    args = ["campaign", "reconcile", str(env.out), "b", "--as", "blocked", "--cost", "0.25"]
    assert main(args) == 0
    assert "b: blocked, cost 0.25" in capsys.readouterr().out
    # No controller runs after the last reconcile: the status must not claim one does.
    assert main(["campaign", "status", str(env.out)]) == 0
    out = capsys.readouterr().out
    assert "[reconciled]" in out and "[running]" not in out
    assert main(args) == 2
    assert "not uncertain" in capsys.readouterr().err

    assert run(env, "--no-live") == 0
    report = read_report(env.out)
    assert report.stop_reason == "panel_exhausted" and report.spent == Decimal("0.75")


def test_refusals_exit_2_with_a_reason(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    env.write_plan([{"key": "a"}])
    assert main(["campaign", "run", str(env.plan_path), str(env.out), "--ledger", "no.db"]) == 2
    assert "ledger init" in capsys.readouterr().err
    env.write_plan([{"key": "a", "reservation": "-1"}], max_parallel="2")
    assert run(env) == 2
    err = capsys.readouterr().err
    assert "plan.max_parallel" in err
    assert main(["campaign", "status", str(env.out)]) == 2
    assert main(["campaign", "drain", str(env.out)]) == 2
    assert capsys.readouterr().err.count("does not exist (no campaign.json)") == 2
    env.out.mkdir()
    assert main(["campaign", "drain", str(env.out)]) == 2
    assert "not a campaign output directory" in capsys.readouterr().err


def test_missing_paths_get_one_line_naming_them(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    def refused(*argv: str) -> str:
        assert main(list(argv)) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Errno" not in err, err
        return err

    nowhere = str(env.root / "nowhere_dir")
    err = refused("campaign", "reconcile", nowhere, "k", "--as", "blocked")
    assert f"{nowhere} does not exist" in err and "campaign run" in err
    assert not (env.root / "nowhere_dir").exists()
    err = refused("ledger", "init", str(env.root / "nodir" / "l.db"), "--limit", "1")
    assert "nodir does not exist; create it first" in err
    missing = str(env.root / "nothere.json")
    err = refused("campaign", "run", missing, str(env.out), "--ledger", str(env.ledger_path))
    assert f"no plan file {missing}" in err
    assert not env.out.exists()
    env.write_plan([{"key": "a"}])
    under_a_file = str(env.plan_path / "out")
    err = refused("campaign", "run", str(env.plan_path), under_a_file, "--ledger", "x")
    assert "ledger init" in err
    err = refused(
        "campaign", "run", str(env.plan_path), under_a_file, "--ledger", str(env.ledger_path)
    )
    assert f"cannot use {under_a_file}: Not a directory" in err


def test_a_misspelled_job_function_is_refused_before_any_work(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = env.path("runs.log")
    env.write_plan([{"key": "a", "options": {"runs": runs}}], job="fakejob:nofunc")
    assert run(env, "--no-live") == 2
    err = capsys.readouterr().err
    assert "'nofunc'" in err and "'fakejob'" in err and "fakejob.py" in err
    assert env.runs() == [] and not (env.out / "code").exists()
    # The same directory still takes the corrected plan.
    env.write_plan([{"key": "a", "options": {"runs": runs}}])
    assert run(env, "--no-live") == 0
    assert env.runs() == ["a"]


DOCS = Path(__file__).parent.parent / "docs" / "campaign.md"


def test_drain_command_stops_a_rerun(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    env.write_plan([{"key": "a"}, {"key": "b"}], target=1)
    assert run(env, "--no-live") == 0
    capsys.readouterr()
    assert main(["campaign", "drain", str(env.out)]) == 0
    # The command, the docs and the controller's default agree on the delay.
    assert f"within {DRAIN_POLL_S} s" in capsys.readouterr().out
    docs = " ".join(DOCS.read_text().split())
    assert f"looks for it every {DRAIN_POLL_S} s, so within {DRAIN_POLL_S} s" in docs
    assert (env.out / "drain-request.json").exists()
    assert run(env, "--no-live") == 0
    assert read_report(env.out).stop_reason == "target_reached"


def _text(path: Path) -> str:
    return path.read_text()


def _draining(env: Env) -> bool:
    try:
        return bool(json.loads((env.out / "report.json").read_text())["draining"])
    except (OSError, ValueError):
        return False


async def _wait_for_text(path: Path, text: str) -> None:
    with trio.fail_after(PATIENCE_S):
        # Another process writes it: poll, bounded.
        while text not in _text(path):  # noqa: ASYNC110
            await trio.sleep(0.01)


async def _controller_with_signals(env: Env, signals: int) -> tuple[int, str]:
    """Run `campaign run` in a process, send it ``signals`` SIGINTs once two jobs run.

    For a third signal, the jobs ignore SIGTERM, so that it arrives while
    the controller is still stopping them.
    """
    gate = env.path("gate")
    candidates = []
    for k in "abc":
        options = {"gate": gate, "started": env.path(f"started-{k}")}
        if signals == 3:
            options["on_term"] = env.path(f"term-{k}")
        candidates.append({"key": k, "options": options})
    env.write_plan(candidates, max_parallel=2)
    paths = [str(env.plan_path), str(env.out), "--ledger", str(env.ledger_path)]
    command = [sys.executable, "-m", "sluicegate", "campaign", "run", *paths, "--no-live"]
    stderr = env.root / "stderr.txt"
    with stderr.open("wb") as err:
        spawn = functools.partial(trio.run_process, command, check=False, stderr=err)
        async with trio.open_nursery() as nursery:
            done = await nursery.start(spawn)
            await wait_for_files(env.path("started-a"), env.path("started-b"))
            done.send_signal(signal.SIGINT)
            with trio.fail_after(PATIENCE_S):
                # Another process writes the report: poll it, bounded.
                while not _draining(env):  # noqa: ASYNC110
                    await trio.sleep(0.01)
            if signals == 1:
                env.open_gate("gate")
            else:
                done.send_signal(signal.SIGINT)
            if signals == 3:
                await wait_for_files(env.path("term-a"), env.path("term-b"))
                done.send_signal(signal.SIGINT)
                await _wait_for_text(stderr, "already stopping")
                env.open_gate("gate")
    return done.returncode, _text(stderr)


async def test_a_signal_drains(env: Env) -> None:
    status, stderr = await _controller_with_signals(env, 1)
    assert status == 0, stderr
    docs = " ".join(DOCS.read_text().split())
    assert "exits with status 0 (stop reason `drained`)" in docs
    assert "SIGINT: draining" in stderr
    report = read_report(env.out)
    assert report.stop_reason == "drained"
    assert [r.status for r in report.rows] == ["verified", "verified", "pending"]


async def test_a_second_signal_stops_the_running_jobs(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    status, stderr = await _controller_with_signals(env, 2)
    assert status == 130, stderr
    # Stopped without a stop reason, and no controller is left.
    assert main(["campaign", "status", str(env.out)]) == 0
    out = capsys.readouterr().out
    assert "[interrupted]" in out and "[running]" not in out and "[draining]" not in out
    report = read_report(env.out)
    # Terminated before writing a result: their fate (and spending) is unknown.
    assert [r.status for r in report.rows] == ["uncertain", "uncertain", "pending"]
    assert env.ledger.usage(("camp",)).uncertain == Decimal(2)


async def test_a_third_signal_does_not_cut_the_stopping_short(env: Env) -> None:
    status, stderr = await _controller_with_signals(env, 3)
    assert status == 130, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr
    report = read_report(env.out)
    # The close-out finished: each job ended (with its result, or stopped
    # after the grace period) and was recorded.
    assert [r.status for r in report.rows][2] == "pending"
    assert all(r.status in ("verified", "uncertain") for r in report.rows[:2])


def test_render_and_live_view(env: Env) -> None:
    env.write_plan([{"key": "a", "resource_class": "gpu"}], class_limits={"gpu": 2})
    assert run(env, "--live") == 0
    report = read_report(env.out)
    console = Console(file=io.StringIO(), width=200, force_terminal=True)
    with LiveView(console) as view:
        view(report)
    shown = console.file.getvalue()  # type: ignore[attr-defined]
    assert "verified 1/1" in shown
    plain = Console(file=io.StringIO(), width=200)
    plain.print(render(report, rows=True))
    text = plain.file.getvalue()  # type: ignore[attr-defined]
    assert "gpu 0/2" in text and "cap 50.00" in text and "target_reached" in text
    assert "a" in text.split("\n")[2]


def test_amounts_a_ledger_cannot_store_are_refused_before_any_work(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    env.write_plan([{"key": "a"}], max_spend="1e20")
    assert run(env) == 2
    err = capsys.readouterr().err
    assert "the most a ledger can store), got 1E+20 @ plan.max_spend" in err
    assert "Traceback" not in err
    assert not env.out.exists() and env.ledger.scopes()[1:] == []
    env.write_plan([{"key": "a", "options": {"crash": 1}}])
    assert run(env, "--display", "none") == 3
    with pytest.raises(SystemExit) as info:
        main(["campaign", "reconcile", str(env.out), "a", "--as", "blocked", "--cost", "1e20"])
    assert info.value.code == 2
    assert "argument --cost: must be at most" in capsys.readouterr().err
    assert read_report(env.out).row("a").status == "uncertain"


def test_displays(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    env.write_plan([{"key": "a", "options": {"reason": "fine"}}, {"key": "b"}], target=3)
    assert run(env, "--display", "plain") == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert " camp: 2 pending " in lines[0]
    assert any(line.split(" ", 1)[1].startswith("a: running") for line in lines)
    assert any("a: verified, cost 0.00 (fine)" in line for line in lines)
    assert "panel_exhausted" in captured.out  # the final report
    assert "warning: target 3 cannot be reached" in captured.err
    for extra in (["--display", "none"], ["--no-live"], ["--live"]):
        assert run(env, *extra) == 0
        out = capsys.readouterr().out
        assert ("panel_exhausted" in out) == (extra != ["--display", "none"]), extra


# A job's reason is user text (an exception's message, say): none of it is markup.
_MARKUP = "choked on '[/]'; [bold red]styled[/bold red] [link=http://x]l[/link] :smile: [Errno 2]"


def test_user_text_is_shown_verbatim(
    env: Env, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "400")  # one line per row: nothing wraps
    options = {"status": "blocked", "reason": _MARKUP}
    env.write_plan(
        [{"key": "a", "resource_class": "[b]gpu", "options": options}],
        class_limits={"[b]gpu": 1},
    )
    assert run(env, "--display", "plain") == 0
    out = capsys.readouterr().out
    assert f"a: blocked, cost 0.00 ({_MARKUP})" in out, out  # the line of its change
    assert f"[b]gpu  blocked  0.00  {_MARKUP}" in out, out  # the final report
    assert run(env, "--display", "rich") == 0  # a rerun: the job does not run again
    assert f"[b]gpu  blocked  0.00  {_MARKUP}" in capsys.readouterr().out
    assert main(["campaign", "status", str(env.out)]) == 0
    out = capsys.readouterr().out
    assert f"[b]gpu  blocked  0.00  {_MARKUP}" in out and "[b]gpu 0/1" in out, out


def test_the_plain_display_shows_results_imported_on_resume(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    env.write_plan([gated(env, "a", cost="0.1"), gated(env, "b"), {"key": "c"}], max_parallel=2)

    async def both_ended_after_their_controller() -> None:
        await kill_controller_once_running(env, "a", "b")
        env.open_gate("gate-a")
        env.open_gate("gate-b")
        for key in "ab":
            await wait_for_files(env.out / "jobs" / key / "result.json")
            await wait_for_gone(env.out / "jobs" / key / "child.lock")

    trio.run(both_ended_after_their_controller)
    assert run(env, "--display", "plain") == 0
    lines = [line.split(" ", 1)[1] for line in capsys.readouterr().out.splitlines()]
    assert lines[0].startswith("camp: 1 pending; left running by an earlier controller: a, b")
    # Measured before the fix: no line for a, and "b: running" though b had ended.
    assert any(line.startswith("a: verified, cost 0.10 ") for line in lines), lines
    assert any(line.startswith("b: verified, cost 0.00 ") for line in lines), lines
    running = [line.split(":")[0] for line in lines if ": running" in line]
    assert running == ["c"], lines


def test_the_display_options_exclude_each_other(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        run(env, "--display", "plain", "--live")
    assert info.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_help_lists_exit_statuses_and_explains_every_argument(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def help_of(*argv: str) -> str:
        with pytest.raises(SystemExit):
            main([*argv, "--help"])
        return capsys.readouterr().out

    for argv in (["campaign"], ["campaign", "run"]):
        text = help_of(*argv)
        assert "exit status of `campaign run`:" in text
        for status in ("0 ", "2 ", "3 ", "130 "):
            assert f"\n  {status}" in text, (argv, status)
        words = " ".join(text.split())
        assert "`reconcile` exits 3 when an imported result leaves" in words
    text = help_of("campaign", "reconcile")
    for argument in ("outdir", "key", "--as", "--cost"):
        line = next(line for line in text.splitlines() if line.strip().startswith(argument))
        assert len(line.split()) > 1 or argument == "--as", line
    words = " ".join(text.split())
    assert "the uncertain candidate's key" in words and "late result.json" in words
    assert "--display {rich,plain,none}" in help_of("campaign", "run")


_WITHOUT_FCNTL = """
import sys
sys.modules["fcntl"] = None  # as on a system without it: `import fcntl` fails
from sluicegate.cli import main
try:
    status = main(sys.argv[1:])
finally:
    print("campaign imported:", "sluicegate.campaign" in sys.modules, file=sys.stderr)
sys.exit(status)
"""


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--help"], 0),
        (["eval", "EXAMPLE:env", "-n", "2", "-o", "OUT", "--display", "none"], 0),
        (["campaign", "run", "PLAN", "OUT", "--ledger", "LEDGER"], 2),
    ],
    ids=["help", "eval", "campaign"],
)
def test_help_and_eval_work_without_fcntl(env: Env, argv: list[str], expected: int) -> None:
    env.write_plan([{"key": "a"}])
    examples = Path(__file__).resolve().parent.parent / "examples"
    paths = {
        "EXAMPLE": str(examples / "arithmetic.py"),
        "OUT": str(env.out),
        "PLAN": str(env.plan_path),
        "LEDGER": str(env.ledger_path),
    }
    argv = [
        paths.get(a.split(":")[0], a) + (":env" if a.startswith("EXAMPLE") else "") for a in argv
    ]
    command = [sys.executable, "-c", _WITHOUT_FCNTL, *argv]
    done = subprocess.run(command, capture_output=True, text=True, timeout=PATIENCE_S)
    assert done.returncode == expected, done.stderr
    assert "Traceback" not in done.stderr
    if argv[0] == "campaign":
        assert "campaigns need a POSIX system" in done.stderr
        assert not env.out.exists()
    else:
        assert "campaign imported: False" in done.stderr
    if argv == ["--help"]:
        assert "campaign" in done.stdout and "ledger" in done.stdout


def test_status_works_without_fcntl(env: Env) -> None:
    env.write_plan([{"key": "a"}])
    assert run(env, "--display", "none") == 0

    def status(*extra: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-c", _WITHOUT_FCNTL, "campaign", "status", str(env.out)]
        done = subprocess.run(
            [*command, *extra], capture_output=True, text=True, timeout=PATIENCE_S
        )
        assert done.returncode == 0, done.stderr  # before: 2, "campaigns need a POSIX system"
        return done

    out = " ".join(status().stdout.split())
    assert "camp [target_reached] verified 1/1" in out
    assert "whether a controller is running cannot be told here (no fcntl)" in out
    assert json.loads(status("--json").stdout)["stop_reason"] == "target_reached"
    report = read_report(env.out)
    running = render(attrs.evolve(report, stop_reason=None), controller=None)
    console = Console(file=io.StringIO(), width=200)
    console.print(running)
    assert "[running or interrupted]" in console.file.getvalue()  # type: ignore[attr-defined]


def test_trace_records_each_job_with_how_it_ended(env: Env) -> None:
    env.write_plan(
        [
            {"key": "a"},
            {"key": "b", "options": {"status": "blocked", "reason": "no"}},
            {"key": "c"},
        ],
        max_parallel=2,
    )
    assert run(env, "--display", "none", "--trace") == 0
    events = json.loads((env.out / "trace.json").read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    jobs = {e["args"]["label"]: e for e in events if e["ph"] == "X"}
    assert sorted(jobs) == ["a", "b", "c"]
    assert jobs["a"]["args"]["outcome"] == jobs["c"]["args"]["outcome"] == "ok"
    assert jobs["b"]["args"]["outcome"] == "error"
    assert jobs["b"]["args"]["error"] == "blocked"
    assert {e["tid"] for e in jobs.values()} <= {0, 1}


def test_a_drained_rerun_names_the_drain_file_and_undrain_admits_again(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = env.path("runs.log")
    env.write_plan(
        [{"key": "a", "options": {"runs": runs}}, {"key": "b", "options": {"runs": runs}}]
    )
    env.out.mkdir()
    drain_file = env.out / "drain-request.json"
    drain_file.write_text('{"requested": "2026-01-01T00:00:00Z", "reason": "for the test"}')
    assert run(env, "--no-live") == 0
    err = capsys.readouterr().err
    assert read_report(env.out).stop_reason == "drained"
    assert env.runs() == []
    assert f"drained: {drain_file} asks to admit nothing (for the test" in err
    assert "--undrain`" in err
    assert main(["campaign", "status", str(env.out)]) == 0
    out = capsys.readouterr().out
    assert "[drained]" in out and f"{drain_file} asks to admit nothing" in out
    assert "--undrain` admits again" in out
    assert run(env, "--no-live", "--undrain") == 0
    err = capsys.readouterr().err
    assert f"removed {drain_file}: admitting again" in err
    assert not drain_file.exists()
    assert sorted(env.runs()) == ["a", "b"]
    assert read_report(env.out).stop_reason != "drained"


def test_output_that_is_not_a_terminal_keeps_whole_lines(
    env: Env, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    long_class = "gpu-class-with-a-long-name"
    keys = [f"a-very-long-candidate-key-name-{n}" for n in range(2)]
    env.write_plan(
        [
            {"key": key, "resource_class": long_class, "options": {"uncertain": True}}
            for key in keys
        ],
        class_limits={long_class: 2},
    )
    run(env, "--no-live")
    capsys.readouterr()
    assert main(["campaign", "status", str(env.out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    (head,) = [line for line in lines if "/ cap " in line]
    assert f"({long_class} 0/2)" in head and "verified 0/2" in head
    for key in keys:
        (row,) = [line for line in lines if line.startswith(key)]
        assert long_class in row and "uncertain" in row
        assert row.rstrip().endswith("the job reports its cleanup is uncertain")
    assert any(line.endswith(f"ledger scope {'/'.join(env.scope())}") for line in lines)
