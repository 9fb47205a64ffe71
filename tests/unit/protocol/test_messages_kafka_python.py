"""Cross-check against an independent codec: bytes riverbed encodes, kafka-python decodes.

kafka-python 3 (a dev dependency) carries its own schema-driven codec for ~100 client
APIs; a field that riverbed writes at the wrong place or width shows up as a value
mismatch here, which a riverbed-only round trip (symmetric bugs cancel) would miss.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import Any

import kafka.protocol
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.api_message import ApiMessage
from tests.unit.protocol.strategies import message_strategy

from riverbed.protocol import messages as m


def _kafka_python_classes() -> dict[str, Any]:
    found: dict[str, Any] = {}
    for mod in pkgutil.walk_packages(kafka.protocol.__path__, "kafka.protocol."):
        if ".old" in mod.name or "generate" in mod.name:
            continue
        module = importlib.import_module(mod.name)
        for _, c in inspect.getmembers(module, inspect.isclass):
            if issubclass(c, ApiMessage) and c is not ApiMessage and getattr(c, "_json", None):
                found[c.name] = c
    return found


KP = _kafka_python_classes()
SPECS = m.all_message_specs()
CASES = [
    (name, v)
    for name, kc in sorted(KP.items())
    if name in SPECS
    for v in range(
        SPECS[name].valid_versions.lo, min(SPECS[name].valid_versions.hi, kc._valid_versions[1]) + 1
    )
]


def _kp_view_differs(f: Any, ours: Any, theirs: Any) -> bool:
    """kafka-python presents a few values differently; these are not wire differences."""
    if f.attr.endswith("authorized_operations"):
        return False  # kafka-python turns the bit field into a set of operations
    if theirs is None and ours is not None:
        # zero topic ids and default tagged structs come back as None
        return bool(ours != f.default())
    if isinstance(theirs, memoryview):
        theirs = bytes(theirs)
    return bool(ours != theirs)


def _compare(ours: m.Message, theirs: Any, version: int, path: str) -> None:
    for f in ours._spec.fields:
        if version not in f.versions:
            continue
        ov = getattr(ours, f.attr)
        tv = getattr(theirs, f.attr, None)
        where = f"{path}.{f.attr}"
        if f.struct is not None and ov is not None and tv is not None:
            if f.is_array:
                assert len(ov) == len(tv), where
                for a, b in zip(ov, tv, strict=True):
                    _compare(a, b, version, where)
            else:
                _compare(ov, tv, version, where)
            continue
        assert not _kp_view_differs(f, ov, tv), f"{where}: riverbed {ov!r}, kafka-python {tv!r}"


def test_cross_check_covers_the_main_apis() -> None:
    names = {n for n, _ in CASES}
    assert {"ProduceRequest", "FetchResponse", "MetadataResponse", "JoinGroupRequest"} <= names
    assert len(CASES) > 400


@pytest.mark.parametrize(("name", "version"), CASES, ids=[f"{n}-v{v}" for n, v in CASES])
@settings(
    max_examples=3,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_kafka_python_reads_what_riverbed_writes(
    name: str, version: int, data: st.DataObject
) -> None:
    cls = m.get_message(name)
    # kafka-python rejects unknown tags inside tagged structs, so none are generated here
    obj = data.draw(message_strategy(cls, version, unknown_tags=False))
    if name == "ApiVersionsResponse":
        obj.error_code = 0  # kafka-python reads any error answer as v0 (see headers.py)
    theirs = KP[name].decode(m.encode(obj, version), version=version)
    _compare(obj, theirs, version, name)
