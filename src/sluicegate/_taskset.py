"""Placeholder: tasksets land with issue 3."""


class Task:
    pass


class Taskset:
    pass


class FeedTaskset(Taskset):
    pass
