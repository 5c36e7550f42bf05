"""``evaluate()``: one evaluation as a pipeline.

Configuration (:mod:`._config`, :mod:`._target`), then the plan of rollout
slots and its source (:mod:`._slots`), then the run (:func:`_run_slots`: one
:func:`~sluicegate.open_stream` over the slots with ``window=concurrency``
and ``ordered=False``, each slot run by :class:`._rollout.Rollouts`), the
log (:mod:`._log`) and the report (:mod:`._verdict`). Each step is handed
what it needs once. Rows are written the moment their rollout finishes, so
a slow disk holds back new rollouts rather than piling rows up in memory.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import shlex
import warnings
from collections.abc import AsyncIterator, Collection, Iterable, Mapping
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

import attrs
import trio

from .._checks import check_flag
from .._runner import Drain, Recorder, WindowLike, open_stream, report_failure
from .._signals import DEFAULT_SIGNALS, drain_on_signals
from .._trace import recording
from .._util import in_background
from ._config import (
    ErrorBudget,
    EvalConfig,
    UsageError,
    differences,
    recorded_concurrency,
    task_arguments,
    window_object,
)
from ._display import (
    Display,
    Summary,
    header_text,
    make_display,
    resume_command,
    window_text,
)
from ._format import RESULTS, TORN, Previous, read_results, read_run_record, rollout_label
from ._log import RunLog, SessionLock, check_new
from ._records import RolloutRow, RunRecord, StopReason
from ._rollout import AttemptFn, Rollouts, attempt_here
from ._slots import DuplicateTaskId, EvalSource, Kind, Slot, Source, check, kind_of, plan
from ._tally import RunTally
from ._target import Parts, environment
from ._verdict import EvalReport, begin, budget_text, check_floors, end
from ._windows import WindowWatch, session_window

if TYPE_CHECKING:
    from ..dask import DaskBridge

__all__ = ["evaluate"]

logger = logging.getLogger("sluicegate")

# How many error rows are named one by one on the console; the rest are counted.
FIRST_ERRORS = 5


class _ErrorBudgetCrossed(Exception):
    pass


@attrs.frozen
class _Setup:
    """Everything checked before anything happens."""

    parts: Parts
    config: EvalConfig
    kind: Kind
    earlier: RunRecord | None
    previous: Previous | None
    lock: SessionLock | None = None

    @property
    def done(self) -> Collection[tuple[str, int]]:
        """The rollouts a resume found ok: not run again."""
        return self.previous.ok.keys() if self.previous is not None else ()


def _default_output(name: str) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    base = Path("runs") / f"{stamp}-{name}"
    candidate, suffix = base, 1
    while candidate.exists():
        suffix += 1
        candidate = base.with_name(f"{base.name}-{suffix}")
    return candidate


def _on_dask() -> ModuleType:
    """The module that runs attempts on a Dask cluster, if the extra is installed.

    Imported only when asked for: ``sluicegate.dask`` is a layer below this
    one, and an optional extra.

    Raises:
        UsageError: without Dask distributed.
    """
    if importlib.util.find_spec("distributed") is None:
        raise UsageError("--dask needs Dask distributed: pip install 'sluicegate[dask]'")
    from . import _dask

    return _dask


_NOTHING = "nothing to evaluate: the taskset gave no task, or --id matched none of those read"


def _output_dir(value: object) -> Path | None:
    if value is None:
        return None
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(
            f"output_dir (-o) must be a path (str or os.PathLike) or None, not {value!r}"
        )
    if not os.fspath(value):
        # Path("") is the current directory: never what an empty -o meant.
        raise UsageError("-o/--output (output_dir) is empty: give the run's directory")
    return Path(value)


def _resume(session: _Session, _: Any, value: bool) -> None:
    if check_flag(value, "resume") and session.output_dir is None:
        raise UsageError("resume=True needs output_dir: the directory of the run to continue")


def _drain(_: object, __: Any, value: Drain | None) -> None:
    if value is not None and not isinstance(value, Drain):
        raise TypeError(f"drain must be a sluicegate.Drain or None, not {value!r}")


def _trace(_: object, __: Any, value: Recorder | Literal[True] | None) -> None:
    # A class has the methods too, unbound: Timeline for Timeline() is a slip.
    if not (
        value is None
        or value is True
        or (isinstance(value, Recorder) and not isinstance(value, type))
    ):
        raise TypeError(
            f"trace must be True, None or a recorder with pulled(), started(), finished() "
            f"and marked() (a Timeline), not {value!r}"
        )


@attrs.frozen(kw_only=True)
class _Session:
    """How this session runs: the settings of :func:`evaluate` that ``run.json`` does not
    record (a resume may change them). Building one checks them.

    Attributes:
        output_dir: Where the run's files go (None: a new directory under ``runs/``).
        resume: Continue the run in ``output_dir``.
        display: The progress display, or None.
        drain: The drain the caller holds, or None.
        signals: Drain on the first SIGINT/SIGTERM, cancel on the second.
        trace: The recorder handed to the runner, True to record
            ``trace.json`` in the output directory, or None.
        dask: Where attempts run, when on a Dask cluster.
        window: The window object given as ``concurrency=``, or None
            (``run.json`` records what it can of it: see ``docs/eval.md``).
    """

    output_dir: Path | None = attrs.field(default=None, converter=_output_dir)
    resume: bool = attrs.field(default=False, validator=_resume)
    display: Display | None = attrs.field(default=None, converter=make_display)
    drain: Drain | None = attrs.field(default=None, validator=_drain)
    signals: bool = attrs.field(default=False, validator=lambda _, __, v: check_flag(v, "signals"))
    trace: Recorder | Literal[True] | None = attrs.field(default=None, validator=_trace)
    dask: str | DaskBridge | None = None
    window: WindowLike | None = None


def _setup(
    env: object, config: EvalConfig, task_args: Mapping[str, Any] | None, session: _Session
) -> _Setup:
    """Resolve the environment and finish the config, before anything runs.

    Nothing is written, except that a resume sets aside a torn last line.

    Args:
        config: The settings checked so far: the target, the output and the
            ``-T`` arguments are filled in here.
        task_args: The ``-T`` arguments as given (None: on a resume, the
            recorded ones).

    Raises:
        UsageError: for the first thing refused.
    """
    output_dir, resume, dask = session.output_dir, session.resume, session.dask
    earlier = None
    if env is None:
        if not resume:
            raise UsageError("no environment given: pass one, or a TARGET string")
        assert output_dir is not None  # _Session checked it
        earlier = read_run_record(output_dir)
        env = earlier.config.target
        if env is None:
            raise UsageError(
                f"{output_dir / 'run.json'} names no TARGET (the run was started "
                f"from Python): give the environment again"
            )
    if task_args is None and resume:
        # A resume passes the factory the arguments the run was started with.
        assert output_dir is not None
        with contextlib.suppress(UsageError):
            earlier = earlier or read_run_record(output_dir)
        task_args = earlier.config.task_args if earlier is not None else None
    checked = task_arguments(task_args)
    if checked and dask is not None:
        raise UsageError(
            "-T cannot be used with --dask: the workers build the environment from TARGET alone"
        )
    parts = environment(env, checked)
    output = output_dir if output_dir is not None else _default_output(parts.name)
    config = attrs.evolve(config, target=parts.target, output=str(output), task_args=checked)
    # Now that the environment's file is loaded: --retry-on may name a class of it.
    config.retry()
    kind = kind_of(parts.taskset)
    check(kind, config, resume)
    check_floors(config.min_score, config.reduce, parts.score is not None, parts.scores)
    if dask is not None:
        if kind is Kind.DYNAMIC:
            raise UsageError(
                "--dask cannot run a SampleSource: enqueue(), on_complete() and next() "
                "live in this process, and a rollout on a worker cannot reach them"
            )
        _on_dask().check(dask, parts)
    if not resume:
        check_new(output)
        return _Setup(parts, config, kind, None, None)
    earlier = earlier or read_run_record(output)
    found = differences(earlier.config, config)
    if found:
        raise UsageError(
            f"--resume refused: this command differs from the run in {output}: " + "; ".join(found)
        )
    # Before reading the rows: a session still writing them must not be
    # joined by another, and setting aside a torn line is a write.
    lock = SessionLock.take(output)
    try:
        previous = read_results(output)
    except BaseException:
        lock.release()
        raise
    if previous.set_aside is not None:
        warnings.warn(
            f"set aside a torn last line of {output / RESULTS} (kept in {output / TORN})",
            UserWarning,
            stacklevel=3,
        )
    return _Setup(parts, config, kind, earlier, previous, lock)


@asynccontextmanager
async def _showing(shown: Display | None, tally: RunTally) -> AsyncIterator[None]:
    """Run the display's progress task around the block."""
    if shown is None:
        yield
        return
    async with in_background(shown.show, tally):
        yield


