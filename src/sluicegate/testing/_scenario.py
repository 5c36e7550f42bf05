"""Run one example of a property: a fresh clock, a deadlock named, one readable failure.

:func:`run_scenario` runs an async function under ``trio.run`` with a fresh
``MockClock(autojump_threshold=0)``; :func:`scenario` makes an async test
function a sync one that does so, to put under Hypothesis's ``@given``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, ParamSpec, TypeVar, overload

import trio
import trio.testing

from ._errors import TestingError

P = ParamSpec("P")
R = TypeVar("R")

#: Seconds of trio's clock a scenario may take unless it says otherwise.
#: Under the autojumping clock a sleep costs no real time, so this is long
#: enough for any reasonable scenario and only a deadlock reaches it.
DEFAULT_TIMEOUT = 600.0


class Deadlock(TestingError, AssertionError):
    """A scenario made no progress until its timeout: every task waited on another.

    Under ``MockClock(autojump_threshold=0)`` the clock jumps to the next
    deadline whenever every task is blocked, so a scenario whose tasks all
    wait on each other reaches its timeout at once instead of hanging.

    Attributes:
        waiting: ``"task name: where it waits"`` for each task that was
            still waiting, as they were when the timeout came.
    """

    def __init__(self, message: str, waiting: list[str]) -> None:
        super().__init__(message)
        self.waiting = waiting


class ScenarioFailure(TestingError, AssertionError):
    """Several exceptions ended a scenario; the message lists each, with its notes.

    ``__cause__`` is the first of them. The runner's notes name the item
    (``sluicegate: raised by the run of item 3``), so the failure does too.

    Attributes:
        exceptions: The exceptions, flattened out of their groups.
    """

    def __init__(self, message: str, exceptions: list[BaseException]) -> None:
        super().__init__(message)
        self.exceptions = exceptions


def _leaves(error: BaseException) -> Iterator[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            yield from _leaves(inner)
    else:
        yield error


def _describe(error: BaseException) -> str:
    notes = getattr(error, "__notes__", None) or []
    text = f"{type(error).__qualname__}: {error}" if str(error) else type(error).__qualname__
    return "; ".join([text, *notes])


def _where(task: trio.lowlevel.Task) -> str:
    """Where ``task`` waits: its innermost awaits outside trio itself."""
    frames = [
        f"{frame.f_code.co_name} ({frame.f_globals.get('__name__', '?')}:{lineno})"
        for frame, lineno in task.iter_await_frames()
        if not str(frame.f_globals.get("__name__", "")).startswith("trio")
    ]
    return " > ".join(frames[-2:]) if frames else "?"


def _waiting(root: trio.lowlevel.Task, watchdog: trio.lowlevel.Task) -> list[str]:
    found = []
    stack = [root]
    while stack:
        task = stack.pop()
        children = [child for nursery in task.child_nurseries for child in nursery.child_tasks]
        if not children and task is not watchdog:
            found.append(f"{task.name}: {_where(task)}")
        stack.extend(reversed(children))
    return found


def flatten(error: BaseException) -> BaseException:
    """``error`` itself, or for a group one :class:`ScenarioFailure` listing its leaves.

    A group holding one exception (besides cancellations) is that exception.
    """
    if not isinstance(error, BaseExceptionGroup):
        return error
    leaves = [leaf for leaf in _leaves(error) if not isinstance(leaf, trio.Cancelled)]
    if not leaves:
        leaves = list(_leaves(error))
    if len(leaves) == 1:
        return leaves[0]
    lines = [f"{len(leaves)} exceptions ended the scenario:"]
    lines += [f"  - {_describe(leaf)}" for leaf in leaves]
    failure = ScenarioFailure("\n".join(lines), leaves)
    failure.__cause__ = leaves[0]
    return failure


def run_scenario(
    fn: Callable[..., Awaitable[R]],
    *args: Any,
    timeout: float = DEFAULT_TIMEOUT,
    autojump: bool = True,
) -> R:
    """Run ``fn(*args)`` in ``trio.run`` on a fresh ``MockClock(autojump_threshold=0)``.

    Args:
        fn: The async function of one example.
        args: Its arguments.
        timeout: Seconds of trio's clock before the scenario counts as
            deadlocked; ``math.inf`` for none.
        autojump: Run on a fresh ``MockClock(autojump_threshold=0)``; False
            runs on the real clock, for a scenario that waits on threads or
            I/O (a SQLite journal, a server): the autojumping clock would
            jump over them, since no task is runnable while they work.

    Returns:
        What ``fn`` returned.

    Raises:
        Deadlock: the timeout came first; the message names the tasks still
            waiting and where.
        ScenarioFailure: several exceptions ended it (an exception group,
            flattened: the message lists each with the item its note names).
        BaseException: a single exception that ended it, as itself (taken
            out of its group, if it came in one).
    """
    waiting: list[str] = []

    async def main() -> R:
        main_task = trio.lowlevel.current_task()
        async with trio.open_nursery() as nursery:
            outcome: list[R] = []

            async def body() -> None:
                outcome.append(await fn(*args))
                nursery.cancel_scope.cancel()

            async def watchdog() -> None:
                await trio.sleep(timeout)
                waiting.extend(_waiting(main_task, me()))
                nursery.cancel_scope.cancel()

            def me() -> trio.lowlevel.Task:
                return trio.lowlevel.current_task()

            nursery.start_soon(body, name=getattr(fn, "__qualname__", "scenario"))
            if math.isfinite(timeout):
                nursery.start_soon(watchdog, name="sluicegate.testing watchdog")
        if outcome:
            return outcome[0]
        raise Deadlock(
            f"deadlock: no progress in {timeout:g} s of trio's clock; waiting: "
            + "; ".join(waiting),
            waiting,
        )

    try:
        clock = trio.testing.MockClock(autojump_threshold=0) if autojump else None
        return trio.run(main, clock=clock)
    except BaseExceptionGroup as group:
        error = flatten(group)
        # Its own cause kept; the group it came in left out of the traceback.
        raise error from error.__cause__


@overload
def scenario(fn: Callable[P, Awaitable[R]], /) -> Callable[P, R]: ...
@overload
def scenario(
    *, timeout: float = DEFAULT_TIMEOUT, autojump: bool = True
) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, R]]: ...
def scenario(
    fn: Callable[P, Awaitable[R]] | None = None,
    /,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    autojump: bool = True,
) -> Callable[P, R] | Callable[[Callable[P, Awaitable[R]]], Callable[P, R]]:
    """Make an async function a sync one that runs it with :func:`run_scenario`.

    Put it under ``@given``: each example then runs on a fresh clock, a
    deadlock fails it by name after ``timeout`` seconds of trio's clock, and
    an exception group fails it as one readable exception::

        @given(items=st.lists(st.integers()))
        @scenario
        async def test_it(items):
            ...
    """

    def decorate(async_fn: Callable[P, Awaitable[R]]) -> Callable[P, R]:
        @functools.wraps(async_fn)
        def run(*args: P.args, **kwargs: P.kwargs) -> R:
            call = functools.partial(async_fn, *args, **kwargs)
            return run_scenario(call, timeout=timeout, autojump=autojump)

        return run

    return decorate if fn is None else decorate(fn)
