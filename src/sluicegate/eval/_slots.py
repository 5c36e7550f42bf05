"""Which rollouts an evaluation runs: task ids, selection, and one slot per rollout.

Every kind of taskset ends up as a source of :class:`Slot` for the runner:

* a static finite set is read whole, once, before the first rollout (ids,
  shuffle, ``--id``, ``-n``), so its total is known from the start;
* a streaming or infinite set is read through ``take(..., n)``, one task at a
  time, and a task is pulled only when the runner asks for its first slot,
  so the window bounds rollouts and the feed is never read ahead;
* a :class:`~sluicegate.SampleSource` is wrapped by :class:`EvalSource`,
  whose admission hook makes slots of every task the moment it is added
  (seed, ``next()``, ``on_complete()``, ``enqueue()``): ids, filter, cap.
"""

from __future__ import annotations

import contextlib
import enum
import math
import traceback
import warnings
from collections.abc import AsyncIterator, Collection, Iterable, Iterator, Sequence
from typing import Any

import attrs
import trio

from .._dynamic import SampleSource
from .._take import take
from .._taskset import Task, Taskset
from .._util import in_background
from ._config import EvalConfig, UsageError
from ._current import rollout_of
from ._errors import EvalError
from ._records import RolloutRow
from ._reduce import rollouts_needed
from ._tally import RunTally

__all__ = [
    "DuplicateTaskId",
    "EvalSource",
    "IdBook",
    "Kind",
    "Slot",
    "Source",
    "TaskCapWarning",
    "check",
    "kind_of",
    "plan",
]


class DuplicateTaskId(EvalError, ValueError):
    """Two tasks of one evaluation have the same id, or one rollout was added twice."""


class TaskCapWarning(UserWarning):
    """A dynamic source added tasks beyond ``-n``; they were dropped."""


@attrs.frozen
class Slot:
    """One rollout to run: the unit the runner's window counts.

    Attributes:
        task_id: The task's id.
        rollout: Which rollout of the task, from 0.
        task: The task, with its id and system prompt applied.
    """

    task_id: str
    rollout: int
    task: Any


class Kind(enum.Enum):
    """What sort of set an environment's ``taskset`` is."""

    STATIC = "static"
    INFINITE = "infinite"
    STREAMING = "streaming"
    DYNAMIC = "SampleSource"

    @property
    def resumable(self) -> bool:
        """Whether ``--resume`` can read the same tasks again."""
        return self in (Kind.STATIC, Kind.INFINITE)


def kind_of(taskset: Taskset[Any] | SampleSource[Any, Any]) -> Kind:
    """Classify ``taskset``."""
    if isinstance(taskset, SampleSource):
        return Kind.DYNAMIC
    if taskset.streaming:
        return Kind.STREAMING
    if taskset.infinite:
        return Kind.INFINITE
    return Kind.STATIC


def check(kind: Kind, config: EvalConfig, resume: bool) -> None:
    """Refuse settings that cannot work for ``kind``, before anything runs.

    Raises:
        UsageError: saying which flag and why.
    """
    if kind is not Kind.DYNAMIC:
        # (A SampleSource may add rollouts past -r with enqueue(task, rollout=k).)
        for reducer in config.reduce:
            needed = rollouts_needed(reducer)
            if config.rollouts < needed:
                raise UsageError(
                    f"--reduce {reducer} needs {needed} rollouts of each task, and -r is "
                    f"{config.rollouts}: give -r {needed} or more"
                )
    what = {
        Kind.INFINITE: "an infinite taskset",
        Kind.STREAMING: "a streaming taskset",
        Kind.DYNAMIC: "a SampleSource",
    }.get(kind)
    if what is None:
        return
    if kind is not Kind.DYNAMIC and config.num_tasks is None:
        raise UsageError(
            f"{what} needs -n/--num-tasks: an evaluation is a report on a finite set, "
            f"so say how many of its tasks to run"
        )
    if config.shuffle is not None:
        raise UsageError(
            f"--shuffle cannot be used with {what}: there is no whole set to shuffle, "
            f"only the tasks as they arrive"
        )
    if resume and not kind.resumable:
        raise UsageError(
            f"--resume cannot be used with {what}: its tasks cannot be read again, so "
            f"there is nothing to match the saved rows against"
        )


def _explicit_id(task: object) -> str | None:
    if isinstance(task, Task) and task.id is not None:
        return str(task.id)
    return None


def _with_id(task: Any, task_id: str) -> Any:
    return attrs.evolve(task, id=task_id) if isinstance(task, Task) else task


def _duplicate(rollout: int, task_id: str) -> DuplicateTaskId:
    return DuplicateTaskId(
        f"duplicate rollout {rollout} of task {task_id!r}: each rollout of a task runs once"
    )


