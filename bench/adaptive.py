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

    python bench/adaptive.py            # about 15 minutes: run it alone
    python bench/adaptive.py --quick    # a smoke run of a minute
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import attrs
import httpx
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from sluicegate import AdaptiveWindow, Retry, Window, run_stream
from sluicegate._retry import attempt
from upstream import Upstream, serving


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
    args = parser.parse_args()
    trio.run(main, 15.0 if args.quick else args.seconds, args.capacities, args.sweep_only)
