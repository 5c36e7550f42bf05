"""Looking at a run: a timeline image, a self-contained HTML report (or two runs compared).

``sluicegate plot`` and ``sluicegate report`` are thin over these functions,
and ``sluicegate trace`` over :meth:`sluicegate.Timeline.read`; see
docs/observe.md. A run is recorded with a :class:`~sluicegate.Timeline`
(``eval --trace``, ``campaign run --trace``).

Every error the package raises is a :class:`ReportError`:

```text
ReportError          never raised itself
└── PlotUnavailable  matplotlib is not installed (also ImportError)
```
"""

from .. import _util
from ._compare import write_comparison
from ._errors import ReportError
from ._html import write_report
from ._plot import PlotUnavailable, plot

__all__ = ["PlotUnavailable", "ReportError", "plot", "write_comparison", "write_report"]

_util.fixup_module_metadata(__name__, globals())
