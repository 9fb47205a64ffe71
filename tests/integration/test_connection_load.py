"""2,000 idle connections and 100 long-polling consumers; a fresh client is answered at once.

Issue 11 (network limits): ``queued.max.requests`` (default 500) counts requests waiting
for a handler, so idle connections hold no permit, and neither do fetches parked in the
purgatory. A real broker process gets 2,000 idle TCP connections plus 100 Fetch requests
that long-poll an empty partition; a new client must still get ApiVersions, Metadata and
Produce answered within seconds, the produce wakes every parked fetch, and an old idle
connection is still served.
"""

from __future__ import annotations

import resource
import socket
import time

import pytest

from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.messages import ApiVersionsRequest, MetadataRequest
from riverbed.testing.cluster import BrokerProcess

from .test_wire_protocol import Client, batch, create_topic, fetch_req, produce, values_of

pytestmark = pytest.mark.integration

IDLE_CONNECTIONS = 2000
LONG_POLLS = 100
ANSWER_WITHIN_S = 5.0  # "at once" on a loaded 2-core machine; a stuck broker never answers


def _raise_fd_limit(wanted: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= wanted:
        return
    if hard != resource.RLIM_INFINITY and hard < wanted:
        hard = wanted  # raising the hard limit needs root (as CI runs), which the test asks for
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    except (ValueError, OSError) as e:
        pytest.fail(f"needs {wanted} file descriptors (RLIMIT_NOFILE); cannot raise it: {e}")


def test_idle_connections_and_long_polls_leave_room_for_a_fresh_client(
    broker: BrokerProcess, topic_name: str
) -> None:
    _raise_fd_limit(IDLE_CONNECTIONS + LONG_POLLS + 256)
    admin = Client(broker.port)
    create_topic(admin, topic_name)
    idle: list[socket.socket] = []
    polls: list[tuple[Client, object]] = []
    try:
        for _ in range(IDLE_CONNECTIONS):
            idle.append(socket.create_connection(("127.0.0.1", broker.port), timeout=20))
        for _ in range(LONG_POLLS):
            c = Client(broker.port)
            req = fetch_req(topic_name, [(0, 0, 1 << 20)], max_wait_ms=30000, min_bytes=1)
            polls.append((c, c.send(ApiKey.FETCH, 12, req)))
        time.sleep(0.5)  # the fetches are parked by now

        fresh = Client(broker.port)
        started = time.monotonic()
        versions = fresh.call(ApiKey.API_VERSIONS, 3, ApiVersionsRequest())
        assert versions.error_code == 0
        meta = fresh.call(ApiKey.METADATA, 12, MetadataRequest(topics=None))
        assert any(t.name == topic_name for t in meta.topics)
        assert produce(fresh, topic_name, batch(b"wake")).error_code == 0
        assert time.monotonic() - started < ANSWER_WITHIN_S
        fresh.close()

        for c, header in polls:  # the produce woke every parked fetch
            r = c.recv(header)  # type: ignore[arg-type]
            assert values_of(r.responses[0].partitions[0].records) == [b"wake"]
        old = Client.__new__(Client)  # an old idle connection is served too
        old.sock, old.ids = idle[0], iter(range(1, 10))
        assert old.call(ApiKey.API_VERSIONS, 3, ApiVersionsRequest()).error_code == 0
    finally:
        for s in idle:
            s.close()
        for c, _ in polls:
            c.close()
        admin.close()
