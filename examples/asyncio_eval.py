"""An evaluation whose environment is asyncio code: it calls its model with aiohttp.

The "model" is an aiohttp server on 127.0.0.1 that ``serving()`` starts for
the run, and each rollout asks it with an ``aiohttp.ClientSession``: a
client that speaks only asyncio. The environment says ``loop = "asyncio"``,
so ``sluicegate eval`` runs it on asyncio with no flag:

    sluicegate eval examples/asyncio_eval.py:env -n 20 -c auto
    python examples/asyncio_eval.py        # the same, with sluicegate.aio.evaluate

Nothing leaves the machine.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web

import sluicegate.aio
from sluicegate import Task, Taskset


async def answer(request: web.Request) -> web.Response:
    """The model: adds two numbers, in 10 ms."""
    question = await request.json()
    await asyncio.sleep(0.01)
    return web.json_response({"answer": question["a"] + question["b"]})


class Sums(Taskset[Task]):
    """A live feed of questions, read on asyncio: ``-n`` says how many."""

    async def stream(self) -> AsyncIterator[Task]:
        n = 0
        while True:
            await asyncio.sleep(0)  # a network read, say
            yield Task({"a": n, "b": n % 7}, id=f"sum-{n}", target=n + n % 7)
            n += 1


class Env:
    name = "asyncio_eval"
    loop = "asyncio"  # run, score, serving() and the feed are asyncio code
    taskset = Sums()

    def __init__(self) -> None:
        self.url = ""
        self.session: aiohttp.ClientSession | None = None

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        app = web.Application()
        app.router.add_post("/answer", answer)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{runner.addresses[0][1]}/answer"
        try:
            async with aiohttp.ClientSession() as session:
                self.session = session
                yield
        finally:
            await runner.cleanup()

    async def run(self, task: Task) -> int:
        assert self.session is not None
        async with self.session.post(self.url, json=task.input) as response:
            response.raise_for_status()
            return int((await response.json())["answer"])

    def score(self, task: Task, result: int) -> float:
        return float(result == task.target)


env = Env


async def main() -> None:
    report = await sluicegate.aio.evaluate(Env(), num_tasks=20, concurrency="auto", output_dir=None)
    print(f"{report.stop_reason}: {report.ok} rollouts, score {report.scores['score']:.2f}")


if __name__ == "__main__":
    asyncio.run(main())