class IdBook:
    """Task ids and the rollouts reserved under each.

    Explicit ids are kept; other tasks get ``1``, ``2``, ... skipping ids in
    use. Ids are strings, so ``1`` and ``"1"`` are the same id. Each
    ``(task id, rollout)`` is reserved once: a whole task reserves rollouts
    ``0`` to ``rollouts - 1``, a single rollout just itself.
    """

    def __init__(self, rollouts: int = 1) -> None:
        self._rollouts = rollouts
        # Invariant: written by name_all() only; every id handed out, explicit or made.
        self._named: set[str] = set()
        # Invariant: _whole and _single are written by reserve() only; each
        # (task id, rollout) is held by at most one of them.
        self._whole: set[str] = set()
        self._single: dict[str, set[int]] = {}
        # Invariant: written by name_all() only; no made id below it is free.
        self._next = 1

    def name_all(self, tasks: Sequence[Any]) -> list[tuple[str, Any]]:
        """Give each of ``tasks`` its id (a :class:`~sluicegate.Task` is evolved to carry it).

        Every explicit id in ``tasks`` is set aside first, so no generated id
        takes one that appears later in the sequence. Nothing is reserved.
        """
        explicit = [_explicit_id(task) for task in tasks]
        self._named.update(task_id for task_id in explicit if task_id is not None)
        named = []
        for task_id, task in zip(explicit, tasks, strict=True):
            if task_id is None:
                while str(self._next) in self._named:
                    self._next += 1
                task_id = str(self._next)
                self._named.add(task_id)
                task = _with_id(task, task_id)
            named.append((task_id, task))
        return named

    def reserve(self, task_id: str, rollout: int | None) -> None:
        """Reserve the whole task (``rollout=None``) or one rollout of it.

        Raises:
            DuplicateTaskId: if any of those rollouts was reserved before.
        """
        single = self._single.get(task_id, ())
        if rollout is None:
            if task_id in self._whole:
                raise DuplicateTaskId(f"duplicate task id {task_id!r}: every task needs its own id")
            taken = sorted(k for k in single if k < self._rollouts)
            if taken:
                raise _duplicate(taken[0], task_id)
            self._whole.add(task_id)
            return
        if rollout in single or (task_id in self._whole and rollout < self._rollouts):
            raise _duplicate(rollout, task_id)
        self._single.setdefault(task_id, set()).add(rollout)

    def assign(self, task: Any) -> tuple[str, Any]:
        """Name ``task`` and reserve it whole.

        Raises:
            DuplicateTaskId: if the task's explicit id was seen before.
        """
        return self.assign_all([task])[0]

    def assign_all(self, tasks: Sequence[Any]) -> list[tuple[str, Any]]:
        """Name ``tasks`` (see :meth:`name_all`) and reserve each whole.

        Raises:
            DuplicateTaskId: if an id is used twice.
        """
        named = self.name_all(tasks)
        for task_id, _ in named:
            self.reserve(task_id, None)
        return named


def _prompted(task: Any, prompt: str | None) -> Any:
    if prompt is not None and isinstance(task, Task):
        return task.with_system_prompt(prompt)
    return task


