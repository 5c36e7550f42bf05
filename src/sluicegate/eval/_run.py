"""The orchestration of one evaluation: plan, run every rollout through the runner, record.

The whole evaluation is one :func:`~sluicegate.open_stream` over rollout
slots with ``window=-c`` and ``ordered=False``, so each row is written the
moment its rollout finishes and a slow disk holds back new rollouts rather
than piling rows up in memory.
"""

from __future__ import annotations

import inspect
import signal
import traceback
import warnings
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs
import trio

from .. import __version__
from .._runner import Drain, open_stream
from ._config import ErrorBudget, EvalConfig, UsageError, differences
from ._display import Display, Summary, make_display
from ._log import RESULTS, TORN, ResultsLog, read_results, read_run_record, write_run_record
from ._plan import DuplicateTaskId, EvalSource, Slot, build_source, check, kind_of
from ._records import ErrorInfo, Row, RunRecord, Score, StopReason
from ._tally import Tally
from ._target import Environment

__all__ = ["Outcome", "evaluate"]

EXIT_STATUS: dict[StopReason, int] = {"completed": 0, "failed": 1, "interrupted": 130}


@attrs.frozen
class Outcome:
    """How an evaluation ended.

    Attributes:
        record: What was written to ``run.json``.
        directory: The output directory.
        exit_status: 0 completed, 1 failed, 130 interrupted.
    """

    record: RunRecord
    directory: Path

    @property
    def exit_status(self) -> int:
        """The process exit status this outcome calls for."""
        assert self.record.stop_reason is not None
        return EXIT_STATUS[self.record.stop_reason]


class _ErrorBudgetCrossed(Exception):
    pass


def backoff(attempt: int) -> float:
    """Seconds to wait after the ``attempt``-th failed attempt (1-based) before the next."""
    return float(min(0.1 * 2 ** (attempt - 1), 5.0))


async def _score(env: Environment, task: Any, result: Any) -> Score:
    if env.score is None:
        return None
    value = env.score(task, result)
    if inspect.isawaitable(value):
        value = await value
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, Mapping):
        return {str(key): float(inner) for key, inner in value.items()}
    raise TypeError(f"score() must return a number or a mapping of numbers, not {value!r}")


async def run_rollout(env: Environment, slot: Slot, retries: int) -> Row:
    """Run one rollout, retrying it whole up to ``retries`` times with :func:`backoff`.

    Returns:
        An ok row, or an error row once every attempt raised. Only
        ``Exception`` s are caught: cancellation and ``KeyboardInterrupt``
        propagate.
    """
    started_at = datetime.now(UTC)
    start = trio.current_time()
    errors: list[ErrorInfo] = []
    for attempt in range(1, retries + 2):
        try:
            result = await env.run(slot.task)
            score = await _score(env, slot.task, result)
        except Exception as exc:
            errors.append(ErrorInfo.of(exc))
            if attempt <= retries:
                await trio.sleep(backoff(attempt))
            continue
        return Row(
            task_id=slot.task_id,
            rollout=slot.rollout,
            status="ok",
            result=result,
            score=score,
            error=None,
            attempts=attempt,
            started_at=started_at,
            duration_s=trio.current_time() - start,
            earlier_errors=tuple(errors),
        )
    return Row(
        task_id=slot.task_id,
        rollout=slot.rollout,
        status="error",
        result=None,
        score=None,
        error=errors[-1],
        attempts=len(errors),
        started_at=started_at,
        duration_s=trio.current_time() - start,
        earlier_errors=tuple(errors[:-1]),
    )


@asynccontextmanager
async def _serving(env: Environment) -> AsyncIterator[None]:
    if env.serving is None:
        yield
    else:
        async with env.serving():
            yield


