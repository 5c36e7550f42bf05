"""Which rollouts an evaluation runs: task ids, selection, and one slot per rollout.

Every kind of taskset ends up as a source of :class:`Slot` for the runner:

* a static finite set is read whole before the first rollout (ids, shuffle,
  ``--id``, ``-n``), so its total is known from the start;
* a streaming or infinite set is read through ``take(..., n)``, one task at a
  time, and a task is pulled only when the runner asks for its first slot,
  so the window bounds rollouts and the feed is never read ahead;
* a :class:`~sluicegate.SampleSource` is wrapped by :class:`EvalSource`,
  which gives the tasks it adds ids, filters and caps them, and expands
  each into its rollouts.
"""

from __future__ import annotations

import enum
import warnings
from collections.abc import AsyncIterable, AsyncIterator, Collection, Iterable, Iterator, Sequence
from typing import Any

import attrs

from .._dynamic import SampleSource, enqueue
from .._take import take
from .._taskset import Task, Taskset
from ._config import EvalConfig, UsageError
from ._records import Row
from ._tally import Tally

__all__ = [
    "DuplicateTaskId",
    "EvalSource",
    "IdBook",
    "Kind",
    "Slot",
    "TaskCapWarning",
    "build_source",
    "check",
    "kind_of",
]


class DuplicateTaskId(ValueError):
    """Two tasks of one evaluation have the same id."""


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


def kind_of(taskset: Taskset[Any] | SampleSource[Any, Any]) -> Kind:
    """Classify ``taskset``."""
    if isinstance(taskset, SampleSource):
        return Kind.DYNAMIC
    if taskset.streaming:
        return Kind.STREAMING
    if taskset.infinite:
        return Kind.INFINITE
    return Kind.STATIC


def check(kind: Kind, config: EvalConfig) -> None:
    """Refuse settings that cannot work for ``kind``, before anything runs.

    Raises:
        UsageError: saying which flag and why.
    """
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
    if config.resume and kind is not Kind.INFINITE:
        raise UsageError(
            f"--resume cannot be used with {what}: its tasks cannot be read again, so "
            f"there is nothing to match the saved rows against"
        )


def _explicit_id(task: object) -> str | None:
    if isinstance(task, Task) and task.id is not None:
        return str(task.id)
    return None


class IdBook:
    """Gives tasks ids: explicit ones are kept, the rest get ``1``, ``2``, ... skipping ids in use.

    Ids are strings, so ``1`` and ``"1"`` are the same id.
    """

    def __init__(self) -> None:
        self._used: set[str] = set()
        self._next = 1

    def _claim(self, task_id: str) -> None:
        if task_id in self._used:
            raise DuplicateTaskId(f"duplicate task id {task_id!r}: every task needs its own id")
        self._used.add(task_id)

    def _fresh(self) -> str:
        while str(self._next) in self._used:
            self._next += 1
        task_id = str(self._next)
        self._used.add(task_id)
        return task_id

    @staticmethod
    def _with_id(task: Any, task_id: str) -> Any:
        return attrs.evolve(task, id=task_id) if isinstance(task, Task) else task

    def assign(self, task: Any) -> tuple[str, Any]:
        """Return ``task``'s id and the task carrying it (a :class:`~sluicegate.Task` is evolved).

        Raises:
            DuplicateTaskId: if the task's explicit id was seen before.
        """
        task_id = _explicit_id(task)
        if task_id is not None:
            self._claim(task_id)
            return task_id, task
        task_id = self._fresh()
        return task_id, self._with_id(task, task_id)

    def assign_all(self, tasks: Sequence[Any]) -> list[tuple[str, Any]]:
        """Like :meth:`assign` over ``tasks``, but every explicit id is reserved first,
        so no generated id takes one that appears later in the sequence."""
        explicit = [_explicit_id(task) for task in tasks]
        for task_id in explicit:
            if task_id is not None:
                self._claim(task_id)
        return [
            (task_id, task) if task_id is not None else self._assign_fresh(task)
            for task_id, task in zip(explicit, tasks, strict=True)
        ]

    def _assign_fresh(self, task: Any) -> tuple[str, Any]:
        task_id = self._fresh()
        return task_id, self._with_id(task, task_id)


async def _aclose(source: object) -> None:
    aclose = getattr(source, "aclose", None)
    if aclose is not None:
        await aclose()


def _static_slots(
    ts: Taskset[Any],
    config: EvalConfig,
    done: Collection[tuple[str, int]],
    tally: Tally,
) -> Iterator[Slot]:
    try:
        pairs = IdBook().assign_all(list(ts))
    except DuplicateTaskId as exc:
        raise UsageError(str(exc)) from None
    if config.shuffle is not None:
        pairs = list(Taskset.from_iterable(pairs).shuffle(config.shuffle))
    if config.ids:
        wanted = set(config.ids)
        pairs = [pair for pair in pairs if pair[0] in wanted]
        unknown = wanted.difference(task_id for task_id, _ in pairs)
        if unknown:
            warnings.warn(
                f"--id matched no task for: {', '.join(sorted(unknown))}",
                UserWarning,
                stacklevel=1,
            )
    if config.num_tasks is not None:
        pairs = pairs[: config.num_tasks]
    tally.planned = len(pairs) * config.rollouts
    slots = [
        Slot(task_id, rollout, task)
        for task_id, task in pairs
        for rollout in range(config.rollouts)
        if (task_id, rollout) not in done
    ]
    return iter(slots)


