"""The one cattrs converter of ``sluicegate.eval``: rows, ``run.json`` and results.

Anything an environment's ``run`` returns goes through it too: primitives,
mappings, sequences, attrs classes and dataclasses unstructure to JSON-ready
values.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import cattrs

from ._records import Score

__all__ = ["converter"]

converter = cattrs.Converter()

converter.register_unstructure_hook(datetime, lambda value: value.isoformat())
converter.register_structure_hook(datetime, lambda value, _: datetime.fromisoformat(value))


def _structure_score(value: Any, _: Any) -> Score:
    if value is None:
        return None
    if isinstance(value, dict):
        return {str(key): float(inner) for key, inner in value.items()}
    return float(value)


converter.register_structure_hook(Score, _structure_score)
