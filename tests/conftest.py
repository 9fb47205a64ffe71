"""Settings for every test directory.

Hypothesis' per-example deadline (200 ms) and its "too slow" health check are timed
asserts: on a loaded 2-core machine (CI, or a developer running simulations beside the
suite) a property test then fails for the machine's load, not for the property. The
charter measures speed in ``benchmarks/``, never in tests, so both are off here; every
property is still checked on every example.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

settings.register_profile("riverbed", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("riverbed")