async def _identified(
    stream: AsyncIterator[Any], book: IdBook, ids: Collection[str]
) -> AsyncIterator[tuple[str, Any]]:
    # Ids are unique, so once every wanted id has been seen nothing further
    # can match: stop reading instead of waiting on the feed forever.
    missing = set(ids)
    try:
        async for task in stream:
            task_id, task = book.assign(task)
            if ids and task_id not in ids:
                continue
            yield task_id, task
            missing.discard(task_id)
            if ids and not missing:
                return
    finally:
        await _aclose(stream)


async def _expanded(
    tasks: AsyncIterator[tuple[str, Any]],
    rollouts: int,
    done: Collection[tuple[str, int]],
    tally: Tally,
) -> AsyncIterator[Slot]:
    try:
        async for task_id, task in tasks:
            tally.planned += rollouts
            for rollout in range(rollouts):
                if (task_id, rollout) not in done:
                    yield Slot(task_id, rollout, task)
    finally:
        await _aclose(tasks)


class EvalSource(SampleSource[Any, Any]):
    """A user's :class:`~sluicegate.SampleSource` seen through the eval's rules.

    It delegates :meth:`initial`, :meth:`next` and :meth:`on_complete` to the
    user's source and turns every task they add into slots: ids continue the
    numbering (a duplicate fails the run), ``--id`` filters, ``-n`` caps the
    total (later additions are dropped with one :class:`TaskCapWarning`, and
    once the cap is reached the user's ``next()`` is not called), and each
    admitted task becomes ``-r`` slots, growing ``tally.planned``.

    Tasks the user's run adds with :func:`~sluicegate.enqueue` reach the
    runner as they are; the eval's run hands them back to :meth:`admit_enqueued`.
    """

    def __init__(self, user: SampleSource[Any, Any], config: EvalConfig, tally: Tally) -> None:
        self._user = user
        self._config = config
        self._tally = tally
        self._book = IdBook()
        self._ids = frozenset(config.ids)
        self._admitted = 0
        self._warned = False

    @property
    def full(self) -> bool:
        """Whether ``-n`` tasks have been admitted."""
        cap = self._config.num_tasks
        return cap is not None and self._admitted >= cap

    def _prepare(self, task: Any) -> Any:
        prompt = self._config.system_prompt
        if prompt is not None and isinstance(task, Task):
            return task.with_system_prompt(prompt)
        return task

    def _warn_cap(self) -> None:
        if not self._warned:
            self._warned = True
            warnings.warn(
                f"-n/--num-tasks {self._config.num_tasks} reached: further tasks from the "
                f"SampleSource are dropped",
                TaskCapWarning,
                stacklevel=1,
            )

    def _slots(self, task_id: str, task: Any) -> list[Slot]:
        if self._ids and task_id not in self._ids:
            return []
        self._admitted += 1
        self._tally.planned += self._config.rollouts
        return [Slot(task_id, rollout, task) for rollout in range(self._config.rollouts)]

    def admit(self, tasks: Iterable[Any]) -> list[Slot]:
        """Give ``tasks`` ids, filter and cap them, and return their slots.

        Raises:
            DuplicateTaskId: if a task's explicit id is already in use.
        """
        slots = []
        for task in tasks:
            if self.full:
                self._warn_cap()
                continue
            slots.extend(self._slots(*self._book.assign(self._prepare(task))))
        return slots

    def admit_enqueued(self, task: Any) -> None:
        """Admit a task the user's run passed to :func:`~sluicegate.enqueue` (call from a run)."""
        enqueue(*self.admit((task,)))

    def initial(self) -> Sequence[Slot]:
        # The whole seed gets its ids at once, so generated ids skip explicit ones.
        pairs = self._book.assign_all([self._prepare(task) for task in self._user.initial()])
        slots = []
        for task_id, task in pairs:
            if self.full:
                self._warn_cap()
                continue
            slots.extend(self._slots(task_id, task))
        return slots

    async def next(self) -> Sequence[Slot] | None:
        if self.full:
            return None
        more = await self._user.next()
        if more is None:
            return None
        return self.admit(more)

    async def on_complete(self, item: Any, result: Any) -> Sequence[Slot] | None:
        if not isinstance(item, Slot) or not isinstance(result, Row) or result.status != "ok":
            return None
        more = await self._user.on_complete(item.task, result.result)
        if more is None:
            return None
        return self.admit(more)


def build_source(
    kind: Kind,
    taskset: Taskset[Any] | SampleSource[Any, Any],
    config: EvalConfig,
    done: Collection[tuple[str, int]],
    tally: Tally,
) -> Iterable[Slot] | AsyncIterable[Slot] | EvalSource:
    """The runner's source for this evaluation; sets or grows ``tally.planned``.

    Args:
        kind: From :func:`kind_of`, already :func:`check` ed.
        taskset: The environment's taskset or source.
        config: The run's settings.
        done: ``(task_id, rollout)`` pairs a resume found ok; they are skipped.
        tally: Where the planned total goes.

    Raises:
        UsageError: for a static set with duplicate ids (found before any rollout).
    """
    tally.growing = kind is not Kind.STATIC
    if tally.growing and config.num_tasks is not None:
        tally.bound = config.num_tasks * config.rollouts
    if isinstance(taskset, SampleSource):
        return EvalSource(taskset, config, tally)
    view = taskset
    if config.system_prompt is not None:
        view = view.with_system_prompt(config.system_prompt)
    if kind is Kind.STATIC:
        return _static_slots(view, config, done, tally)
    tasks: AsyncIterator[tuple[str, Any]] = _identified(view.stream(), IdBook(), config.ids)
    if config.num_tasks is not None:
        tasks = take(tasks, config.num_tasks)
    return _expanded(tasks, config.rollouts, done, tally)
