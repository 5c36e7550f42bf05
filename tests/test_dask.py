"""sluicegate.dask on a real LocalCluster.

One in-process cluster (2 workers x 4 threads, ``processes=False``: it starts
in about 50 ms against about a second for worker processes) serves the whole
module through its address. Being in-process lets a test hold remote runs on
their worker threads with a ``threading.Event`` and release them itself, so
nothing here waits on real time to see whether something happened; where a
test has to see the scheduler catch up (cancellations travel asynchronously)
it asks the scheduler under a ``fail_after`` bound. One test starts an
embedded cluster of worker processes, for a real process boundary.
"""

from __future__ import annotations

import functools
import itertools
import logging
import operator
import pickle
import threading
import time
import traceback
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from distributed import Client, Future, LocalCluster
from distributed.core import Status

from sluicegate import Drain, open_stream, run_stream
from sluicegate.dask import RemoteCancelled, open_dask

pytestmark = pytest.mark.timeout(60)

# Cancellations reach the scheduler asynchronously; the issue promises
# "within a second". The bound is looser because the machine is shared.
SETTLE = 5.0

# distributed leaves its constructors untyped.
new_client: Callable[..., Client] = Client


# -- what runs on the workers ---------------------------------------------------


class Flaky(Exception):
    """Raised by a remote run: it must come back as itself."""


def double(item: int) -> int:
    # Later items finish first, so order is the runner's doing, not Dask's.
    time.sleep((7 - item % 8) * 0.001)
    return item * 2


async def async_double(item: int) -> tuple[int, bool]:
    await trio.sleep((7 - item % 8) * 0.001)
    return item * 2, trio.lowlevel.current_root_task() is not None


def fails_on_three(item: int) -> int:
    if item == 3:
        raise Flaky(f"item {item} is flaky")
    return item


_GATES: dict[str, Gate] = {}


class Gate:
    """A remote function whose runs block on their worker thread until released.

    Only works on an in-process cluster, where the worker unpickles the very
    same object (a gate pickles as its name). ``fail`` makes the run of that
    item raise, once ``wait_for`` other runs have started; the run of item
    ``quick`` returns at once.
    """

    def __init__(
        self, name: str, *, fail: int | None = None, wait_for: int = 0, quick: int | None = None
    ) -> None:
        self.__name__ = f"{name}_{uuid.uuid4().hex[:8]}"
        self.released = threading.Event()
        self.started = threading.Semaphore(0)
        self.fail = fail
        self.wait_for = wait_for
        self.quick = quick
        _GATES[self.__name__] = self

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (_gate_named, (self.__name__,))

    def __call__(self, item: int) -> int:
        if item == self.quick:
            return item
        if item == self.fail:
            for _ in range(self.wait_for):
                self.started.acquire(timeout=10)
            raise Flaky(f"item {item} failed")
        self.started.release()
        self.released.wait(timeout=30)
        return item

    async def wait_started(self, count: int) -> None:
        """Wait (in a thread) until ``count`` runs are blocked on this gate."""

        def wait() -> None:
            for _ in range(count):
                assert self.started.acquire(timeout=10), "the runs never started"

        await trio.to_thread.run_sync(wait)
        for _ in range(count):
            self.started.release()


def _gate_named(name: str) -> Gate:
    return _GATES[name]


@pytest.fixture
def make_gate() -> Iterator[Callable[..., Gate]]:
    """Makes gates for a test; releases them when it ends, so worker threads come free."""
    made: list[Gate] = []

    def make(name: str, **options: Any) -> Gate:
        made.append(Gate(name, **options))
        return made[-1]

    yield make
    for gate in made:
        gate.released.set()
        del _GATES[gate.__name__]


def _keys_with_prefix(dask_scheduler: Any, prefix: str) -> list[str]:
    return [str(key) for key in dask_scheduler.tasks if str(key).startswith(prefix)]


