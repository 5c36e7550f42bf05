"""The one cattrs converter of ``sluicegate.eval``'s records: rows, ``run.json``, ``tasks.jsonl``.

The user values a row holds (the sample, the result, a score's metadata)
are not its business: :mod:`sluicegate._values` encodes those, bounded.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from .. import _taskset
from ._config import EvalConfig, exception_name, recorded_form
from ._score import ScoreValue

__all__ = ["converter"]

converter = cattrs.Converter()

# The package re-exports Task with __module__ = "sluicegate", where its string
# annotations cannot be evaluated; resolve them against their own module once,
# so a run that returns Tasks can be unstructured.
attrs.resolve_types(_taskset.Task, globalns=vars(_taskset))

converter.register_unstructure_hook(datetime, lambda value: value.isoformat())
converter.register_unstructure_hook(Path, str)
# The classes given for --retry-on live only as long as the session: run.json
# keeps their names, and a config read back holds the names.
converter.register_unstructure_hook(
    EvalConfig,
    make_dict_unstructure_fn(
        EvalConfig,
        converter,
        retry_on=override(
            unstruct_hook=lambda kinds: [
                kind if isinstance(kind, str) else exception_name(kind) for kind in kinds
            ]
        ),
    ),
)
_structure_config = make_dict_structure_fn(
    EvalConfig,
    converter,
    retry_on=override(struct_hook=lambda value, _: tuple(str(name) for name in value)),
    # An int or "auto[:MAX]": the field's own converter checks it.
    concurrency=override(struct_hook=lambda value, _: value),
    # The field's own converter checks it, a value that is not text included.
    loop=override(struct_hook=lambda value, _: value),
)


def _structure_config_of_any_version(data: Any, cls: type[EvalConfig]) -> EvalConfig:
    if isinstance(data, dict) and "concurrency" in data:
        data = {**data, "concurrency": recorded_form(data)}
    return _structure_config(data, cls)


converter.register_structure_hook(EvalConfig, _structure_config_of_any_version)
converter.register_structure_hook(datetime, lambda value, _: datetime.fromisoformat(value))


def _structure_score(value: Any, _: Any) -> ScoreValue:
    if value is None:
        return None
    if isinstance(value, dict):
        return {str(key): float(inner) for key, inner in value.items()}
    return float(value)


converter.register_structure_hook(ScoreValue, _structure_score)
