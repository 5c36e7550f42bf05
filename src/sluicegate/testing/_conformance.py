"""Conformance checks for a user's pieces: :func:`check_source` and :func:`check_run`.

In the spirit of ``trio.testing.check_one_way_stream``: given a factory,
drive a fresh piece through every way a stream can end, each on a fresh
``MockClock``, and check the contracts of docs/runner.md and
docs/tasksets.md. Each failure is a :class:`ConformanceError` naming the
ending that broke it.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterable, Callable, Iterable, Sequence
from typing import Any, Literal, final

import attrs
import trio

from .._runner import BindsRun, Drain, open_stream, run_stream
from ._checks import InvariantViolation, check_trace
from ._dependency import Flaky
from ._errors import TestingError
from ._scenario import DEFAULT_TIMEOUT, Deadlock, flatten, run_scenario
from ._trace import Trace
from ._traced import traced_source
from ._upstream import Upstream

How = Literal["exhausted", "consumer-left", "run-failed", "cancelled", "drained", "restarted"]

#: Every way a stream can end, in the order the checks drive them.
ENDINGS: tuple[How, ...] = (
    "exhausted",
    "consumer-left",
    "run-failed",
    "cancelled",
    "drained",
    "restarted",
)


@final
@attrs.frozen
class Ending:
    """How a stream ends, and after how much.

    Attributes:
        how: ``"exhausted"`` (the source ran out), ``"consumer-left"`` (the
            consumer of ``open_stream`` broke out), ``"run-failed"`` (another
            run raised), ``"cancelled"`` (the caller was cancelled),
            ``"drained"`` (a :class:`~sluicegate.Drain`), or ``"restarted"``
            (drained, then a fresh stream over the same upstream).
        after: How many runs start before it ends (for the endings that
            come from outside).
    """

    how: How = attrs.field(validator=attrs.validators.in_(ENDINGS))
    after: int = attrs.field(default=1, validator=attrs.validators.ge(0))

    def __str__(self) -> str:
        return self.how if self.after == 1 else f"{self.how} after {self.after}"


class ConformanceError(TestingError, AssertionError):
    """A piece broke a contract on one way of ending; the message starts with the ending.

    Attributes:
        ending: The ending that broke it.
    """

    def __init__(self, ending: Ending, message: str) -> None:
        super().__init__(f"ending {str(ending)!r}: {message}")
        self.ending = ending


class EndingError(TestingError):
    """What the run that fails raises, in the ``"run-failed"`` ending."""


def _endings(endings: Iterable[Ending | How]) -> list[Ending]:
    return [ending if isinstance(ending, Ending) else Ending(ending) for ending in endings]


def _takes_argument(factory: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(
        p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
        for p in parameters
    )


def _is_source(made: object) -> bool:
    return isinstance(made, (AsyncIterable, Iterable, BindsRun))


def _streamed(made: object) -> Any:
    """What to give the runner: ``made.stream()`` for a taskset, else ``made`` itself."""
    stream = getattr(made, "stream", None)
    return stream() if callable(stream) else made


def _problem(result: object) -> str | None:
    """What an ``invariant()`` result says is wrong, if anything."""
    if result is None or result is True:
        return None
    if result is False:
        return "invariant() returned False"
    if isinstance(result, str):
        return result or None
    return f"invariant() returned {result!r}"


@attrs.define
class _Ends:
    """Drives one ending from inside the runs: the kit's run counts starts and acts."""

    ending: Ending
    scope: trio.CancelScope
    drain: Drain
    # Written only by started(). Invariant: the runs started so far in this stream.
    starts: int = 0

    def started(self) -> bool:
        """A run started: the ending comes when ``after`` have started before this one.

        Returns whether this run is the one that fails (``"run-failed"``).
        """
        self.starts += 1
        if self.starts != self.ending.after + 1:
            return False
        if self.ending.how == "cancelled":
            self.scope.cancel()
        elif self.ending.how in ("drained", "restarted"):
            self.drain.request("sluicegate.testing")
        return self.ending.how == "run-failed"


