"""An environment of asyncio code calling an aiohttp upstream that answers 429 above a capacity.

200 tasks, each a ``GET /square/N`` through one ``aiohttp.ClientSession``
(held by ``serving()``), against the server of ``tests/upstream_429.py`` at
``$EVAL_UPSTREAM``. A 429 raises aiohttp's ``ClientResponseError``, whose
``status`` makes it an overload error for ``-c auto``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator

import aiohttp

from sluicegate import Task, Taskset

TASKS = 200


class Env:
    name = "overloaded"
    loop = "asyncio"
    taskset = Taskset.from_iterable([Task(n) for n in range(TASKS)])

    def __init__(self) -> None:
        self.url = os.environ["EVAL_UPSTREAM"]
        self.session: aiohttp.ClientSession | None = None

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        connector = aiohttp.TCPConnector(limit=0)  # the window is the only bound
        async with aiohttp.ClientSession(connector=connector) as session:
            self.session = session
            yield

    async def run(self, task: Task) -> int:
        assert self.session is not None
        async with self.session.get(f"{self.url}/square/{task.input}") as response:
            response.raise_for_status()
            return int((await response.json())["square"])

    async def score(self, task: Task, result: int) -> float:
        return float(result == task.input * task.input)


env = Env
