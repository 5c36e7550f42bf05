"""The environment contract: the public :class:`Environment` protocol, checked once.

An environment reaches :func:`~sluicegate.eval.evaluate` as an object or as
a ``TARGET`` string (``path/to/file.py:NAME`` or ``package.module:NAME``);
:func:`environment` resolves either into :class:`Parts`, the checked pieces
the rest of the evaluation uses, or refuses it with a :class:`UsageError`.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import attrs

from .._asyncio import AsyncioContext, awaiting_on_asyncio, on_asyncio
from .._dynamic import AsyncioHooks, SampleSource
from .._taskset import Taskset
from .._util import surely_sync
from ._config import TARGET_MODULE, UsageError, check_loop

if TYPE_CHECKING:
    import asyncio

__all__ = [
    "Environment",
    "Parts",
    "as_parts",
    "canonical_target",
    "environment",
    "file_of",
    "on_loop",
    "resolve_target",
]


@runtime_checkable
class Environment(Protocol):
    """What an evaluation runs. Any object with these two members is one.

    ``taskset`` is a :class:`~sluicegate.Taskset` (static, infinite or
    streaming) or a :class:`~sluicegate.SampleSource`; ``run`` is an
    ``async def`` taking one task and returning a result that goes into
    ``results.jsonl``.

    Four members are optional, and found by name when present:

    * ``score(task, result)``: a ``float``, a mapping of names to floats
      (finite numbers), or a :class:`~sluicegate.eval.Score` carrying either
      with an explanation; plain or ``async``; its means make the run's scores.
    * ``scores``: the names of the scores ``score`` returns (``"score"`` for
      a plain number), so that a ``--min-score`` naming none of them is
      refused before the run rather than failed after it.
    * ``serving()``: an async context manager held open around all the
      rollouts (a model server, a connection pool).
    * ``name``: a short string for the output directory and the display.
    * ``loop``: ``"asyncio"`` when ``run``, ``score``, ``serving()`` and the
      taskset's feed (or the ``SampleSource``'s hooks) are asyncio code
      (``"trio"``, the default, when they are trio code): ``sluicegate
      eval`` then runs it on asyncio without ``--loop``.

    A class or a function returning such an object is accepted too: it is
    called once, with the ``-T`` arguments (``task_args``) as keywords.
    """

    taskset: Taskset[Any] | SampleSource[Any, Any]

    async def run(self, task: Any, /) -> Any:
        """Run one rollout of ``task`` and return its result."""
        ...


@attrs.frozen
class Parts:
    """An environment after its contract was checked: what the evaluation uses.

    Attributes:
        name: A short name for the output directory and the display.
        taskset: A :class:`~sluicegate.Taskset` or a :class:`~sluicegate.SampleSource`.
        run: ``async run(task) -> result``.
        score: Optional ``score(task, result) -> float | Mapping[str, float] | Score``
            (it may be async).
        serving: Optional zero-argument callable returning an async context
            manager, held open for the whole run.
        target: The ``TARGET`` it was imported from (absolute), if any.
        scores: The score names the environment declares, or None.
        loop: The loop the environment says its code runs on (``"trio"``
            or ``"asyncio"``), or None when it says nothing.
    """

    name: str
    taskset: Taskset[Any] | SampleSource[Any, Any]
    run: Callable[[Any], Awaitable[Any]]
    score: Callable[[Any, Any], Any] | None = None
    serving: Callable[[], AbstractAsyncContextManager[Any]] | None = None
    target: str | None = None
    scores: tuple[str, ...] | None = None
    loop: str | None = None


def on_loop(parts: Parts, loop: asyncio.AbstractEventLoop) -> Parts:
    """``parts`` of asyncio code, as the evaluation (trio code) calls them on ``loop``.

    ``run`` and an ``async`` ``score`` run as asyncio tasks, ``serving()``
    is held open by one, and a :class:`~sluicegate.SampleSource` runs its
    hooks there. A live taskset's feed is read on asyncio by the trio code
    that pulls it (``take()``, the views), which the evaluation runs while
    the user's code is marked as asyncio's (``sluicegate._asyncio``).
    Must be called in the loop's trio guest run.
    """
    taskset, serving, score = parts.taskset, parts.serving, parts.score
    if isinstance(taskset, SampleSource):
        taskset = AsyncioHooks(taskset, loop)
    if score is not None:
        score = awaiting_on_asyncio(score, loop, "the environment's score")
    if serving is not None:
        serving = functools.partial(AsyncioContext, serving, loop, "the environment's serving()")
    return attrs.evolve(
        parts,
        taskset=taskset,
        run=on_asyncio(parts.run, loop, "the environment's run"),
        score=score,
        serving=serving,
    )


def _refuse_unknown(factory: Any, name: str, kwargs: Mapping[str, Any]) -> None:
    """Refuse ``-T`` names the factory does not take, naming the first.

    Raises:
        UsageError: for a name the factory's signature has no keyword for.
    """
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return  # no signature to read (some builtins): calling it will tell
    if any(parameter.kind is inspect.Parameter.VAR_KEYWORD for parameter in parameters):
        return
    takes = {
        parameter.name
        for parameter in parameters
        if parameter.kind
        in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    }
    for key in kwargs:
        if key not in takes:
            offered = ", ".join(sorted(takes)) or "none"
            raise UsageError(
                f"-T {key}=...: {name} does not take an argument {key!r} (it takes: {offered})"
            )


def _made(factory: Any, name: str, kwargs: Mapping[str, Any]) -> object:
    """Call a factory of an environment with the ``-T`` arguments.

    Raises:
        UsageError: ``factory`` does not take an argument given, needs
            others, raised, or called ``sys.exit()``.
    """
    called = f"{name}: {getattr(factory, '__qualname__', factory)!s}()"
    _refuse_unknown(factory, name, kwargs)
    try:
        inspect.signature(factory).bind(**kwargs)
    except TypeError as exc:
        what = "with the -T arguments given" if kwargs else "a zero-argument factory"
        raise UsageError(f"{name} is callable but not {what}: {exc}") from None
    except ValueError:
        pass  # no signature to read (some builtins): calling it will tell
    try:
        return factory(**kwargs)
    except SystemExit as exc:
        raise UsageError(
            f"{called} called sys.exit({exc.code!r}); an environment factory must return "
            f"the environment"
        ) from None
    except Exception as exc:
        raise UsageError(f"{called} raised {type(exc).__name__}: {exc}") from exc


def as_parts(
    obj: object,
    name: str,
    target: str | None = None,
    task_args: Mapping[str, Any] | None = None,
) -> Parts:
    """Check that ``obj`` keeps the :class:`Environment` contract and take it apart.

    Args:
        obj: The environment, or a zero-argument factory (a class, a
            function) returning one.
        name: The fallback name, used unless ``obj`` has a string ``name``.
        target: The ``TARGET`` it came from, if any.
        task_args: Keyword arguments for a factory (``-T``).

    Raises:
        UsageError: naming what is missing or of the wrong kind (a ``run``
            that is not ``async`` included), a factory that does not take
            a ``-T`` argument, needs others, raises or calls ``sys.exit()``,
            or ``-T`` arguments for an object that is not a factory.
    """
    kwargs = dict(task_args or {})
    if inspect.isclass(obj) or (callable(obj) and not hasattr(obj, "taskset")):
        obj = _made(obj, name, kwargs)
    elif kwargs:
        raise UsageError(
            f"-T {next(iter(kwargs))}=...: {name} is an environment object, not a factory, "
            f"so it takes no arguments; point TARGET at a class or function that builds it"
        )
    missing = [attr for attr in ("taskset", "run") if getattr(obj, attr, None) is None]
    if missing:
        raise UsageError(
            f"{name}: the environment has no {' and no '.join(missing)} "
            f"(it needs a `taskset` and an async `run(task)`)"
        )
    taskset: Any = obj.taskset  # type: ignore[attr-defined]
    if not isinstance(taskset, (Taskset, SampleSource)):
        fix = (
            f": wrap it, taskset = sluicegate.Taskset.from_iterable(the {type(taskset).__name__})"
            if isinstance(taskset, Iterable) and not isinstance(taskset, (str, bytes))
            else ""
        )
        raise UsageError(
            f"{name}: taskset must be a sluicegate.Taskset or a sluicegate.SampleSource, "
            f"not {type(taskset).__name__}{fix}"
        )
    run = obj.run  # type: ignore[attr-defined]
    if not callable(run):
        raise UsageError(f"{name}: run must be an async function, not {type(run).__name__}")
    if surely_sync(run):
        raise UsageError(
            f"{name}: run must be an async function (`async def run(self, task)`); "
            f"{getattr(run, '__qualname__', run)!s} is a plain function"
        )
    score = getattr(obj, "score", None)
    if score is not None and not callable(score):
        raise UsageError(f"{name}: score must be callable, not {type(score).__name__}")
    serving = getattr(obj, "serving", None)
    if serving is not None and not callable(serving):
        raise UsageError(f"{name}: serving must be callable, not {type(serving).__name__}")
    declared = getattr(obj, "scores", None)
    scores = None
    if declared is not None:
        if isinstance(declared, Iterable) and not isinstance(declared, str):
            scores = tuple(declared)
        if scores is None or not all(isinstance(key, str) for key in scores):
            raise UsageError(
                f"{name}: scores must be the names score() returns (a list of text), "
                f"not {declared!r}"
            )
        if score is None:
            raise UsageError(f"{name}: declares scores but has no score(task, result)")
    loop = getattr(obj, "loop", None)
    if loop is not None:
        check_loop(loop, f"{name}: loop")
    own_name = getattr(obj, "name", None)
    return Parts(
        name=own_name if isinstance(own_name, str) and own_name else name,
        taskset=taskset,
        run=run,
        score=score,
        serving=serving,
        target=target,
        scores=scores,
        loop=loop,
    )


def environment(env: object, task_args: Mapping[str, Any] | None = None) -> Parts:
    """Resolve what :func:`~sluicegate.eval.evaluate` was given: an object or a ``TARGET``.

    Args:
        env: The environment, a factory of one, or a ``TARGET`` string.
        task_args: Keyword arguments for a factory (``-T``).

    Raises:
        UsageError: see :func:`resolve_target` and :func:`as_parts`.
    """
    if isinstance(env, Parts):
        return env
    if isinstance(env, str):
        return resolve_target(env, task_args)
    named = inspect.isclass(env) or inspect.isfunction(env)
    name: str = env.__name__ if named else type(env).__name__  # type: ignore[attr-defined]
    return as_parts(env, name.lower(), task_args=task_args)


def _is_file(where: str) -> bool:
    return where.endswith(".py") or os.sep in where or "/" in where


def file_of(target: str) -> Path | None:
    """The file a ``path/to/file.py:NAME`` target names; None for a module target."""
    where, sep, _ = target.rpartition(":")
    return Path(where) if sep and where and _is_file(where) else None


def canonical_target(target: str) -> str:
    """``target`` with a file path made absolute, so a resume from another
    directory still names the same environment; a module target is unchanged."""
    path = file_of(target)
    return target if path is None else f"{path.resolve()}:{target.rpartition(':')[2]}"


def resolve_target(target: str, task_args: Mapping[str, Any] | None = None) -> Parts:
    """Import ``target`` and return the environment it names.

    ``path/to/file.py:NAME`` loads the file as a module (its directory goes on
    ``sys.path``, as when running it as a script); ``package.module:NAME``
    imports the module, with the working directory importable.

    Raises:
        UsageError: if the target is malformed, does not import (or calls
            ``sys.exit()`` while importing), lacks ``NAME``, or ``NAME`` does
            not keep the environment contract.
    """
    where, sep, attr = target.rpartition(":")
    if not sep or not where or not attr:
        raise UsageError(
            f"TARGET must be path/to/file.py:NAME or package.module:NAME, not {target!r}"
        )
    if _is_file(where):
        module = _load_file(Path(where))
        stem = Path(where).stem
    else:
        module = _import_module(where)
        stem = where.rpartition(".")[2]
    try:
        obj = getattr(module, attr)
    except AttributeError:
        raise UsageError(f"{target}: {where} has no {attr!r}{_names_in(module, attr)}") from None
    return as_parts(obj, stem if stem != "__main__" else attr, canonical_target(target), task_args)


# How many of a module's names a refusal lists.
_LISTED = 12


def _names_in(module: ModuleType, wanted: str) -> str:
    """What a TARGET could have named in ``module``: its own classes, functions and
    objects (not what it imported), the nearest to ``wanted`` first."""
    own = sorted(
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and not inspect.ismodule(value)
        and (getattr(value, "__module__", None) == module.__name__ or hasattr(value, "taskset"))
    )
    if not own:
        return "; it defines no public name"
    near = difflib.get_close_matches(wanted, own, n=1)
    listed = ", ".join(own[:_LISTED])
    if len(own) > _LISTED:
        listed += f" and {len(own) - _LISTED} more"
    if near:
        return f"; did you mean {near[0]!r}? It has: {listed}"
    return f"; it has: {listed}"


def _exited(what: str, exc: SystemExit) -> UsageError:
    return UsageError(
        f"importing {what} called sys.exit({exc.code!r}); an environment module must not "
        f"exit when imported (guard script code with `if __name__ == '__main__':`)"
    )


def _load_file(path: Path) -> ModuleType:
    if not path.is_file():
        raise UsageError(f"TARGET file {str(path)!r} does not exist")
    path = path.resolve()
    name = f"{TARGET_MODULE}{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UsageError(f"TARGET file {str(path)!r} cannot be imported as Python")
    module = importlib.util.module_from_spec(spec)
    # Registered before it runs: dataclasses and pickling look modules up by name.
    sys.modules[name] = module
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    except SystemExit as exc:
        del sys.modules[name]
        raise _exited(repr(str(path)), exc) from None
    except Exception as exc:
        del sys.modules[name]
        raise UsageError(f"importing {str(path)!r} failed: {exc!r}") from exc
    return module


def _import_module(name: str) -> ModuleType:
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    try:
        return importlib.import_module(name)
    except SystemExit as exc:
        raise _exited(repr(name), exc) from None
    except ModuleNotFoundError as exc:
        if exc.name is not None and name.startswith(exc.name):
            raise UsageError(f"TARGET module {name!r} not found") from exc
        raise UsageError(f"importing {name!r} failed: {exc!r}") from exc
    except Exception as exc:
        raise UsageError(f"importing {name!r} failed: {exc!r}") from exc
