"""Every message at every version: encode -> decode -> equal, and re-encode is stable."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.unit.protocol.strategies import as_written, message_strategy

from riverbed.protocol import messages as m

CASES = [
    (name, version)
    for name, spec in sorted(m.all_message_specs().items())
    for version in range(spec.valid_versions.lo, spec.valid_versions.hi + 1)
]


def test_every_spec_has_versions() -> None:
    assert len(CASES) > 700
    assert ("ProduceRequest", 0) in CASES and ("FetchResponse", 12) in CASES


@pytest.mark.parametrize(("name", "version"), CASES, ids=[f"{n}-v{v}" for n, v in CASES])
def test_defaults_roundtrip(name: str, version: int) -> None:
    cls = m.get_message(name)
    obj = cls()
    data = m.encode(obj, version)
    decoded = m.decode(cls, data, version)
    assert decoded == as_written(obj, version)
    assert m.encode(decoded, version) == data


@pytest.mark.parametrize(("name", "version"), CASES, ids=[f"{n}-v{v}" for n, v in CASES])
@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_random_roundtrip(name: str, version: int, data: st.DataObject) -> None:
    cls = m.get_message(name)
    obj = data.draw(message_strategy(cls, version))
    encoded = m.encode(obj, version)
    decoded = m.decode(cls, encoded, version)
    assert decoded == obj, f"{name} v{version}: {obj!r} != {decoded!r}"
    assert m.encode(decoded, version) == encoded
