"""The output directory: its lock, its manifest and frozen code, its report and job files.

Layout of ``OUTDIR``::

    .lock               held by the controller (the OS releases it if it dies)
    campaign.json       the manifest: plan, job code hash, ledger, id, controller
    code/               the frozen job code (read-only files)
    report.json         rewritten atomically after each change; also the state
    drain-request.json  present: admit nothing
    jobs/KEY/           request.json, result.json, stdout.log, stderr.log,
                        child.lock (held by the running child), started
                        (made by the child before its job begins), work/

Nothing here talks to the ledger or starts a process.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Literal

import attrs

from ._convert import CampaignFileError, load_json, structure, write_json_atomic
from ._errors import CampaignError
from ._freeze import JobCodeError, check_job_function, freeze, locate_job_source, tree_hash
from ._job import JobResult
from ._panel import now
from ._plan import Plan
from ._state import Controller, Manifest, Report, Row

__all__ = [
    "DRAIN_FILE",
    "DRAIN_POLL_S",
    "CampaignLocked",
    "DrainRequest",
    "JobCode",
    "JobFiles",
    "OutputDir",
    "Step",
    "current_controller",
    "is_locked",
    "locate_job",
    "posix_fcntl",
    "prior_keys",
    "read_report",
    "request_drain",
]

DRAIN_FILE = "drain-request.json"
REPORT_FILE = "report.json"
MANIFEST_FILE = "campaign.json"
# How often a controller looks for DRAIN_FILE; `campaign drain` and the docs quote it.
DRAIN_POLL_S = 0.2
LOCK_FILE = ".lock"
CODE_DIR = "code"
JOBS_DIR = "jobs"
# Code being frozen; only a controller holding the lock makes or removes these.
_STAGING_PREFIX = ".code-"

Step = Literal["staging made", "code frozen", "manifest written", "launching"]
"""A moment after which a controller killed leaves a state of its own on disk.

On a first run: ``"staging made"`` (an empty staging directory for the code),
``"code frozen"`` (the code copied there, no ``campaign.json`` yet),
``"manifest written"`` (``campaign.json`` written, ``code/`` not yet in place).
For each job: ``"launching"`` (its row is ``running`` with its reservation
in ``report.json``, and nothing of its own exists yet).

For maintainers: the hook given as ``run_campaign(_step=...)`` is called with
each of them as it is reached, so that a test can kill the controller exactly
there (its child scripts call ``os._exit``) and check that rerunning the same
command goes on. It must change nothing; it returns None.
"""

StepHook = Callable[[Step], None]


def no_step(step: Step) -> None:
    """The default step hook: nothing happens at any step."""


class CampaignLocked(CampaignError):
    """Another controller is working on this output directory."""


def posix_fcntl() -> ModuleType:
    """The ``fcntl`` module, which campaigns need for their locks.

    Raises:
        CampaignError: this system has no ``fcntl`` (it is not POSIX).
    """
    try:
        import fcntl
    except ImportError:
        raise CampaignError(
            "campaigns need a POSIX system (Linux, macOS): this Python has no fcntl module"
        ) from None
    return fcntl


@attrs.frozen
class DrainRequest:
    """``OUTDIR/drain-request.json``: admission stops while this file exists."""

    requested: str
    reason: str = "drain requested"


@contextlib.contextmanager
def locked(outdir: Path) -> Iterator[None]:
    """Hold the output directory's lock (released by the OS if the process dies).

    Raises:
        CampaignLocked: another process holds it.
    """
    fcntl = posix_fcntl()
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


def is_locked(outdir: Path) -> bool | None:
    """Whether a controller holds ``outdir`` now; None where that cannot be told.

    Without ``fcntl`` (not a POSIX system) no controller can run here, but
    one on another machine sharing the directory might: the answer is None.
    """
    try:
        posix_fcntl()
    except CampaignError:
        return None
    try:
        with locked(outdir):
            return False
    except CampaignLocked:
        return True


def require_campaign_dir(outdir: Path) -> None:
    """Refuse a directory that no ``campaign run`` made.

    Raises:
        CampaignError: ``outdir`` has no ``campaign.json``.
    """
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
    require_campaign_dir(outdir)
    path = outdir / DRAIN_FILE
    write_json_atomic(path, DrainRequest(requested=now(), reason=reason))
    return path


def read_report(outdir: Path | str) -> Report:
    """The last report written in ``outdir``.

    Raises:
        CampaignError: there is no report.
        CampaignFileError: the report is not valid.
    """
    path = Path(outdir) / REPORT_FILE
    if not path.is_file():
        require_campaign_dir(Path(outdir))
        raise CampaignError(f"no {REPORT_FILE} in {outdir}; rerun its `campaign run` to write one")
    return load_json(path, Report, root="report")


def prior_keys(plan: Plan, plan_dir: Path) -> set[str]:
    """Keys proven verified by the plan's ``prior`` files.

    Raises:
        CampaignError: a prior file cannot be read.
        CampaignFileError: it is neither a job result nor a report.
    """
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


@functools.cache
def current_controller() -> Controller:
    """The sluicegate running now: its version and the hash of its package's files."""
    from .._version import __version__

    package = Path(__file__).resolve().parents[1]
    return Controller(version=__version__, source_hash=tree_hash(package))