async def keys_on_scheduler(client: Client, prefix: str) -> list[str]:
    keys: list[str] = await trio.to_thread.run_sync(
        functools.partial(client.run_on_scheduler, _keys_with_prefix, prefix=prefix)
    )
    return keys


async def wait_scheduler_clear(client: Client, prefix: str) -> None:
    """Poll the scheduler, under a bound, until it holds no task named ``prefix``."""
    with trio.fail_after(SETTLE):
        # The state lives on the scheduler: there is no event to wait on.
        while await keys_on_scheduler(client, prefix):  # noqa: ASYNC110
            await trio.sleep(0.01)


async def wait_on_scheduler(client: Client, prefix: str, count: int) -> None:
    with trio.fail_after(SETTLE):
        while len(await keys_on_scheduler(client, prefix)) < count:  # noqa: ASYNC110
            await trio.sleep(0.01)


# -- order and results -----------------------------------------------------------


async def test_results_come_back_in_submission_order(dask_address: str) -> None:
    async with open_dask(dask_address) as dask:
        assert await run_stream(range(40), dask.remote(double), window=8) == [
            item * 2 for item in range(40)
        ]
        async with open_stream(range(40), dask.remote(double), window=8) as results:
            assert [done.value async for done in results] == [item * 2 for item in range(40)]
        async with open_stream(range(40), dask.remote(double), window=8, ordered=False) as results:
            assert sorted([done.value async for done in results]) == [
                item * 2 for item in range(40)
            ]


async def test_async_functions_run_under_trio_on_the_worker(dask_address: str) -> None:
    async with open_dask(dask_address) as dask:
        results = await run_stream(range(20), dask.remote(async_double), window=8)
    assert results == [(item * 2, True) for item in range(20)]


# -- failures ----------------------------------------------------------------------


async def test_a_remote_failure_is_raised_as_itself_with_the_runners_note(
    dask_address: str,
) -> None:
    async with open_dask(dask_address) as dask:
        with pytest.raises(Flaky) as caught:
            await run_stream(range(10), dask.remote(fails_on_three), window=4)
    error = caught.value
    assert type(error) is Flaky
    assert error.args == ("item 3 is flaky",)
    assert "sluicegate: raised by the run of item 3" in error.__notes__
    # The worker's traceback comes along.
    assert "fails_on_three" in "".join(traceback.format_exception(error))


async def test_fail_fast_leaves_no_task_on_the_scheduler(
    dask_address: str, make_gate: Callable[..., Gate]
) -> None:
    # Item 0 fails once 7 others hold the other worker threads; the rest of
    # the window (24 items) is queued on the scheduler at that moment.
    gate = make_gate("fail_fast", fail=0, wait_for=7)
    async with open_dask(dask_address) as dask:
        with pytest.raises(Flaky, match="item 0 failed") as caught:
            await run_stream(range(100), dask.remote(gate), window=32)
        assert "sluicegate: raised by the run of item 0" in caught.value.__notes__
        await wait_scheduler_clear(dask.client, gate.__name__)


async def test_caller_cancellation_leaves_no_task_on_the_scheduler(
    dask_address: str, make_gate: Callable[..., Gate]
) -> None:
    gate = make_gate("caller_cancel")
    async with open_dask(dask_address) as dask:
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(
                    functools.partial(run_stream, range(100), dask.remote(gate), window=32)
                )
                await wait_on_scheduler(dask.client, gate.__name__, 32)
                await gate.wait_started(8)
                scope.cancel()
        assert scope.cancelled_caught
        await wait_scheduler_clear(dask.client, gate.__name__)


async def test_leaving_open_stream_early_cancels_on_the_scheduler(
    dask_address: str, make_gate: Callable[..., Gate]
) -> None:
    gate = make_gate("leave_early", quick=0)
    async with open_dask(dask_address) as dask:
        async with open_stream(range(100), dask.remote(gate), window=16) as results:
            async for done in results:
                assert done.index == 0
                await wait_on_scheduler(dask.client, gate.__name__, 16)
                break
        await wait_scheduler_clear(dask.client, gate.__name__)


