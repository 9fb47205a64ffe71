"""Settings for every test directory.

Hypothesis' per-example deadline (200 ms) and its "too slow" health check are timed
asserts: on a loaded 2-core machine (CI, or a developer running simulations beside the
suite) a property test then fails for the machine's load, not for the property. The
charter measures speed in ``benchmarks/``, never in tests, so both are off here; every
property is still checked on every example.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

_SLOW_OK = [HealthCheck.too_slow]
settings.register_profile(
    "riverbed", deadline=None, suppress_health_check=_SLOW_OK, derandomize=True
)
settings.register_profile(
    "fuzz",
    deadline=None,
    suppress_health_check=_SLOW_OK,
    max_examples=1000,
    print_blob=True,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "riverbed"))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Groups for pytest-xdist's ``--dist loadgroup`` (``make test``): the Spark tests all
    run on one worker, so the run starts one SparkSession (a JVM of ~1 GiB and two Python
    workers) rather than one per worker; every other file is a group of its own, so its
    module-scoped cluster starts once and its tests run in file order. xdist's worker
    turns the markers into node-id suffixes in its own ``pytest_collection_modifyitems``,
    so these must be added first (``tryfirst``). `tests/unit/test_xdist_groups.py` checks
    that the groups hold: under pytest 9.2 they did not (see pyproject.toml)."""
    for item in items:
        path = item.path.as_posix()
        group = "spark" if "/tests/spark/" in path else path
        item.add_marker(pytest.mark.xdist_group(group))
