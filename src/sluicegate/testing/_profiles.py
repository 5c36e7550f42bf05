"""The Hypothesis profiles sluicegate's tests, and a user's, run under.

``SLUICEGATE_HYPOTHESIS_PROFILE`` (or pytest's ``--hypothesis-profile``) picks one:

* ``dev`` (the default): random examples, remembered in ``.hypothesis/`` so
  a failure replays first on the next run;
* ``ci``: random examples, no example database (every CI run is a fresh
  clone), and each failure printed with the ``@reproduce_failure`` blob that
  replays it;
* ``repro``: ``ci`` with ``derandomize=True``: the same examples on every
  run and every machine, for bisecting or for comparing two branches.

No profile has a deadline: properties run on trio's ``MockClock``, so their
wall-clock time measures how loaded the machine is, not the code.
"""

from __future__ import annotations

import os
from typing import Final

#: The environment variable that names the profile to load.
PROFILE_VARIABLE: Final = "SLUICEGATE_HYPOTHESIS_PROFILE"
#: The profiles, in the order they are registered.
PROFILES: Final = ("dev", "ci", "repro")


def register_profiles() -> None:
    """Register ``dev``, ``ci`` and ``repro`` with Hypothesis (again is harmless).

    Raises:
        ImportError: Hypothesis is not installed (the ``test`` extra brings it).
    """
    from hypothesis import HealthCheck, settings

    settings.register_profile("dev", deadline=None)
    settings.register_profile(
        "ci",
        deadline=None,
        database=None,
        print_blob=True,
        # A shared 2-core machine makes generation look slow; that is not a bug.
        suppress_health_check=[HealthCheck.too_slow],
    )
    settings.register_profile("repro", settings.get_profile("ci"), derandomize=True)


def load_profile(name: str | None = None) -> str:
    """Register the profiles and load one: ``name``, else the variable's, else ``dev``.

    Returns:
        The name of the profile loaded.

    Raises:
        ImportError: Hypothesis is not installed.
        hypothesis.errors.InvalidArgument: no profile has that name.
    """
    from hypothesis import settings

    register_profiles()
    chosen = name or os.environ.get(PROFILE_VARIABLE) or "dev"
    settings.load_profile(chosen)
    return chosen
