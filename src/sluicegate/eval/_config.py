"""What one evaluation was asked to do, checked as it is built, and the rules for comparing runs.

:class:`EvalConfig` holds the settings of :func:`~sluicegate.eval.evaluate`
that ``run.json`` records; each field checks itself (attrs converters and
validators), so building one refuses a bad value before anything happens.
A resume reads it back; :func:`differences` says whether a resume describes
the same run. :class:`ErrorBudget` is the parsed ``--fail-on-error``.
"""

from __future__ import annotations

import builtins
import importlib
import json
import math
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from fractions import Fraction
from typing import Any, TypeVar

import attrs

from .._adaptive import AdaptiveWindow
from .._checks import check_count, check_flag, check_seconds
from .._retry import Retry
from .._runner import WindowLike
from ._errors import EvalError
from ._reduce import check_reducer

__all__ = [
    "EVERY_SCORE",
    "LOOPS",
    "TARGET_MODULE",
    "ErrorBudget",
    "EvalConfig",
    "UsageError",
    "check_loop",
    "differences",
    "exception_name",
    "exception_types",
    "parse_concurrency",
    "recorded_concurrency",
    "recorded_form",
    "task_arguments",
    "window_object",
]

_T = TypeVar("_T")

# The --min-score key that stands for every score.
EVERY_SCORE = "*"

# A TARGET file path/to/NAME.py is loaded as the module TARGET_MODULE + NAME, so
# that it cannot clash with an importable module called NAME. `--retry-on
# NAME:Class` means a class of that loaded file (see exception_types).
TARGET_MODULE = "_sluicegate_eval_target_"


class UsageError(EvalError, ValueError):
    """A mistake in the command or the environment, found before any rollout (exit 2)."""


# Each setting is checked by its field of EvalConfig (a converter that takes the
# forms evaluate() accepts, or a validator), so building the config is the check.
# The words are the package's (see sluicegate._checks): "<flag> must be <what it
# takes>, not <value>"; a wrong type is a TypeError, a wrong value a UsageError
# (a ValueError, which the command line reports with exit status 2).


