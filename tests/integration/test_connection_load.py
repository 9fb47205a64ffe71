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
import urllib.request

import pytest

from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.messages import ApiVersionsRequest, MetadataRequest
from riverbed.testing.cluster import BrokerProcess, scaled_s

from .test_wire_protocol import Client, batch, create_topic, fetch_req, produce, values_of

pytestmark = pytest.mark.integration

IDLE_CONNECTIONS = 2000
LONG_POLLS = 100
ANSWER_WITHIN_S = 5.0  # "at once" on a loaded 2-core machine; a stuck broker never answers
#: Connections opened before waiting for the broker to accept them: below the listen backlog
#: (socket.listen.backlog.size, 50), whose overflow costs a dropped SYN and a 1 s resend
CONNECT_BATCH = 40
#: Liveness bound of a wait for the broker's metrics (not a timing under test)
WAIT_S = 60.0
POLL_S = 0.01
CLIENT_CONNECTIONS = 'kafka_server_socket_server_metrics_connection_count{listener="PLAINTEXT",'
PARKED_FETCHES = 'kafka_server_delayedoperationpurgatory_purgatorysize{delayedOperation="Fetch"}'


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


def _gauge(broker: BrokerProcess, sample: str) -> float:
    """The value of the one /metrics sample whose line starts with ``sample``."""
    text = urllib.request.urlopen(broker.http_url + "/metrics", timeout=10).read().decode()
    (value,) = (line.rsplit(" ", 1)[1] for line in text.splitlines() if line.startswith(sample))
    return float(value)


def _wait_gauge(broker: BrokerProcess, sample: str, wanted: int) -> None:
    deadline = time.monotonic() + scaled_s(WAIT_S)
    while (seen := _gauge(broker, sample)) != wanted:
        assert time.monotonic() < deadline, f"{sample} is {seen}, not {wanted}"
        time.sleep(POLL_S)


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
            if len(idle) % CONNECT_BATCH == 0:  # the broker holds every one of them
                _wait_gauge(broker, CLIENT_CONNECTIONS, len(idle) + 1)  # + the admin connection
        for _ in range(LONG_POLLS):
            c = Client(broker.port)
            req = fetch_req(topic_name, [(0, 0, 1 << 20)], max_wait_ms=30000, min_bytes=1)
            polls.append((c, c.send(ApiKey.FETCH, 12, req)))
            if len(polls) % CONNECT_BATCH == 0:
                _wait_gauge(broker, CLIENT_CONNECTIONS, len(idle) + len(polls) + 1)
        _wait_gauge(broker, PARKED_FETCHES, LONG_POLLS)  # every fetch is parked

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
