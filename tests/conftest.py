"""Suite-wide set-up: the Hypothesis profile, and the Dask cluster tests share.

The profiles (``dev``, ``ci``, ``repro``) live in the testing kit
(``sluicegate.testing``, see docs/testing.md and CONTRIBUTING.md);
``SLUICEGATE_HYPOTHESIS_PROFILE`` picks one. Loading it here as well as in
the kit's pytest plugin keeps the suite right before the plugin's entry
point is installed (an editable install made before it existed).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sluicegate.testing import load_profile

# The real servers (redis-server, PostgreSQL) as fixtures: see server_fixtures.py.
pytest_plugins = ["server_fixtures"]

load_profile()


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
