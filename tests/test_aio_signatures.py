"""The asyncio front takes exactly its trio namesakes' arguments: the signatures cannot drift.

Each function of ``sluicegate.aio`` spells its trio namesake's signature out
(so that editors and type checkers see it); this holds them together:
names, kinds, defaults, annotations and the return annotation.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

import sluicegate
import sluicegate.aio
import sluicegate.eval

PAIRS: list[tuple[Callable[..., Any], Callable[..., Any]]] = [
    (sluicegate.aio.run_stream, sluicegate.run_stream),
    (sluicegate.aio.open_stream, sluicegate.open_stream),
    (sluicegate.aio.serve, sluicegate.serve),
    (sluicegate.aio.evaluate, sluicegate.eval.evaluate),
]


@pytest.mark.parametrize("pair", PAIRS, ids=lambda pair: pair[0].__name__)
def test_each_asyncio_function_has_its_trio_namesakes_signature(
    pair: tuple[Callable[..., Any], Callable[..., Any]],
) -> None:
    on_asyncio, on_trio = pair
    assert on_asyncio.__name__ == on_trio.__name__
    assert inspect.signature(on_asyncio) == inspect.signature(on_trio)


def test_the_asyncio_front_names_all_four() -> None:
    assert sorted(sluicegate.aio.__all__) == ["evaluate", "open_stream", "run_stream", "serve"]
    for name in sluicegate.aio.__all__:
        assert getattr(sluicegate.aio, name).__module__ == "sluicegate.aio"
