"""``prometheus_collector()``: the counters of every ``serve()`` in the process, for Prometheus.

The collector reads the services' counters when Prometheus scrapes, so a
service pays nothing per item for it beyond the latency histogram's bucket
count. It never opens a port: serve the registry the way your program
already does (``prometheus_client.start_http_server``, an ASGI app, ...).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ._stats import BOUNDS
from ._stats import registry as services

if TYPE_CHECKING:
    from prometheus_client.registry import CollectorRegistry

__all__ = ["prometheus_collector"]

# The 1-2-5 bounds among the histogram's buckets, 100 us .. 1000 s.
_EXPOSED = tuple(
    (index, bound)
    for index, bound in enumerate(BOUNDS)
    if 1e-4 <= bound <= 1e3 and f"{bound:.0e}"[0] in "125" and float(f"{bound:.0e}") == bound
)


class _ServeCollector:
    """A ``prometheus_client`` custom collector over the registry of running services."""

    def __init__(self, namespace: str) -> None:
        self._prefix = f"{namespace}_serve" if namespace else "serve"  # set here, never changed

    def describe(self) -> list[Any]:
        # Without describe(), registering would call collect() once to learn
        # the names; an empty answer would hide a name clash until a scrape.
        return list(self.collect())

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        total, live = services.totals()
        prefix = self._prefix
        items = CounterMetricFamily(
            f"{prefix}_items", "Items finished or skipped, by outcome.", labels=["outcome"]
        )
        items.add_metric(["ok"], total.ok)
        items.add_metric(["failed"], total.failed)
        items.add_metric(["skipped"], total.skipped)
        yield items
        yield CounterMetricFamily(f"{prefix}_pulled", "Items taken from the source.", total.pulled)
        yield CounterMetricFamily(
            f"{prefix}_retries", "Extra attempts made after a failed one.", total.retried
        )
        yield CounterMetricFamily(
            f"{prefix}_cut_short",
            "Items a drain, grace or second signal cut short (they run again on restart).",
            total.cut,
        )
        yield GaugeMetricFamily(
            f"{prefix}_in_flight", "Items running or waiting for their journal commit.",
            total.in_flight,
        )  # fmt: skip
        yield GaugeMetricFamily(f"{prefix}_services", "serve() calls running now.", live)
        window = services.window_size()
        if window is not None:
            yield GaugeMetricFamily(
                f"{prefix}_window_size",
                "The window size in force, summed over running services with a Window object.",
                window,
            )
        assert total.histogram is not None
        buckets: list[tuple[str, float]] = []
        cumulative = 0
        upto = 0
        for index, bound in _EXPOSED:
            cumulative += sum(total.histogram[upto : index + 1])
            upto = index + 1
            buckets.append((f"{bound:g}", cumulative))
        buckets.append(("+Inf", sum(total.histogram)))
        yield HistogramMetricFamily(
            f"{prefix}_item_duration_seconds",
            "Seconds from an item's first attempt to its end, retries included.",
            buckets=buckets,
            sum_value=total.seconds,
        )


def prometheus_collector(
    *, registry: CollectorRegistry | None = None, namespace: str = "sluicegate"
) -> Any:
    """Register a collector of every :func:`~sluicegate.serve` in this process.

    Metrics (with the default namespace): ``sluicegate_serve_items_total``
    (label ``outcome``: ok, failed, skipped), ``..._pulled_total``,
    ``..._retries_total``, ``..._cut_short_total``, ``..._in_flight``,
    ``..._services``, the histogram ``..._item_duration_seconds``, and
    ``..._window_size`` while a service runs under a window object (an
    :class:`~sluicegate.AdaptiveWindow` sizes itself). Counts
    cover every ``serve()`` the process ran, finished ones included; the
    counters never go down (an item a failed service left in flight counts
    as cut short). Values are read when Prometheus scrapes; no port is
    opened.

    Args:
        registry: The ``prometheus_client`` registry to join; its default
            ``REGISTRY`` when None.
        namespace: The metric name prefix.

    Returns:
        The collector (``registry.unregister(collector)`` removes it).

    Raises:
        ModuleNotFoundError: ``prometheus_client`` is not installed
            (``pip install 'sluicegate[prometheus]'``).
    """
    try:
        import prometheus_client
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(
            "prometheus_collector() needs prometheus_client: pip install 'sluicegate[prometheus]'",
            name=exc.name,
        ) from exc
    collector = _ServeCollector(namespace)
    (registry or prometheus_client.REGISTRY).register(collector)
    services.watch()
    return collector
