"""A ``run`` for tests: :class:`RunProbe` records what ran, when, and how many at once."""

from __future__ import annotations

from collections.abc import Callable, Container, Hashable, Mapping
from typing import TYPE_CHECKING, Any, Generic

import trio

from ._errors import TestingError
from ._trace import Trace

if TYPE_CHECKING:
    from typing_extensions import TypeVar

    # A feed or probe built without items to infer from is of Any items.
    T = TypeVar("T", default=Any)
else:
    from typing import TypeVar

    T = TypeVar("T")


class ProbeError(TestingError):
    """Raised by a :class:`RunProbe` run that was told to fail."""

    def __init__(self, item: object) -> None:
        super().__init__(f"probe run failed on {item!r}")
        self.item = item


class RunProbe(Generic[T]):
    """An async callable to pass as ``run``; records starts, finishes and the peak alive.

    Args:
        gated: Each run waits until the test calls :meth:`release` for its
            item (or :meth:`release_all`).
        durations: Seconds each run sleeps on the trio clock: a mapping from
            item to seconds or a function of the item. Missing means 0 (one
            checkpoint).
        fail: Items whose run raises :class:`ProbeError` (after its gate and
            its duration): a container of items or a predicate.
        value: What a run returns for its item (default: the item).
        trace: A shared :class:`Trace` to record ``start``/``finish``/``fail``/
            ``cancel`` events in.
    """

    def __init__(
        self,
        *,
        gated: bool = False,
        durations: Mapping[Any, float] | Callable[[T], float] | None = None,
        fail: Container[Any] | Callable[[T], bool] = (),
        value: Callable[[T], Any] | None = None,
        trace: Trace | None = None,
    ) -> None:
        self._gated = gated
        self._durations = durations
        self._fail = fail
        self._value = value
        self._trace = trace
        self._gates: dict[Hashable, trio.Event] = {}
        self._released: set[Hashable] = set()
        self._start_lot = trio.lowlevel.ParkingLot()
        self.started: list[T] = []
        self.finished: list[T] = []
        self.failed: list[T] = []
        self.cancelled: list[T] = []
        self.alive: int = 0
        self.peak: int = 0

    def release(self, item: T) -> None:
        """Let the gated run of ``item`` go on (now or whenever it starts)."""
        self._released.add(item)
        gate = self._gates.pop(item, None)
        if gate is not None:
            gate.set()

    def release_all(self) -> None:
        """Let every gated run that has started go on."""
        for gate in self._gates.values():
            gate.set()
        self._gates.clear()

    async def wait_started(self, count: int) -> None:
        """Return once ``count`` runs have started."""
        while len(self.started) < count:
            await self._start_lot.park()

    def _duration(self, item: T) -> float:
        if self._durations is None:
            return 0.0
        if callable(self._durations):
            return float(self._durations(item))
        return float(self._durations.get(item, 0.0))

    def _should_fail(self, item: T) -> bool:
        if callable(self._fail):
            return bool(self._fail(item))
        return item in self._fail

    async def __call__(self, item: T) -> Any:
        self.started.append(item)
        self.alive += 1
        self.peak = max(self.peak, self.alive)
        self._record("start", item)
        self._start_lot.unpark_all()
        try:
            if self._gated and item not in self._released:
                gate = self._gates.setdefault(item, trio.Event())
                await gate.wait()
            duration = self._duration(item)
            if duration > 0:
                await trio.sleep(duration)
            else:
                await trio.lowlevel.checkpoint()
            if self._should_fail(item):
                self.failed.append(item)
                self._record("fail", item)
                raise ProbeError(item)
        except trio.Cancelled:
            self.cancelled.append(item)
            self._record("cancel", item)
            raise
        finally:
            self.alive -= 1
        self.finished.append(item)
        self._record("finish", item)
        return item if self._value is None else self._value(item)

    def _record(self, kind: str, item: object) -> None:
        if self._trace is not None:
            self._trace.record(kind, item)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        return (
            f"<RunProbe started={len(self.started)} finished={len(self.finished)} "
            f"alive={self.alive} peak={self.peak}>"
        )