def _usage(check: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    """``check(*args, **kwargs)``, its ValueError made a :class:`UsageError` (exit status 2)."""
    try:
        return check(*args, **kwargs)
    except UsageError:
        raise
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _num_tasks(value: object) -> int | None:
    # None (the whole set) is the default, not a count anyone types.
    return None if value is None else _usage(check_count, value, "-n/--num-tasks", minimum=1)


def _rollouts(value: object) -> int:
    return _usage(check_count, value, "-r/--rollouts", minimum=1)


def _retries(value: object) -> int:
    return _usage(check_count, value, "--retries", minimum=0)


def _timeout(value: object) -> float | None:
    return None if value is None else _usage(check_seconds, value, "--timeout", zero=False)


def _finite(value: object, flag: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{flag} must be a finite number, not {value!r}")
    if not math.isfinite(value):
        raise UsageError(f"{flag} must be a finite number, not {value!r}")
    return float(value)


def _pass_threshold(value: object) -> float:
    return _finite(value, "--pass-threshold")


def _min_score(value: object) -> dict[str, float]:
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return {str(key): _finite(floor, f"--min-score {key}") for key, floor in value.items()}
    return {EVERY_SCORE: _finite(value, "--min-score")}


def _shuffle(value: object) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise TypeError(f"--shuffle must be an int seed or None, not {value!r}")
    return value


def _text_or_none(value: object, flag: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{flag} must be text (a str) or None, not {value!r}")
    return value


def _target(value: object) -> str | None:
    return _text_or_none(value, "TARGET")


def _system_prompt(value: object) -> str | None:
    return _text_or_none(value, "--system-prompt (system_prompt)")


def _window_class(value: object) -> str | None:
    return _text_or_none(value, "window_object")


def _trace(value: object) -> bool:
    return check_flag(value, "trace")


# The loops an environment's code may run on (--loop, an environment's `loop`).
LOOPS = ("trio", "asyncio")


def check_loop(value: object, name: str = "--loop") -> str:
    """``value`` if it names a loop an environment's code may run on (see :data:`LOOPS`).

    Raises:
        UsageError: for anything else (``name`` says where it was given).
    """
    if not (isinstance(value, str) and value in LOOPS):
        raise UsageError(f'{name} must be "trio" or "asyncio", not {value!r}')
    return value


def _ids(value: object) -> tuple[str, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise TypeError(f"ids (--id) must be a collection of task ids, not {value!r}")
    return tuple(str(task_id) for task_id in value)


def _budget(value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float, str, Fraction)):
        raise TypeError(f"--fail-on-error {ErrorBudget.TAKES}, not {value!r}")
    text = str(value).strip()
    ErrorBudget.parse(text)
    return text


def _reducers(value: object) -> tuple[str, ...]:
    names: object = (value,) if isinstance(value, str) else value
    if not isinstance(names, Iterable):
        raise TypeError(f"--reduce must be reducer names, not {value!r}")
    found: list[str] = []
    for name in names:
        reducer = _usage(check_reducer, name)
        if reducer not in found:
            found.append(reducer)
    return tuple(found)


def _retry_on(value: object) -> tuple[str | type[Exception], ...]:
    """What ``--retry-on`` was given: names, or (from Python) exception classes, as they are.

    A class is kept, not its name: one defined inside a function cannot be
    imported again. Names are resolved by :meth:`EvalConfig.retry`, once the
    environment is loaded (``module:Name`` may name its own file).
    """
    kinds: object = (value,) if isinstance(value, (str, type)) else value
    if not isinstance(kinds, Iterable):
        raise TypeError(f"--retry-on must be exception classes or their names, not {value!r}")
    found: list[str | type[Exception]] = []
    for kind in kinds:
        if isinstance(kind, str):
            found.append(kind)
        elif isinstance(kind, type) and issubclass(kind, BaseException):
            found.append(_retried(exception_name(kind), kind))
        else:
            raise TypeError(f"--retry-on must be exception classes or their names, not {kind!r}")
    return tuple(found)


def _output(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"output must be a path as text, not {value!r}")
    return value


# The largest window -c auto may grow to (AdaptiveWindow's own default).
AUTO_MAX = 256

# What -c and concurrency= take, as the refusals say it.
_TAKES = "an int >= 1, 'auto', 'auto:MAX' or a sluicegate.Window"


def parse_concurrency(value: object) -> int | str:
    """``-c``'s value as ``run.json`` records it: an int >= 1, ``"auto"`` or ``"auto:MAX"``.

    Text is read without regard to case or surrounding spaces, and
    ``"auto:MAX"`` is written with MAX as a plain int (``" Auto:064"`` is
    ``"auto:64"``).

    Raises:
        TypeError: neither an int nor text.
        UsageError: for any other value.
    """
    if isinstance(value, str):
        text = value.strip().lower()
        if text == "auto":
            return text
        most = text[5:].strip()
        if text.startswith("auto:") and most.isdecimal() and int(most) >= 1:
            return f"auto:{int(most)}"
        raise UsageError(f"-c/--concurrency must be {_TAKES}, not {value!r}")
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"-c/--concurrency must be {_TAKES}, not {value!r}")
    if value < 1:
        raise UsageError(f"-c/--concurrency must be {_TAKES}, not {value!r}")
    return value


def recorded_form(config: Mapping[str, Any]) -> object:
    """The ``concurrency`` a ``run.json`` config holds, as this version writes it (unchecked).

    Files written before ``concurrency`` said ``"auto"`` itself recorded
    ``-c auto:MAX`` as MAX with ``"adaptive": true``: that reads as
    ``"auto:MAX"``.
    """
    concurrency = config.get("concurrency")
    if config.get("adaptive") is True and type(concurrency) is int:
        return f"auto:{concurrency}"
    return concurrency


def window_object(value: object) -> WindowLike | None:
    """``value`` if it is a window object (a :class:`~sluicegate.Window`, or any
    object the runner takes as ``window=``), else None.

    A class has a window's methods too, unbound: ``Window`` for ``Window(8)``
    is a slip, not a window.
    """
    if isinstance(value, type) or not isinstance(value, WindowLike):
        return None
    return value


def recorded_concurrency(value: object) -> int | str:
    """What ``run.json`` records for ``concurrency=value``: the form ``-c`` would take.

    An :class:`~sluicegate.AdaptiveWindow` is ``"auto:MAX"`` with its
    ``max``; another window object is its size now (as the session starts);
    anything else is read by :func:`parse_concurrency`.

    Raises:
        TypeError: neither an int, text nor a window object.
        UsageError: for any other value.
    """
    if isinstance(value, AdaptiveWindow):
        return f"auto:{value.max}"
    window = window_object(value)
    if window is not None:
        return parse_concurrency(window.size)
    return parse_concurrency(value)


def task_arguments(args: object) -> dict[str, Any]:
    """Check ``-T`` arguments: identifiers for names, JSON values (a copy is returned).

    Raises:
        TypeError: ``args`` is not a mapping, or a value has no JSON form.
        UsageError: a name that is not an identifier, or a value JSON
            cannot hold (a NaN).
    """
    if args is None:
        return {}
    if not isinstance(args, Mapping):
        raise TypeError(f"task_args (-T) must be a mapping of names to values, not {args!r}")
    checked: dict[str, Any] = {}
    for key, value in args.items():
        if not isinstance(key, str) or not key.isidentifier():
            raise UsageError(f"-T names must be Python identifiers, not {key!r}")
        try:
            # run.json records them, and a resume passes them again.
            checked[key] = json.loads(json.dumps(value, allow_nan=False))
        except TypeError:
            raise TypeError(
                f"-T {key} must be a JSON value (text, a number, a list, a mapping...), "
                f"not {value!r}"
            ) from None
        except ValueError:
            raise UsageError(
                f"-T {key} must be a JSON value (a finite number), not {value!r}"
            ) from None
    return checked


@attrs.frozen(kw_only=True)
class EvalConfig:
    """The settings of one evaluation, as ``run.json`` records them; building one checks them.

    Each field takes the forms :func:`~sluicegate.eval.evaluate` accepts
    and refuses anything else as it is built (a wrong type is a
    :class:`TypeError`, a wrong value a :class:`UsageError`), so a config
    that exists is a valid one. Reading ``run.json`` back builds one the
    same way.

    Attributes:
        target: ``path/to/file.py:NAME`` (the path made absolute) or
            ``package.module:NAME``; None for an environment object handed
            to :func:`~sluicegate.eval.evaluate` directly.
        num_tasks: ``-n``: how many tasks at most; None for the whole set.
        rollouts: ``-r``: rollouts per task.
        concurrency: ``-c``: rollouts in flight at most (an int), or
            ``"auto"`` / ``"auto:MAX"``: an :class:`~sluicegate.AdaptiveWindow`
            finds it, up to 256 (or MAX). For a window object given as
            ``concurrency=``, what ``-c`` would say of it (see
            :func:`recorded_concurrency`).
        window_object: The class name of the window object given as
            ``concurrency=`` (``"Window"``, ``"AdaptiveWindow"``), or None:
            a resume cannot have the object back, and runs under
            ``concurrency`` as recorded.
        shuffle: ``--shuffle`` seed, or None.
        system_prompt: The system prompt's text, applied to every task.
        ids: ``--id``: run only tasks with these ids (empty: all).
        retries: ``--retries``: extra attempts for a failing rollout.
        retry_on: ``--retry-on``: the exceptions worth a retry, as given:
            names (builtin names or ``module:Name``) or, from Python,
            classes; empty for every ``Exception``. ``run.json`` records
            each class by its name (see :func:`exception_name`).
        timeout: ``--timeout``: seconds each attempt may take, or None.
        fail_on_error: ``--fail-on-error`` as text (see :class:`ErrorBudget`).
        min_score: ``--min-score``: the lowest mean allowed per score name
            (``"*"``: every score).
        output: The output directory.
        task_args: ``-T``: keyword arguments for the environment's factory
            (JSON values).
        reduce: ``--reduce``: the reducers over each task's rollouts.
        pass_threshold: ``--pass-threshold``: the score at which a rollout
            counts as correct for ``pass_at_K`` and ``at_least_K``.
        trace: ``--trace``: the sessions record their timeline in the
            output directory (``sluicegate eval --resume`` keeps recording).
        loop: ``--loop``: the event loop the environment's code runs on,
            ``"trio"`` or ``"asyncio"`` (``sluicegate eval --resume`` keeps it).
    """

    target: str | None = attrs.field(default=None, converter=_target)
    num_tasks: int | None = attrs.field(default=None, converter=_num_tasks)
    rollouts: int = attrs.field(default=1, converter=_rollouts)
    concurrency: int | str = attrs.field(default=32, converter=parse_concurrency)
    window_object: str | None = attrs.field(default=None, converter=_window_class)
    shuffle: int | None = attrs.field(default=None, converter=_shuffle)
    system_prompt: str | None = attrs.field(default=None, converter=_system_prompt)
    ids: tuple[str, ...] = attrs.field(default=(), converter=_ids)
    retries: int = attrs.field(default=0, converter=_retries)
    retry_on: tuple[str | type[Exception], ...] = attrs.field(default=(), converter=_retry_on)
    timeout: float | None = attrs.field(default=None, converter=_timeout)
    fail_on_error: str = attrs.field(default="0", converter=_budget)
    min_score: dict[str, float] = attrs.field(factory=dict, converter=_min_score)
    output: str = attrs.field(default="", converter=_output)
    task_args: dict[str, Any] = attrs.field(factory=dict, converter=task_arguments)
    reduce: tuple[str, ...] = attrs.field(default=(), converter=_reducers)
    pass_threshold: float = attrs.field(default=1.0, converter=_pass_threshold)
    trace: bool = attrs.field(default=False, converter=_trace)
    loop: str = attrs.field(default="trio", converter=check_loop)

    @property
    def adaptive(self) -> bool:
        """Whether an :class:`~sluicegate.AdaptiveWindow` finds the concurrency (``-c auto``)."""
        return isinstance(self.concurrency, str)

    @property
    def bound(self) -> int:
        """The most rollouts in flight: ``-c N``'s N, or the adaptive window's MAX."""
        if isinstance(self.concurrency, int):
            return self.concurrency
        _, _, most = self.concurrency.partition(":")
        return int(most) if most else AUTO_MAX

    def retry(self) -> Retry | None:
        """The retry policy: full-jitter exponential backoff, 0.1 s doubling to 5 s at most.

        Raises:
            UsageError: a ``retry_on`` name that imports no exception class.
        """
        on = tuple(
            found
            for kind in self.retry_on
            for found in (exception_types([kind]) if isinstance(kind, str) else (kind,))
        )
        if not self.retries:
            return None
        return Retry(attempts=self.retries + 1, on=on or (Exception,))


def exception_name(kind: type[BaseException]) -> str:
    """How ``run.json`` names an exception class: a builtin by name, else ``module:Name``.

    A class defined in a ``TARGET`` file is named after the file
    (``retryon:RateLimited`` for ``retryon.py``), as a user would write it.
    """
    name: str = kind.__name__
    if getattr(builtins, name, None) is kind:
        return name
    module = kind.__module__
    if module.startswith(TARGET_MODULE):
        module = module[len(TARGET_MODULE) :]
    return f"{module}:{kind.__qualname__}"


def _module(name: str) -> object:
    # A TARGET file already loaded answers for its own name: importing the
    # file again would run it twice and make a second, different class.
    loaded = sys.modules.get(TARGET_MODULE + name)
    return loaded if loaded is not None else importlib.import_module(name)


def exception_types(names: Iterable[str]) -> tuple[type[Exception], ...]:
    """The exception classes ``names`` stand for (see :func:`exception_name`).

    ``module:Name`` looks in the ``TARGET`` file called ``module.py`` when
    that file is the environment's (it is loaded by then), and imports
    ``module`` otherwise.

    Raises:
        UsageError: for a name that does not import or is not an exception class.
    """
    found = []
    for name in names:
        module_name, sep, path = name.rpartition(":")
        try:
            kind: object = _module(module_name) if sep else builtins
            for part in path.split("."):
                kind = getattr(kind, part)
        except (ImportError, AttributeError, ValueError) as exc:
            raise UsageError(
                f"--retry-on must name an exception (a builtin name such as TimeoutError, "
                f"or module:Name), not {name!r} ({type(exc).__name__}: {exc})"
            ) from None
        if not (isinstance(kind, type) and issubclass(kind, BaseException)):
            raise UsageError(
                f"--retry-on must name an exception class, not {name!r} (a {type(kind).__name__})"
            )
        found.append(_retried(name, kind))
    return tuple(found)


def _retried(name: str, kind: type[BaseException]) -> type[Exception]:
    if not issubclass(kind, Exception):
        raise UsageError(f"--retry-on must name an Exception subclass, not {name!r}")
    return kind


# The settings that decide which rollouts exist and what they run. A resume must
# match them, or the rows already on disk would answer a different question.
# -c, --retries, --retry-on, --timeout, --fail-on-error, --min-score,
# --reduce, --pass-threshold, --display and --loop may change between sessions.
RESUME_KEYS: dict[str, str] = {
    "target": "TARGET",
    "num_tasks": "-n/--num-tasks",
    "rollouts": "-r/--rollouts",
    "shuffle": "--shuffle",
    "system_prompt": "--system-prompt (the file's text)",
    "ids": "--id",
    "task_args": "-T",
}


def differences(recorded: EvalConfig, current: EvalConfig) -> list[str]:
    """Name every setting in which ``current`` may not differ from ``recorded`` for a resume.

    An environment object handed to :func:`~sluicegate.eval.evaluate` has
    no ``target``; then the target is not compared.

    Returns:
        One human-readable line per difference; empty when the resume may go on.
    """
    found = []
    for key, flag in RESUME_KEYS.items():
        old, new = getattr(recorded, key), getattr(current, key)
        if key == "target" and new is None:
            continue
        if key == "ids":
            # A selection: the order and repeats of --id mean nothing.
            old, new = sorted(set(old)), sorted(set(new))
        if old != new:
            found.append(f"{flag}: {_shown(old)} in run.json, {_shown(new)} now")
    return found


def _shown(value: object) -> str:
    return "not given" if value is None else repr(value)


_COUNT = re.compile(r"\d+")


@attrs.frozen
class ErrorBudget:
    """How many error rows a run tolerates (``--fail-on-error``).

    A count ``N`` fails the run at the ``N``-th error (``0``, the default, at
    the first). A fraction ``f`` in (0, 1) fails it when the errors exceed
    ``f`` of the rollouts; for a run whose total grows (a stream or a
    ``SampleSource``) that is judged only once the run is over.
    """

    count: int | None = None
    fraction: Fraction | None = None

    # What --fail-on-error takes, as the refusals say it.
    TAKES = "must be a count (0, 1, 2, ...) or a fraction in (0, 1)"

    @classmethod
    def parse(cls, text: str) -> ErrorBudget:
        """Read ``--fail-on-error``.

        Raises:
            UsageError: unless ``text`` is an int >= 0 or a number strictly between 0 and 1.
        """
        text = text.strip()
        if _COUNT.fullmatch(text):
            return cls(count=int(text))
        try:
            value = Fraction(text)
        except (ValueError, ZeroDivisionError):
            value = None
        if value is None or not 0 < value < 1:
            raise UsageError(f"--fail-on-error {cls.TAKES}, not {text!r}")
        return cls(fraction=value)

    def crossed(self, errors: int, total: int | None) -> bool:
        """Whether ``errors`` error rows break the budget.

        Args:
            errors: Error rows so far.
            total: The run's total rollouts when it is known (a static set, or
                any run once it is over); None while it still grows, in which
                case a fraction is never crossed.
        """
        if self.count is not None:
            return errors >= max(self.count, 1)
        assert self.fraction is not None
        return total is not None and errors > self.fraction * total
