"""sluicegate's pytest plugin, registered on install (the ``pytest11`` entry point).

It gives tests:

* the ``fresh_clock`` fixture: a ``trio.testing.MockClock(autojump_threshold=0)``
  made anew for each test and, under Hypothesis's ``@given``, for each
  example, which pytest-trio runs the async test on. The fixture is
  session-scoped and the plugin hands each test call its own clock, so it
  passes Hypothesis's function-scoped-fixture health check
  (pytest-trio's ``autojump_clock`` under ``@given`` fails it, and
  suppressed, one clock runs on across the examples);
* the Hypothesis profiles ``dev``, ``ci`` and ``repro``, registered when
  the plugin loads so that ``--hypothesis-profile`` can name them, and
  loaded from ``$SLUICEGATE_HYPOTHESIS_PROFILE`` when no option names one.

Disable it with ``-p no:sluicegate``.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Generator
from typing import Any

import pytest
import trio.testing

from ._profiles import load_profile, register_profiles

#: The fixture's name.
FIXTURE = "fresh_clock"

with contextlib.suppress(ImportError):  # Hypothesis is in the test extra
    register_profiles()


def pytest_configure(config: pytest.Config) -> None:
    """Load the profile ``$SLUICEGATE_HYPOTHESIS_PROFILE`` names, unless an option named one."""
    try:
        chosen = config.getoption("hypothesis_profile", default=None)
    except ValueError:
        chosen = None
    if chosen is None:
        with contextlib.suppress(ImportError):
            load_profile()


@pytest.fixture(scope="session")
def fresh_clock() -> trio.testing.MockClock:
    """An autojumping ``MockClock``, a new one for each test and each Hypothesis example.

    Time starts at 0 and jumps to the next deadline whenever every task
    waits, so sleeps cost no real time and a deadlock meets its
    ``fail_after`` at once.
    """
    return trio.testing.MockClock(autojump_threshold=0)


def _fresh(inner: Callable[..., Any]) -> Callable[..., Any]:
    """``inner`` called with a new clock in place of the fixture's, per call (per example)."""

    @functools.wraps(inner)
    def call(*args: Any, **kwargs: Any) -> Any:
        kwargs[FIXTURE] = trio.testing.MockClock(autojump_threshold=0)
        return inner(*args, **kwargs)

    return call


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Generator[None, object, object]:
    # By now pytest-trio has wrapped the test (its pytest_runtest_call):
    # under Hypothesis, each example calls `inner_test`, which runs trio
    # with the clock among its arguments; so that is where a new one goes.
    if FIXTURE in pyfuncitem.funcargs:
        hypothesis = getattr(pyfuncitem.obj, "hypothesis", None)
        if hypothesis is not None:
            hypothesis.inner_test = _fresh(hypothesis.inner_test)
        else:
            pyfuncitem.funcargs[FIXTURE] = trio.testing.MockClock(autojump_threshold=0)
    return (yield)