async def _watch_signals(
    drain: Drain,
    run_scope: trio.CancelScope,
    display: Display | None,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as received:
        task_status.started()
        async for signum in received:
            name = signal.Signals(signum).name
            if not drain.requested:
                drain.request(f"{name} received")
                if display is not None:
                    display.note(
                        f"{name}: draining (no new rollouts; those in flight finish). "
                        f"Send it again to cancel them."
                    )
            else:
                if display is not None:
                    display.note(f"{name} again: cancelling the rollouts in flight")
                run_scope.cancel()
                return


def _prepare_directory(config: EvalConfig) -> tuple[Path, dict[tuple[str, int], Row]]:
    directory = Path(config.output)
    if config.resume:
        recorded = read_run_record(directory)
        found = differences(recorded.config, config)
        if found:
            raise UsageError(
                "--resume refused: this command differs from the run in "
                f"{directory}: " + "; ".join(found)
            )
        previous = read_results(directory)
        if previous.set_aside is not None:
            warnings.warn(
                f"set aside a torn last line of {directory / RESULTS} (kept in {directory / TORN})",
                UserWarning,
                stacklevel=1,
            )
        return directory, previous.ok
    if directory.exists() and not directory.is_dir():
        raise UsageError(f"-o {directory}: exists and is not a directory")
    if (directory / RESULTS).exists():
        raise UsageError(
            f"{directory} already holds {RESULTS}: pass --resume {directory} to continue "
            f"that run, or choose another -o"
        )
    directory.mkdir(parents=True, exist_ok=True)
    return directory, {}


async def evaluate(
    config: EvalConfig,
    env: Environment,
    *,
    drain: Drain | None = None,
    signals: bool = False,
    display: Display | str | None = "config",
) -> Outcome:
    """Run an evaluation and record it in ``config.output``.

    Args:
        config: The run's settings.
        env: The environment to evaluate.
        drain: A :class:`~sluicegate.Drain` that stops admission when
            requested (the run then ends ``interrupted``); one is made if None.
        signals: Drain on the first SIGINT/SIGTERM and cancel on the second
            (main thread only; the command line turns this on).
        display: A display, None for none, or ``"config"`` to follow
            ``config.display``.

    Returns:
        The :class:`Outcome`; its record is also in ``run.json``.

    Raises:
        UsageError: for settings the environment cannot honour, found before
            any rollout starts.
    """
    kind = kind_of(env.taskset)
    check(kind, config)
    budget = ErrorBudget.parse(config.fail_on_error)
    shown = make_display(config.display) if isinstance(display, str) else display
    directory, previous = _prepare_directory(config)
    tally = Tally(concurrency=config.concurrency, started=trio.current_time())
    source = build_source(kind, env.taskset, config, previous.keys(), tally)
    tally.add_resumed(previous.values())
    started_at = datetime.now(UTC)
    record = RunRecord(
        config=config, environment=env.name, started_at=started_at, sluicegate_version=__version__
    )
    write_run_record(directory, record)

    # The runner's signature names iterables only; a SampleSource gets in
    # through its bind_run (the BindsRun protocol), which it checks at runtime.
    stream_source: Any = source
    drain = drain if drain is not None else Drain()
    log = ResultsLog(directory)

    async def run(item: Any) -> Row | None:
        if not isinstance(item, Slot):
            # A task a run of a SampleSource passed to enqueue(): it reached
            # the runner as it was, so give it an id and its rollouts now.
            assert isinstance(source, EvalSource)
            source.admit_enqueued(item)
            return None
        tally.running += 1
        try:
            return await run_rollout(env, item, config.retries)
        finally:
            tally.running -= 1

    async def consume() -> None:
        async with (
            _serving(env),
            open_stream(
                stream_source, run, window=config.concurrency, ordered=False, drain=drain
            ) as results,
        ):
            async for done in results:
                row = done.value
                if row is None:
                    continue
                log.write(row)
                tally.add(row)
                if row.status == "error" and budget.crossed(
                    tally.errors, None if tally.growing else tally.planned
                ):
                    raise _ErrorBudgetCrossed

    stop: StopReason = "completed"
    error: str | None = None
    run_scope = trio.CancelScope()
    try:
        async with trio.open_nursery() as helpers:
            if signals:
                await helpers.start(_watch_signals, drain, run_scope, shown)
            if shown is not None:
                helpers.start_soon(shown.show, tally)
            try:
                with run_scope:
                    await consume()
            except _ErrorBudgetCrossed:
                stop = "failed"
                error = f"--fail-on-error {config.fail_on_error}: {_errors(tally.errors)}"
            except Exception as exc:
                stop = "failed"
                error = f"{type(exc).__name__}: {exc}"
                if not isinstance(exc, DuplicateTaskId):
                    # The environment's own failure: its traceback is what the
                    # user needs. Our own refusals say everything in one line.
                    traceback.print_exception(exc)
            finally:
                helpers.cancel_scope.cancel()
    finally:
        log.close()
    if stop == "completed":
        if run_scope.cancelled_caught or drain.requested:
            stop = "interrupted"
            error = drain.reason if drain.requested else "cancelled"
        elif budget.crossed(tally.errors, tally.planned):
            stop = "failed"
            error = f"--fail-on-error {config.fail_on_error}: {_errors(tally.errors)}"
    record = attrs.evolve(
        record,
        ended_at=datetime.now(UTC),
        stop_reason=stop,
        counts=tally.counts(),
        scores=tally.means(),
        error=error,
    )
    write_run_record(directory, record)
    if shown is not None:
        shown.summary(
            Summary(
                stop_reason=stop,
                counts=record.counts,
                scores=record.scores,
                output=str(directory),
                elapsed=trio.current_time() - tally.started,
                error=error,
            )
        )
    return Outcome(record=record, directory=directory)


def _errors(count: int) -> str:
    return f"{count} error" if count == 1 else f"{count} errors"