@asynccontextmanager
async def _serving(env: Parts) -> AsyncIterator[None]:
    if env.serving is None:
        yield
    else:
        async with env.serving():
            yield


@asynccontextmanager
async def _attempts(
    dask: str | DaskBridge | None, env: Parts, config: EvalConfig
) -> AsyncIterator[tuple[AttemptFn, float | None]]:
    """Where attempts run, and the timeout this process keeps on each.

    On a cluster the timeout is kept where the attempt runs (see
    ``docs/eval.md``), so this process keeps none.
    """
    if dask is None:
        yield attempt_here, config.timeout
        return
    on_dask = _on_dask().on_dask
    async with on_dask(dask, env, config.bound, config.timeout) as attempt:
        yield attempt, None


def _slot_label(item: object) -> str | None:
    return rollout_label(item.task_id, item.rollout) if isinstance(item, Slot) else None


def _show_traceback(row: RolloutRow, directory: Path, config: EvalConfig) -> None:
    """Show the traceback of the rollout that stops the run, and where its whole record is."""
    if row.error is None:
        return
    frames, internal = row.error.own_frames()
    left_out = f", and {internal} sluicegate and trio frames left out here" if internal else ""
    logger.error(
        "the run stops at task %s rollout %d (--fail-on-error %s); its traceback:\n%s\n"
        "the whole record (every attempt%s) is its row in %s; sluicegate report %s shows it",
        row.task_id,
        row.rollout,
        config.fail_on_error,
        frames,
        left_out,
        directory / RESULTS,
        shlex.quote(str(directory)),
    )


