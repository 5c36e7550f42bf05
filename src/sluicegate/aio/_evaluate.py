"""``evaluate()`` awaited from asyncio: the trio namesake, hosted for an asyncio environment.

The evaluation itself is :func:`sluicegate.eval.evaluate`, run in the trio
guest run of the running asyncio loop, told that the environment's code is
asyncio's (:func:`sluicegate._asyncio.hosting_user_code`): it runs the
environment's ``run``, ``score``, ``serving()``, feed and hooks on asyncio,
as ``sluicegate eval --loop asyncio`` does. The arguments, results and
errors are the trio front's, because it is the trio front that checks,
runs and raises.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal

from .._asyncio import host, hosting_user_code, refuse_outside_asyncio
from .._runner import Drain, Recorder, WindowLike
from ..eval import EvalReport
from ..eval import evaluate as trio_evaluate

if TYPE_CHECKING:
    import os

    from ..dask import DaskBridge

__all__ = ["evaluate"]


async def evaluate(
    env: object = None,
    *,
    num_tasks: int | None = None,
    rollouts: int = 1,
    concurrency: int | str | WindowLike = 32,
    shuffle: int | None = None,
    system_prompt: str | None = None,
    ids: Iterable[str | int] = (),
    retries: int = 0,
    retry_on: Iterable[type[BaseException] | str] = (),
    timeout: float | None = None,  # noqa: ASYNC109 - per attempt, not for this call
    fail_on_error: int | float | str = 0,
    min_score: float | Mapping[str, float] | None = None,
    reduce: Iterable[str] = (),
    pass_threshold: float = 1.0,
    task_args: Mapping[str, Any] | None = None,
    output_dir: str | os.PathLike[str] | None = None,
    resume: bool = False,
    display: str = "none",
    drain: Drain | None = None,
    signals: bool = False,
    trace: Recorder | Literal[True] | None = None,
    dask: str | DaskBridge | None = None,
) -> EvalReport:
    """:func:`sluicegate.eval.evaluate`, awaited from asyncio, for an environment of asyncio code.

    The same arguments, files, report and errors as
    :func:`sluicegate.eval.evaluate` (``docs/eval.md``); what differs is
    where the environment's code runs: ``run``, an ``async`` ``score``,
    ``serving()``, a live taskset's ``stream()`` and a
    :class:`~sluicegate.SampleSource`'s hooks are asyncio code, each call
    an asyncio task. ``run.json`` records ``"loop": "asyncio"``, so that
    ``sluicegate eval --resume`` runs it on asyncio too. With
    ``signals=True`` the first SIGINT/SIGTERM drains and the second
    cancels, taken with the loop's ``add_signal_handler``.

    Returns:
        The :class:`~sluicegate.eval.EvalReport`.

    Raises:
        RuntimeError: awaited where no asyncio loop runs (from trio, say).
        ValueError: as :func:`sluicegate.eval.evaluate`, and for an
            environment whose ``loop`` is ``"trio"``.
        asyncio.CancelledError: the awaiting task was cancelled: the
            rollouts in flight were cancelled and ``run.json`` says the run
            was interrupted.
        Exception: everything :func:`sluicegate.eval.evaluate` raises, the same way.
    """
    refuse_outside_asyncio("sluicegate.aio.evaluate", "sluicegate.eval.evaluate")
    evaluation = functools.partial(
        trio_evaluate,
        env,
        num_tasks=num_tasks,
        rollouts=rollouts,
        concurrency=concurrency,
        shuffle=shuffle,
        system_prompt=system_prompt,
        ids=ids,
        retries=retries,
        retry_on=retry_on,
        timeout=timeout,
        fail_on_error=fail_on_error,
        min_score=min_score,
        reduce=reduce,
        pass_threshold=pass_threshold,
        task_args=task_args,
        output_dir=output_dir,
        resume=resume,
        display=display,
        drain=drain,
        signals=signals,
        trace=trace,
        dask=dask,
    )
    with hosting_user_code():
        return await host(evaluation)
