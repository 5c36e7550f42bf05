"""Placeholder: dynamic sources land with issue 4."""

from typing import Any


class SampleSource:
    pass


def enqueue(*items: Any) -> None:
    raise NotImplementedError
