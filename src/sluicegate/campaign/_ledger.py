"""The budget ledger: nested spending limits in one SQLite file.

Scopes nest as paths: the global scope is ``()``, a campaign is
``("name",)``, a candidate ``("name", "key")`` and a stage below it
``("name", "key", "stage")``. A reservation is recorded against one scope
and counts against that scope and every scope enclosing it.

Each reservation holds money in one of three states:

* ``reserved``: the full amount is held until it is settled;
* ``settled``: the actual cost is held, whatever it is; an overrun stays
  recorded and leaves the scopes it pushed over without room;
* ``uncertain``: the outcome is unknown, so the full amount stays held until
  someone settles it.

Every change runs inside one ``BEGIN IMMEDIATE`` transaction, which takes
SQLite's write lock before reading, so two processes checking the same limit
cannot both see the same room. Amounts are :class:`~decimal.Decimal` at the
API and integer micro-units (1e-6) in the file: amounts held or spent are
rounded up and limits down, so that rounding never lets spending slip past
a limit. SQLite stores a signed 64-bit integer,
so no amount, and no total the ledger keeps, may exceed :data:`MAX_AMOUNT`
(2**63 - 1 micro-units); anything larger is refused with
:class:`AmountTooLarge` before it is written.

The operations are short blocking calls. Trio code calls them through
``trio.to_thread.run_sync``; job code in a child process calls them directly.
Each call opens its own connection, so a :class:`Ledger` may be used from any
thread.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from pathlib import Path
from typing import Literal

import attrs

from .. import _sqlite
from ._errors import CampaignError

__all__ = [
    "MAX_AMOUNT",
    "AmountTooLarge",
    "BudgetRefused",
    "Ledger",
    "LedgerError",
    "LedgerMissing",
    "Reservation",
    "amount_problem",
    "ScopeUsage",
    "format_money",
    "from_micros",
    "limit_text",
    "to_micros",
]

MICROS = 1_000_000
# SQLite's INTEGER is a signed 64-bit number.
MAX_MICROS = 2**63 - 1
_SCHEMA_VERSION = "1"
# The SQLite header's application id marks a file as a ledger ("SGL1"); ledgers
# made before it was set carry 0 and are recognised by their meta table.
_APPLICATION_ID = 0x53474C31
# A writer waits this long for another process's transaction before failing.
_BUSY_TIMEOUT_S = 60.0

Scope = tuple[str, ...]
State = Literal["reserved", "settled", "uncertain"]


class LedgerError(CampaignError):
    """A ledger operation was refused or the ledger file is unusable."""


class LedgerMissing(LedgerError):
    """There is no ledger at the given path."""


class AmountTooLarge(LedgerError, ValueError):
    """An amount, or the total it would bring the ledger to, is more than it can store."""


class BudgetRefused(LedgerError):
    """A reservation does not fit the limit of an enclosing scope.

    Attributes:
        scope: The scope that lacks room, as a path (``()`` is global).
        requested: The amount asked for.
        remaining: What that scope had left (may be negative after an overrun).
    """

    def __init__(self, scope: Scope, requested: Decimal, remaining: Decimal) -> None:
        self.scope = scope
        self.requested = requested
        self.remaining = remaining
        super().__init__(
            f"scope {scope_name(scope)} has {format_money(remaining)} left, "
            f"cannot reserve {format_money(requested)}"
        )


def from_micros(micros: int) -> Decimal:
    """The Decimal for ``micros`` micro-units, exactly."""
    return Decimal(micros).scaleb(-6).quantize(Decimal("0.000001"))


MAX_AMOUNT = from_micros(MAX_MICROS)
"""The largest amount a ledger can store: 9223372036854.775807."""


def amount_problem(amount: Decimal) -> str | None:
    """Why the ledger cannot store ``amount``, or None if it can.

    Plans and the command line use it to refuse an amount before any work.
    """
    if not amount.is_finite() or amount < 0:
        return f"must be a finite, non-negative amount, got {amount}"
    # Compared before scaling: a Decimal like 1E+999999 is exact until multiplied.
    if amount > MAX_AMOUNT:
        return f"must be at most {MAX_AMOUNT} (the most a ledger can store), got {amount}"
    return None


def to_micros(amount: Decimal, *, limit: bool = False) -> int:
    """``amount`` in integer micro-units, rounded up (down for a ``limit``).

    Either way the rounding never lets spending slip past a limit: a
    reservation or a cost never counts for less than it is, and a limit
    never allows more than it says.

    Raises:
        TypeError: ``amount`` is not a Decimal (floats are refused on purpose).
        AmountTooLarge: ``amount`` is above :data:`MAX_AMOUNT`.
        ValueError: ``amount`` is negative or not finite.
    """
    if not isinstance(amount, Decimal):
        raise TypeError(f"amounts are Decimal, not {type(amount).__name__}: {amount!r}")
    problem = amount_problem(amount)
    if problem is not None:
        if amount.is_finite() and amount > 0:
            raise AmountTooLarge(f"amount {problem}")
        raise ValueError(f"amount {problem}")
    rounding = ROUND_FLOOR if limit else ROUND_CEILING
    return int((amount * MICROS).to_integral_value(rounding=rounding))


def limit_text(limit: Decimal) -> str:
    """``limit`` as a ledger stores it, saying so where it was rounded down.

    Raises:
        ValueError: as :func:`to_micros`.
    """
    stored = from_micros(to_micros(limit, limit=True))
    if stored == limit:
        return format_money(stored)
    return f"{format_money(stored)} ({limit} rounded down to millionths)"


def format_money(amount: Decimal | None) -> str:
    """``amount`` with at least two decimals and no trailing zeros beyond them."""
    if amount is None:
        return "-"
    text = f"{amount:f}"
    if "." not in text:
        return text + ".00"
    whole, frac = text.split(".")
    frac = frac.rstrip("0").ljust(2, "0")
    return f"{whole}.{frac}"


def scope_name(scope: Scope) -> str:
    """A readable name for a scope path: ``global`` or ``name/key/stage``."""
    return "/".join(scope) if scope else "global"


def _check_scope(scope: Sequence[str]) -> Scope:
    scope = tuple(scope)
    for part in scope:
        if not isinstance(part, str) or not part or "/" in part:
            raise ValueError(f"scope parts must be non-empty strings without '/': {scope!r}")
    return scope


@attrs.frozen
class ScopeUsage:
    """What a scope (and everything under it) holds.

    Attributes:
        scope: The scope path; ``()`` is global.
        limit: The scope's own limit, or None if it has none.
        reserved: Held by open reservations.
        settled: Actual costs recorded.
        uncertain: Held by reservations whose outcome is unknown.
    """

    scope: Scope
    limit: Decimal | None
    reserved: Decimal
    settled: Decimal
    uncertain: Decimal

    @property
    def used(self) -> Decimal:
        """Everything held: reserved + settled + uncertain."""
        return self.reserved + self.settled + self.uncertain

    @property
    def remaining(self) -> Decimal | None:
        """``limit - used`` (negative after an overrun), or None without a limit."""
        return None if self.limit is None else self.limit - self.used


@attrs.frozen
class Reservation:
    """One reservation as recorded in the ledger."""

    id: int
    scope: Scope
    amount: Decimal
    state: State
    actual: Decimal | None
    note: str


_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE scopes (
    path TEXT PRIMARY KEY,
    limit_micros INTEGER,
    created TEXT NOT NULL
);
CREATE TABLE reservations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    scope TEXT NOT NULL REFERENCES scopes(path),
    amount INTEGER NOT NULL CHECK (amount >= 0),
    state TEXT NOT NULL CHECK (state IN ('reserved', 'settled', 'uncertain')),
    actual INTEGER CHECK (actual IS NULL OR actual >= 0),
    note TEXT NOT NULL,
    created TEXT NOT NULL,
    updated TEXT NOT NULL
);
CREATE INDEX reservations_scope ON reservations(scope);
CREATE TABLE limit_changes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    path TEXT NOT NULL,
    old_micros INTEGER,
    new_micros INTEGER NOT NULL,
    reason TEXT NOT NULL,
    at TEXT NOT NULL
);
"""

