"""What :func:`~sluicegate.serve` was asked to do: its settings, each checked by its own field.

Each keyword of ``serve()`` is a field of :class:`Settings` (or of one of its
groups) of the same name, with an attrs validator or converter that refuses
a bad value in the project's wording (``sluicegate._checks``, and the
runner's :func:`~sluicegate._runner.check_stream_arguments` for what a
stream takes), so building the settings is the check. Related knobs form a
group a user would recognise: the journal's file, the items' key and
whether dead letters run again (:class:`Journaling`); whoever watches the
service (:class:`Observers`). :meth:`Settings.of` fills every field from the
keyword of its name, so an option is spelled twice: in ``serve()``'s
signature and as a field here (:meth:`Settings.of` checks the two agree,
at every call).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Generic, Literal, TypeVar, final

import attrs

from .._checks import check_flag, check_seconds
from .._retry import Retry
from .._runner import Drain, Pacer, Recorder, WindowLike, check_stream_arguments
from .._signals import check_signals
from .._util import surely_sync
from ..sources import LeasedQueue, consume
from ._journal import Journal, journal_at
from ._postgres import PostgresJournal

__all__ = ["Journaling", "Observers", "Settings", "is_queue"]

T = TypeVar("T")

# -- the checks, as attrs validators and converters -------------------------------------


def _check_callable(name: str) -> Callable[[object, attrs.Attribute[Any], object], None]:
    def check(_: object, __: attrs.Attribute[Any], value: object) -> None:
        if value is not None and not callable(value):
            raise TypeError(f"{name} must be callable or None, not {value!r}")

    return check


def _check_async(name: str) -> Callable[[object, attrs.Attribute[Any], object], None]:
    # A plain function is refused here, not met at the first item: by then it
    # has done its work, and its result could not be awaited.
    def check(_: object, __: attrs.Attribute[Any], value: object) -> None:
        if value is not None and surely_sync(value):
            what = getattr(value, "__qualname__", None) or repr(value)
            raise TypeError(
                f"{name} must be an async function (async def, or a functools.partial of one);"
                f" {what} is a plain function"
            )

    return check


def _check_seconds(
    name: str, *, zero: bool = True, none: bool = False
) -> Callable[[object, attrs.Attribute[Any], object], None]:
    def check(_: object, __: attrs.Attribute[Any], value: object) -> None:
        check_seconds(value, name, zero=zero, none=none)

    return check


def _check_flag(name: str) -> Callable[[object, attrs.Attribute[Any], object], None]:
    def check(_: object, __: attrs.Attribute[Any], value: object) -> None:
        check_flag(value, name)

    return check


def _to_journal(value: object) -> Journal | PostgresJournal | None:
    """``journal=`` as a journal: a path names a SQLite one, a URL a Postgres one; none opened."""
    if value is None or isinstance(value, Journal | PostgresJournal):
        return value
    if not isinstance(value, str | os.PathLike):
        raise TypeError(
            f"journal must be a path, a postgresql:// URL, a Journal or a PostgresJournal,"
            f" not {value!r}"
        )
    return journal_at(value)


def _check_bounded(_: object, __: attrs.Attribute[Any], value: object) -> None:
    if value is None:
        raise TypeError(
            "serve() needs a bounded window (an int >= 1): a service's memory is bounded by it"
        )


def _check_errors(_: object, __: attrs.Attribute[Any], value: object) -> None:
    if value not in ("record", "raise"):
        raise ValueError(f'errors must be "record" or "raise", not {value!r}')


def _check_retry(_: object, __: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not isinstance(value, Retry):
        raise TypeError(f"retry must be a sluicegate.Retry or None, not {value!r}")


def _to_drain(value: object) -> object:
    # A wrong type is check_stream_arguments' to refuse, in the runner's words.
    return Drain() if value is None else value


def _to_signals(value: object) -> tuple[signal.Signals, ...]:
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise TypeError(f"signals must be a sequence of signals, not {value!r}")
    return check_signals(value)


def _check_thread(_: object, __: attrs.Attribute[Any], value: tuple[signal.Signals, ...]) -> None:
    if value and threading.current_thread() is not threading.main_thread():
        raise RuntimeError(
            "serve() can only take signals in the main thread; pass signals=() and "
            "stop it with a Drain (or by cancelling it)"
        )


def is_queue(source: object) -> bool:
    """Whether ``source`` is a queue ``serve()`` consumes itself (a ``LeasedQueue``)."""
    return not isinstance(source, type) and isinstance(source, LeasedQueue)


# -- the settings ------------------------------------------------------------------------


@final
@attrs.frozen(kw_only=True)
class Journaling:
    """Where outcomes are recorded, how an item is known, and whether dead letters run again.

    Attributes:
        journal: The journal, or None for none (a path becomes a
            :class:`~sluicegate.service.Journal`, a ``postgresql://`` URL a
            :class:`~sluicegate.service.PostgresJournal`).
        key: ``key(item) -> str``, each item's identity; required with a journal.
        rerun_errors: Run again the items the journal holds as errors.
    """

    journal: Journal | PostgresJournal | None = attrs.field(converter=_to_journal)
    key: Callable[[Any], str] | None = attrs.field(validator=_check_callable("key"))
    rerun_errors: bool = attrs.field(validator=_check_flag("rerun_errors"))

    def __attrs_post_init__(self) -> None:
        if self.journal is not None and self.key is None:
            raise TypeError("a journal needs key=: a function giving each item's identity as a str")


@final
@attrs.frozen(kw_only=True)
class Observers(Generic[T]):
    """Whoever hears of the service as it runs: each outcome, the stats, a recorder.

    Attributes:
        on_outcome: ``async on_outcome(served)`` for each item that finishes or
            is skipped, once it is durable.
        on_stats: Called with a ``ServeStats`` every ``stats_interval`` seconds.
        stats_interval: Seconds between stats (and INFO log lines).
        trace: A recorder of pulls, starts and ends (a ``Timeline``).
    """

    on_outcome: Callable[[Any], Awaitable[None]] | None = attrs.field(
        validator=[_check_callable("on_outcome"), _check_async("on_outcome")]
    )
    on_stats: Callable[[Any], Any] | None = attrs.field(validator=_check_callable("on_stats"))
    stats_interval: float = attrs.field(validator=_check_seconds("stats_interval", zero=False))
    # A Recorder: check_stream_arguments refuses anything else, in the runner's words.
    trace: Recorder | None


@final
@attrs.frozen(kw_only=True)
class Settings(Generic[T]):
    """Everything :func:`~sluicegate.serve` was asked to do; building one is the check.

    No field has a default: the defaults are ``serve()``'s, spelled once, in
    its signature.

    Attributes:
        run: The async function run for each item.
        window: The most items in flight (an int >= 1 or a window object).
        journaling: The journal, the key and ``rerun_errors``.
        errors: ``"record"`` or ``"raise"``.
        retry: The retry policy, or None.
        rate: A bound on starts (a ``RateLimit``), or None.
        timeout: Seconds each attempt may take, or None.
        drain: The caller's drain, or a fresh one.
        signals: The signals that drain, then interrupt.
        grace: Seconds after a drain before what runs is cancelled, or None.
        observers: ``on_outcome``, ``on_stats``, ``stats_interval``, ``trace``.
    """

    run: Callable[[T], Awaitable[Any]]
    window: int | WindowLike = attrs.field(validator=_check_bounded)
    # A group: Settings.of() fills it from the keywords of its own fields.
    journaling: Journaling = attrs.field(metadata={"group": Journaling})
    errors: Literal["record", "raise"] = attrs.field(validator=_check_errors)
    retry: Retry | None = attrs.field(validator=_check_retry)
    # A Pacer: check_stream_arguments refuses anything else, in the runner's words.
    rate: Pacer | None
    timeout: float | None = attrs.field(validator=_check_seconds("timeout", zero=False, none=True))
    drain: Drain = attrs.field(converter=_to_drain)
    signals: tuple[signal.Signals, ...] = attrs.field(
        converter=_to_signals, validator=_check_thread
    )
    grace: float | None = attrs.field(validator=_check_seconds("grace", none=True))
    observers: Observers[T] = attrs.field(metadata={"group": Observers})

    @classmethod
    def of(cls, arguments: Mapping[str, Any]) -> Settings[Any]:
        """The settings of a call of ``serve()``, from its arguments by name (its ``locals()``).

        Raises:
            TypeError, ValueError, RuntimeError: as :func:`~sluicegate.serve`
                documents, before anything is opened or pulled.
        """
        # Every keyword but the source is a field: an option added to the
        # signature and not here would be dropped unread.
        assert set(arguments) == {"source", *cls.keywords()}, sorted(arguments)
        source = arguments["source"]
        if is_queue(source):
            # serve() consumes a queue itself: consume() checks it, touching
            # nothing, and the queue's item_key() is the default key.
            source = consume(source, acknowledge="manual")
            item_key = getattr(arguments["source"], "item_key", None)
            if arguments["key"] is None and callable(item_key):
                arguments = {**arguments, "key": item_key}
        settings: Settings[Any] = _filled(cls, arguments)
        check_stream_arguments(
            source, settings.run, settings.window, settings.rate,
            settings.observers.trace, settings.drain,
        )  # fmt: skip
        return settings

    @classmethod
    def keywords(cls) -> list[str]:
        """The keywords ``serve()`` takes besides ``source``: one per field, groups flattened."""
        return _names(cls)


def _filled(kind: type[Any], arguments: Mapping[str, Any]) -> Any:
    values = {}
    for field in attrs.fields(kind):
        group = field.metadata.get("group")
        values[field.name] = (
            _filled(group, arguments) if group is not None else arguments[field.name]
        )
    return kind(**values)


def _names(kind: type[Any]) -> list[str]:
    names: list[str] = []
    for field in attrs.fields(kind):
        group = field.metadata.get("group")
        names.extend(_names(group) if group is not None else [field.name])
    return names