@attrs.frozen
class JobCode:
    """The job's code as found on this machine: where it is and its hash."""

    source: Path
    hash: str


def locate_job(plan: Plan, plan_dir: Path) -> JobCode:
    """Find the job's code and check that its module binds the job function.

    Raises:
        CampaignError: the package or module is missing, not plain Python
            source, or binds no such function (it is never imported here).
    """
    search = plan_dir / plan.job_path if plan.job_path is not None else None
    try:
        source = locate_job_source(plan.job, search)
        code_hash = tree_hash(source)
        # Before anything is frozen or run: a misspelled function would
        # otherwise make every candidate launch and end blocked.
        check_job_function(plan.job, source)
    except (JobCodeError, OSError) as exc:
        raise CampaignError(f"job {plan.job}: {exc}") from None
    return JobCode(source, code_hash)


class JobFiles:
    """The files of one candidate's job under ``OUTDIR/jobs/KEY``.

    Attributes:
        dir: ``OUTDIR/jobs/KEY``.
        work: The job's own work directory, kept after it ends.
        request: What the child is asked to run.
        result: What the child wrote when its job ended.
        stdout, stderr: The child's output (mode 0600).
        lock: Locked for as long as the child (or a process that inherited
            the lock from it) lives.
        started: Made by the child before it imports the job, and removed
            before each launch: while it is missing, the job never began,
            so nothing can have been spent or written by it.
    """

    def __init__(self, dir: Path) -> None:
        self.dir = dir
        self.work = dir / "work"
        self.request = dir / "request.json"
        self.result = dir / "result.json"
        self.stdout = dir / "stdout.log"
        self.stderr = dir / "stderr.log"
        self.lock = dir / "child.lock"
        self.started = dir / "started"

    def read_result(self, key: str) -> tuple[JobResult | None, str | None]:
        """The child's result, or None and why there is none."""
        if not self.result.is_file():
            return None, None
        try:
            result = load_json(self.result, JobResult, root="result")
        except (CampaignFileError, OSError) as exc:
            return None, f"its result.json is unreadable: {exc}"
        if result.key != key:
            return None, f"its result.json is for {result.key!r}"
        return result, None


