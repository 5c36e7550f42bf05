"""Looking at a run: a timeline image, a self-contained HTML report, and anomalies.

``sluicegate plot``, ``sluicegate report`` and ``sluicegate trace`` are thin
over these functions; see docs/observe.md. A run is recorded with a
:class:`~sluicegate.Timeline` (``eval --trace``, ``campaign run --trace``).
"""

from .._trace import Mark, Span, read_timelines, recording, write_chrome_trace
from ._html import write_report
from ._plot import PlotUnavailable, plot

__all__ = [
    "Mark",
    "PlotUnavailable",
    "Span",
    "plot",
    "read_timelines",
    "recording",
    "write_chrome_trace",
    "write_report",
]
