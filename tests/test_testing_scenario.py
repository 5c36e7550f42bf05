"""The scenario runner, the ledger checks and the pytest plugin of sluicegate.testing."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from sluicegate import Window, run_stream
from sluicegate.testing import (
    Deadlock,
    Dependency,
    Flaky,
    LedgerViolation,
    ScenarioFailure,
    Trace,
    check_once,
    check_rate,
    load_profile,
    run_scenario,
    scenario,
    traced_run,
)

ROOT = Path(__file__).resolve().parent.parent


async def nap(value: int) -> None:
    await trio.sleep(value)


async def chained(shared: bool) -> list[None]:
    """Two streams chained through a channel, under one Window(1) or a window each."""
    window = Window(1)
    send, receive = trio.open_memory_channel[int](0)

    async def forward(value: int) -> None:
        await send.send(value)

    async def first() -> None:
        async with send:
            await run_stream(range(3), forward, window=window)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(first)
        return await run_stream(receive, nap, window=window if shared else Window(1))


def test_two_streams_chained_under_one_window_deadlock_and_are_named() -> None:
    with pytest.raises(Deadlock) as info:
        run_scenario(chained, True, timeout=30)
    assert str(info.value).startswith("deadlock: no progress in 30 s of trio's clock; waiting: ")
    assert any("acquire (sluicegate._window" in where for where in info.value.waiting)
    assert run_scenario(chained, False) == [None, None, None]


def test_an_exception_group_is_one_failure_naming_the_items() -> None:
    async def two_fail() -> None:
        async def boom(n: int) -> None:
            error = KeyError(n)
            error.add_note(f"the item {n}")
            raise error

        async with trio.open_nursery() as nursery:
            nursery.start_soon(boom, 1)
            nursery.start_soon(boom, 1)

    with pytest.raises(ScenarioFailure) as info:
        run_scenario(two_fail)
    assert str(info.value) == (
        "2 exceptions ended the scenario:\n  - KeyError: 1; the item 1\n  - KeyError: 1; the item 1"
    )
    assert isinstance(info.value.__cause__, KeyError)


def test_one_failure_of_a_run_comes_out_as_itself_with_its_note() -> None:
    async def run(n: int) -> None:
        await trio.sleep(n)
        if n == 2:
            raise LookupError(n)

    with pytest.raises(LookupError) as info:
        run_scenario(functools.partial(run_stream, range(4), run, window=2))
    assert info.value.__notes__ == ["sluicegate: raised by the run of item 2"]


clocks: list[float] = []


@settings(max_examples=5, deadline=None)
@given(seconds=st.integers(1, 100))
@scenario
async def test_each_example_gets_a_fresh_clock(seconds: int) -> None:
    clocks.append(trio.current_time())
    await trio.sleep(seconds)  # costs no real time
    assert trio.current_time() == seconds


def test_the_examples_started_at_zero() -> None:
    assert clocks and set(clocks) == {0.0}


def test_check_once_names_the_key_booked_twice_or_never() -> None:
    check_once(["a", "b"], expected={"a", "b"})
    check_once([{"k": 1}, {"k": 2}])  # unhashable rows
    with pytest.raises(LedgerViolation, match="key 'a' was booked 2 times, not once") as info:
        check_once([("a", 5), ("b", 1), ("a", 5)], key=lambda row: row[0])
    assert info.value.key == "a"
    with pytest.raises(LedgerViolation, match="key 'c' was never booked"):
        check_once(["a"], expected=["a", "c"])
    with pytest.raises(LedgerViolation, match="key 'z' was booked and not expected"):
        check_once(["a", "z"], expected=["a"])


def test_check_rate_bounds_every_window_of_starts() -> None:
    check_rate([0.0, 0.5, 1.0, 1.5], rate=2, per=1.0)
    with pytest.raises(LedgerViolation, match=r"rate bound: 3 starts in the 0\.5 s from t=1"):
        check_rate([0.0, 1.0, 1.2, 1.5], rate=2, per=1.0)
    check_rate([0.0, 0.0, 0.0], rate=1, burst=3)


async def test_check_rate_over_a_traced_dependency(autojump_clock: trio.abc.Clock) -> None:
    trace = Trace()
    dependency = Dependency(Flaky(duration=0.5), trace=trace)
    await run_stream(range(6), traced_run(dependency, Trace()), window=1)
    check_rate(trace, rate=2, per=1.0)
    with pytest.raises(LedgerViolation, match="rate bound"):
        check_rate(dependency.calls, rate=1, per=1.0)


def test_the_profiles_live_in_the_kit() -> None:
    from hypothesis import settings as current

    assert load_profile("repro") == "repro"
    loaded = current.default
    assert loaded is not None and loaded.derandomize and loaded.database is None
    assert load_profile(os.environ.get("SLUICEGATE_HYPOTHESIS_PROFILE")) in ("dev", "ci", "repro")


def test_the_plugin_is_declared_as_a_pytest11_entry_point() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    module = project["project"]["entry-points"]["pytest11"]["sluicegate"]
    assert module == "sluicegate.testing.pytest_plugin"
    loaded = subprocess.run(
        [sys.executable, "-c", f"import {module} as m; print(m.fresh_clock.__name__)"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert loaded.stdout.strip() == "fresh_clock", loaded.stderr


PLUGIN_TEST = """
    import trio
    from hypothesis import given, settings, strategies as st

    starts = []

    @settings(max_examples=10)
    @given(seconds=st.integers(1, 1000))
    async def test_a_fresh_clock_per_example(fresh_clock, seconds):
        starts.append(trio.current_time())
        await trio.sleep(seconds)
        assert trio.current_time() == seconds
        assert fresh_clock.autojump_threshold == 0

    async def test_and_per_test(fresh_clock):
        assert trio.current_time() == 0

    def test_every_example_started_at_zero():
        assert starts and set(starts) == {0.0}

    def test_the_profile_was_chosen():
        assert settings.default.derandomize
"""


def test_the_plugin_gives_a_fresh_clock_that_passes_the_health_check(tmp_path: Path) -> None:
    (tmp_path / "test_plugin.py").write_text(textwrap.dedent(PLUGIN_TEST))
    (tmp_path / "pytest.ini").write_text("[pytest]\ntrio_mode = true\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:sluicegate",
         "-p", "sluicegate.testing.pytest_plugin", str(tmp_path)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={**os.environ, "SLUICEGATE_HYPOTHESIS_PROFILE": "repro"},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 passed" in done.stdout