async def test_cancellation_by_someone_else_is_an_ordinary_exception(
    dask_address: str, make_gate: Callable[..., Gate]
) -> None:
    gate = make_gate("cancelled_elsewhere")
    async with open_dask(dask_address) as dask:
        client = dask.client

        async def cancel_from_outside() -> None:
            await wait_on_scheduler(client, gate.__name__, 4)
            keys = await keys_on_scheduler(client, gate.__name__)
            await trio.to_thread.run_sync(client.cancel, [Future(key, client) for key in keys])

        async with trio.open_nursery() as nursery:
            nursery.start_soon(cancel_from_outside)
            with pytest.raises(RemoteCancelled) as caught:
                await run_stream(range(4), dask.remote(gate), window=4)
    assert isinstance(caught.value, Exception)
    assert caught.value.__cause__ is not None
    assert any(
        note.startswith("sluicegate: raised by the run of item") for note in caught.value.__notes__
    )


async def test_an_item_that_cannot_be_pickled_fails_alone(dask_address: str) -> None:
    items: list[object] = [1, threading.Lock(), 3]
    async with open_dask(dask_address) as dask:
        with pytest.raises(TypeError) as caught:
            await run_stream(items, dask.remote(repr), window=3)
    assert "sluicegate: raised by the run of item 1" in caught.value.__notes__
    assert "sluicegate: the item could not be sent to the cluster" in caught.value.__notes__


class Kept(logging.Handler):
    """Keeps the records of the logger it is added to."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


async def test_an_item_that_cannot_be_pickled_is_logged_once_not_once_per_sending(
    dask_address: str,
) -> None:
    # Dask logs the refused batch at ERROR with a traceback; sent again on
    # its own, the culprit fails with the same TypeError, not a second log.
    dask_pickle = logging.getLogger("distributed.protocol.pickle")
    kept = Kept()
    dask_pickle.addHandler(kept)
    try:
        async with open_dask(dask_address) as dask:
            with pytest.raises(TypeError):
                await run_stream([1, threading.Lock(), 3], dask.remote(repr), window=3)
    finally:
        dask_pickle.removeHandler(kept)
    assert [record.levelname for record in kept.records] == ["ERROR"]


class Locked(Exception):
    """An exception that holds a lock, so it cannot be pickled."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.lock = threading.Lock()


def raise_locked(n: int) -> int:
    raise Locked(f"item {n} holds a lock")


async def test_a_remote_exception_that_does_not_pickle_comes_back_as_a_plain_exception(
    dask_address: str,
) -> None:
    # What docs/scaling.md says: Dask sends back Exception(repr(original)).
    async with open_dask(dask_address) as dask:
        with pytest.raises(Exception) as caught:
            await dask.remote(raise_locked)(3)
    assert type(caught.value) is Exception
    assert caught.value.args == ("Locked('item 3 holds a lock')",)


# -- drain -------------------------------------------------------------------------


async def test_a_drain_lets_the_runs_in_flight_finish(dask_address: str) -> None:
    drain = Drain()
    pulled = 0

    async def feed() -> AsyncIterator[int]:
        nonlocal pulled
        for item in itertools.count():
            if item == 12:
                drain.request("enough")
            pulled += 1
            yield item

    async with open_dask(dask_address) as dask:
        results = await run_stream(feed(), dask.remote(double), window=8, drain=drain)
        assert results == [item * 2 for item in range(len(results))]
        assert 12 <= len(results) <= pulled
        await wait_scheduler_clear(dask.client, "double")


# -- batching ------------------------------------------------------------------------