# Money held by one reservation, per state.
_HELD = """
    CASE state WHEN 'settled' THEN actual ELSE amount END
"""
# Reservations at or below a scope path (the root matches everything).
_UNDER = "(:p = '' OR scope = :p OR substr(scope, 1, length(:p) + 1) = :p || '/')"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class Ledger:
    """A handle on an existing ledger file.

    Args:
        path: The SQLite file, made by :meth:`create` (or ``sluicegate ledger init``).

    Raises:
        LedgerMissing: there is no file at ``path``.
        LedgerError: the file is not a sluicegate ledger.
    """

    def __init__(self, path: Path | str) -> None:
        # Fixed. The ledger's state is in the file, changed only in transactions
        # (BEGIN IMMEDIATE), so any number of handles and processes share it.
        self.path: Path = Path(path)
        if not self.path.is_file():
            raise LedgerMissing(
                f"no ledger at {self.path}; create one with "
                f"`sluicegate ledger init {self.path} --limit AMOUNT`"
            )
        with self._connect() as db:
            try:
                (application,) = db.execute("PRAGMA application_id").fetchone()
                if application not in (0, _APPLICATION_ID):
                    raise LedgerError(f"{self.path} is not a sluicegate ledger (another program's)")
                row = db.execute("SELECT value FROM meta WHERE key = 'version'").fetchone()
            except sqlite3.DatabaseError as exc:
                raise LedgerError(f"{self.path} is not a sluicegate ledger: {exc}") from None
        if row is None or row[0] != _SCHEMA_VERSION:
            raise LedgerError(f"{self.path} is not a sluicegate ledger (version {row})")

    def __repr__(self) -> str:
        return f"Ledger({str(self.path)!r})"

    @classmethod
    def create(cls, path: Path | str, limit: Decimal, *, reason: str = "created") -> Ledger:
        """Make a new ledger with a global ``limit`` (stored rounded down to micro-units).

        Raises:
            LedgerError: something already exists at ``path``, or its
                directory does not exist.
            ValueError, TypeError: ``limit`` is not a non-negative Decimal.
        """
        path = Path(path)
        micros = to_micros(limit, limit=True)
        parent = path.parent
        if not parent.is_dir():
            raise LedgerError(
                f"cannot create {path}: the directory {parent} does not exist; create it first"
            )
        try:
            # "x" mode: refuse atomically if the file appeared meanwhile.
            with open(path, "x"):
                pass
        except FileExistsError:
            raise LedgerError(f"{path} already exists; a ledger is created only once") from None
        try:
            db = _sqlite.connect(path, "rw", timeout=_BUSY_TIMEOUT_S)
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        try:
            with _sqlite.immediate(db):
                # executescript() would commit first; run the statements one by one.
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        db.execute(statement)
                now = _now()
                db.execute(f"PRAGMA application_id = {_APPLICATION_ID}")
                db.execute("INSERT INTO meta VALUES ('version', ?)", (_SCHEMA_VERSION,))
                db.execute("INSERT INTO scopes VALUES ('', ?, ?)", (micros, now))
                db.execute(
                    "INSERT INTO limit_changes (path, old_micros, new_micros, reason, at) "
                    "VALUES ('', NULL, ?, ?, ?)",
                    (micros, reason, now),
                )
        except BaseException:
            db.close()
            path.unlink(missing_ok=True)
            raise
        db.close()
        return cls(path)

    @contextlib.contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        # mode=rw: never create a file by accident.
        try:
            db = _sqlite.connect(self.path, "rw", timeout=_BUSY_TIMEOUT_S)
        except sqlite3.OperationalError as exc:
            raise LedgerError(f"cannot open ledger {self.path}: {exc}") from None
        except sqlite3.DatabaseError as exc:
            raise LedgerError(f"{self.path} is not a sluicegate ledger: {exc}") from None
        try:
            yield db
        finally:
            db.close()

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: the write lock is taken before anything is read."""
        with self._connect() as db, _sqlite.immediate(db):
            yield db

    # -- scopes ----------------------------------------------------------------

    def open_scope(self, scope: Sequence[str], limit: Decimal | None) -> None:
        """Make sure ``scope`` exists with ``limit`` (None: no limit of its own).

        A limit is stored rounded down to micro-units.

        Creating the same scope again with the same limit is a no-op, so a
        resumed campaign can call this freely.

        Raises:
            LedgerError: the scope is global (its limit only changes through
                :meth:`raise_limit`), or it exists with a different limit.
        """
        self.open_scopes([(scope, limit)])

    def open_scopes(self, scopes: Sequence[tuple[Sequence[str], Decimal | None]]) -> None:
        """:meth:`open_scope` for each ``(scope, limit)``, all in one transaction.

        Raises:
            LedgerError: as :meth:`open_scope`; then no scope is created.
        """
        checked = [(_check_scope(scope), limit) for scope, limit in scopes]
        with self._write() as db:
            for path, limit in checked:
                self._open(db, path, limit)

    def _open(self, db: sqlite3.Connection, path: Scope, limit: Decimal | None) -> None:
        if not path:
            raise LedgerError("the global limit is set by `ledger init` and `ledger raise` only")
        micros = None if limit is None else to_micros(limit, limit=True)
        self._ensure(db, path[:-1])
        row = db.execute(
            "SELECT limit_micros FROM scopes WHERE path = ?", ("/".join(path),)
        ).fetchone()
        if row is None:
            db.execute("INSERT INTO scopes VALUES (?, ?, ?)", ("/".join(path), micros, _now()))
        elif row[0] != micros:
            old = None if row[0] is None else from_micros(row[0])
            raise LedgerError(
                f"scope {scope_name(path)} already exists with limit "
                f"{format_money(old)}, not {format_money(limit)}"
            )

    def _ensure(self, db: sqlite3.Connection, scope: Scope) -> None:
        """Create missing scopes along ``scope`` without limits of their own."""
        for i in range(1, len(scope) + 1):
            db.execute(
                "INSERT OR IGNORE INTO scopes VALUES (?, NULL, ?)", ("/".join(scope[:i]), _now())
            )

    def raise_limit(self, limit: Decimal, reason: str) -> None:
        """Raise the global limit to ``limit`` (rounded down to micro-units) and record ``reason``.

        Raises:
            LedgerError: ``limit`` is not above the current limit, or ``reason`` is empty.
        """
        micros = to_micros(limit, limit=True)
        if not reason.strip():
            raise LedgerError("a limit is raised only with a reason")
        with self._write() as db:
            (old,) = db.execute("SELECT limit_micros FROM scopes WHERE path = ''").fetchone()
            if micros <= old:
                raise LedgerError(
                    f"the global limit is {format_money(from_micros(old))}; "
                    f"{limit_text(limit)} does not raise it"
                )
            db.execute("UPDATE scopes SET limit_micros = ? WHERE path = ''", (micros,))
            db.execute(
                "INSERT INTO limit_changes (path, old_micros, new_micros, reason, at) "
                "VALUES ('', ?, ?, ?, ?)",
                (old, micros, reason, _now()),
            )

    def limit_changes(self) -> list[tuple[Decimal | None, Decimal, str]]:
        """The global limit's history: (old, new, reason), oldest first."""
        with self._connect() as db:
            rows = db.execute(
                "SELECT old_micros, new_micros, reason FROM limit_changes ORDER BY id"
            ).fetchall()
        return [(None if o is None else from_micros(o), from_micros(n), r) for o, n, r in rows]

    def _usage(self, db: sqlite3.Connection, path: str) -> tuple[int, int, int]:
        row = db.execute(
            f"""SELECT
                  coalesce(sum(CASE state WHEN 'reserved' THEN amount END), 0),
                  coalesce(sum(CASE state WHEN 'settled' THEN actual END), 0),
                  coalesce(sum(CASE state WHEN 'uncertain' THEN amount END), 0)
                FROM reservations WHERE {_UNDER}""",
            {"p": path},
        ).fetchone()
        return int(row[0]), int(row[1]), int(row[2])

    def usage(self, scope: Sequence[str] = ()) -> ScopeUsage:
        """What ``scope`` and everything under it holds (zeros if it does not exist)."""
        path = _check_scope(scope)
        with self._connect() as db:
            row = db.execute(
                "SELECT limit_micros FROM scopes WHERE path = ?", ("/".join(path),)
            ).fetchone()
            reserved, settled, uncertain = self._usage(db, "/".join(path))
        limit = None if row is None or row[0] is None else from_micros(row[0])
        return ScopeUsage(
            path, limit, from_micros(reserved), from_micros(settled), from_micros(uncertain)
        )

    def scopes(self) -> list[ScopeUsage]:
        """Every scope, global first, then in path order."""
        with self._connect() as db:
            paths = [r[0] for r in db.execute("SELECT path FROM scopes ORDER BY path")]
        return [self.usage(tuple(p.split("/")) if p else ()) for p in paths]

    def room(self, scope: Sequence[str]) -> Decimal | None:
        """The most that could be reserved in ``scope`` now (None: unlimited).

        This is advice for admission only; :meth:`reserve` is the check that counts.
        """
        path = _check_scope(scope)
        with self._connect() as db:
            return self._room(db, path)[1]

    def _room(self, db: sqlite3.Connection, path: Scope) -> tuple[Scope, Decimal | None]:
        """The tightest enclosing scope and its remaining room."""
        scope, left = self._tightest(db, path)
        return scope, None if left is None else from_micros(left)

    def _tightest(self, db: sqlite3.Connection, path: Scope) -> tuple[Scope, int | None]:
        """The enclosing scope with the least room left, and that room in micro-units.

        Scopes without a limit of their own are skipped; ``((), None)`` means
        nothing on the path has a limit.
        """
        tightest: tuple[Scope, int | None] = ((), None)
        for i in range(len(path) + 1):
            prefix = path[:i]
            row = db.execute(
                "SELECT limit_micros FROM scopes WHERE path = ?", ("/".join(prefix),)
            ).fetchone()
            if row is None or row[0] is None:
                continue
            left = row[0] - sum(self._usage(db, "/".join(prefix)))
            if tightest[1] is None or left < tightest[1]:
                tightest = (prefix, left)
        return tightest

    # -- reservations ------------------------------------------------------------

    def reserve(self, scope: Sequence[str], amount: Decimal, *, note: str = "") -> int:
        """Hold ``amount`` in ``scope`` if every enclosing limit has room for it.

        Args:
            scope: Where the money is spent; missing scopes below existing ones
                are created without limits of their own.
            amount: A non-negative Decimal; stored rounded up to micro-units.
            note: Free text kept with the reservation (what it is for).

        Returns:
            The reservation id, for :meth:`settle` and :meth:`mark_uncertain`.

        Raises:
            BudgetRefused: the scope named in it lacks room; nothing is recorded.
        """
        path = _check_scope(scope)
        micros = to_micros(amount)
        with self._write() as db:
            scope_short, left = self._tightest(db, path)
            if left is not None and micros > left:
                raise BudgetRefused(scope_short, from_micros(micros), from_micros(left))
            self._ensure(db, path)
            now = _now()
            cursor = db.execute(
                "INSERT INTO reservations (scope, amount, state, actual, note, created, updated) "
                "VALUES (?, ?, 'reserved', NULL, ?, ?, ?)",
                ("/".join(path), micros, note, now, now),
            )
            assert cursor.lastrowid is not None
            return cursor.lastrowid

    def settle(self, reservation: int, actual: Decimal) -> None:
        """Record the actual cost of a reserved or uncertain reservation.

        The actual cost replaces the held amount. If it is larger, the overrun
        stays recorded and leaves every scope it pushes over without room.

        Raises:
            AmountTooLarge: ``actual`` is above :data:`MAX_AMOUNT`, or would
                bring everything the ledger holds above it; nothing is recorded.
            LedgerError: no such reservation, or it is already settled.
        """
        micros = to_micros(actual)
        with self._write() as db:
            held = self._require_open(db, reservation)
            # Every scope's total is at most the global one, so checking it
            # keeps each sum SQLite computes within its integers.
            total = sum(self._usage(db, ""))
            if total - held + micros > MAX_MICROS:
                raise AmountTooLarge(
                    f"settling reservation {reservation} at {format_money(actual)} would "
                    f"bring the ledger's total above {MAX_AMOUNT}, the most it can store"
                )
            db.execute(
                "UPDATE reservations SET state = 'settled', actual = ?, updated = ? WHERE id = ?",
                (micros, _now(), reservation),
            )

    def mark_uncertain(self, reservation: int) -> None:
        """Keep the full amount of an open reservation held: its outcome is unknown.

        Raises:
            LedgerError: no such reservation, or it is already settled.
        """
        with self._write() as db:
            self._require_open(db, reservation)
            db.execute(
                "UPDATE reservations SET state = 'uncertain', updated = ? WHERE id = ?",
                (_now(), reservation),
            )

    def _require_open(self, db: sqlite3.Connection, reservation: int) -> int:
        """The amount an open reservation holds, in micro-units."""
        row = db.execute(
            "SELECT state, amount FROM reservations WHERE id = ?", (reservation,)
        ).fetchone()
        if row is None:
            raise LedgerError(f"no reservation {reservation} in {self.path}")
        if row[0] == "settled":
            raise LedgerError(f"reservation {reservation} is already settled")
        return int(row[1])

    def reservations(self, scope: Sequence[str] = ()) -> list[Reservation]:
        """Every reservation at or below ``scope``, oldest first."""
        path = "/".join(_check_scope(scope))
        with self._connect() as db:
            rows = db.execute(
                f"SELECT id, scope, amount, state, actual, note FROM reservations "
                f"WHERE {_UNDER} ORDER BY id",
                {"p": path},
            ).fetchall()
        return [
            Reservation(
                id=r[0],
                scope=tuple(r[1].split("/")) if r[1] else (),
                amount=from_micros(r[2]),
                state=r[3],
                actual=None if r[4] is None else from_micros(r[4]),
                note=r[5],
            )
            for r in rows
        ]