async def _drive(
    ending: Ending, source: Any, run: Callable[[Any], Any], window: int, trace: Any, ends: _Ends
) -> list[str]:
    """Run ``source`` through ``run`` to ``ending``; what was wrong with how it ended."""
    problems: list[str] = []
    how = ending.how
    with ends.scope:
        try:
            if how == "consumer-left":
                async with open_stream(source, run, window=window, trace=trace) as results:
                    got = 0
                    async for done in results:
                        recorded = getattr(trace, "consumed", None)
                        if recorded is not None:
                            recorded(done.index)
                        got += 1
                        if got > ending.after:
                            break
            else:
                drain = ends.drain if how in ("drained", "restarted") else None
                await run_stream(source, run, window=window, trace=trace, drain=drain)
        except EndingError:
            if how != "run-failed":
                raise
        else:
            if how == "run-failed" and ends.starts > ending.after:
                problems.append("the stream returned although a run raised")
    if ends.scope.cancel_called and not ends.scope.cancelled_caught:
        problems.append(
            "trio.Cancelled was swallowed: the stream returned after its caller was cancelled"
        )
    return problems


# -- sources ----------------------------------------------------------------------------


class _Books:
    """The trace, and which upstream message each pulled item is (a recorder for the runner)."""

    def __init__(
        self,
        trace: Trace,
        upstream: Upstream[Any] | None,
        key: Callable[[Any], Any],
        matched: dict[int, int] | None = None,
    ) -> None:
        self.trace = trace
        self.upstream = upstream
        self.key = key
        # Written only by pulled(): the upstream serial of each item the
        # runner pulled (None for one that matched no message).
        self.serials: dict[int, int | None] = {}
        # Written only by _serial(): serial -> the take whose message the
        # runner pulled, across sessions (a take is pulled at most once).
        self.matched: dict[int, int] = {} if matched is None else matched

    def _serial(self, message: object) -> int | None:
        """The oldest take out now that the runner did not pull yet: by identity, then equality."""
        assert self.upstream is not None
        out = [
            (serial, take, item)
            for serial, take, item in self.upstream.handed_out()
            if self.matched.get(serial) != take
        ]
        for serial, take, item in out:
            if item is message:
                self.matched[serial] = take
                return serial
        for serial, take, item in out:
            try:
                same = bool(item == message)
            except Exception:
                same = False
            if same:
                self.matched[serial] = take
                return serial
        return None

    def pulled(self, index: int, item: object, /) -> None:
        if self.upstream is not None:
            try:
                message = self.key(item)
            except Exception:
                message = item
            self.serials[index] = self._serial(message)
        self.trace.pulled(index, item)

    def started(self, index: int, /) -> None:
        self.trace.started(index)

    def finished(self, index: int, error: BaseException | None, /) -> None:
        self.trace.finished(index, error)

    def errored(self, index: int, error: BaseException | str, /) -> None:
        self.trace.errored(index, error)

    def marked(self, what: str, /) -> None:
        self.trace.marked(what)

    def consumed(self, index: int) -> None:
        self.trace.consumed(index)

    def ran(self) -> list[int]:
        """Serials of the messages whose run returned, in the current session."""
        done = []
        session = max((event.session for event in self.trace.events), default=0)
        for event in self.trace.events:
            if event.kind == "finished" and event.error is None and event.session == session:
                serial = self.serials.get(event.index)  # type: ignore[arg-type]
                if serial is not None:
                    done.append(serial)
        return done


def _numbers(serials: Iterable[int]) -> str:
    """``#0, #3``: messages by their place in the upstream."""
    return ", ".join(f"#{serial}" for serial in sorted(serials))