class OutputDir:
    """A campaign's output directory.

    Args:
        path: The directory; it may not exist yet.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.code_dir = path / CODE_DIR
        self.manifest_path = path / MANIFEST_FILE
        self.report_path = path / REPORT_FILE
        self.drain_path = path / DRAIN_FILE

    def job(self, key: str) -> JobFiles:
        """The files of ``key``'s job."""
        return JobFiles(self.path / JOBS_DIR / key)

    def drain_requested(self) -> bool:
        """Whether ``drain-request.json`` exists."""
        return self.drain_path.exists()

    def write_report(self, report: Report) -> None:
        """Replace ``report.json`` atomically."""
        write_json_atomic(self.report_path, report)

    def read_manifest(self) -> Manifest:
        """The manifest ``campaign run`` wrote.

        Raises:
            CampaignError: there is none.
            CampaignFileError: it is invalid.
        """
        require_campaign_dir(self.path)
        return load_json(self.manifest_path, Manifest, root="campaign")

    def load_rows(self, plan: Plan, prior: set[str]) -> dict[str, Row]:
        """The rows of the last report, or fresh ones; a prior key is ``prior_verified``."""
        old: dict[str, Row] = {}
        if self.report_path.exists():
            old = {r.key: r for r in read_report(self.path).rows}
        rows: dict[str, Row] = {}
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

    def bind(
        self,
        plan: Plan,
        code: JobCode,
        ledger: Path,
        controller: Controller,
        *,
        allow_upgrade: bool = False,
        step: StepHook = no_step,
    ) -> Manifest:
        """Freeze the job code on a first run; on a rerun, check that nothing changed.

        Call it holding the lock. The code is frozen into a temporary
        directory that becomes ``code/`` only once ``campaign.json`` names its
        hash, so a controller killed at any moment leaves a directory that the
        same command takes up again.

        Args:
            plan: The plan being run.
            code: The job's code, from :func:`locate_job`.
            ledger: The ledger file.
            controller: The sluicegate running now.
            allow_upgrade: Go on under a controller other than the recorded one
                (it is recorded, and the old one kept in ``upgrades``).
            step: Called at each :data:`Step` of a first run.

        Returns:
            The manifest, as now written.

        Raises:
            CampaignError: the plan, job code, ledger or controller differ from
                those the directory was started with, or its frozen code was altered.
        """
        self._remove_staging()
        ledger_path = str(ledger.resolve())
        if not self.manifest_path.exists():
            if self.code_dir.exists():
                # We never make code/ before campaign.json: this is not ours.
                raise CampaignError(
                    f"{self.path} holds a {CODE_DIR}/ that no campaign made; "
                    "use a new output directory"
                )
            staging = self._freeze(code, step)
            manifest = Manifest(
                plan=plan,
                code_hash=code.hash,
                job_source=str(code.source),
                ledger=ledger_path,
                created=now(),
                id=secrets.token_hex(6),
                controller=controller,
            )
            write_json_atomic(self.manifest_path, manifest)
            step("manifest written")
            staging.rename(self.code_dir)
            return manifest
        manifest = load_json(self.manifest_path, Manifest, root="campaign")
        self._check(manifest, plan, code, ledger_path)
        if manifest.controller != controller:
            if not allow_upgrade:
                started = manifest.controller or "a sluicegate that did not record its version"
                raise CampaignError(
                    f"{self.path} was started by {started}; this is {controller}. "
                    "Rerun with --allow-upgrade to go on under this controller, "
                    "or use a new output directory"
                )
            upgrades = manifest.upgrades
            if manifest.controller is not None:
                upgrades = (*upgrades, manifest.controller)
            manifest = attrs.evolve(manifest, controller=controller, upgrades=upgrades)
            write_json_atomic(self.manifest_path, manifest)
        if not self.code_dir.exists():
            # A controller stopped between writing campaign.json and the rename;
            # the source still hashes the same (checked above), so freeze it again.
            self._freeze(code).rename(self.code_dir)
        frozen = self.code_dir / code.source.name
        if not frozen.exists() or tree_hash(frozen) != manifest.code_hash:
            raise CampaignError(f"the frozen job code in {frozen} was altered")
        return manifest

    def _check(self, manifest: Manifest, plan: Plan, code: JobCode, ledger: str) -> None:
        if manifest.plan != plan:
            raise CampaignError(
                f"the plan differs from the one {self.path} was started with; "
                "use a new output directory for a changed plan"
            )
        if manifest.ledger != ledger:
            raise CampaignError(f"{self.path} was started with the ledger {manifest.ledger}")
        if code.hash != manifest.code_hash:
            raise CampaignError(
                f"stale job code: {code.source} no longer matches the code {self.path} was "
                f"started with ({manifest.code_hash}); use a new output directory to run "
                "changed code"
            )

    def _freeze(self, code: JobCode, step: StepHook = no_step) -> Path:
        staging = Path(tempfile.mkdtemp(prefix=_STAGING_PREFIX, dir=self.path))
        try:
            step("staging made")
            if freeze(code.source, staging) != code.hash:
                raise CampaignError(f"job source {code.source} changed while it was being frozen")
            step("code frozen")
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return staging

    def _remove_staging(self) -> None:
        # Left by a controller killed while freezing; the lock says none is now.
        for path in self.path.glob(f"{_STAGING_PREFIX}*"):
            shutil.rmtree(path, ignore_errors=True)
