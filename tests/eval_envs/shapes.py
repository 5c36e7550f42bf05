"""Targets of every shape, for the target-resolution tests."""

from __future__ import annotations

from typing import Any

from sluicegate import Task, Taskset

tasks = Taskset.from_iterable([Task(input=1), Task(input=2)])


async def _run(task: Any) -> Any:
    return task


class _Bare:
    pass


class _NoTaskset:
    run = staticmethod(_run)


class _WrongTaskset:
    taskset = (1, 2, 3)
    run = staticmethod(_run)


class EnvClass:
    taskset = tasks
    run = staticmethod(_run)


class _Named:
    name = "made"
    taskset = tasks
    run = staticmethod(_run)


def make_env() -> _Named:
    return _Named()


empty = _Bare()
no_taskset = _NoTaskset()
wrong_taskset = _WrongTaskset()


class _Broken(Taskset[Task]):
    def load(self) -> list[Task]:
        raise OSError("the task file is gone")


class _BrokenEnv:
    taskset = _Broken()
    run = staticmethod(_run)


broken = _BrokenEnv()


class _SyncRun:
    taskset = tasks

    def run(self, task: Any) -> Any:
        return task


sync_run = _SyncRun()


class _Duplicates:
    taskset = Taskset.from_iterable([Task(input=1, id="a"), Task(input=2, id="a")])
    run = staticmethod(_run)


duplicates = _Duplicates()
