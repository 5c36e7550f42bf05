"""The trio side of running items on a cluster, whatever the engine.

A run submits its item and parks; the engine calls back, from whichever
thread it lives on, when the item is finished, and the callback wakes the run
through the :class:`trio.lowlevel.TrioToken`. No OS thread waits for any item.

Submissions and cancellations made in one trio tick go out together: the
first one in a tick wakes a flusher task, which sends them once every task
that was runnable alongside the first caller has run. The engines
this is written for charge far more per call than per item in a call (Dask:
about 200 µs per ``Client.submit`` against 16 µs per item inside one
``Client.map``). The flusher is woken with ``reschedule``, not
``run_sync_soon``: the latter writes to a socket, and on the trio thread a
system call can wait milliseconds to get the GIL back from the engine's busy
thread.

An engine only has to do three things (see :class:`Engine`): submit many,
call back once per submitted item, cancel many. Dask is the one built
(``_engine.py``); another engine would be a second class of the same shape.
"""

from __future__ import annotations

import collections
import contextlib
import enum
import functools
import logging
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Protocol, final

import outcome
import trio

__all__ = ["Bridge", "Engine"]

logger = logging.getLogger("sluicegate")

Done = Callable[[outcome.Outcome[Any]], None]


class Engine(Protocol):
    """What :class:`Bridge` needs from a distributed engine.

    None of these methods may block: they are called on the trio thread.
    """

    def prepare(self, fn: Callable[[Any], Any], /) -> Hashable:
        """Wrap ``fn`` for the engine, once per ``remote(fn)``.

        Raises:
            Exception: if ``fn`` can never be sent (it cannot be pickled).
        """
        ...

    def submit(
        self, call: Hashable, items: Sequence[Any], done: Sequence[Done], /, *, again: bool = False
    ) -> list[Any]:
        """Start ``call(item)`` for each item; return one handle per item.

        ``done[i]`` must be called exactly once with the outcome of item
        ``i`` (a cancelled item may be reported either way, or not at all),
        from any thread, never from inside this call.

        ``again`` is true when the items were in a batch this method just
        refused and are sent one by one: the engine had its say about that
        failure (a log line, say) and should not repeat it.

        Raises:
            Exception: if the batch could not be sent; then nothing of it was.
        """
        ...

    def cancel(self, handles: Sequence[Any], /) -> None:
        """Drop the work behind ``handles``, queued or running, as far as the engine can."""
        ...


def _abort_parked(_: Any) -> trio.lowlevel.Abort:
    # The flusher is only ever cancelled when the whole trio run ends.
    return trio.lowlevel.Abort.SUCCEEDED


class _State(enum.Enum):
    QUEUED = "queued"  # waiting for the flush that submits it
    SUBMITTED = "submitted"  # the engine has it
    OVER = "over"  # delivered, failed to submit, or its run was cancelled


@final
class _Slot:
    """One item between its submission and its run waking up."""

    __slots__ = ("handle", "item", "state", "task")

    def __init__(self, item: Any, task: trio.lowlevel.Task) -> None:
        self.item = item
        self.task = task
        self.state = _State.QUEUED
        self.handle: Any = None


