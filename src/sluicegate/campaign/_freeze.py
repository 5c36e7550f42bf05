"""Freezing a job's code: find its source, copy it into the campaign, hash it.

A campaign runs its job from a copy taken at its first run, so editing the
working tree never changes a campaign that is under way. The hash of that copy
is recorded; a rerun whose source no longer hashes the same is refused as
stale, because finished and unfinished candidates would have run different code.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import os
import shutil
import stat
from pathlib import Path

__all__ = ["JobCodeError", "freeze", "locate_job_source", "tree_hash"]

_IGNORED = ("__pycache__", "*.pyc", "*.pyo")


class JobCodeError(Exception):
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
