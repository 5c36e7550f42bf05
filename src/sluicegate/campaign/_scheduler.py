"""The campaign controller: admission, child processes, settlement and resume.

The scheduler is a source and a run for :func:`sluicegate.run_stream`, the one
dispatcher of the package:

* the source (:meth:`_Campaign.admissions`) is an async generator that
  yields the next admissible candidate. It picks the first pending candidate,
  in plan order, whose class has room, while target slots remain
  (``target - verified - running``), and reserves its dispatch amount in the
  ledger; a refused reservation skips to a later candidate. When nothing is
  admissible it waits for a completion to change the picture, and it ends
  when nothing ever can be admitted again.
* the run (:meth:`_Campaign.run_job`) starts one ``python -I`` child, waits
  for it, reads its result file and settles the reservation.
* ``window=max_parallel`` bounds the running jobs, and a :class:`Drain`
  requested by a task polling ``drain-request.json`` stops admission.

Every ledger call is a short blocking SQLite transaction, made through
``trio.to_thread.run_sync`` so that the controller keeps serving its children
while another process holds the ledger's write lock.
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import functools
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Protocol

import attrs
import trio

from .._runner import Drain, run_stream
from ._convert import CampaignFileError, load_json, structure, write_json_atomic
from ._freeze import JobCodeError, check_job_function, freeze, locate_job_source, tree_hash
from ._job import JobRequest, JobResult, OutcomeStatus
from ._ledger import BudgetRefused, Ledger, ScopeUsage
from ._plan import Candidate, Plan, load_plan
from ._report import FINISHED, Manifest, Report, Row, StopReason

__all__ = [
    "DRAIN_FILE",
    "CampaignError",
    "CampaignLocked",
    "DrainRequest",
    "read_report",
    "reconcile",
    "request_drain",
    "run_campaign",
]

DRAIN_FILE = "drain-request.json"
REPORT_FILE = "report.json"
MANIFEST_FILE = "campaign.json"
# How often a controller looks for DRAIN_FILE; `campaign drain` and the docs quote it.
DRAIN_POLL_S = 0.2
LOCK_FILE = ".lock"
CODE_DIR = "code"
JOBS_DIR = "jobs"
_DISPATCH = "dispatch"
# How long a child gets to exit after SIGTERM when the controller is cancelled.
_TERMINATE_GRACE_S = 5.0

Observer = Callable[[Report], None]


class Child(Protocol):
    """What the controller needs of a child process (``trio.Process`` has it)."""

    @property
    def returncode(self) -> int | None: ...

    async def wait(self) -> int: ...

    def terminate(self) -> None: ...

    def kill(self) -> None: ...


# Starts a child: (command, work dir, stdout fd, stderr fd) -> the child.
Spawn = Callable[[list[str], Path, int, int], Awaitable[Child]]


async def spawn_process(command: list[str], cwd: Path, stdout: int, stderr: int) -> Child:
    """Start ``command`` as a child process with its output in the given files."""
    return await trio.lowlevel.open_process(
        command,
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        cwd=cwd,
        # Its own session: a Ctrl-C at the terminal reaches the controller,
        # which decides what happens to the children.
        start_new_session=True,
    )


# -I drops PYTHONPATH, so a child would not find a sluicegate that is only on
# the parent's PYTHONPATH (a source checkout): it is handed the directory the
# parent imported sluicegate from. Third-party packages come from the
# interpreter's own site-packages, as -I leaves those in place.
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
_CHILD_BOOT = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from sluicegate.campaign._child import main; sys.exit(main(sys.argv[1:]))"
)


class CampaignError(Exception):
    """A campaign cannot start or go on; the message says why and what to do."""


class CampaignLocked(CampaignError):
    """Another controller is working on this output directory."""


@attrs.frozen
class DrainRequest:
    """``OUTDIR/drain-request.json``: admission stops while this file exists."""

    requested: str
    reason: str = "drain requested"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


@contextlib.contextmanager
def _locked(outdir: Path) -> Iterator[None]:
    """Hold the output directory's lock (released by the OS if the process dies)."""
    fd = os.open(outdir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise CampaignLocked(f"another controller is running on {outdir}") from None
    try:
        yield
    finally:
        os.close(fd)


def is_locked(outdir: Path) -> bool:
    """Whether a controller holds ``outdir`` now."""
    try:
        with _locked(outdir):
            return False
    except CampaignLocked:
        return True


def _require_campaign_dir(outdir: Path) -> None:
    if not (outdir / MANIFEST_FILE).is_file():
        what = "is not a campaign output directory" if outdir.is_dir() else "does not exist"
        raise CampaignError(
            f"{outdir} {what} (no {MANIFEST_FILE}); give the OUTDIR a `campaign run` wrote"
        )


def request_drain(outdir: Path | str, reason: str = "drain requested") -> Path:
    """Ask the controller of ``outdir`` to stop admitting jobs.

    Running jobs finish normally. The file stays until removed by hand, and
    while it exists a rerun admits nothing.

    Returns:
        The path of the drain file.

    Raises:
        CampaignError: ``outdir`` is not a campaign directory.
    """
    outdir = Path(outdir)
    _require_campaign_dir(outdir)
    path = outdir / DRAIN_FILE
    write_json_atomic(path, DrainRequest(requested=_now(), reason=reason))
    return path


def read_report(outdir: Path | str) -> Report:
    """The last report written in ``outdir``.

    Raises:
        CampaignError: there is no report.
        CampaignFileError: the report is not valid.
    """
    path = Path(outdir) / REPORT_FILE
    if not path.is_file():
        _require_campaign_dir(Path(outdir))
        raise CampaignError(f"no {REPORT_FILE} in {outdir}; rerun its `campaign run` to write one")
    return load_json(path, Report, root="report")


def _prior_keys(plan: Plan, plan_dir: Path) -> set[str]:
    """Keys proven verified by the plan's ``prior`` files."""
    keys: set[str] = set()
    for name in plan.prior:
        path = plan_dir / name
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise CampaignError(f"plan.prior: cannot read {path}: {exc}") from None
        if isinstance(data, dict) and "outcome" in data:
            result = structure(data, JobResult, path=path, root="result")
            if result.outcome.status == "verified":
                keys.add(result.key)
        else:
            report = structure(data, Report, path=path, root="report")
            keys.update(r.key for r in report.rows if r.status == "verified")
            keys.update(report.prior_verified)
    return keys


def summarize(
    plan: Plan,
    rows: dict[str, Row],
    prior: set[str],
    usage: ScopeUsage,
    stop_reason: StopReason | None,
    *,
    draining: bool = False,
) -> Report:
    """A report of ``rows``; counts are derived from the rows, never kept apart."""
    verified = prior | {r.key for r in rows.values() if r.status == "verified"}
    by_class: collections.Counter[str] = collections.Counter(
        r.resource_class or "-" for r in rows.values() if r.status == "running"
    )
    return Report(
        name=plan.name,
        target=plan.target,
        verified=len(verified),
        prior_verified=tuple(sorted(prior)),
        running=sum(by_class.values()),
        running_by_class=dict(sorted(by_class.items())),
        max_parallel=plan.max_parallel,
        class_limits=dict(plan.class_limits),
        rows=tuple(rows[c.key] for c in plan.candidates),
        pending=tuple(c.key for c in plan.candidates if rows[c.key].status == "pending"),
        spent=usage.settled,
        held=usage.reserved + usage.uncertain,
        cap=plan.max_spend,
        stop_reason=stop_reason,
        draining=draining,
        updated=_now(),
    )


def _bind(plan: Plan, plan_dir: Path, outdir: Path, ledger: Ledger) -> Manifest:
    """Freeze the job code on a first run; on a rerun, check nothing changed."""
    search = plan_dir / plan.job_path if plan.job_path is not None else None
    try:
        source = locate_job_source(plan.job, search)
        source_hash = tree_hash(source)
        # Before anything is frozen or run: a misspelled function would
        # otherwise make every candidate launch and end blocked.
        check_job_function(plan.job, source)
    except (JobCodeError, OSError) as exc:
        raise CampaignError(f"job {plan.job}: {exc}") from None
    manifest_path = outdir / MANIFEST_FILE
    if not manifest_path.exists():
        code_dir = outdir / CODE_DIR
        if code_dir.exists():
            raise CampaignError(f"{outdir} holds code but no {MANIFEST_FILE}; use a new directory")
        code_hash = freeze(source, code_dir)
        if code_hash != source_hash:
            raise CampaignError(f"job source {source} changed while it was being frozen")
        manifest = Manifest(
            plan=plan,
            code_hash=code_hash,
            job_source=str(source),
            ledger=str(ledger.path.resolve()),
            created=_now(),
        )
        write_json_atomic(manifest_path, manifest)
        return manifest
    manifest = load_json(manifest_path, Manifest, root="campaign")
    if manifest.plan != plan:
        raise CampaignError(
            f"the plan differs from the one {outdir} was started with; "
            "use a new output directory for a changed plan"
        )
    if manifest.ledger != str(ledger.path.resolve()):
        raise CampaignError(f"{outdir} was started with the ledger {manifest.ledger}")
    if source_hash != manifest.code_hash:
        raise CampaignError(
            f"stale job code: {source} no longer matches the code {outdir} was started with "
            f"({manifest.code_hash}); use a new output directory to run changed code"
        )
    frozen = outdir / CODE_DIR / source.name
    if not frozen.exists() or tree_hash(frozen) != manifest.code_hash:
        raise CampaignError(f"the frozen job code in {frozen} was altered")
    return manifest


def _open_private(path: Path) -> int:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    # O_CREAT's mode does not apply to a file left by an earlier attempt.
    os.fchmod(fd, 0o600)
    return fd


class _Campaign:
    """One controller run over one output directory; not reusable."""

    def __init__(
        self,
        plan: Plan,
        outdir: Path,
        ledger: Ledger,
        prior: set[str],
        rows: dict[str, Row],
        observer: Observer | None,
        spawn: Spawn,
        drain: Drain | None,
    ) -> None:
        self.plan = plan
        self.outdir = outdir
        self.ledger = ledger
        self.prior = prior
        self.rows = rows
        self.observer = observer
        self.spawn = spawn
        self.drain = drain if drain is not None else Drain()
        self.code_dir = outdir / CODE_DIR
        self._refused: set[str] = set()  # reservation refused since the last completion
        self._changed = trio.Event()
        self._write_lock = trio.Lock()
        self.end_reason: StopReason | None = None
        self.stop_reason: StopReason | None = None
        self.report: Report | None = None

    # -- counting ------------------------------------------------------------------

    def _scope(self, key: str) -> tuple[str, str]:
        return (self.plan.name, key)

    def _verified(self) -> int:
        return len(self.prior | {r.key for r in self.rows.values() if r.status == "verified"})

    def _running(self, resource_class: str | None = None) -> int:
        return sum(
            1
            for r in self.rows.values()
            if r.status == "running"
            and (resource_class is None or r.resource_class == resource_class)
        )

    def _class_has_room(self, candidate: Candidate) -> bool:
        cls = candidate.resource_class
        if cls is None or cls not in self.plan.class_limits:
            return True
        return self._running(cls) < self.plan.class_limits[cls]

    def _signal(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def final_reason(self) -> StopReason:
        if any(r.status == "uncertain" for r in self.rows.values()):
            return "reconciliation_required"
        if self._verified() >= self.plan.target:
            return "target_reached"
        if self.drain.requested:
            return "drained"
        if self.end_reason == "budget_exhausted":
            return "budget_exhausted"
        if not any(r.status == "pending" for r in self.rows.values()):
            return "panel_exhausted"
        return self.end_reason or "panel_exhausted"

    async def write(self) -> None:
        """Rewrite report.json atomically and tell the observer."""
        async with self._write_lock:
            usage = await trio.to_thread.run_sync(self.ledger.usage, (self.plan.name,))
            report = summarize(
                self.plan,
                self.rows,
                self.prior,
                usage,
                self.stop_reason,
                draining=self.drain.requested,
            )
            await trio.to_thread.run_sync(write_json_atomic, self.outdir / REPORT_FILE, report)
            self.report = report
        if self.observer is not None:
            self.observer(report)

    # -- start and resume --------------------------------------------------------------

    def open_scopes(self) -> None:
        """Create the campaign's and candidates' ledger scopes (blocking)."""
        scopes: list[tuple[tuple[str, ...], Decimal | None]] = [
            ((self.plan.name,), self.plan.max_spend)
        ]
        scopes += [(self._scope(c.key), c.max_spend) for c in self.plan.candidates]
        self.ledger.open_scopes(scopes)

    def _job_dir(self, key: str) -> Path:
        return self.outdir / JOBS_DIR / key

    def _read_result(self, key: str) -> JobResult | None:
        path = self._job_dir(key) / "result.json"
        if not path.is_file():
            return None
        try:
            result = load_json(path, JobResult, root="result")
        except (CampaignFileError, OSError):
            return None
        return result if result.key == key else None

    async def recover(self) -> None:
        """Settle what a controller that died left behind.

        A ``running`` row whose child wrote a result is imported; one without
        a result is ``uncertain``. A dispatch reservation recorded for a
        ``pending`` candidate was made just before a crash, before its child
        could start (the report is written before any launch), so it is
        released.
        """
        for row in list(self.rows.values()):
            if row.status == "running":
                result = self._read_result(row.key)
                await self._settle(
                    row.key,
                    result,
                    exit_code=None,
                    missing="the controller stopped while it ran and no result was written",
                )

        def release_orphans() -> None:
            for r in self.ledger.reservations((self.plan.name,)):
                row = self.rows.get(r.scope[-1]) if len(r.scope) == 2 else None
                pending = row is not None and row.status == "pending"
                if pending and r.note == _DISPATCH and r.state == "reserved":
                    self.ledger.settle(r.id, Decimal(0))

        await trio.to_thread.run_sync(release_orphans)

    # -- the source ---------------------------------------------------------------------

    def _next_candidate(self) -> Candidate | None:
        slots = self.plan.target - self._verified() - self._running()
        if slots <= 0:
            return None
        for candidate in self.plan.candidates:
            if (
                self.rows[candidate.key].status == "pending"
                and candidate.key not in self._refused
                and self._class_has_room(candidate)
            ):
                return candidate
        return None

    def _still_admissible(self) -> bool:
        """Whether a candidate chosen before an await may still be admitted."""
        return not (
            self.drain.requested
            or any(r.status == "uncertain" for r in self.rows.values())
            or self._verified() + self._running() >= self.plan.target
        )

    async def admissions(self) -> AsyncIterator[Candidate]:
        """Yield candidates as they become admissible, each with its reservation made."""
        while True:
            if any(r.status == "uncertain" for r in self.rows.values()):
                self.end_reason = "reconciliation_required"
                return
            if self._verified() >= self.plan.target:
                self.end_reason = "target_reached"
                return
            if not any(r.status == "pending" for r in self.rows.values()):
                self.end_reason = "panel_exhausted"
                return
            candidate = self._next_candidate()
            if candidate is None:
                if self._running() == 0:
                    # Nothing running can free a class, a slot or money: the
                    # pending candidates are all refused by the budget.
                    self.end_reason = "budget_exhausted"
                    return
                await self._changed.wait()
                continue
            # Shielded: once the ledger holds the money, the row must say so
            # before anything can interrupt us.
            with trio.CancelScope(shield=True):
                try:
                    reserve = functools.partial(
                        self.ledger.reserve,
                        self._scope(candidate.key),
                        candidate.reservation,
                        note=_DISPATCH,
                    )
                    reservation = await trio.to_thread.run_sync(reserve)
                except BudgetRefused:
                    self._refused.add(candidate.key)
                    continue
                if not self._still_admissible():
                    # A completion or a drain arrived while the ledger was busy.
                    release = functools.partial(self.ledger.settle, reservation, Decimal(0))
                    await trio.to_thread.run_sync(release)
                    continue
                self.rows[candidate.key] = Row(
                    key=candidate.key,
                    status="running",
                    resource_class=candidate.resource_class,
                    reservation_id=reservation,
                    reserved=candidate.reservation,
                    started=_now(),
                )
                await self.write()
            yield candidate

    # -- the run ------------------------------------------------------------------------

    async def run_job(self, candidate: Candidate) -> Row:
        """Run one admitted candidate in a child process and settle it."""
        key = candidate.key
        job_dir = self._job_dir(key)
        work_dir = job_dir / "work"
        work_dir.mkdir(parents=True, exist_ok=True)
        result_path = job_dir / "result.json"
        result_path.unlink(missing_ok=True)
        request = JobRequest(
            key=key,
            job=self.plan.job,
            options=candidate.options,
            work_dir=str(work_dir.resolve()),
            code_dir=str(self.code_dir.resolve()),
            ledger=str(self.ledger.path.resolve()),
            scope=self._scope(key),
            result=str(result_path.resolve()),
        )
        request_path = job_dir / "request.json"
        write_json_atomic(request_path, request, mode=0o600)
        request_arg = str(request_path.resolve())
        command = [sys.executable, "-I", "-c", _CHILD_BOOT, _PACKAGE_ROOT, request_arg]
        process: Child | None = None
        launch_error: OSError | None = None
        stdout = _open_private(job_dir / "stdout.log")
        stderr = _open_private(job_dir / "stderr.log")
        try:
            try:
                process = await self.spawn(command, work_dir, stdout, stderr)
            except OSError as exc:
                launch_error = exc
            finally:
                os.close(stdout)
                os.close(stderr)
            if process is not None:
                await process.wait()
        finally:
            with trio.CancelScope(shield=True):
                if process is None:
                    await self._unlaunch(key, launch_error)
                else:
                    if process.returncode is None:
                        # We are being cancelled: ask the child to stop, then insist.
                        process.terminate()
                        with trio.move_on_after(_TERMINATE_GRACE_S):
                            await process.wait()
                        if process.returncode is None:
                            process.kill()
                            await process.wait()
                    await self._settle(
                        key,
                        self._read_result(key),
                        exit_code=process.returncode,
                        missing=f"the child exited with status {process.returncode} "
                        "and wrote no result",
                    )
        return self.rows[key]

    async def _unlaunch(self, key: str, error: OSError | None) -> None:
        """The child never started: release the reservation."""
        row = self.rows[key]
        assert row.reservation_id is not None
        await trio.to_thread.run_sync(self.ledger.settle, row.reservation_id, Decimal(0))
        if error is None:
            # Cancelled before the launch: the candidate is still to do.
            self.rows[key] = Row(key=key, status="pending", resource_class=row.resource_class)
        else:
            self.rows[key] = attrs.evolve(
                row,
                status="blocked",
                cost=Decimal(0),
                reason=f"the child could not be started: {error}",
                finished=_now(),
            )
        self._refused.clear()
        self._signal()
        await self.write()

    async def _settle(
        self, key: str, result: JobResult | None, *, exit_code: int | None, missing: str
    ) -> None:
        """Settle a finished (or vanished) child's reservations and record its row."""
        row = self.rows[key]
        scope = self._scope(key)
        dispatch = row.reservation_id

        def settle() -> tuple[bool, str | None, Decimal]:
            reservations = self.ledger.reservations(scope)
            left_open = [r for r in reservations if r.state == "reserved" and r.id != dispatch]
            dispatch_state = next((r.state for r in reservations if r.id == dispatch), None)
            uncertain = result is None or result.outcome.cleanup_uncertain or bool(left_open)
            why = None
            if result is None:
                why = missing
            elif result.outcome.cleanup_uncertain:
                why = "the job reports its cleanup is uncertain"
                if result.outcome.reason:
                    why += f": {result.outcome.reason}"
            elif left_open:
                why = f"the job left {len(left_open)} stage reservation(s) open"
            if uncertain:
                for r in left_open:
                    self.ledger.mark_uncertain(r.id)
                if dispatch is not None and dispatch_state == "reserved":
                    self.ledger.mark_uncertain(dispatch)
            elif dispatch is not None and dispatch_state != "settled":
                assert result is not None
                self.ledger.settle(dispatch, result.outcome.cost)
            return uncertain, why, self.ledger.usage(scope).settled

        uncertain, why, cost = await trio.to_thread.run_sync(settle)
        if result is not None:
            row = row.with_outcome(result.outcome)
        row = attrs.evolve(row, cost=cost, exit_code=exit_code, finished=_now())
        if uncertain:
            row = attrs.evolve(row, status="uncertain", reason=why)
        self.rows[key] = row
        self._refused.clear()
        self._signal()
        await self.write()

    async def announce_drain(self) -> None:
        """Record in the report that admission has stopped, however it was asked."""
        await self.drain.wait()
        await self.write()

    async def watch_drain_file(self, interval: float) -> None:
        # Another process writes the file, so there is no event to wait on.
        path = self.outdir / DRAIN_FILE
        while True:
            if path.exists():
                self.drain.request(f"{DRAIN_FILE} found")
                return
            await trio.sleep(interval)


def _load_rows(plan: Plan, outdir: Path, prior: set[str]) -> dict[str, Row]:
    rows: dict[str, Row] = {}
    old: dict[str, Row] = {}
    if (outdir / REPORT_FILE).exists():
        old = {r.key: r for r in read_report(outdir).rows}
    for candidate in plan.candidates:
        row = old.get(candidate.key)
        if row is None or row.status in ("pending", "prior_verified"):
            row = Row(
                key=candidate.key,
                status="prior_verified" if candidate.key in prior else "pending",
                resource_class=candidate.resource_class,
            )
        rows[candidate.key] = row
    return rows


async def run_campaign(
    plan_path: Path | str,
    outdir: Path | str,
    ledger_path: Path | str,
    *,
    observer: Observer | None = None,
    drain: Drain | None = None,
    drain_poll_interval: float = DRAIN_POLL_S,
    _spawn: Spawn = spawn_process,
) -> Report:
    """Run (or continue) the campaign of ``plan_path`` in ``outdir``.

    Rerunning the same command continues where the last run stopped: finished
    candidates are never run again, a child that finished while no controller
    watched is imported from its result file, and one that did not is
    ``uncertain``.

    Args:
        plan_path: The plan file.
        outdir: The output directory (created if missing).
        ledger_path: An existing ledger (see ``sluicegate ledger init``).
        observer: Called with each report as it is written.
        drain: Requesting it stops admission, as ``drain-request.json`` does
            (the command line requests it on the first SIGINT or SIGTERM).
        drain_poll_interval: Seconds between looks for ``drain-request.json``.
        _spawn: How a child is started; tests replace it to exercise admission
            without processes.

    Returns:
        The final report, also in ``OUTDIR/report.json``.

    Raises:
        CampaignFileError: the plan is invalid.
        LedgerMissing: there is no ledger at ``ledger_path``.
        CampaignLocked: another controller runs on ``outdir``.
        CampaignError: there is no plan file; the job's module binds no
            such function; the plan, job code or ledger differ from those
            ``outdir`` was started with, or a prior result cannot be read.
    """
    plan_path = Path(plan_path)
    outdir = Path(outdir)
    if not plan_path.is_file():
        raise CampaignError(
            f"no plan file {plan_path}; give the path of an existing plan (JSON), "
            "see docs/campaign.md for its fields"
        )
    plan = load_plan(plan_path)
    ledger = Ledger(ledger_path)
    prior = _prior_keys(plan, plan_path.parent)
    outdir.mkdir(parents=True, exist_ok=True)
    with _locked(outdir):
        _bind(plan, plan_path.parent, outdir, ledger)
        rows = _load_rows(plan, outdir, prior)
        campaign = _Campaign(plan, outdir, ledger, prior, rows, observer, _spawn, drain)
        await trio.to_thread.run_sync(campaign.open_scopes)
        await campaign.recover()
        if (outdir / DRAIN_FILE).exists():
            campaign.drain.request(f"{DRAIN_FILE} found")
        await campaign.write()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(campaign.watch_drain_file, drain_poll_interval)
            nursery.start_soon(campaign.announce_drain)
            await run_stream(
                campaign.admissions(),
                campaign.run_job,
                window=plan.max_parallel,
                drain=campaign.drain,
            )
            nursery.cancel_scope.cancel()
        campaign.stop_reason = campaign.final_reason()
        await campaign.write()
        assert campaign.report is not None
        return campaign.report


def reconcile(
    outdir: Path | str, key: str, status: OutcomeStatus, cost: Decimal | None = None
) -> Report:
    """Resolve an ``uncertain`` candidate by hand.

    Its dispatch reservation is settled at ``cost`` (at its full amount when
    ``cost`` is None); stage reservations it left open are settled at their
    full amount. The row takes ``status``; a ``verified`` one counts toward
    the target. The next run continues once no candidate is uncertain.

    Raises:
        CampaignLocked: a controller runs on ``outdir``.
        CampaignError: ``outdir`` is not a campaign directory, no such
            candidate, or it is not uncertain.
    """
    outdir = Path(outdir)
    if status not in FINISHED:
        raise CampaignError(f"reconcile as one of {sorted(FINISHED)}, not {status!r}")
    _require_campaign_dir(outdir)
    with _locked(outdir):
        manifest = load_json(outdir / MANIFEST_FILE, Manifest, root="campaign")
        report = read_report(outdir)
        try:
            row = report.row(key)
        except KeyError:
            raise CampaignError(f"no candidate {key!r} in {outdir}") from None
        if row.status != "uncertain":
            raise CampaignError(f"{key} is {row.status}, not uncertain; nothing to reconcile")
        ledger = Ledger(manifest.ledger)
        plan = manifest.plan
        scope = (plan.name, key)
        for r in ledger.reservations(scope):
            if r.state == "settled":
                continue
            actual = cost if r.id == row.reservation_id and cost is not None else r.amount
            ledger.settle(r.id, actual)
        rows = {r.key: r for r in report.rows}
        rows[key] = attrs.evolve(
            row,
            status=status,
            cost=ledger.usage(scope).settled,
            reason=f"{row.reason}; reconciled as {status}",
            reconciled=True,
        )
        still = any(r.status == "uncertain" for r in rows.values())
        # Never None: None means "a controller runs", and none does here.
        stop: StopReason = "reconciliation_required" if still else "reconciled"
        new = summarize(plan, rows, set(report.prior_verified), ledger.usage((plan.name,)), stop)
        write_json_atomic(outdir / REPORT_FILE, new)
        return new
