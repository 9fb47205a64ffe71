"""riverbed advertises Apache Kafka 4.1's maxima (issue 19, protocol level); a lower one
carries its reason on the line above it in ``protocol/api_versions.py``."""

from __future__ import annotations

import inspect

from riverbed.protocol import api_versions
from riverbed.protocol.api_versions import SUPPORTED_VERSIONS, ApiKey
from riverbed.protocol.messages import message_spec, request_class, response_class

#: Kafka 4.1's maxima (a broker's ApiVersions, and a controller's for the controller-only
#: APIs), as listed by franz-go's kversion for v4.1 (``b41`` / ``c41``).
KAFKA_41_MAX: dict[int, int] = {
    0: 13, 1: 18, 2: 10, 3: 13, 8: 9, 9: 9, 10: 6, 11: 9, 12: 4, 13: 5, 14: 5, 15: 6,
    16: 5, 17: 1, 18: 4, 19: 7, 20: 6, 21: 2, 22: 5, 23: 4, 24: 5, 25: 4, 26: 5, 27: 1,
    28: 5, 29: 3, 30: 3, 31: 3, 32: 4, 33: 2, 34: 2, 35: 4, 36: 2, 37: 3, 42: 2, 43: 2,
    44: 1, 45: 1, 46: 0, 47: 0, 48: 1, 49: 1, 50: 0, 51: 0, 52: 2, 53: 1, 54: 1, 55: 2, 56: 3, 57: 2,
    58: 0,
    59: 1, 60: 2, 61: 0, 62: 4, 63: 1, 64: 0, 65: 0, 66: 2, 67: 0, 68: 1, 69: 1, 75: 0,
}  # fmt: skip


def _reason_above(key: ApiKey) -> str:
    """The comment lines right above ``key``'s entry in SUPPORTED_VERSIONS."""
    lines = inspect.getsource(api_versions).splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().startswith(f"ApiKey.{key.name}:"))
    comments = []
    for line in reversed(lines[:at]):
        if not line.strip().startswith("#"):
            break
        comments.append(line.strip())
    return " ".join(reversed(comments))


def test_maxima_are_kafka_41s_or_say_why_not() -> None:
    for key, (_, hi) in SUPPORTED_VERSIONS.items():
        kafka = KAFKA_41_MAX[int(key)]
        if hi != kafka:  # e.g. InitProducerId v6: unstable in 4.1, used by the Spark sink
            assert "4.1" in _reason_above(key), f"{key.name}: v{hi}, Kafka 4.1 v{kafka}"


def test_every_advertised_version_is_in_the_specs() -> None:
    for key, (lo, hi) in SUPPORTED_VERSIONS.items():
        for cls in (request_class(key), response_class(key)):
            versions = message_spec(cls).valid_versions
            assert versions.lo <= lo and hi <= versions.hi, (key.name, cls.__name__)