def _account(upstream: Upstream[Any], ran: list[int], delivered: set[int]) -> list[str]:
    """What the upstream's books say went wrong in one session."""
    problems = []
    state: dict[int, str] = {}
    for what, serial in upstream.log:
        state[serial] = what
    twice = {serial for serial in ran if state.get(serial) == "back"}
    if twice:
        problems.append(
            f"message(s) {_numbers(twice)} ran and were then given back "
            "to the upstream: they will run twice"
        )
    dropped = {
        serial for serial, what in state.items() if what == "take" and serial not in delivered
    }
    if dropped:
        problems.append(
            f"message(s) {_numbers(dropped)} taken from the upstream were "
            "neither run nor given back: dropped at close"
        )
    if upstream.close_count != 1:
        what = (
            "never closed" if not upstream.close_count else f"closed {upstream.close_count} times"
        )
        problems.append(f"the upstream was {what}, not once")
    return problems


def check_source(
    make_source: Callable[..., Any],
    *,
    items: Iterable[Any] = range(8),
    window: int = 2,
    endings: Iterable[Ending | How] = ENDINGS,
    restartable: bool = False,
    invariant: Callable[[], object] | None = None,
    key: Callable[[Any], Any] = lambda item: item,
    timeout: float = DEFAULT_TIMEOUT,
) -> None:
    """Drive fresh sources from ``make_source`` through every ending and check the contracts.

    ``make_source(upstream)`` builds the source under test over an
    :class:`Upstream` holding ``items`` (a source that reads from a queue or
    a connection), or ``make_source()`` builds one that needs none. The
    result is anything the runner takes (an async or sync iterable, a
    :class:`~sluicegate.SampleSource`) or a taskset, whose ``stream()`` is
    read. Each ending runs in its own ``trio.run`` on a fresh
    ``MockClock(autojump_threshold=0)``, with ``window`` runs at most, each
    taking a second or two of that clock.

    Checked on every ending, each failure naming it:

    * the runner's invariants over the recorded trace (:func:`check_trace`):
      the source closed exactly once, nothing pulled after its close;
    * ``trio.Cancelled`` reaches the caller (the ``"cancelled"`` ending);
    * with an upstream: it is closed exactly once per source; nothing is
      dropped at close (every message taken is run or given back); no
      message that ran is given back (it would run twice); and after
      ``"exhausted"`` and ``"restarted"`` every message ran exactly once;
    * ``restartable=True``: a second ``stream()`` of the same object gives
      the items of the first (``"restarted"``);
    * ``invariant()``, called after each ending, returns None or True (a
      False or a message fails it; write a check, not an ``assert``, which
      ``python -O`` strips).

    Args:
        make_source: Builds a fresh source, given an upstream if it takes an argument.
        items: The upstream's messages.
        window: The window to run with.
        endings: Which endings to drive (names or :class:`Ending` values).
        restartable: Whether ``stream()`` promises to start again when called again.
        invariant: What must hold after every ending.
        key: Maps an item the source yields to the upstream message it came
            from, for a source that does not yield messages as they are.
        timeout: Seconds of trio's clock before an ending counts as deadlocked.

    Raises:
        ConformanceError: naming the ending and what broke.
    """
    messages = list(items)
    takes_upstream = _takes_argument(make_source)
    for ending in _endings(endings):
        if ending.how == "restarted" and not (takes_upstream or restartable):
            continue

        async def one(ending: Ending = ending) -> list[str]:
            upstream = Upstream(messages) if takes_upstream else None
            trace = Trace()
            books = _Books(trace, upstream, key)
            made = make_source(upstream) if upstream is not None else make_source()
            ends = _Ends(ending, trio.CancelScope(), Drain())

            async def run(item: Any) -> Any:
                fails = ends.started()
                await trio.sleep(1 + ends.starts % 2)
                if fails:
                    raise EndingError("the run that fails, in the run-failed ending")
                return item

            problems = await _drive(
                ending, traced_source(_streamed(made), trace), run, window, books, ends
            )
            frees: Literal["finish", "consume"] = (
                "consume" if ending.how == "consumer-left" else "finish"
            )
            problems += _trace_problems(trace, window, frees)
            if upstream is not None:
                delivered = {s for s in books.serials.values() if s is not None}
                ran = books.ran()
                problems += _account(upstream, ran, delivered)
                missing = set(range(len(messages))) - set(ran)
                if ending.how == "exhausted" and missing:
                    problems.append(
                        f"message(s) {_numbers(missing)} never ran although the upstream ended"
                    )
            if ending.how == "restarted":
                second = Trace()
                books = _Books(second, upstream, key, books.matched)
                if upstream is not None:
                    upstream.reopen()
                    again = make_source(upstream)
                else:
                    again = made
                ends = _Ends(Ending("exhausted"), trio.CancelScope(), Drain())
                problems += await _drive(
                    Ending("exhausted"),
                    traced_source(_streamed(again), second),
                    run,
                    window,
                    books,
                    ends,
                )
                problems += _trace_problems(second, window, "finish")
                items_again = [event.item for event in second.events if event.kind == "pulled"]
                if upstream is not None:
                    ran_after = books.ran()
                    twice = sorted(set(ran) & set(ran_after))
                    if twice:
                        problems.append(
                            f"message(s) {twice} ran before and again after the restart"
                        )
                    never = sorted(set(range(len(messages))) - set(ran) - set(ran_after))
                    if never:
                        problems.append(
                            f"message(s) {never} never ran, before or after the restart"
                        )
                    delivered = {s for s in books.serials.values() if s is not None}
                    problems += _account(upstream, ran_after, delivered)
                else:
                    whole = await _read_all(_streamed(make_source()))
                    if not _same_items(items_again, whole):
                        problems.append(
                            f"stream() is not restartable: a second stream() gave "
                            f"{len(items_again)} item(s), a whole first read {len(whole)}"
                        )
            problems += _invariant_problems(invariant)
            return problems

        problems = _run(ending, one, timeout)
        if problems:
            raise ConformanceError(ending, "; ".join(problems))