def _name_error(row: RolloutRow, tally: RunTally) -> None:
    if tally.errors <= FIRST_ERRORS:
        tried = f" after {row.attempts} attempts" if row.attempts > 1 else ""
        logger.warning(
            "task %s rollout %d failed%s: %s", row.task_id, row.rollout, tried, row.error
        )


async def _run_slots(
    source: Source,
    rollouts: Rollouts,
    config: EvalConfig,
    log: RunLog,
    tally: RunTally,
    trace: Recorder | None,
    watch: WindowWatch | None,
) -> tuple[StopReason, str | None]:
    budget = ErrorBudget.parse(config.fail_on_error)
    # The runner's signature names iterables only; a SampleSource gets in
    # through its bind_run (the BindsRun protocol), which it checks at runtime.
    slots: Any = source
    try:
        async with (
            source.reporting() if isinstance(source, EvalSource) else contextlib.nullcontext(),
            _serving(rollouts.env),
            open_stream(
                slots,
                rollouts,
                window=config.bound if watch is None else watch.window,
                ordered=False,
                drain=rollouts.drain,
                trace=trace,
            ) as results,
        ):
            async for done in results:
                row = done.value
                if row is None:
                    continue  # cut short by a drain: no row, so a resume runs it again
                log.write(row)
                tally.add(row)
                if watch is not None:
                    tally.sized(watch.window.size)  # the display shows the size in force
                    watch.seen()
                if row.status == "error":
                    if row.error is not None:
                        report_failure(trace, done.index, row.error.type)
                    _name_error(row, tally)
                    if budget.crossed(tally.errors, None if tally.growing else tally.planned):
                        _show_traceback(row, log.directory, config)
                        raise _ErrorBudgetCrossed
    except _ErrorBudgetCrossed:
        return "failed", budget_text(config, tally.errors)
    except BaseException as exc:
        # A KeyboardInterrupt is an interruption, and a cancellation belongs
        # to the scope that asked for it. Anything else, a SystemExit from a
        # library deep in a rollout included, is the run failing: nothing
        # interrupted it.
        if _interrupts(exc):
            raise
        if not isinstance(exc, DuplicateTaskId):
            # The environment's own failure: its traceback is what the user
            # needs. Our own refusals say everything in one line.
            logger.error("the environment failed", exc_info=exc)
        return "failed", f"{type(exc).__name__}: {exc}"
    return "completed", None


def _interrupts(exc: BaseException) -> bool:
    """Whether ``exc`` is (or holds) a ``KeyboardInterrupt`` or a cancellation."""
    stops = (KeyboardInterrupt, trio.Cancelled)
    if isinstance(exc, BaseExceptionGroup):
        return exc.subgroup(stops) is not None
    return isinstance(exc, stops)


def _stopped(
    stop: StopReason, error: str | None, drain: Drain, cancel: trio.CancelScope
) -> tuple[StopReason, str | None]:
    """How the session stopped, once its drain and its cancel scope are taken into account."""
    if stop == "completed" and (drain.requested or cancel.cancelled_caught):
        stop = "interrupted"
    if stop == "interrupted":
        error = drain.reason or "cancelled"
    return stop, error


