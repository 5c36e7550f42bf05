"""Long-lived services on the runner: retries, signals, and (soon) ``serve()``."""

from ._retry import Retry
from ._signals import drain_on_signals

__all__ = ["Retry", "drain_on_signals"]