async def _read_all(source: object) -> list[Any]:
    """Every item of ``source``, read to its end and closed."""
    if isinstance(source, AsyncIterable):
        iterator = aiter(source)
        try:
            return [item async for item in iterator]
        finally:
            aclose = getattr(iterator, "aclose", None)
            if aclose is not None:
                await aclose()
    if isinstance(source, Iterable):
        return list(source)
    raise TypeError(f"restartable=True needs an iterable source, not {source!r}")


def _same_items(a: Sequence[Any], b: Sequence[Any]) -> bool:
    try:
        return bool(list(a) == list(b))
    except Exception:
        return [repr(x) for x in a] == [repr(x) for x in b]


def _trace_problems(trace: Trace, window: int, frees: Literal["finish", "consume"]) -> list[str]:
    try:
        check_trace(trace, window=window, frees_on=frees)
    except InvariantViolation as exc:
        return [str(exc)]
    return []


def _invariant_problems(invariant: Callable[[], object] | None) -> list[str]:
    if invariant is None:
        return []
    try:
        problem = _problem(invariant())
    except AssertionError as exc:
        problem = f"invariant() failed: {exc}"
    return [] if problem is None else [problem]


def _run(ending: Ending, one: Callable[[], Any], timeout: float) -> Any:
    try:
        return run_scenario(one, timeout=timeout)
    except ConformanceError:
        raise
    except Deadlock as exc:
        raise ConformanceError(ending, str(exc)) from exc
    except AssertionError:
        raise
    except BaseException as exc:
        error = flatten(exc)
        raise ConformanceError(ending, f"raised {error!r}") from error


# -- runs -------------------------------------------------------------------------------


