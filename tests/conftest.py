"""Settings for every test directory.

Hypothesis' per-example deadline (200 ms) and its "too slow" health check are timed
asserts: on a loaded 2-core machine (CI, or a developer running simulations beside the
suite) a property test then fails for the machine's load, not for the property. The
charter measures speed in ``benchmarks/``, never in tests, so both are off here; every
property is still checked on every example.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("riverbed", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("riverbed")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Groups for pytest-xdist's ``--dist loadgroup`` (``make test``): the Spark tests all
    run on one worker, so the run starts one SparkSession (a JVM of ~1 GiB and two Python
    workers) rather than one per worker; every other file is a group of its own, so its
    module-scoped cluster starts once."""
    for item in items:
        path = item.path.as_posix()
        group = "spark" if "/tests/spark/" in path else path
        item.add_marker(pytest.mark.xdist_group(group))
