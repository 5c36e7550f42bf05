"""A SampleSource under serve(): completed, abandoned, and skipped on restart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio
import trio.lowlevel
import trio.testing

from sluicegate import Drain, Retry, SampleSource, serve


class Crawl:
    """A SampleSource's hooks: page n leads to page n + 1, up to 5."""

    def __init__(self) -> None:
        self.completed: list[tuple[int, Any]] = []
        self.abandoned: list[int] = []

    async def on_complete(self, page: int, result: Any) -> list[int] | None:
        self.completed.append((page, result))
        return [result["next"]] if result["next"] is not None else None

    async def on_abandoned(self, page: int) -> None:
        self.abandoned.append(page)

    def source(self) -> SampleSource[int, Any]:
        return SampleSource.from_items(
            [0], on_complete=self.on_complete, on_abandoned=self.on_abandoned
        )


async def fetch(page: int) -> dict[str, Any]:
    await trio.lowlevel.checkpoint()
    if page == 2:
        raise ConnectionError("flaky upstream")
    return {"page": page, "next": page + 1 if page < 5 else None}


async def test_a_failed_item_of_a_sample_source_is_abandoned_not_completed(
    tmp_path: Path,
) -> None:
    crawl = Crawl()
    path = tmp_path / "j.db"
    report = await serve(crawl.source(), fetch, window=2, key=str, journal=path, signals=())
    assert (report.ok, report.failed) == (2, 1)
    assert crawl.completed == [(0, {"page": 0, "next": 1}), (1, {"page": 1, "next": 2})]
    assert crawl.abandoned == [2]
    # Restarted: the recorded successes are completed again with their
    # values as the journal holds them (JSON data), the dead letter is
    # abandoned again.
    again = Crawl()
    report = await serve(again.source(), fetch, window=2, key=str, journal=path, signals=())
    assert report.skipped == 3
    assert again.completed == crawl.completed
    assert again.abandoned == [2]


async def test_an_item_whose_retries_a_drain_cut_short_is_abandoned(
    autojump_clock: trio.testing.MockClock,
) -> None:
    crawl = Crawl()
    drain = Drain()

    async def run(page: int) -> dict[str, Any]:
        if page == 1:
            drain.request()
            raise ConnectionError("flaky upstream")
        return await fetch(page)

    report = await serve(
        crawl.source(), run, window=2, retry=Retry(attempts=3, base_delay=1), drain=drain,
        signals=(),
    )  # fmt: skip
    assert (report.ok, report.failed, report.stop_reason) == (1, 0, "drained")
    assert [page for page, _ in crawl.completed] == [0]
    assert crawl.abandoned == [1]
