"""An evaluation that calls an OpenAI-compatible chat endpoint, with the window found for you.

Nothing is sent anywhere unless you say where. Point it at an endpoint with
``--base-url`` (or ``HTTP_EVAL_BASE_URL`` for the command); the model name
comes from ``HTTP_EVAL_MODEL`` and the key, if the endpoint wants one, from
``HTTP_EVAL_API_KEY``:

    HTTP_EVAL_API_KEY=... python examples/http_eval.py --base-url https://api.example.com/v1 -c auto

    HTTP_EVAL_BASE_URL=http://127.0.0.1:8000/v1 \\
        sluicegate eval examples/http_eval.py:env -n 20 -c auto --retries 8

With ``-c auto`` an adaptive window finds how many requests the endpoint
takes at once: it grows while answers come back and shrinks on a 429, a 503
or a timeout, waiting as long as a ``Retry-After`` asks; ``--retries`` tries
those requests again. Run without an address, it only prints this help.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import trio

from sluicegate import Task, Taskset
from sluicegate.eval import evaluate


class Sums(Taskset[Task]):
    """Forty additions, asked in words; the target is the sum."""

    def load(self) -> list[Task]:
        return [
            Task(input=f"What is {a} + {b}? Answer with the number only.", target=a + b, id=str(a))
            for a, b in ((a, 7 * a % 50) for a in range(1, 41))
        ]


class ChatEval:
    """The environment: each task is one chat completion request, scored by its number."""

    name = "http-chat"
    taskset = Sums()

    def __init__(self, base_url: str | None, model: str, key: str | None) -> None:
        self.base_url = base_url
        self.model = model
        self.key = key
        self._client: httpx.AsyncClient | None = None

    @classmethod
    def from_environment(cls) -> ChatEval:
        return cls(
            os.environ.get("HTTP_EVAL_BASE_URL"),
            os.environ.get("HTTP_EVAL_MODEL", "gpt-4o-mini"),
            os.environ.get("HTTP_EVAL_API_KEY"),
        )

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        # One client (one connection pool) for every rollout of the run.
        if not self.base_url:
            raise ValueError("no endpoint: pass --base-url or set HTTP_EVAL_BASE_URL")
        headers = {"Authorization": f"Bearer {self.key}"} if self.key else {}
        # The window bounds the requests in flight; the pool must not bound them lower.
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
        async with httpx.AsyncClient(
            base_url=self.base_url.rstrip("/") + "/", headers=headers, limits=limits, timeout=60
        ) as client:
            self._client = client
            try:
                yield
            finally:
                self._client = None

    async def run(self, task: Task) -> dict[str, object]:
        assert self._client is not None, "run() is called inside serving()"
        response = await self._client.post(
            "chat/completions",
            json={"model": self.model, "messages": [{"role": "user", "content": task.input}]},
        )
        # A 429 or 503 raises httpx.HTTPStatusError: the adaptive window
        # shrinks on it, and --retries tries it again after its Retry-After.
        response.raise_for_status()
        return {"answer": response.json()["choices"][0]["message"]["content"]}

    def score(self, task: Task, result: dict[str, object]) -> float:
        found = re.search(r"-?\d+", str(result["answer"]))
        return 1.0 if found is not None and int(found[0]) == task.target else 0.0


env = ChatEval.from_environment()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", help="the endpoint, e.g. https://api.example.com/v1")
    parser.add_argument("-n", type=int, default=10, help="tasks to run (default 10)")
    parser.add_argument("-c", default="auto", help="concurrency: N, auto or auto:MAX")
    parser.add_argument("--retries", type=int, default=8, help="extra attempts per rollout")
    args = parser.parse_args(argv)
    if args.base_url is None and env.base_url is None:
        print(__doc__)
        return 0
    environment = ChatEval(args.base_url or env.base_url, env.model, env.key)
    report = trio.run(
        lambda: evaluate(
            environment,
            num_tasks=args.n,
            concurrency=args.c,
            retries=args.retries,
            display="plain",
        )
    )
    return report.exit_status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