def _conclude(
    shown: Display | None, record: RunRecord, setup: _Setup, tally: RunTally, window: str | None
) -> None:
    """Count the errors not named, and show the summary."""
    more = tally.errors - FIRST_ERRORS
    if more > 0:
        logger.warning(
            "%d more error%s not named here: every one is in %s",
            more,
            "" if more == 1 else "s",
            Path(record.config.output) / RESULTS,
        )
    if shown is not None:
        shown.summary(_summary(record, setup, tally, window))


def _summary(record: RunRecord, setup: _Setup, tally: RunTally, window: str | None) -> Summary:
    assert record.stop_reason is not None and record.passed is not None
    resumable = record.config.target is not None and setup.kind.resumable
    return Summary(
        stop_reason=record.stop_reason,
        passed=record.passed,
        reasons=record.reasons,
        counts=record.counts,
        scores=record.scores,
        output=record.config.output,
        elapsed=trio.current_time() - tally.began,
        abandoned=tuple(tally.abandoned_names),
        score_stats=record.score_stats,
        reduced=record.reduced,
        window=window,
        resume=resume_command(record.config.output)
        if resumable and record.stop_reason != "completed"
        else None,
    )


async def _session(setup: _Setup, session: _Session) -> tuple[RunRecord, RunTally, str | None]:
    """Plan and run the rollouts, then write the final ``run.json``.

    Returns:
        The record written, the tally, and where the window settled (None
        under ``-c N``).
    """
    config = setup.config
    window = session_window(config, session.window)
    watch = None if window is None else WindowWatch.of(window)
    # Under a window object the display's bound follows its size (see _run_slots).
    tally = RunTally(
        concurrency=config.bound if window is None else window.size,
        began=trio.current_time(),
    )
    drain = session.drain if session.drain is not None else Drain()
    signals, trace = session.signals, session.trace
    # The first signal stops waiting for a load() still reading; the second
    # cancels the rollouts in flight.
    startup, cancel = trio.CancelScope(), trio.CancelScope()
    async with (
        drain_on_signals(
            drain,
            signals=DEFAULT_SIGNALS if signals else (),
            cancel_scope=cancel,
            on_signal=lambda _, __: startup.cancel(),
        ),
        # The cluster before the display: a refusal from it is shown alone.
        _attempts(session.dask, setup.parts, config) as (attempt, timeout),
        _showing(session.display, tally),
    ):
        source: Source | None = None
        with startup:
            source = await plan(setup.kind, setup.parts.taskset, config, setup.done, tally, signals)
        tally.add_resumed(setup.previous.ok.values() if setup.previous else ())
        log = RunLog(
            Path(config.output), begin(config, setup.parts.name, setup.earlier), setup.lock
        )
        stop: StopReason = "interrupted"
        error: str | None = None
        try:
            if source is not None:
                rollout = Rollouts(setup.parts, tally, drain, config.retry(), timeout, attempt)
                traced = (
                    recording(log.directory, label=_slot_label)
                    if trace is True
                    else contextlib.nullcontext(trace)
                )
                with cancel, traced as recorder:
                    stop, error = await _run_slots(
                        source, rollout, config, log, tally, recorder, watch
                    )
                if stop == "completed" and tally.planned == 0:
                    # A stream or a SampleSource that gave no task (or none
                    # --id selected): a run that evaluated nothing must not pass.
                    stop, error = "failed", _NOTHING
        finally:
            # Written however the session ends, a KeyboardInterrupt or an
            # outside cancellation included: run.json never stays unfinished.
            stop, error = _stopped(stop, error, drain, cancel)
            tasks = tally.task_rows(config.reduce, config.pass_threshold) if config.reduce else None
            record = end(log.record, stop, error, tally, tasks or ())
            if watch is not None:
                record = attrs.evolve(record, window=watch.changes())
            record = log.close(record, tasks)
    if watch is None:
        return record, tally, None
    return record, tally, window_text(config, watch.start, watch.window.size, watch.decreases())


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
    """Evaluate ``env``: run its tasks' rollouts, record every one, and judge the run.

    Every argument is checked, and the environment resolved, before anything
    runs or anything is written: a setting of the wrong type raises
    :class:`TypeError`, any other mistake :class:`ValueError`, each naming
    the setting as its flag (``-r/--rollouts must be an int >= 1, not 0``).
    Writes ``results.jsonl`` (one row per rollout, as it finishes) and
    ``run.json`` to ``output_dir``. See ``docs/eval.md`` for each setting.

    Args:
        env: An :class:`~sluicegate.eval.Environment` (or a zero-argument
            factory of one), or a ``TARGET`` string ``path/to/file.py:NAME``
            / ``package.module:NAME``. With ``resume=True`` it may be None:
            the target recorded in ``run.json`` is used.
        num_tasks: Run at most this many tasks (needed for streaming and
            infinite tasksets).
        rollouts: Rollouts per task.
        concurrency: Rollouts in flight at most; ``"auto"`` (or
            ``"auto:MAX"``) lets an :class:`~sluicegate.AdaptiveWindow`
            find it, up to 256 (or MAX), and records its sizes in
            ``run.json``. A window object (a :class:`~sluicegate.Window`,
            an :class:`~sluicegate.AdaptiveWindow`) is used as it is: one
            shared with a service or another evaluation bounds them
            together.
        shuffle: Shuffle a static set with this seed.
        system_prompt: Text set as every task's system prompt.
        ids: Run only the tasks with these ids.
        retries: Try a failing rollout again up to this many times, waiting
            with exponential backoff and full jitter in between.
        retry_on: Retry only these exceptions (classes, or names such as
            ``"TimeoutError"`` or ``"module:Name"``); default every Exception.
        timeout: Seconds each attempt may take; an expiry is a ``TimeoutError``.
        fail_on_error: Error rows that fail the run: a count ``N`` (fails at
            the ``N``-th; 0 and 1 at the first) or a fraction in (0, 1).
        min_score: The lowest mean score that passes (the task-weighted
            mean, see ``docs/eval.md``): a number for every score, or a
            mapping of score names (``"*"`` for every score) or reduced
            score names (``"pass_at_1"``). A name no score of the run can
            have is refused before the run.
        reduce: Reducers over each task's rollouts (``"mean"``, ``"max"``,
            ``"min"``, ``"median"``, ``"mode"``, ``"pass_at_K"``,
            ``"at_least_K"``): their per-task values go to ``tasks.jsonl``,
            their statistics to ``run.json`` and the report's ``reduced``.
        pass_threshold: The score at which a rollout counts as correct for
            ``pass_at_K`` and ``at_least_K``.
        task_args: Keyword arguments for the environment's factory (``-T``);
            JSON values, recorded in ``run.json`` and used again by a resume
            (None: the recorded ones on a resume, else none).
        output_dir: Where the files go (default ``runs/<UTC time>-<name>``).
        resume: Continue the run in ``output_dir``: skip rollouts already ok.
        display: ``"rich"``, ``"plain"`` or ``"none"``.
        drain: A :class:`~sluicegate.Drain`; requesting it stops admission,
            the rollouts in flight finish, and the run ends ``interrupted``.
        signals: Drain on the first SIGINT/SIGTERM, cancel on the second
            (main thread only). A static set's ``load()`` then runs in a
            worker thread, so that signals are heard while it reads.
        trace: A recorder handed to the runner as its ``trace=``: it hears of
            every slot pulled, started and finished. True records a trace
            in the output directory (``--trace``); None records nothing.
        dask: Run each attempt on a Dask cluster: ``"local"`` starts an
            embedded ``LocalCluster`` for the evaluation, another string is
            a scheduler address, and a bridge from
            :func:`sluicegate.dask.open_dask` is used as it is. ``env`` must
            then be a ``TARGET`` string, and not a ``SampleSource``.

    Returns:
        The :class:`~sluicegate.eval.EvalReport`; ``run.json`` says the same.

    Raises:
        TypeError: a setting of the wrong type (``drain="x"``, ``rollouts="2"``).
        ValueError: a setting, the environment or the output directory was
            refused before anything ran (a ``load()`` that raised and
            duplicate task ids included).
    """
    session = _Session(
        output_dir=output_dir,
        resume=resume,
        display=display,
        drain=drain,
        signals=signals,
        trace=trace,
        dask=dask,
        window=window_object(concurrency),
    )
    config = EvalConfig(
        num_tasks=num_tasks,
        rollouts=rollouts,
        concurrency=recorded_concurrency(concurrency),
        window_object=None if session.window is None else type(session.window).__name__,
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
        trace=trace is True,  # recorded in run.json, so that a resume traces too
    )
    setup = _setup(env, config, task_args, session)
    if session.display is not None:
        session.display.header(header_text(setup.parts.name, setup.config, session.resume))
    try:
        record, tally, window = await _session(setup, session)
    finally:
        # The session's own lock (a resume's, taken before anything was read);
        # a RunLog lets go of its lock itself.
        if setup.lock is not None:
            setup.lock.release()
    # After the live display has stopped, so that the summary stands alone.
    _conclude(session.display, record, setup, tally, window)
    return EvalReport.of(record, Path(record.config.output))
