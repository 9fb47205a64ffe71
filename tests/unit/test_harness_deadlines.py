"""The test harness's deadlines stretch with the machine's load, within a bound."""

from __future__ import annotations

import os

import pytest

from riverbed.testing import cluster
from riverbed.testing.cluster import LOAD_SCALE_MAX, scaled_s


@pytest.mark.parametrize(
    ("load_per_cpu", "factor"),
    [(0.2, 1.0), (1.0, 1.0), (2.5, 2.5), (100.0, LOAD_SCALE_MAX)],
)
def test_deadline_scales_with_the_load_per_cpu(
    monkeypatch: pytest.MonkeyPatch, load_per_cpu: float, factor: float
) -> None:
    cpus = 2
    monkeypatch.setattr(cluster.os, "cpu_count", lambda: cpus)
    load = load_per_cpu * cpus
    monkeypatch.setattr(cluster.os, "getloadavg", lambda: (load, 0.0, 0.0))
    assert scaled_s(10) == pytest.approx(10 * factor)


def test_no_load_average_keeps_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing() -> tuple[float, float, float]:
        raise OSError("no load average")

    monkeypatch.setattr(os, "getloadavg", missing)
    assert scaled_s(7) == 7