def _where(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return ""
    last = frames[-1]
    return f" (at {last.filename}:{last.lineno}, in {last.name})"


def _read_static(taskset: Taskset[Any], prompt: str | None) -> list[Any]:
    # iter(), not list(taskset): list() asks len() first, and a Taskset's
    # len() calls load() again.
    try:
        return [_prompted(task, prompt) for task in iter(taskset)]
    except Exception as exc:
        raise UsageError(
            f"the taskset's load() raised {type(exc).__name__}: {exc}{_where(exc)}"
        ) from exc


async def _static_slots(
    config: EvalConfig,
    taskset: Taskset[Any],
    done: Collection[tuple[str, int]],
    tally: RunTally,
    threaded: bool,
) -> Iterator[Slot]:
    if threaded:
        # In a worker thread, so that signals are heard while a long load()
        # runs; the caller may stop waiting for it.
        tasks = await trio.to_thread.run_sync(
            _read_static, taskset, config.system_prompt, abandon_on_cancel=True
        )
    else:
        tasks = _read_static(taskset, config.system_prompt)
    try:
        pairs = IdBook(config.rollouts).assign_all(tasks)
    except DuplicateTaskId as exc:
        raise UsageError(str(exc)) from None
    if config.shuffle is not None:
        pairs = list(Taskset.from_iterable(pairs).shuffle(config.shuffle))
    if not pairs:
        raise UsageError("the taskset's load() returned no task: there is nothing to evaluate")
    if config.ids:
        wanted = set(config.ids)
        pairs = [pair for pair in pairs if pair[0] in wanted]
        unknown = wanted.difference(task_id for task_id, _ in pairs)
        if not pairs:
            # A typo in --id must not pass a gate having evaluated nothing.
            raise UsageError(f"--id matched no task: {', '.join(sorted(unknown))}")
        if unknown:
            warnings.warn(
                f"--id matched no task for: {', '.join(sorted(unknown))}",
                UserWarning,
                stacklevel=1,
            )
    if config.num_tasks is not None:
        pairs = pairs[: config.num_tasks]
    tally.plan(len(pairs) * config.rollouts)
    slots = [
        Slot(task_id, rollout, task)
        for task_id, task in pairs
        for rollout in range(config.rollouts)
        if (task_id, rollout) not in done
    ]
    return iter(slots)


async def _aclose(source: object) -> None:
    aclose = getattr(source, "aclose", None)
    if aclose is not None:
        await aclose()


async def _identified(
    stream: AsyncIterator[Any], book: IdBook, config: EvalConfig
) -> AsyncIterator[tuple[str, Any]]:
    # Ids are unique, so once every wanted id has been seen nothing further
    # can match: stop reading instead of waiting on the feed forever. The
    # caller bounds `stream` to -n tasks, so a wanted id that never comes
    # cannot keep the feed open either.
    ids = frozenset(config.ids)
    missing = set(ids)
    read = 0
    try:
        async for task in stream:
            read += 1
            task_id, task = book.assign(_prompted(task, config.system_prompt))
            if ids and task_id not in ids:
                continue
            yield task_id, task
            missing.discard(task_id)
            if ids and not missing:
                return
        if missing:
            warnings.warn(
                f"--id matched no task among the {read} read for: {', '.join(sorted(missing))}",
                UserWarning,
                stacklevel=1,
            )
    finally:
        await _aclose(stream)


async def _expanded(
    tasks: AsyncIterator[tuple[str, Any]],
    rollouts: int,
    done: Collection[tuple[str, int]],
    tally: RunTally,
) -> AsyncIterator[Slot]:
    try:
        async for task_id, task in tasks:
            tally.grow(rollouts)
            for rollout in range(rollouts):
                if (task_id, rollout) not in done:
                    yield Slot(task_id, rollout, task)
    finally:
        await _aclose(tasks)


class EvalSource(SampleSource[Any, Any]):
    """A user's :class:`~sluicegate.SampleSource` seen through the eval's rules.

    It delegates :meth:`initial`, :meth:`next`, :meth:`on_complete` and
    :meth:`on_abandoned` to the user's source, and its admission hook turns
    every task added by any of them, or by :func:`~sluicegate.enqueue`, into
    slots at the moment it is added: ids continue the numbering, each
    ``(task id, rollout)`` is reserved once (a second reservation fails the
    run), ``--id`` filters, ``-n`` caps the number of tasks (further
    rollouts of an admitted task still run; a new task past the cap is
    dropped with one :class:`TaskCapWarning`, and once the cap is reached
    the user's ``next()`` is not called), and ``tally.planned`` grows.

    A task dropped by the cap or the filter was accepted (``enqueue()`` did
    not raise) and will never run, so the user's ``on_abandoned()`` hears
    of each of its rollouts, from a task of its own while the run goes on
    (see :meth:`reporting`): a run that waits for work it enqueued is not
    left waiting forever.

    A duplicate raises :class:`DuplicateTaskId` where the task was added
    (``enqueue()`` included) and fails the run when the run that added it
    completes, whether or not its code caught the exception.
    """

    def __init__(self, user: SampleSource[Any, Any], config: EvalConfig, tally: RunTally) -> None:
        self._user = user
        self._config = config
        self._tally = tally
        self._book = IdBook(config.rollouts)
        self._ids = frozenset(config.ids)
        # Invariant: written by _slots() only; len(_admitted) <= -n when -n is given.
        self._admitted: set[str] = set()
        # Invariant: written by _warn_cap() only; False -> True once.
        self._warned = False
        # Invariant: written by admit() only; the first duplicate, kept once set.
        self._failure: DuplicateTaskId | None = None
        # Rollouts of tasks dropped by -n or --id, for on_abandoned().
        # Invariant: _drop() sends, _report_dropped() receives, reporting() closes.
        self._dropped, self._to_report = trio.open_memory_channel[Slot](math.inf)

    @property
    def full(self) -> bool:
        """Whether ``-n`` tasks have been admitted."""
        cap = self._config.num_tasks
        return cap is not None and len(self._admitted) >= cap

    def _warn_cap(self) -> None:
        if not self._warned:
            self._warned = True
            warnings.warn(
                f"-n/--num-tasks {self._config.num_tasks} reached: further tasks from the "
                f"SampleSource are dropped (its on_abandoned() hears of each)",
                TaskCapWarning,
                stacklevel=1,
            )

    def admit(self, items: Iterable[Any], rollout: int | None) -> list[Slot]:
        try:
            return self._slots(items, rollout)
        except DuplicateTaskId as exc:
            # Raised to whoever added the task, and kept: the run fails even
            # if that code catches it.
            if self._failure is None:
                self._failure = exc
            raise

    def _check(self) -> None:
        if self._failure is not None:
            raise self._failure

    def _slots(self, items: Iterable[Any], rollout: int | None) -> list[Slot]:
        tasks = [_prompted(task, self._config.system_prompt) for task in items]
        rollouts = range(self._config.rollouts) if rollout is None else range(rollout, rollout + 1)
        slots: list[Slot] = []
        for task_id, task in self._book.name_all(tasks):
            if task_id not in self._admitted and self.full:
                self._warn_cap()
                self._drop(task_id, task, rollouts)
                continue
            self._book.reserve(task_id, rollout)
            if self._ids and task_id not in self._ids:
                self._drop(task_id, task, rollouts)
                continue
            self._admitted.add(task_id)
            # A rollout past -r: -n times -r no longer bounds the total.
            self._tally.grow(len(rollouts), past_bound=rollouts.stop > self._config.rollouts)
            slots.extend(Slot(task_id, k, task) for k in rollouts)
        return slots

    def _drop(self, task_id: str, task: Any, rollouts: range) -> None:
        for k in rollouts:
            # Unbounded: admission never waits. After reporting() ended the
            # channel is closed, and nothing is left to hear of it.
            with contextlib.suppress(trio.ClosedResourceError):
                self._dropped.send_nowait(Slot(task_id, k, task))

    async def _report_dropped(self, reported: trio.Event) -> None:
        try:
            async for slot in self._to_report:
                with rollout_of(slot.rollout):
                    await self._user.on_abandoned(slot.task)
        finally:
            reported.set()

    @contextlib.asynccontextmanager
    async def reporting(self) -> AsyncIterator[None]:
        """Tell the user's ``on_abandoned()`` of dropped tasks while the block runs.

        A block that ends normally waits for every drop to be reported; one
        that fails or is cancelled stops the reporting, as a failure or a
        cancellation unwinds everything.
        """
        reported = trio.Event()
        async with in_background(self._report_dropped, reported):
            yield
            self._dropped.close()
            await reported.wait()

    def initial(self) -> Sequence[Any]:
        return self._user.initial()

    async def next(self) -> Sequence[Any] | None:
        self._check()
        if self.full:
            return None
        return await self._user.next()

    async def on_complete(self, item: Slot, result: RolloutRow | None) -> Sequence[Any] | None:
        self._check()
        if result is None or result.status != "ok":
            return None
        with rollout_of(item.rollout):
            return await self._user.on_complete(item.task, result.result)

    async def on_abandoned(self, item: Slot) -> None:
        self._tally.abandon(item.task_id, item.rollout)
        with rollout_of(item.rollout):
            await self._user.on_abandoned(item.task)


Source = Iterable[Slot] | AsyncIterator[Slot] | EvalSource


async def plan(
    kind: Kind,
    taskset: Taskset[Any] | SampleSource[Any, Any],
    config: EvalConfig,
    done: Collection[tuple[str, int]],
    tally: RunTally,
    threaded: bool = False,
) -> Source:
    """The runner's source of slots for this evaluation; plans ``tally``, or grows it as tasks come.

    Args:
        kind: From :func:`kind_of`, already :func:`check` ed.
        taskset: The environment's taskset or source.
        config: The run's settings.
        done: ``(task_id, rollout)`` pairs a resume found ok; they are skipped.
        tally: Where the planned total goes.
        threaded: Read a static set's ``load()`` in a worker thread.

    Raises:
        UsageError: for a static set whose ``load()`` raises or holds
            duplicate ids (found before any rollout).
    """
    if kind is not Kind.STATIC:
        bound = None if config.num_tasks is None else config.num_tasks * config.rollouts
        tally.plan(0, growing=True, bound=bound)
    if isinstance(taskset, SampleSource):
        return EvalSource(taskset, config, tally)
    if kind is Kind.STATIC:
        return await _static_slots(config, taskset, done, tally, threaded)
    # -n bounds the tasks *read*, before --id filters them: a stream has no
    # end to wait for, so an id that never arrives must not keep it open.
    # (check() made sure -n is given.)
    assert config.num_tasks is not None
    read: AsyncIterator[Any] = take(taskset.stream(), config.num_tasks)
    tasks = _identified(read, IdBook(config.rollouts), config)
    return _expanded(tasks, config.rollouts, done, tally)
