"""Dask scenarios that may kill an event loop, run in a child process.

Not a test module: ``tests/test_dask_escapes.py`` and ``tests/test_dask.py``
run it as a script, so that a loop this kills cannot leak into the test run.
It prints one JSON object describing what the caller saw, and exits.

* ``threads``: remote functions raising what is not an ``Exception``, on an
  embedded cluster of threads; ``processes``: the same with worker processes.
* ``lost``: the scheduler goes away under a bridge opened with
  ``connect_timeout=2``; how long the next run takes to fail, and what the
  ``sluicegate`` logger said.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from typing import Any

import trio
import trio.lowlevel

from sluicegate import run_stream
from sluicegate.dask import open_dask

# Set in the child; read by the remote functions (a worker process inherits it).
MARKS = os.environ.get("DASK_ESCAPES_MARKS", "")


def mark(what: str, item: int) -> None:
    """Record that ``what`` ran ``item`` (to see whether anything ran twice)."""
    if MARKS:
        with open(MARKS, "a") as marks:
            marks.write(f"{what} {item}\n")


def interrupts_on_two(item: int) -> int:
    mark("interrupts", item)
    if item == 2:
        raise KeyboardInterrupt("stop at two")
    return item


def exits_on_two(item: int) -> int:
    mark("exits", item)
    if item == 2:
        raise SystemExit("exit at two")
    return item


async def async_exits_on_two(item: int) -> int:
    await trio.lowlevel.checkpoint()
    if item == 2:
        raise SystemExit(3)
    return item


class Odd(BaseException):
    """A BaseException of the user's own, importable on the workers."""


def odd_on_two(item: int) -> int:
    if item == 2:
        raise Odd("odd at two")
    return item


def absolute(item: int) -> int:
    return abs(item)


def locked_on_two(item: int) -> int:
    if item == 2:
        raise SystemExit(threading.Lock())
    return item


def pid(item: int) -> int:
    return os.getpid()


async def failure(run: Any) -> dict[str, Any]:
    try:
        await run_stream(range(4), run, window=2)
    except BaseException as exc:  # what is under test is which one
        return {
            "type": f"{type(exc).__module__}.{type(exc).__qualname__}",
            "args": [str(arg) for arg in exc.args],
            "notes": getattr(exc, "__notes__", []),
        }
    return {"type": None}


async def main(mode: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    cluster: dict[str, Any] = {
        "n_workers": 1,
        "threads_per_worker": 2,
        "processes": mode == "processes",
        "dashboard_address": ":0",
    }
    with trio.fail_after(60):
        async with open_dask(**cluster) as dask:
            pids = await run_stream(range(4), dask.remote(pid), window=2)
            seen["pids_before"] = sorted(set(pids))
            for fn in (
                interrupts_on_two,
                exits_on_two,
                async_exits_on_two,
                odd_on_two,
                locked_on_two,
            ):
                seen[fn.__name__] = await failure(dask.remote(fn))
            # The bridge, the loop and the worker all still work.
            pids = await run_stream(range(4), dask.remote(pid), window=2)
            seen["pids_after"] = sorted(set(pids))
    seen["closed"] = True
    return seen


class Kept(logging.Handler):
    def __init__(self, into: list[str]) -> None:
        super().__init__()
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        self.into.append(record.getMessage())


async def lost() -> dict[str, Any]:
    from distributed import LocalCluster

    seen: dict[str, Any] = {}
    said: list[str] = []
    told = logging.getLogger("sluicegate")
    told.setLevel(logging.INFO)
    told.addHandler(Kept(said))
    seen["said"] = said
    cluster = LocalCluster(n_workers=1, processes=False, dashboard_address=":0")  # type: ignore[no-untyped-call]
    with trio.fail_after(60):
        async with open_dask(cluster.scheduler_address, connect_timeout=2) as dask:
            seen["before"] = await run_stream(range(3), dask.remote(absolute), window=2)
            await trio.to_thread.run_sync(cluster.close)
            # The client notices on its own loop; the state is Dask's, with
            # no event to wait on.
            while dask.client.status == "running":  # noqa: ASYNC110
                await trio.sleep(0.01)
            start = time.monotonic()
            try:
                await run_stream(range(3), dask.remote(absolute), window=2)
            except Exception as exc:
                seen["raised"] = type(exc).__name__
            seen["waited"] = time.monotonic() - start
    return seen


if __name__ == "__main__":
    if sys.argv[1] == "lost":
        print(json.dumps(trio.run(lost)))
    else:
        print(json.dumps(trio.run(main, sys.argv[1])))