@final
class Bridge:
    """Runs items on an :class:`Engine` from trio, batching per tick.

    Create it inside the trio run that will use it, and :meth:`close` it
    when done; every method except :meth:`_finished_elsewhere` must be
    called on that run's thread.
    """

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._token = trio.lowlevel.current_trio_token()
        self._to_submit: dict[Hashable, list[_Slot]] = {}
        self._to_cancel: list[Any] = []
        # True while the flusher is not parked (it is not started yet): only
        # a parked flusher may be rescheduled.
        self._flush_due = True
        self._flusher = trio.lowlevel.spawn_system_task(
            self._flush_forever, name="sluicegate.dask flusher"
        )
        self._live: set[_Slot] = set()
        self._closed = False
        self._arrived: collections.deque[tuple[_Slot, outcome.Outcome[Any]]] = collections.deque()
        self._arrival_due = False

    def prepare(self, fn: Callable[[Any], Any]) -> Hashable:
        """What :meth:`call` takes for ``fn``; see :meth:`Engine.prepare`."""
        return self._engine.prepare(fn)

    async def call(self, call: Hashable, item: Any) -> Any:
        """Run ``call(item)`` on the engine and return what it returned.

        If the waiting task is cancelled, the work is cancelled on the engine
        (or never submitted, if the flush has not happened yet).

        Raises:
            RuntimeError: if the bridge is closed.
            Exception: what the remote call raised, as itself, or what
                submitting the item raised.
        """
        if self._closed:
            raise RuntimeError("this Dask bridge is closed: use it inside its open_dask() block")
        slot = _Slot(item, trio.lowlevel.current_task())
        batch = self._to_submit.get(call)
        if batch is None:
            self._to_submit[call] = [slot]
        else:
            batch.append(slot)
        self._live.add(slot)
        self._flush_soon()

        def abort(_: Any) -> trio.lowlevel.Abort:
            if slot.state is _State.SUBMITTED:
                self._to_cancel.append(slot.handle)
                self._flush_soon()
            self._retire(slot)
            return trio.lowlevel.Abort.SUCCEEDED

        return await trio.lowlevel.wait_task_rescheduled(abort)

    def close(self) -> None:
        """Refuse new calls; cancel what is in flight and wake its runs.

        Runs still waiting (in tasks that outlived the ``open_dask`` block)
        get a :class:`RuntimeError`.
        """
        if self._closed:
            return
        self._closed = True
        parked = not self._flush_due
        handles = [slot.handle for slot in self._live if slot.state is _State.SUBMITTED]
        self._to_cancel.extend(handles)
        for slot in list(self._live):
            self._wake(
                slot,
                outcome.Error(
                    RuntimeError("the open_dask() block ended before this item finished")
                ),
            )
        self._flush()
        if parked:
            # Let it see that the bridge is closed, and end.
            self._flush_due = True
            trio.lowlevel.reschedule(self._flusher)

    # -- the engine's side ----------------------------------------------------

    def _finished_elsewhere(self, slot: _Slot, result: outcome.Outcome[Any]) -> None:
        """The engine's callback for ``slot``; safe from any thread.

        Results that arrive together reach trio in one ``run_sync_soon``:
        each call is a hand-over between threads, and those, not the work,
        are what a small task costs.
        """
        self._arrived.append((slot, result))
        # Lock-free: _take_arrived clears the flag before it empties the
        # deque, so a result appended after the flag was seen set is taken by
        # that pass, and one appended later schedules a pass of its own.
        if not self._arrival_due:
            self._arrival_due = True
            with contextlib.suppress(trio.RunFinishedError):  # nobody is left to wake
                self._token.run_sync_soon(self._take_arrived)

    def _take_arrived(self) -> None:
        self._arrival_due = False
        arrived = self._arrived
        while arrived:
            slot, result = arrived.popleft()
            if slot.state is _State.SUBMITTED:
                self._wake(slot, result)

    # -- batching ---------------------------------------------------------------

    def _flush_soon(self) -> None:
        if not self._flush_due:
            self._flush_due = True
            trio.lowlevel.reschedule(self._flusher)

    async def _flush_forever(self) -> None:
        while True:
            if not (self._to_submit or self._to_cancel or self._closed):
                # No schedule point from here to parking: whoever finds the
                # flag false may reschedule the flusher.
                self._flush_due = False
                await trio.lowlevel.wait_task_rescheduled(_abort_parked)
            # Woken by the first call of a tick (or starting while calls wait):
            # give the tasks runnable alongside it one more tick to queue
            # theirs, so that they all go out in one call.
            await trio.lowlevel.cancel_shielded_checkpoint()
            self._flush()
            if self._closed:
                return

    def _flush(self) -> None:
        """Send what this tick queued: cancellations first, to free room."""
        if self._to_cancel:
            handles, self._to_cancel = self._to_cancel, []
            try:
                self._engine.cancel(handles)
            except Exception:
                # The runs are already cancelled on our side; all that is lost
                # is the cluster's time, and nobody is left to raise this to.
                logger.exception(
                    "sluicegate: cancelling %d items on the cluster failed", len(handles)
                )
        if self._to_submit:
            batches, self._to_submit = self._to_submit, {}
            for call, slots in batches.items():
                queued = [slot for slot in slots if slot.state is _State.QUEUED]
                if queued:
                    self._submit(call, queued)

    def _submit(self, call: Hashable, slots: list[_Slot], *, again: bool = False) -> None:
        finished = self._finished_elsewhere
        try:
            handles = self._engine.submit(
                call,
                [slot.item for slot in slots],
                [functools.partial(finished, slot) for slot in slots],
                again=again,
            )
        except Exception as exc:
            if len(slots) > 1:
                # One bad item (say, one that cannot be pickled) refuses the
                # whole batch: send them one by one so only the culprit fails.
                for slot in slots:
                    self._submit(call, [slot], again=True)
                return
            exc.add_note("sluicegate: the item could not be sent to the cluster")
            self._wake(slots[0], outcome.Error(exc))
            return
        for slot, handle in zip(slots, handles, strict=True):
            slot.handle = handle
            slot.state = _State.SUBMITTED

    # -- waking ---------------------------------------------------------------

    def _retire(self, slot: _Slot) -> None:
        # Drop the handle: an exception raised out of the run keeps the run's
        # frame, hence the slot, alive, and a live handle keeps the result
        # held on the cluster.
        slot.state = _State.OVER
        slot.handle = None
        slot.item = None
        self._live.discard(slot)

    def _wake(self, slot: _Slot, result: outcome.Outcome[Any]) -> None:
        task = slot.task
        self._retire(slot)
        trio.lowlevel.reschedule(task, result)