async def test_calls_made_in_one_tick_go_out_as_one_map_and_one_cancel(
    dask_address: str, make_gate: Callable[..., Gate], monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = make_gate("batching")
    async with open_dask(dask_address) as dask:
        client = dask.client
        maps: list[int] = []
        cancels: list[int] = []
        real_map: Any = client.map
        real_cancel: Any = client.cancel

        def counting_map(fn: Any, items: list[int], **kwargs: Any) -> Any:
            maps.append(len(items))
            return real_map(fn, items, **kwargs)

        def counting_cancel(futures: list[Future[Any]], **kwargs: Any) -> Any:
            cancels.append(len(futures))
            return real_cancel(futures, **kwargs)

        monkeypatch.setattr(client, "map", counting_map)
        monkeypatch.setattr(client, "cancel", counting_cancel)
        run = dask.remote(gate)
        async with trio.open_nursery() as nursery:
            for item in range(12):
                nursery.start_soon(run, item)  # all start in the same tick
            await wait_on_scheduler(client, gate.__name__, 12)
            nursery.cancel_scope.cancel()
        await wait_scheduler_clear(client, gate.__name__)
    assert maps == [12]
    assert cancels == [12]


# -- threads -------------------------------------------------------------------------


async def test_no_thread_per_item_in_flight(
    dask_address: str, make_gate: Callable[..., Gate]
) -> None:
    warm = make_gate("warm_up")
    gate = make_gate("threads")
    async with open_dask(dask_address) as dask:
        # Make every thread the cluster and trio's thread cache will use.
        async with trio.open_nursery() as nursery:
            nursery.start_soon(functools.partial(run_stream, range(8), dask.remote(warm), window=8))
            await warm.wait_started(8)
            warm.released.set()
        before = threading.active_count()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                functools.partial(run_stream, range(32), dask.remote(gate), window=32)
            )
            await wait_on_scheduler(dask.client, gate.__name__, 32)
            await gate.wait_started(8)
            during = threading.active_count()
            gate.released.set()
    # One thread per item in flight would add 32 here.
    assert during - before <= 2, (before, during)


# -- arguments and lifetimes -----------------------------------------------------------


async def test_bad_arguments_are_refused_before_anything_starts(dask_address: str) -> None:
    # Nothing listens there: had open_dask tried to connect before checking
    # its arguments, it would fail on the connection, not on the argument.
    nowhere = "tcp://127.0.0.1:9"
    with new_client(dask_address) as client:
        with pytest.raises(ValueError, match="not both"):
            async with open_dask(nowhere, client=client):
                pass
        with pytest.raises(TypeError, match="n_workers"):
            async with open_dask(client=client, n_workers=2):
                pass
    with pytest.raises(ValueError, match="closed"):
        async with open_dask(client=client):
            pass
    with pytest.raises(TypeError, match="n_workers"):
        async with open_dask(nowhere, n_workers=2):
            pass
    with pytest.raises(TypeError, match="address"):
        async with open_dask(8786):  # type: ignore[arg-type]
            pass
    with pytest.raises(TypeError, match=r"distributed\.Client"):
        async with open_dask(client="tcp://127.0.0.1:8786"):  # type: ignore[arg-type]
            pass


async def test_remote_refuses_what_cannot_run_before_submitting(dask_address: str) -> None:
    lock = threading.Lock()
    async with open_dask(dask_address) as dask:
        with pytest.raises(TypeError, match="callable"):
            dask.remote(42)  # type: ignore[call-overload]
        with pytest.raises(TypeError, match="cannot be pickled"):
            dask.remote(functools.partial(operator.add, lock))
        assert not dask.client.futures  # nothing was submitted


async def test_a_callers_client_is_left_open(dask_address: str) -> None:
    with new_client(dask_address) as client:
        async with open_dask(client=client) as dask:
            assert dask.client is client
            assert repr(client) in repr(dask)
            assert repr(dask.remote(double)) == f"<remote {double!r}>"
            assert await run_stream(range(4), dask.remote(double), window=2) == [0, 2, 4, 6]
        assert client.status == "running"
        assert client.submit(operator.neg, 3).result() == -3


