"""What looking at a run costs: recording, exporting, and the HTML report in a browser.

    python bench/trace.py [--quick] [--no-browser]

Recording: ``run_stream`` over no-op items (``await trio.sleep(0)``, window 8)
without a trace and with a ``Timeline`` (bare, with a label function, and
with the event log ``eval --trace`` keeps). The cases take turns repeat by
repeat so that load from elsewhere hits them alike; each row is the median,
and the extra cost per item is the difference to the untraced row measured
in the same run, in CPU time. The target: a Timeline adds at most about 3 µs
per item.

Exporting: writing ``trace.json`` and reading it (and the log) back, per
item, in CPU time.

The report: generating ``report.html`` for 10,000 rollouts with a trace, and
in headless Chromium (``/usr/bin/chromium``) the page's load time and the
time the error filter and a search take.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

from sluicegate import Timeline, run_stream

WINDOW = 8
CHROMIUM = Path("/usr/bin/chromium")


async def noop(item: int) -> int:
    await trio.sleep(0)  # noqa: ASYNC115 (what user code writes)
    return item


def recording_cases(scratch: Path) -> dict[str, Callable[[int], Awaitable[Any]]]:
    async def untraced(n: int) -> None:
        await run_stream(range(n), noop, window=WINDOW)

    async def bare(n: int) -> None:
        await run_stream(range(n), noop, window=WINDOW, trace=Timeline())

    async def labelled(n: int) -> None:
        await run_stream(range(n), noop, window=WINDOW, trace=Timeline(label=str))

    async def logged(n: int) -> None:
        log = scratch / "bench.jsonl"
        log.unlink(missing_ok=True)
        with Timeline(label=str, log=log) as timeline:
            await run_stream(range(n), noop, window=WINDOW, trace=timeline)

    return {
        "run_stream, no trace": untraced,
        "trace=Timeline()": bare,
        "trace=Timeline(label=str)": labelled,
        "trace=Timeline(label=str, log=...)": logged,
    }


def bench_recording(n: int, repeats: int, scratch: Path) -> None:
    cases = recording_cases(scratch)
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeats):
        for name, case in cases.items():
            # CPU time: another process's burst of load costs this one less.
            start = time.process_time()
            trio.run(case, n)
            times[name].append(time.process_time() - start)
    base = statistics.median(times["run_stream, no trace"])
    print(f"recording: {n:,} no-op items, window {WINDOW}, median of {repeats}")
    print(f"  {'case':<38} {'µs/item':>8} {'ratio':>7} {'+µs/item':>9}")
    for name, samples in times.items():
        median = statistics.median(samples)
        extra = (median - base) / n * 1e6
        print(
            f"  {name:<38} {median / n * 1e6:>8.2f} {median / base:>6.2f}x "
            f"{extra if samples is not times['run_stream, no trace'] else 0:>9.2f}"
        )


def bench_export(n: int, scratch: Path) -> None:
    async def record() -> Timeline:
        log = scratch / "export.jsonl"
        log.unlink(missing_ok=True)
        with Timeline(label=str, log=log) as timeline:
            await run_stream(range(n), noop, window=WINDOW, trace=timeline)
        return timeline

    timeline = trio.run(record)
    path = scratch / "export.json"
    rows = []
    start = time.process_time()
    timeline.write_chrome_trace(path)
    rows.append(("write_chrome_trace", time.process_time() - start))
    start = time.process_time()
    Timeline.read(path)
    rows.append(("read back trace.json", time.process_time() - start))
    start = time.process_time()
    Timeline.read(scratch / "export.jsonl")
    rows.append(("read back the event log", time.process_time() - start))
    size = path.stat().st_size
    print(f"exporting: {n:,} items, trace.json {size / 1e6:.1f} MB ({size / n:.0f} B/item)")
    for name, seconds in rows:
        print(f"  {name:<38} {seconds:>6.2f} s {seconds / n * 1e6:>8.2f} µs/item")


def bench_report(rollouts: int, scratch: Path, browser: bool) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from observe_runs import write_eval_run
    from sluicegate.report import write_report

    run = scratch / "run"
    write_eval_run(run, rollouts, error_every=50)
    start = time.perf_counter()
    page = write_report(run)
    generated = time.perf_counter() - start
    print(f"report: {rollouts:,} rollouts with a trace")
    size = page.stat().st_size / 1e6
    print(f"  {'generate report.html':<38} {generated:>6.2f} s  ({size:.1f} MB)")
    if not browser:
        return
    if not CHROMIUM.exists():
        print(f"  (no browser timings: {CHROMIUM} is missing)")
        return
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(scratch / "profile"),
            executable_path=str(CHROMIUM),
            headless=True,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"],
        )
        tab = context.new_page()
        start = time.perf_counter()
        tab.goto(page.as_uri(), wait_until="load")
        loaded = time.perf_counter() - start
        timing = tab.evaluate(
            "() => { const t = performance.getEntriesByType('navigation')[0];"
            " return [t.domContentLoadedEventEnd, t.loadEventEnd]; }"
        )
        filtered = tab.evaluate(
            "() => { const b = document.querySelector('[data-filter=error]');"
            " const t = performance.now(); b.click(); document.body.offsetHeight;"
            " return performance.now() - t; }"
        )
        shown_all = tab.evaluate(
            "() => { const b = document.querySelector('[data-filter=all]');"
            " const t = performance.now(); b.click(); document.body.offsetHeight;"
            " return performance.now() - t; }"
        )
        # On a large table the search waits 120 ms after the last keystroke
        # (a small one answers at once); the figure includes that wait.
        searched = tab.evaluate(
            "() => new Promise(done => { const s = document.getElementById('search');"
            " s.value = 'task-0001'; const t = performance.now();"
            " s.dispatchEvent(new Event('input'));"
            " const shown = document.getElementById('shown');"
            " new MutationObserver(() => { document.body.offsetHeight;"
            " done(performance.now() - t); }).observe(shown,"
            " {childList: true, characterData: true, subtree: true}); })"
        )
        context.close()
    print(f"  {'page load (navigation to load event)':<38} {loaded:>6.2f} s")
    ready, load = timing[0] / 1e3, timing[1] / 1e3
    print(f"  {'  DOMContentLoaded / load, in page':<38} {ready:>6.2f} s / {load:.2f} s")
    print(f"  {'error filter (click to layout)':<38} {filtered / 1e3:>6.3f} s")
    print(f"  {'back to all rows (click to layout)':<38} {shown_all / 1e3:>6.3f} s")
    print(f"  {'search by task id (input to result)':<38} {searched / 1e3:>6.3f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke-sized run")
    parser.add_argument("--no-browser", action="store_true", help="skip the Chromium timings")
    args = parser.parse_args()
    n = 20_000 if args.quick else 200_000
    repeats = 3 if args.quick else 7
    with tempfile.TemporaryDirectory() as scratch:
        bench_recording(n, repeats, Path(scratch))
        print()
        bench_export(n // 2, Path(scratch))
        print()
        bench_report(1_000 if args.quick else 10_000, Path(scratch), not args.no_browser)


if __name__ == "__main__":
    main()
