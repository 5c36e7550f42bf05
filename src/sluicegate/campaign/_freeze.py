"""Freezing a job's code: find its source, copy it into the campaign, hash it.

A campaign runs its job from a copy taken at its first run, so editing the
working tree never changes a campaign that is under way. The hash of that copy
is recorded; a rerun whose source no longer hashes the same is refused as
stale, because finished and unfinished candidates would have run different code.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.machinery
import os
import shutil
import stat
from pathlib import Path

from ._errors import CampaignError

__all__ = ["JobCodeError", "check_job_function", "freeze", "locate_job_source", "tree_hash"]

_IGNORED = ("__pycache__", "*.pyc", "*.pyo")


class JobCodeError(CampaignError):
    """The job's code cannot be found, or it is not what the campaign froze."""


def locate_job_source(job: str, search: Path | None = None) -> Path:
    """The file or package directory that holds the top-level package of ``job``.

    Args:
        job: ``package.module:function``.
        search: A directory searched before ``sys.path``.

    Returns:
        A ``.py`` file (a top-level module) or a package directory.

    Raises:
        JobCodeError: nothing importable by that name, or it is not plain Python
            source (an extension module, a namespace package).
    """
    top = job.split(":", 1)[0].split(".", 1)[0]
    spec = None
    if search is not None:
        spec = importlib.machinery.PathFinder.find_spec(top, [str(search)])
    if spec is None:
        spec = importlib.machinery.PathFinder.find_spec(top)
    if spec is None:
        where = f"{search} or sys.path" if search is not None else "sys.path"
        raise JobCodeError(f"cannot find the job's package {top!r} on {where}")
    locations = list(spec.submodule_search_locations or [])
    if locations:
        if spec.origin is None or len(locations) != 1:
            raise JobCodeError(f"{top!r} is a namespace package; the job needs a regular one")
        return Path(locations[0])
    if spec.origin is None or not spec.origin.endswith(".py"):
        raise JobCodeError(f"{top!r} is not Python source ({spec.origin}); it cannot be frozen")
    return Path(spec.origin)


def _module_file(module: str, source: Path) -> Path:
    parts = module.split(".")
    if source.is_file():
        if len(parts) > 1:
            raise JobCodeError(f"{parts[0]!r} is a module ({source}), not a package")
        return source
    base = source.joinpath(*parts[1:])
    for candidate in (base / "__init__.py", base.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    raise JobCodeError(f"no module {module!r} in {source}")


def _bound_names(body: list[ast.stmt]) -> set[str]:
    # Names bound by module-level statements, looking into if/try blocks
    # (import fallbacks) but not into functions or classes.
    names: set[str] = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.If):
            names |= _bound_names(node.body) | _bound_names(node.orelse)
        elif isinstance(node, ast.Try):
            names |= _bound_names(node.body) | _bound_names(node.orelse)
            names |= _bound_names(node.finalbody)
            for handler in node.handlers:
                names |= _bound_names(handler.body)
    return names


def check_job_function(job: str, source: Path) -> None:
    """Check, without importing it, that the job's module binds the job's function.

    The module's source is parsed and its module-level statements are read:
    a ``def``, ``async def``, assignment or import of the name counts. A name
    made only at run time (``globals()``, a module ``__getattr__``) does not:
    the check is strict so that a misspelled name is refused before any work.

    Args:
        job: ``package.module:function``.
        source: The job's top-level package directory or module file, as
            returned by :func:`locate_job_source`.

    Raises:
        JobCodeError: the module is missing or not valid Python, or it binds
            no such name at module level.
    """
    module, function = job.split(":", 1)
    path = _module_file(module, source)
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except SyntaxError as exc:
        raise JobCodeError(f"{path} is not valid Python: {exc}") from None
    if function not in _bound_names(tree.body):
        raise JobCodeError(
            f"module {module!r} ({path}) defines no {function!r} at module level "
            "(checked without importing it: a def, async def, assignment or import "
            "of that name is needed)"
        )


def _files(source: Path) -> list[Path]:
    if source.is_file():
        return [source]
    found = []
    for dirpath, dirnames, filenames in os.walk(source):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if not name.endswith((".pyc", ".pyo")):
                found.append(Path(dirpath) / name)
    return found


def tree_hash(source: Path) -> str:
    """A hash of the file or package at ``source``: names and contents.

    Returns:
        ``sha256:`` followed by hex digits; the same for a source and its frozen copy.
    """
    digest = hashlib.sha256()
    for path in _files(source):
        rel = path.relative_to(source.parent).as_posix()
        data = path.read_bytes()
        digest.update(f"{rel}\0{len(data)}\0".encode())
        digest.update(data)
    return "sha256:" + digest.hexdigest()


def freeze(source: Path, code_dir: Path) -> str:
    """Copy ``source`` into ``code_dir`` (read-only files) and return its hash.

    Raises:
        JobCodeError: ``code_dir`` already holds something by that name.
    """
    code_dir.mkdir(parents=True, exist_ok=True)
    target = code_dir / source.name
    if target.exists():
        raise JobCodeError(f"{target} already exists")
    if source.is_file():
        shutil.copy2(source, target)
    else:
        shutil.copytree(source, target, ignore=shutil.ignore_patterns(*_IGNORED))
    for path in _files(target):
        # Read-only, so an accidental edit of the copy fails loudly.
        path.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    return tree_hash(target)
