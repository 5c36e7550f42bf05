"""Suite-wide set-up: the Hypothesis profiles, and the Dask cluster tests share.

``SLUICEGATE_HYPOTHESIS_PROFILE`` picks one (CONTRIBUTING.md says when):

* ``dev`` (the default): random examples, remembered in ``.hypothesis/`` so a
  failure replays first on the next run;
* ``ci``: random examples, no example database (every CI run is a fresh
  clone), and each failure printed with the ``@reproduce_failure`` blob
  that replays it;
* ``repro``: ``ci`` with ``derandomize=True``: the same examples on every
  run and every machine, for bisecting or for comparing two branches.

No profile has a deadline: the property tests run on trio's ``MockClock``,
so their wall-clock time measures how loaded the machine is, not the code.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

# The real servers (redis-server, PostgreSQL) as fixtures: see server_fixtures.py.
pytest_plugins = ["server_fixtures"]

PROFILE_VARIABLE = "SLUICEGATE_HYPOTHESIS_PROFILE"

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
settings.load_profile(os.environ.get(PROFILE_VARIABLE) or "dev")


@pytest.fixture(scope="module")
def dask_address() -> Iterator[str]:
    """The scheduler address of an in-process ``LocalCluster``, one per test module.

    ``processes=False`` starts it in about 50 ms against about a second for
    worker processes, and lets a test hold remote runs on their worker
    threads with a ``threading.Event``.
    """
    from distributed import LocalCluster

    with LocalCluster(  # type: ignore[no-untyped-call]
        n_workers=2, threads_per_worker=4, processes=False, dashboard_address=":0"
    ) as cluster:
        yield cluster.scheduler_address