async def test_an_address_gets_its_own_client_closed_on_exit(dask_address: str) -> None:
    async with open_dask(dask_address) as dask:
        client = dask.client
        assert client.scheduler is not None
        assert client.scheduler.address == dask_address
    assert client.status == "closed"
    with new_client(dask_address) as other:  # the cluster itself is still up
        assert other.submit(operator.neg, 3).result() == -3


async def test_runs_outliving_the_block_are_refused(dask_address: str) -> None:
    async with open_dask(dask_address) as dask:
        run = dask.remote(double)
    with pytest.raises(RuntimeError, match="open_dask"):
        await run(1)


@pytest.mark.timeout(120)
async def test_an_embedded_cluster_of_processes_runs_and_is_closed_on_exit() -> None:
    async with open_dask(
        n_workers=1, threads_per_worker=2, processes=True, dashboard_address=":0"
    ) as dask:
        cluster = dask.client.cluster
        assert isinstance(cluster, LocalCluster)
        # Functions importable on the worker process; the coroutine runs
        # under trio.run there.
        assert await run_stream(range(20), dask.remote(str), window=4) == [
            str(item) for item in range(20)
        ]
        assert await run_stream([0.001] * 4, dask.remote(trio.sleep), window=4) == [None] * 4
    assert dask.client.status == "closed"
    assert cluster.status == Status.closed


def test_a_gate_pickles_as_its_name() -> None:
    gate = Gate("pickling")
    try:
        assert pickle.loads(pickle.dumps(gate)) is gate
    finally:
        del _GATES[gate.__name__]


async def test_cancelling_a_connection_to_a_silent_scheduler_returns_at_once() -> None:
    # Port 1 accepts nothing: Dask would wait for its whole connect timeout (30 s).
    async with trio.open_nursery() as nursery:
        scope = trio.CancelScope()

        async def connect() -> None:
            with scope:
                async with open_dask("tcp://127.0.0.1:1"):
                    raise AssertionError("connected to nothing")  # pragma: no cover

        nursery.start_soon(connect)
        await trio.testing.wait_all_tasks_blocked()  # connecting, in its thread
        scope.cancel()
    assert scope.cancelled_caught


async def test_connecting_says_what_it_waits_for_and_gives_up_after_connect_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="sluicegate")
    with pytest.raises(OSError, match=r"after 0\.5 s"):
        async with open_dask("tcp://127.0.0.1:9", connect_timeout=0.5):
            raise AssertionError("connected to nothing")  # pragma: no cover
    assert (
        "connecting to the Dask scheduler at tcp://127.0.0.1:9 (giving up after 0.5 s)"
        in caplog.messages
    )


async def test_a_bad_connect_timeout_is_refused(dask_address: str) -> None:
    takes = "connect_timeout must be a finite number of seconds > 0 or None"
    with pytest.raises(TypeError, match=takes):
        async with open_dask(dask_address, connect_timeout="5"):  # type: ignore[arg-type]
            pass
    with pytest.raises(ValueError, match="connect_timeout must be a finite number of seconds > 0"):
        async with open_dask(dask_address, connect_timeout=0):
            pass
    with (
        new_client(dask_address) as client,
        pytest.raises(TypeError, match="connect_timeout only when it connects"),
    ):
        async with open_dask(client=client, connect_timeout=5):
            pass


@pytest.mark.timeout(120)
def test_a_lost_scheduler_fails_the_next_run_after_connect_timeout(tmp_path: Path) -> None:
    # In a child process: the client closes itself when it gives up.
    from test_dask_escapes import run_child

    seen = run_child("lost", tmp_path / "marks")
    assert seen["before"] == [0, 1, 2]
    assert seen["raised"] == "RemoteCancelled"
    # Dask's default would have waited 30 s to reconnect.
    assert seen["waited"] < 15
    connecting, lost = seen["said"]
    assert connecting.startswith("connecting to the Dask scheduler at ")
    assert lost.startswith("lost the Dask scheduler at ")
    assert lost.endswith(": runs wait for it to come back (giving up after 2 s)")
