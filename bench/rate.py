"""How close RateLimit comes to its rate, with the default burst and with burst=1.

Each case runs ``rate * seconds`` items through ``run_stream(window=64,
rate=RateLimit(rate))`` on the real clock; each item does 10 checkpoints of
work. The achieved rate is the items started per second between the first
start and the last. Target (issue 24): the default burst reaches >= 98% of the
rate at every rate up to 10,000/s; burst=1 is the old default, for contrast.
The bound the burst must keep (never more than ``rate * T + burst`` starts in
any window T) is a property test in tests/test_rate_cost.py.

    python bench/rate.py            # about 20 s
    python bench/rate.py --quick    # a smoke run
"""

from __future__ import annotations

import argparse

import trio

from sluicegate import RateLimit, run_stream

RATES = [100, 1_000, 5_000, 10_000]


async def achieved(limit: RateLimit, seconds: float) -> float:
    starts: list[float] = []
    count = max(int(limit.per_second * seconds), 10)

    async def item(n: int) -> None:
        starts.append(trio.current_time())
        for _ in range(10):
            await trio.lowlevel.checkpoint()

    await run_stream(range(count), item, window=64, rate=limit)
    # count starts span count - 1 intervals; a burst at the start is not the rate.
    span = starts[-1] - starts[0]
    return (len(starts) - limit.burst) / span if span > 0 else float("inf")


async def main(seconds: float) -> None:
    print(f"{'rate/s':>8} {'burst':>6} {'achieved/s':>11} {'share':>7}   {'burst=1':>9}")
    for rate in RATES:
        default = RateLimit(rate)
        got = await achieved(default, seconds)
        old = await achieved(RateLimit(rate, burst=1), seconds)
        print(f"{rate:>8} {default.burst:>6} {got:>11.0f} {got / rate:>7.1%}   {old / rate:>9.1%}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="0.5 s per case")
    args = parser.parse_args()
    trio.run(main, 0.5 if args.quick else 2.5)
