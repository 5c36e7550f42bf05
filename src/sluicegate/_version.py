"""The one place the version lives (hatch reads it from here; ``sluicegate --version`` too)."""

__version__ = "0.1.0"
