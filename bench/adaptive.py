"""AdaptiveWindow against fixed windows, on a real HTTP upstream with a capacity.

The upstream is tests/upstream.py: hypercorn serving on trio over a local
socket, taking up to C requests at once (latency C/64 s idle, twice that
full) and answering 429 with ``Retry-After: 1`` above that. The latency
grows with C so that every case asks the same 32 requests per second at
full capacity: client and server share this process, and on a shared
2-core machine a fixed latency would make the CPU, not C, the limit at
C = 128. The client is httpx under
trio; each item is one chat request, retried under ``Retry`` (an overload
waits max(backoff, Retry-After)), through ``run_stream``. Every case runs in
this one process, one after the other.

Rows and targets (issue 24):

* goodput (successful requests per second, over the whole run and after
  the first 10 s) of ``AdaptiveWindow()`` >= 90% of the best fixed window
  (the best over the whole run), swept in the same run, for C = 8, 32 and
  128; 429s under 2% of requests after the first 10 s (each row's ``429s``);
* C halves mid-run (32 -> 16): the window is at or below the new C within
  5 s, and 429s fall back under 2% (counted from 5 s after the halving);
* a fixed window of 256 against C = 32, for contrast.

The simulated rows (issue 29) run first, on trio's MockClock against
tests/upstream.py's SimulatedUpstream, so machine load cannot move them;
each prints a ratio against a fixed window measured the same way:

* stray 429s (1% and 0.1% of calls, with Retry-After 1 s and without) on a
  C=128 upstream with 1-2 s calls, 300 s: goodput >= 85% (1%) and >= 95%
  (0.1%) of a fixed window of 128;
* an upstream that queues above C = 8, 32, 128 (no 429 ever), calls of 1 s
  and of 0.3-6 s, ``AdaptiveWindow(latency=1.25)``: goodput >= 90% of the
  best fixed window, mean latency <= 1.5x the unloaded one;
* capacity rising 128 -> 512 at 120 s: 90% of it within 60 s;
* no noise, 1-2 s calls: C = 8, 32, 128 >= 90% of the best fixed window and
  429s under 1% after 30 s; C = 32 halving to 16 (0.5-1 s calls) followed
  within 5 s; capacity 4, 10 s calls, ``initial=5``: no retry cascade.

    python bench/adaptive.py               # about 17 minutes: run it alone
    python bench/adaptive.py --simulated   # the simulated rows only, about a minute
    python bench/adaptive.py --quick       # a smoke run of a minute
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import attrs
import httpx
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import trio.testing

from sluicegate import AdaptiveWindow, Retry, Window, run_stream
from sluicegate._retry import attempt
from upstream import Drive, SimulatedUpstream, Upstream, drive, serving


def latency(capacity: int) -> float:
    return capacity / 64


RETRY = Retry(attempts=1000, base_delay=0.05, max_delay=2.0)


@attrs.define
class Outcome:
    label: str
    seconds: float
    served: int
    refused: int
    late_served: int
    late_refused: int
    late_seconds: float
    sizes: list[tuple[float, int]]

    @property
    def goodput(self) -> float:
        return self.served / self.seconds

    @property
    def late_goodput(self) -> float:
        return self.late_served / self.late_seconds

    @property
    def late_429(self) -> float:
        total = self.late_served + self.late_refused
        return self.late_refused / total if total else 0.0


async def ask(client: httpx.AsyncClient, url: str, n: int) -> None:
    response = await client.post(
        f"{url}/chat/completions",
        json={"model": "local", "messages": [{"role": "user", "content": f"{n} + 1"}]},
    )
    response.raise_for_status()


async def measure(
    label: str,
    window: Window,
    capacity: int,
    seconds: float,
    *,
    settle: float = 10.0,
    halve_at: float | None = None,
) -> Outcome:
    """Keep an upstream of ``capacity`` busy through ``window`` for ``seconds``."""
    upstream = Upstream(capacity, latency=latency(capacity), retry_after=1.0)
    stop = trio.Event()
    marks: dict[str, tuple[int, int]] = {}
    sizes: list[tuple[float, int]] = []

    async def source() -> AsyncIterator[int]:
        n = 0
        while not stop.is_set():
            yield n
            n += 1

    async with serving(upstream) as url:
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
        async with httpx.AsyncClient(limits=limits, timeout=60) as client:

            async def run(n: int) -> None:
                tried = await attempt(functools.partial(ask, client, url, n), retry=RETRY)
                tried.result.unwrap()

            async def schedule() -> None:
                began = trio.current_time()
                late_mark = settle if halve_at is None else halve_at + 5.0
                while (now := trio.current_time() - began) < seconds:
                    sizes.append((now, window.size))
                    if halve_at is not None and now >= halve_at and "halved" not in marks:
                        upstream.capacity = capacity // 2
                        marks["halved"] = (upstream.served, upstream.refused)
                    if now >= late_mark and "late" not in marks:
                        marks["late"] = (upstream.served, upstream.refused)
                    await trio.sleep(0.1)
                stop.set()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(schedule)
                await run_stream(source(), run, window=window)
    served, refused = marks.get("late", (upstream.served, upstream.refused))
    return Outcome(
        label,
        seconds,
        upstream.served,
        upstream.refused,
        upstream.served - served,
        upstream.refused - refused,
        seconds - (settle if halve_at is None else halve_at + 5.0),
        sizes,
    )


def show(outcome: Outcome, best: Outcome | None = None) -> None:
    share = late = ""
    if best is not None:
        share = f" {outcome.goodput / best.goodput:>7.1%}"
        late = f" {outcome.late_goodput / best.late_goodput:>7.1%}"
    print(
        f"  {outcome.label:<26} goodput {outcome.goodput:>6.1f}/s{share}"
        f"  after settling {outcome.late_goodput:>6.1f}/s{late}"
        f"  429s {outcome.late_429:>6.2%}"
        f"  final size {outcome.sizes[-1][1]:>4}",
        flush=True,
    )


async def main(seconds: float, capacities: list[int], sweep_only: bool) -> None:
    print(f"each case {seconds:g} s; upstream latency C/64 s idle, x2 full, Retry-After 1")
    for capacity in capacities:
        print(f"C = {capacity}")
        fixed = []
        for size in sorted({math.ceil(capacity * f) for f in (0.75, 1.0, 1.5)}):
            outcome = await measure(f"fixed {size}", Window(size), capacity, seconds)
            fixed.append(outcome)
        best = max(fixed, key=lambda outcome: outcome.goodput)
        for outcome in fixed:
            show(outcome, best)
        adaptive = await measure("AdaptiveWindow()", AdaptiveWindow(), capacity, seconds)
        show(adaptive, best)
    if sweep_only:
        return

    print("C = 32 halving to 16 mid-run")
    window = AdaptiveWindow()
    halve_at = seconds / 2
    outcome = await measure("AdaptiveWindow(), halved", window, 32, seconds + 10, halve_at=halve_at)
    show(outcome)
    followed = next((t for t, size in outcome.sizes if t >= halve_at and size <= 16), None)
    took = "never" if followed is None else f"{followed - halve_at:.1f} s"
    print(f"  at or below the new capacity {took} after the halving")

    print("C = 32, a fixed window of 256 for contrast")
    show(await measure("fixed 256", Window(256), 32, seconds))


def simulate(
    upstream: SimulatedUpstream,
    window: Window,
    seconds: float,
    *,
    settle: float = 0.0,
    events: dict[float, Callable[[SimulatedUpstream], object]] | None = None,
) -> Drive:
    """One case on trio's MockClock: no socket, no real time."""
    plan = {when: functools.partial(change, upstream) for when, change in (events or {}).items()}

    async def main() -> Drive:
        return await drive(upstream, window, seconds, settle=settle, events=plan)

    return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def simulated() -> None:
    print("simulated on trio's MockClock (tests/upstream.py); ratios against fixed windows")
    print("stray 429s, C=128, 1-2 s calls, 300 s")
    for stray in (0.01, 0.001):
        for hint in (1.0, None):
            noisy = functools.partial(
                SimulatedUpstream, 128, call_time=(1.0, 2.0), stray=stray, retry_after=hint
            )
            fixed = simulate(noisy(), Window(128), 300)
            adaptive = simulate(noisy(), AdaptiveWindow(), 300)
            target = 0.85 if stray > 0.005 else 0.95
            print(
                f"  {stray:>5.1%} stray, Retry-After {hint!s:<4}  adaptive/fixed 128 "
                f"{adaptive.goodput / fixed.goodput:>6.1%}  (target >= {target:.0%})",
                flush=True,
            )
    print("an upstream that queues above C, AdaptiveWindow(latency=1.25)")
    for capacity in (8, 32, 128):
        for call_time, unloaded in ((1.0, 1.0), ((0.3, 6.0), 3.15)):
            seconds = 1200 if capacity < 32 else 300

            queueing = functools.partial(
                SimulatedUpstream, capacity, call_time=call_time, queue=True, seed=capacity
            )
            best = max(
                (
                    simulate(queueing(), Window(size), seconds)
                    for size in (capacity, capacity * 3 // 2)
                ),
                key=lambda outcome: outcome.goodput,
            )
            adaptive = simulate(queueing(), AdaptiveWindow(latency=1.25), seconds)
            calls = "1 s" if call_time == 1.0 else "0.3-6 s"
            print(
                f"  C={capacity:<4} calls {calls:<8} goodput/best fixed "
                f"{adaptive.goodput / best.goodput:>6.1%} (>= 90%)  mean latency/unloaded "
                f"{adaptive.mean_latency / unloaded:>5.2f}x (<= 1.5x)",
                flush=True,
            )
    print("capacity rising 128 -> 512 at 120 s, 1-2 s calls")
    rising = simulate(
        SimulatedUpstream(128, call_time=(1.0, 2.0)),
        AdaptiveWindow(max=1024),
        240,
        events={120.0: lambda upstream: setattr(upstream, "capacity", 512)},
    )
    reached = rising.reached(int(0.9 * 512), after=120)
    took = "never" if reached is None else f"{reached - 120:.1f} s"
    print(f"  90% of 512 reached {took} after the rise (target <= 60 s)", flush=True)
    print("no noise, 1-2 s calls, 200 s, counted after 30 s")
    for capacity in (8, 32, 128):
        steady = functools.partial(SimulatedUpstream, capacity, call_time=(1.0, 2.0))
        sizes = sorted({capacity * 3 // 4, capacity, capacity * 3 // 2})
        best = max(
            (simulate(steady(), Window(size), 200, settle=30) for size in sizes),
            key=lambda outcome: outcome.goodput,
        )
        adaptive = simulate(steady(), AdaptiveWindow(), 200, settle=30)
        print(
            f"  C={capacity:<4} goodput/best fixed {adaptive.goodput / best.goodput:>6.1%} (>= 90%)"
            f"  429s {adaptive.refused_share:>6.2%} (< 1%)",
            flush=True,
        )
    halved = simulate(
        SimulatedUpstream(32, call_time=(0.5, 1.0)),
        AdaptiveWindow(),
        120,
        settle=65,
        events={60.0: lambda upstream: setattr(upstream, "capacity", 16)},
    )
    below = next((t for t, size in halved.sizes if t >= 60 and size <= 16), None)
    took = "never" if below is None else f"{below - 60:.2f} s"
    print(
        f"  C=32 halving to 16: at or below 16 {took} after (<= 5 s); "
        f"429s from 5 s after {halved.refused_share:.2%}",
        flush=True,
    )
    fixed = simulate(SimulatedUpstream(4, call_time=10.0), Window(4), 60)
    window = AdaptiveWindow(initial=5)
    cascade = simulate(SimulatedUpstream(4, call_time=10.0), window, 60)
    lowest = min(change.size for change in window.changes)
    print(
        f"  capacity 4, 10 s calls, initial=5: goodput/fixed 4 "
        f"{cascade.goodput / fixed.goodput:>6.1%}, lowest size {lowest} (no cascade: >= 3)",
        flush=True,
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="15 s per case")
    parser.add_argument("--seconds", type=float, default=60.0, help="seconds per case")
    parser.add_argument(
        "--capacities", type=int, nargs="+", default=[8, 32, 128], help="C of the sweeps"
    )
    parser.add_argument(
        "--sweep-only", action="store_true", help="skip the halving and the fixed 256"
    )
    parser.add_argument(
        "--simulated", action="store_true", help="only the simulated rows (trio's MockClock)"
    )
    args = parser.parse_args()
    simulated()
    if not args.simulated:
        trio.run(main, 15.0 if args.quick else args.seconds, args.capacities, args.sweep_only)
