"""The campaign controller: a source and a run for :func:`sluicegate.run_stream`.

:func:`run_campaign` puts the pieces together, each in its own module:

* :mod:`._outdir`: the output directory (lock, manifest, frozen code, report);
* :mod:`._panel`: the rows, and every count derived from them;
* :mod:`._admission`: the source, yielding admissible candidates;
* :mod:`._launch`: starting, adopting and stopping child processes;
* :mod:`._settle`: the campaign's reservations in the ledger.

The one call of ``run_stream`` is in :meth:`_Campaign.run`: the source is
:meth:`_Campaign.dispatches` (adopted children first, then admissions), the
run is :meth:`_Campaign.run_job`, ``window=max_parallel``, and a
:class:`~sluicegate.Drain` requested by the drain file, a signal or the
caller stops admission.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import logging
import warnings
from collections.abc import AsyncIterator, Callable
from decimal import Decimal
from pathlib import Path

import attrs
import trio

from .._runner import CURRENT_INDEX, Drain, report_failure, run_stream
from .._trace import Timeline, recording
from ._admission import Admission
from ._errors import CampaignError
from ._job import JobRequest, JobResult, OutcomeStatus
from ._launch import (
    AdoptedChild,
    Child,
    Spawn,
    child_alive,
    launch,
    process_start_time,
    spawn_process,
    stop,
)
from ._ledger import Ledger
from ._outdir import (
    DRAIN_FILE,
    DRAIN_POLL_S,
    JobFiles,
    OutputDir,
    StepHook,
    current_controller,
    locate_job,
    locked,
    no_step,
    posix_fcntl,
    prior_keys,
    read_report,
)
from ._panel import Panel, now
from ._plan import Candidate, Plan, load_plan
from ._settle import Accounts
from ._state import FINISHED, Report, Row, StopReason

__all__ = ["reconcile", "run_campaign"]

logger = logging.getLogger("sluicegate")

Observer = Callable[[Report], None]


@attrs.frozen
class _SourceItem:
    """An item of the campaign's source: a candidate to launch, or a child to adopt."""

    candidate: Candidate
    adopted: AdoptedChild | None = None


def _job_label(dispatch: _SourceItem) -> str:
    return dispatch.candidate.key


