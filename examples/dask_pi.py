"""Estimate pi on a Dask cluster, and stop as soon as the estimate is good enough.

Each item is a chunk of random points, counted by a worker process (CPU-bound
Python, so processes, not threads). Results stream back in completion order,
and once the standard error is small enough a Drain stops admission: the
chunks already on the cluster finish, no new one is sent, and the endless
source is closed.

    python examples/dask_pi.py
"""

from __future__ import annotations

import itertools
import math
import random

import trio

from sluicegate import Drain, open_stream
from sluicegate.dask import open_dask

CHUNK = 100_000  # points per item: about 50 ms of work, far above the round trip
TARGET = 0.002  # stop once the standard error of the estimate is below this


def count_inside(seed: int) -> int:
    """How many of CHUNK random points in the unit square fall in the quarter circle."""
    rng = random.Random(seed)
    inside = 0
    for _ in range(CHUNK):
        x, y = rng.random(), rng.random()
        inside += x * x + y * y <= 1.0
    return inside


async def main() -> None:
    drain = Drain()
    inside = points = 0
    estimate = error = math.inf
    async with open_dask(n_workers=2, threads_per_worker=1, dashboard_address=":0") as dask:
        threads = sum((await trio.to_thread.run_sync(dask.client.nthreads)).values())
        window = 2 * threads  # keep every thread busy while results travel back
        async with open_stream(
            itertools.count(), dask.remote(count_inside), window=window, ordered=False, drain=drain
        ) as results:
            async for done in results:
                inside += done.value
                points += CHUNK
                share = inside / points
                estimate = 4 * share
                error = 4 * math.sqrt(share * (1 - share) / points)
                print(f"chunk {done.index:3}: pi ~ {estimate:.5f} +- {error:.5f}")
                if error < TARGET:
                    drain.request(f"standard error below {TARGET}")
    print(f"pi ~ {estimate:.4f} +- {error:.4f} from {points:,} points on {threads} threads")
    print(f"stopped: {drain.reason}")


if __name__ == "__main__":  # the worker processes import this file again
    trio.run(main)
