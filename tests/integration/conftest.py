"""Fixtures for integration tests: real riverbed broker processes on loopback.

`broker` starts ONE broker per test module (startup is about a second, but modules stay
independent: a test that restarts or kills its broker cannot disturb another module).
Topics get unique names per test through `topic_name`.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from riverbed.testing.cluster import BrokerProcess

_counter = itertools.count()


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    proc = BrokerProcess(
        overrides={
            # Small segments so tests cross segment boundaries; fast retention checks.
            "log.segment.bytes": str(1024 * 1024),
            "num.partitions": "1",
        }
    )
    proc.start()
    try:
        yield proc
    finally:
        proc.close()


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    legal = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-")
    base = "".join(c if c in legal else "-" for c in request.node.name)
    return f"{base[:80]}-{next(_counter)}"