class _Campaign:
    """One controller run over one output directory; not reusable."""

    def __init__(
        self,
        outdir: OutputDir,
        plan: Plan,
        panel: Panel,
        accounts: Accounts,
        *,
        observer: Observer | None,
        spawn: Spawn,
        step: StepHook = no_step,
        drain: Drain,
        trace: bool = False,
    ) -> None:
        # Fixed for the run: where it writes, what it runs, and how.
        self.outdir = outdir
        self.plan = plan
        self.trace = trace
        self.observer = observer
        self.spawn = spawn
        self.step = step
        self.accounts = accounts
        # The rows. Only this object writes them: through record() and settle()
        # (the admission calls record()), and recover() before the run starts.
        self.panel = panel
        # Requested by the drain file, a signal or the caller; never withdrawn.
        self.drain = drain
        self.admission = Admission(
            panel, drain, reserve=self._reserve, release=self._release, record=self.record
        )
        # run_stream's timeline while run() runs it, else None; written only by
        # run(), read by run_job() to mark a job that did not deliver.
        self.timeline: Timeline | None = None
        # Children adopted on resume that the runner has not pulled yet: recover()
        # fills it, _take_adopted() alone empties it.
        # Invariant: an adopted child is here until exactly one of run_job() (it
        # was pulled, or the run ended first) and _close() (the run failed) has it.
        self._adopted: collections.deque[_SourceItem] = collections.deque()
        # Held while a report is made and written, so reports land in order.
        self._write_lock = trio.Lock()
        # The last report written; written only by write().
        # Invariant: it is what report.json holds (None before the first write).
        self.report: Report | None = None

    # -- the ledger and the report -----------------------------------------------------

    async def _reserve(self, candidate: Candidate) -> int | None:
        return await trio.to_thread.run_sync(self.accounts.reserve_dispatch, candidate)

    async def _release(self, reservation: int) -> None:
        await trio.to_thread.run_sync(self.accounts.release, reservation)

    async def write(self, stop_reason: StopReason | None = None) -> None:
        """Rewrite report.json atomically and tell the observer."""
        async with self._write_lock:
            usage = await trio.to_thread.run_sync(self.accounts.usage)
            report = self.panel.report(usage, stop_reason, draining=self.drain.requested)
            await trio.to_thread.run_sync(self.outdir.write_report, report)
            self.report = report
        if self.observer is not None:
            self.observer(report)

    async def record(self, row: Row) -> None:
        """Put ``row`` in the panel and write the report."""
        self.panel.set(row)
        await self.write()

    async def settle(
        self, row: Row, result: JobResult | None, *, missing: str, exit_code: int | None
    ) -> None:
        """Settle a job that ended (or vanished) and record its row."""
        settle = functools.partial(
            self.accounts.settle_job, row, result, missing=missing, exit_code=exit_code
        )
        await self.record(await trio.to_thread.run_sync(settle))

    # -- resume --------------------------------------------------------------------------

    async def recover(self) -> None:
        """Take up what an earlier controller left; the children to adopt go in ``_adopted``.

        A ``running`` row whose child still holds its lock is adopted. One
        whose job never began (no child was recorded, none holds the lock,
        and there is neither a ``started`` file nor a result: the controller
        died between recording the admission and the child's start) is
        ``pending`` again, its reservation released. Any other whose child
        ended is settled from its ``result.json`` (``uncertain`` without
        one). An ``uncertain`` row awaiting a result is looked at the same
        way. Dispatch reservations of ``pending`` candidates (made just
        before a crash) are released.
        """
        for row in self.panel.rows():
            files = self.outdir.job(row.key)
            waiting = row.status == "running" or (row.status == "uncertain" and row.awaiting_result)
            if not waiting:
                continue
            if child_alive(files.lock):
                # Still running: wait for it, as for a child of our own. (An
                # uncertain one was left running by a controller that could
                # not stop it; its reservations stay uncertain until it ends.)
                child = AdoptedChild(row.pid, row.process_start, files.lock)
                self._adopted.append(_SourceItem(self.plan.candidate(row.key), child))
                if row.status != "running":
                    self.panel.set(attrs.evolve(row, status="running", awaiting_result=False))
                continue
            result, problem = files.read_result(row.key)
            if result is None and problem is None and await self._never_started(row, files):
                await self.record(
                    Row(key=row.key, status="pending", resource_class=row.resource_class)
                )
                continue
            if row.status == "running" or result is not None:
                missing = problem or "the controller stopped while it ran and no result was written"
                await self.settle(row, result, missing=missing, exit_code=row.exit_code)
        pending = set(self.panel.keys("pending"))
        await trio.to_thread.run_sync(self.accounts.release_orphans, pending)

    async def _never_started(self, row: Row, files: JobFiles) -> bool:
        """Whether ``row``'s job never began; if so, its reservation is released.

        Call it only once no child holds the lock and there is no result.
        The pid is recorded as soon as a child is launched, and the child
        makes ``started`` before it imports the job, so with neither the job
        cannot have run; :meth:`Accounts.release_unstarted` also checks that
        the job made no stage reservation.
        """
        if row.pid is not None or files.started.exists():
            return False
        return await trio.to_thread.run_sync(self.accounts.release_unstarted, row)

    # -- the source and the run -------------------------------------------------------------

    def _take_adopted(self) -> _SourceItem | None:
        """Take the next adopted child off ``_adopted``: the taker waits for it or stops it."""
        return self._adopted.popleft() if self._adopted else None

    async def dispatches(self) -> AsyncIterator[_SourceItem]:
        """The source: the adopted children (already counted as running), then admissions."""
        while (adopted := self._take_adopted()) is not None:
            yield adopted
        async with contextlib.aclosing(self.admission.candidates()) as candidates:
            async for candidate in candidates:
                yield _SourceItem(candidate)

    async def run_job(self, dispatch: _SourceItem) -> Row:
        """Run one dispatch to its end: launch (or adopt) a child, wait, settle."""
        key = dispatch.candidate.key
        # The runner's index for this run, so a timeline hears how the job ended.
        index = CURRENT_INDEX.get()
        files = self.outdir.job(key)
        child: Child | None = dispatch.adopted
        launch_error: OSError | None = None
        exit_code: int | None = None
        ended = False
        try:
            if child is None:
                request = JobRequest(
                    key=key,
                    job=self.plan.job,
                    options=dispatch.candidate.options,
                    work_dir=str(files.work.resolve()),
                    code_dir=str(self.outdir.code_dir.resolve()),
                    ledger=str(self.accounts.ledger.path.resolve()),
                    scope=self.accounts.candidate_scope(key),
                    result=str(files.result.resolve()),
                    started=str(files.started.resolve()),
                )
                self.step("launching")
                try:
                    child = await launch(files, request, self.spawn)
                except OSError as exc:
                    launch_error = exc
                else:
                    with trio.CancelScope(shield=True):
                        pid = child.pid
                        row = attrs.evolve(
                            self.panel[key], pid=pid, process_start=process_start_time(pid)
                        )
                        await self.record(row)
            if child is not None:
                exit_code = await child.wait()
                ended = True
        finally:
            with trio.CancelScope(shield=True):
                await self._close(key, child, launch_error, ended=ended, exit_code=exit_code)
        row = self.panel[key]
        if row.status != "verified":
            # The run returned, but the job did not deliver: show it as such.
            report_failure(self.timeline, index, row.status)
        return row

    async def _close(
        self,
        key: str,
        child: Child | None,
        launch_error: OSError | None,
        *,
        ended: bool,
        exit_code: int | None,
    ) -> None:
        row = self.panel[key]
        if child is None:
            # Never started: give the reservation back.
            assert row.reservation_id is not None
            await self._release(row.reservation_id)
            if launch_error is None:
                # Cancelled before the launch: the candidate is still to do.
                await self.record(Row(key=key, status="pending", resource_class=row.resource_class))
            else:
                reason = f"the child could not be started: {launch_error}"
                row = attrs.evolve(row, status="blocked", cost=Decimal(0), reason=reason)
                await self.record(attrs.evolve(row, finished=now()))
            return
        if ended:
            missing = f"the child exited with status {exit_code} and wrote no result"
            if isinstance(child, AdoptedChild):
                missing = "the child adopted on resume ended without a result"
        else:
            # We are being cancelled: ask the child to stop, then insist.
            try:
                exit_code = await stop(child)
            except ProcessLookupError as exc:
                await self.settle(row, None, missing=f"it was left running: {exc}", exit_code=None)
                return
            status = "" if exit_code is None else f" (status {exit_code})"
            missing = f"the child was stopped{status} before it wrote a result"
        result, problem = self.outdir.job(key).read_result(key)
        await self.settle(row, result, missing=problem or missing, exit_code=exit_code)

    async def run(self, drain_poll_interval: float) -> StopReason:
        """Run the campaign until its source ends; returns why it stopped."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._watch_drain_file, drain_poll_interval)
            nursery.start_soon(self._announce_drain)
            traced = (
                recording(self.outdir.path, label=_job_label)
                if self.trace
                else contextlib.nullcontext(None)
            )
            with traced as self.timeline:
                try:
                    # The one dispatcher of the package; the window is max_parallel.
                    await run_stream(
                        self.dispatches(),
                        self.run_job,
                        window=self.plan.max_parallel,
                        drain=self.drain,
                        trace=self.timeline,
                    )
                except BaseException:
                    # Cancelled (a second signal) or failed before the runner
                    # pulled every adopted child, and no run starts after
                    # that: stop those children as run_job would have.
                    with trio.CancelScope(shield=True):
                        while (dispatch := self._take_adopted()) is not None:
                            await self._close(
                                dispatch.candidate.key,
                                dispatch.adopted,
                                None,
                                ended=False,
                                exit_code=None,
                            )
                    raise
                finally:
                    self.timeline = None
            # Children adopted but never pulled (a drain came first) still
            # run and are counted: wait for them.
            while (dispatch := self._take_adopted()) is not None:
                nursery.start_soon(self.run_job, dispatch)
            await self._until_none_running()
            nursery.cancel_scope.cancel()
        return self._final_reason()

    async def _until_none_running(self) -> None:
        while self.panel.running():
            await self.panel.changed()

    async def _announce_drain(self) -> None:
        """Record in the report that admission has stopped, however it was asked."""
        await self.drain.wait()
        await self.write()

    async def _watch_drain_file(self, interval: float) -> None:
        # Another process writes the file, so there is no event to wait on.
        while True:
            if self.outdir.drain_requested():
                self.drain.request(f"{DRAIN_FILE} found")
                return
            await trio.sleep(interval)

    def _final_reason(self) -> StopReason:
        panel = self.panel
        if panel.has("uncertain"):
            return "reconciliation_required"
        if panel.verified() >= self.plan.target:
            return "target_reached"
        if self.drain.requested:
            return "drained"
        if not panel.has("pending"):
            return "panel_exhausted"
        return self.admission.end_reason or "panel_exhausted"


def _warn_unreachable(plan: Plan, prior: set[str]) -> None:
    reachable = len(prior | {c.key for c in plan.candidates})
    if plan.target > reachable:
        warnings.warn(
            f"target {plan.target} cannot be reached: the plan has {len(plan.candidates)} "
            f"candidate(s) and {len(prior)} prior verified result(s), "
            f"{reachable} distinct key(s) in all",
            UserWarning,
            stacklevel=2,
        )


async def run_campaign(
    plan_path: Path | str,
    outdir: Path | str,
    ledger_path: Path | str,
    *,
    observer: Observer | None = None,
    drain: Drain | None = None,
    drain_poll_interval: float = DRAIN_POLL_S,
    allow_upgrade: bool = False,
    trace: bool = False,
    _spawn: Spawn = spawn_process,
    _step: StepHook = no_step,
) -> Report:
    """Run (or continue) the campaign of ``plan_path`` in ``outdir``.

    Rerunning the same command continues where the last run stopped: finished
    candidates are never run again, a child still running from a controller
    that died is adopted and waited for, one that finished meanwhile is
    imported from its result file, and one that left no result is
    ``uncertain``.

    Every check that can refuse the start (the plan, its prior results, the
    ledger, the job's module and function) runs before ``outdir`` is created
    or touched.

    Args:
        plan_path: The plan file.
        outdir: The output directory (created if missing).
        ledger_path: An existing ledger (see ``sluicegate ledger init``).
        observer: Called with each report as it is written.
        drain: Requesting it stops admission, as ``drain-request.json`` does
            (the command line requests it on the first SIGINT or SIGTERM).
        drain_poll_interval: Seconds between looks for ``drain-request.json``.
        allow_upgrade: Continue a campaign started by another sluicegate
            version (or source), recording the new one in ``campaign.json``.
        trace: Record the jobs' timeline: ``OUTDIR/trace.jsonl`` as they run,
            ``OUTDIR/trace.json`` at the end (see ``sluicegate plot``); a job
            that is not verified shows as an error with its status.
        _spawn: How a child is started; tests replace it to exercise admission
            without processes.
        _step: Called at each moment after which a controller killed leaves a
            state of its own on disk (``"staging made"``, ``"code frozen"``,
            ``"manifest written"``, ``"launching"``); tests kill the
            controller there to check that a rerun goes on.

    Returns:
        The final report, also in ``OUTDIR/report.json``.

    Warns:
        UserWarning: the target is larger than the number of distinct keys
            in the candidates and prior results, so it cannot be reached.

    Raises:
        CampaignFileError: the plan is invalid.
        LedgerMissing: there is no ledger at ``ledger_path``.
        CampaignLocked: another controller runs on ``outdir``.
        CampaignError: there is no plan file; the job's module or function is
            missing; the plan, job code, ledger or controller differ from
            those ``outdir`` was started with; a prior result cannot be read;
            or the system has no ``fcntl`` (campaigns need POSIX).
    """
    plan_path = Path(plan_path)
    out = OutputDir(Path(outdir))
    if not plan_path.is_file():
        raise CampaignError(
            f"no plan file {plan_path}; give the path of an existing plan (JSON), "
            "see docs/campaign.md for its fields"
        )
    plan = load_plan(plan_path)
    ledger = Ledger(ledger_path)
    prior = prior_keys(plan, plan_path.parent)
    code = locate_job(plan, plan_path.parent)
    controller = current_controller()
    posix_fcntl()
    out.path.mkdir(parents=True, exist_ok=True)
    with locked(out.path):
        manifest = out.bind(
            plan, code, ledger.path, controller, allow_upgrade=allow_upgrade, step=_step
        )
        # Only once nothing can refuse the start: a refusal says it all.
        _warn_unreachable(plan, prior)
        panel = Panel(plan, prior, out.load_rows(plan, prior))
        accounts = Accounts(ledger, manifest.scope, plan)
        campaign = _Campaign(
            out,
            plan,
            panel,
            accounts,
            observer=observer,
            spawn=_spawn,
            step=_step,
            drain=drain if drain is not None else Drain(),
            trace=trace,
        )
        await trio.to_thread.run_sync(accounts.open_scopes)
        await campaign.recover()
        if out.drain_requested():
            campaign.drain.request(f"{DRAIN_FILE} found")
        await campaign.write()
        stop_reason = await campaign.run(drain_poll_interval)
        await campaign.write(stop_reason)
        assert campaign.report is not None
        return campaign.report


def reconcile(
    outdir: Path | str,
    key: str,
    status: OutcomeStatus | None = None,
    cost: Decimal | None = None,
) -> Report:
    """Resolve an ``uncertain`` candidate.

    With ``status``, it is your verdict: the dispatch reservation is settled
    at ``cost`` (at its full amount when ``cost`` is None), stage
    reservations left open at their full amount, and the row takes
    ``status`` (a ``verified`` one counts toward the target).

    Without ``status``, the ``result.json`` the candidate's child wrote after
    its controller lost sight of it is imported, as a controller would have
    (the row may stay ``uncertain``, if the result itself says so).

    The next run continues once no candidate is uncertain.

    Raises:
        CampaignLocked: a controller runs on ``outdir``.
        CampaignError: ``outdir`` is not a campaign directory; no such
            candidate, or it is not uncertain; its child still runs; no
            ``status`` and no result to import; ``cost`` is more than the
            ledger can store.
    """
    out = OutputDir(Path(outdir))
    if status is not None and status not in FINISHED:
        raise CampaignError(f"reconcile as one of {sorted(FINISHED)}, not {status!r}")
    manifest = out.read_manifest()
    with locked(out.path):
        report = read_report(out.path)
        try:
            row = report.row(key)
        except KeyError:
            raise CampaignError(f"no candidate {key!r} in {out.path}") from None
        if row.status != "uncertain":
            raise CampaignError(f"{key} is {row.status}, not uncertain; nothing to reconcile")
        files = out.job(key)
        if child_alive(files.lock):
            raise CampaignError(
                f"{key}'s child (pid {row.pid}) still runs; wait for it to end, or rerun "
                "`campaign run`, which waits for it"
            )
        plan = manifest.plan
        accounts = Accounts(Ledger(manifest.ledger), manifest.scope, plan)
        if status is None:
            if not row.awaiting_result:
                raise CampaignError(
                    f"{key}'s result was read and left it uncertain ({row.reason}); "
                    "say what happened with --as STATUS"
                )
            result, problem = files.read_result(key)
            if result is None:
                raise CampaignError(
                    f"{key} has no result to import ({problem or 'no result.json'}); "
                    "say what happened with --as STATUS"
                )
            new = accounts.settle_job(row, result, missing="", exit_code=row.exit_code)
            new = attrs.evolve(new, reconciled=new.status != "uncertain")
        else:
            try:
                new = accounts.settle_by_hand(row, status, cost)
            except ValueError as exc:
                raise CampaignError(str(exc)) from None
        rows = {r.key: r for r in report.rows}
        rows[key] = new
        panel = Panel(plan, report.prior_verified, rows)
        # Never None: None means "a controller runs", and none does here.
        stop: StopReason = "reconciliation_required" if panel.has("uncertain") else "reconciled"
        new_report = panel.report(accounts.usage(), stop)
        out.write_report(new_report)
        return new_report