def check_run(
    make_run: Callable[..., Callable[[Any], Any]],
    *,
    items: Iterable[Any] = range(6),
    window: int = 2,
    flaky: Flaky | None = None,
    endings: Iterable[Ending | How] = ENDINGS,
    invariant: Callable[[], object] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> None:
    """Drive fresh runs from ``make_run`` through every ending and check the contracts.

    ``make_run(dependency)`` builds the run under test around a
    :class:`Dependency` that behaves as ``flaky`` says (what the run calls:
    a service, a database), or ``make_run()`` builds one that needs none.
    Each ending runs ``items`` through the run in its own ``trio.run`` on a
    fresh ``MockClock(autojump_threshold=0)``; then the same run goes
    through a second, healthy stream of the same items, which must finish:
    a run that left state behind (a slot kept by a cancelled run) deadlocks
    there or fails.

    Checked on every ending, each failure naming it:

    * ``trio.Cancelled`` is never swallowed: a run whose dependency call was
      cancelled lets the cancellation through rather than returning, and
      the caller sees it (``"cancelled"``);
    * no call of the dependency is still in flight once the stream is over;
    * the failure of another run ends the stream (``"run-failed"``);
    * nothing is left behind: the same run completes a fresh stream;
    * ``invariant()``, called after each ending and after the fresh stream,
      returns None or True.

    A run may raise the dependency's own error (``flaky``): the stream then
    ends there, as any run failure ends it.

    Args:
        make_run: Builds a fresh run, given a dependency if it takes an argument.
        items: The items to run.
        window: The window to run with.
        flaky: How the dependency misbehaves (default: never; each call 1 s).
        endings: Which endings to drive (names or :class:`Ending` values).
        invariant: What must hold after every ending.
        timeout: Seconds of trio's clock before a stream counts as deadlocked.

    Raises:
        ConformanceError: naming the ending and what broke.
    """
    values = list(items)
    takes_dependency = _takes_argument(make_run)
    how_flaky = flaky if flaky is not None else Flaky()
    for ending in _endings(endings):

        async def one(ending: Ending = ending) -> list[str]:
            dependency = how_flaky.make()
            user_run = make_run(dependency) if takes_dependency else make_run()
            ends = _Ends(ending, trio.CancelScope(), Drain())
            problems: list[str] = []

            async def run(item: Any) -> Any:
                fails = ends.started()
                # Staggered, so that some runs are in flight whenever the stream ends.
                await trio.sleep(0.5 * (ends.starts % 3))
                if fails:
                    raise EndingError("the run that fails, in the run-failed ending")
                task = trio.lowlevel.current_task()
                dependency.was_cut(task)
                try:
                    value = await user_run(item)
                except trio.Cancelled:
                    raise
                except BaseException as exc:
                    if dependency.was_cut(task) and trio.current_effective_deadline() == -float(
                        "inf"
                    ):
                        problems.append(
                            f"the run of {item!r} raised {exc!r} instead of the trio.Cancelled "
                            "that cut its call"
                        )
                    raise
                if dependency.was_cut(task) and trio.current_effective_deadline() == -float("inf"):
                    problems.append(
                        f"the run of {item!r} returned after its call was cancelled: "
                        "trio.Cancelled was swallowed"
                    )
                return value

            try:
                problems += await _drive(ending, values, run, window, None, ends)
            except Exception as exc:
                if not isinstance(
                    exc, how_flaky.error if isinstance(how_flaky.error, type) else ()
                ):
                    raise
            if dependency.in_flight:
                problems.append(
                    f"{dependency.in_flight} call(s) of the dependency still in flight "
                    "after the stream ended"
                )
            problems += _invariant_problems(invariant)
            if problems:
                return problems
            dependency.flaky = attrs.evolve(how_flaky, fail_first=0)
            with trio.move_on_after(timeout / 2) as again:
                try:
                    await run_stream(values, user_run, window=window)
                except Exception as exc:
                    return [
                        f"the same run, on a fresh stream afterwards, raised {exc!r}: "
                        "state was left behind"
                    ]
            if again.cancelled_caught:
                return [
                    "the same run, on a fresh stream afterwards, deadlocked: state was left "
                    "behind (a slot or a lock kept by a run that ended early?)"
                ]
            return _invariant_problems(invariant)

        problems = _run(ending, one, timeout)
        if problems:
            raise ConformanceError(ending, "; ".join(problems))
