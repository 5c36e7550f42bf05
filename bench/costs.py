"""What the trio primitives behind the runner cost, one at a time.

    python bench/costs.py

The table in docs/performance.md is explained by these numbers: a task spawn
costs several worker steps, a cancel scope costs more than a whole no-op run,
and a lone task that checkpoints pays a full scheduler pass each time. Each
figure is the best of 5 timed loops, in nanoseconds per operation, with the
empty loop's cost taken off; CPU time is used so that other work on the
machine disturbs it less.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import attrs
import trio

from sluicegate import Done

N = 100_000


def best_ns(body: Callable[[int], None], n: int = N) -> float:
    best = float("inf")
    for _ in range(5):
        start = time.process_time()
        body(n)
        best = min(best, time.process_time() - start)
    return best / n * 1e9


@attrs.define
class _Mutable:
    index: int
    item: object
    value: object


async def measure() -> list[tuple[str, float]]:
    lot = trio.lowlevel.ParkingLot()

    def empty(n: int) -> None:
        for _ in range(n):
            pass

    def cancel_scope(n: int) -> None:
        for _ in range(n):
            with trio.CancelScope():  # noqa: ASYNC100 (timing the scope itself)
                pass

    def done(n: int) -> None:
        for i in range(n):
            Done(i, i, i)

    def mutable(n: int) -> None:
        for i in range(n):
            _Mutable(i, i, i)

    def lot_bool(n: int) -> None:
        for _ in range(n):
            if lot:
                pass

    def lot_unpark(n: int) -> None:
        for _ in range(n):
            lot.unpark()

    loop = best_ns(empty)
    rows = [
        ("CancelScope() enter + exit", best_ns(cancel_scope) - loop),
        ("Done(index, item, value) (attrs frozen)", best_ns(done) - loop),
        ("the same fields, attrs.define (mutable)", best_ns(mutable) - loop),
        ("bool(ParkingLot) (the guard before unpark)", best_ns(lot_bool) - loop),
        ("ParkingLot.unpark() with nobody parked", best_ns(lot_unpark) - loop),
    ]

    async def timed(body: Callable[[], object], n: int) -> float:
        start = time.process_time()
        await body()  # type: ignore[misc]
        return (time.process_time() - start) / n * 1e9

    async def lone_checkpoints() -> None:
        for _ in range(N):
            await trio.lowlevel.checkpoint()

    async def cheap_checks() -> None:
        for _ in range(N):
            await trio.lowlevel.checkpoint_if_cancelled()

    steps = 2000

    async def spin() -> None:
        for _ in range(steps):
            await trio.lowlevel.checkpoint()

    async def full_batches() -> None:
        async with trio.open_nursery() as nursery:
            for _ in range(64):
                nursery.start_soon(spin)

    async def nothing() -> None:
        pass

    async def spawns() -> None:
        async with trio.open_nursery() as nursery:
            for _ in range(N // 2):
                nursery.start_soon(nothing)

    rows += [
        ("checkpoint() in a lone task (a scheduler pass)", await timed(lone_checkpoints, N)),
        ("checkpoint_if_cancelled() (no yield)", await timed(cheap_checks, N)),
        ("one task step, 64 tasks per scheduler pass", await timed(full_batches, 64 * steps)),
        ("start_soon + run an empty task", await timed(spawns, N // 2)),
    ]
    return rows


def main() -> int:
    print(f"trio {trio.__version__}, Python {sys.version.split()[0]}; ns per operation")
    for name, ns in trio.run(measure):
        print(f"  {name:<48} {ns:>8,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
