"""Run the same ``run`` contract on a Dask cluster: ``open_dask(...).remote(fn)``.

Needs the ``dask`` extra (``pip install 'sluicegate[dask]'``). See the
"Scaling out" page of the docs.

Every error the package raises is a :class:`DaskError`:

```text
DaskError            never raised itself
└── RemoteCancelled  a run's work was cancelled on the cluster by something other than sluicegate
```
"""

import importlib.util as _importlib_util

if _importlib_util.find_spec("distributed") is None:  # pragma: no cover - only without the extra
    raise ImportError("sluicegate.dask needs Dask distributed: pip install 'sluicegate[dask]'")

from .. import _util
from ._engine import RemoteCancelled
from ._errors import DaskError
from ._open import DaskBridge, RemoteRun, open_dask

__all__ = ["DaskBridge", "DaskError", "RemoteCancelled", "RemoteRun", "open_dask"]

_util.fixup_module_metadata(__name__, globals())
