"""sluicegate.dask against plain ``client.map`` + ``as_completed``, on one cluster.

Run it with ``python bench/dask.py`` (``--quick`` for a smoke-sized run,
``--check`` to exit 1 when a target is missed). One ``LocalCluster`` of 2
worker processes x 4 threads serves every case; the cases take turns repeat
by repeat, so load from elsewhere on the machine hits them alike, and each
row reports the median of the repeats.

Rows and targets (issue 15):

* 200 tasks that each sleep 50 ms: ``run_stream(..., dask.remote(fn),
  window=32)`` must reach >= 0.9x the throughput of ``client.map`` +
  ``as_completed``. Windows 8 and 64 are there to show what the window does
  (the docs' advice on choosing it).
* 5,000 no-op tasks: the time per task at window 32 must be at most 2.5x
  that of ``client.map`` + ``as_completed``. This is the pure overhead of
  running the work through a window.

``client.map`` is the peer: it hands Dask everything at once, which is what
sluicegate's window gives up (in exchange for back-pressure, order,
fail-fast, drain and cancellation reaching the cluster).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

# Run as a script, this file (bench/dask.py) puts bench/ first on sys.path,
# where it would shadow the dask package itself.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != _HERE]

import trio  # noqa: E402
from distributed import Client, LocalCluster, as_completed  # noqa: E402

import sluicegate  # noqa: E402
from sluicegate.dask import open_dask  # noqa: E402

SLEEP = 0.05


def sleeper(item: int) -> int:
    time.sleep(SLEEP)
    return item


def noop(item: int) -> int:
    return item


def with_client_map(client: Client, fn: Callable[[int], int], n: int) -> float:
    start = time.perf_counter()
    futures = client.map(fn, range(n), pure=False)
    count = sum(1 for _ in as_completed(futures, with_results=True))
    elapsed = time.perf_counter() - start
    assert count == n
    return elapsed


def with_sluicegate(client: Client, fn: Callable[[int], int], n: int, window: int) -> float:
    async def main() -> float:
        async with open_dask(client=client) as dask:
            start = time.perf_counter()
            results = await sluicegate.run_stream(range(n), dask.remote(fn), window=window)
            elapsed = time.perf_counter() - start
        assert results == list(range(n))
        return elapsed

    return trio.run(main)


def measure(client: Client, repeats: int, sleeps: int, noops: int) -> dict[str, list[float]]:
    cases: dict[str, Callable[[], float]] = {
        f"{sleeps} x 50 ms: client.map + as_completed": lambda: with_client_map(
            client, sleeper, sleeps
        ),
        f"{sleeps} x 50 ms: sluicegate window 8": lambda: with_sluicegate(
            client, sleeper, sleeps, 8
        ),
        f"{sleeps} x 50 ms: sluicegate window 32": lambda: with_sluicegate(
            client, sleeper, sleeps, 32
        ),
        f"{sleeps} x 50 ms: sluicegate window 64": lambda: with_sluicegate(
            client, sleeper, sleeps, 64
        ),
        f"{noops} no-ops: client.map + as_completed": lambda: with_client_map(client, noop, noops),
        f"{noops} no-ops: sluicegate window 32": lambda: with_sluicegate(client, noop, noops, 32),
        f"{noops} no-ops: sluicegate window 128": lambda: with_sluicegate(client, noop, noops, 128),
    }
    # Warm up: worker imports, pickling caches, connections.
    with_client_map(client, noop, 100)
    with_sluicegate(client, noop, 100, 32)
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeats):
        for name, case in cases.items():
            gc.collect()
            times[name].append(case())
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="smoke-sized run")
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    repeats, sleeps, noops = (1, 40, 500) if args.quick else (args.repeats, 200, 5000)

    with (
        LocalCluster(
            n_workers=2, threads_per_worker=4, processes=True, dashboard_address=":0"
        ) as cluster,
        Client(cluster) as client,
    ):
        times = measure(client, repeats, sleeps, noops)

    median = {name: statistics.median(values) for name, values in times.items()}
    print(f"{'case':<44} {'median s':>9} {'per task ms':>12} {'tasks/s':>9}")
    for name, seconds in median.items():
        n = sleeps if "50 ms" in name else noops
        print(f"{name:<44} {seconds:>9.3f} {seconds / n * 1000:>12.3f} {n / seconds:>9.0f}")

    def ratio(case: str, peer: str) -> float:
        return median[case] / median[peer]

    sleep_peer = f"{sleeps} x 50 ms: client.map + as_completed"
    noop_peer = f"{noops} no-ops: client.map + as_completed"
    throughput = 1 / ratio(f"{sleeps} x 50 ms: sluicegate window 32", sleep_peer)
    overhead = ratio(f"{noops} no-ops: sluicegate window 32", noop_peer)
    print()
    print(f"50 ms tasks, window 32: {throughput:.2f}x client.map throughput (target >= 0.9x)")
    print(
        f"50 ms tasks, window 8:  "
        f"{1 / ratio(f'{sleeps} x 50 ms: sluicegate window 8', sleep_peer):.2f}x"
    )
    print(
        f"50 ms tasks, window 64: "
        f"{1 / ratio(f'{sleeps} x 50 ms: sluicegate window 64', sleep_peer):.2f}x"
    )
    print(f"no-op tasks, window 32: {overhead:.2f}x client.map time per task (target <= 2.5x)")
    print(
        f"no-op tasks, window 128: "
        f"{ratio(f'{noops} no-ops: sluicegate window 128', noop_peer):.2f}x"
    )
    missed = throughput < 0.9 or overhead > 2.5
    if missed:
        print("a target was missed")
    return 1 if (missed and args.check) else 0


if __name__ == "__main__":
    sys.exit(main())
