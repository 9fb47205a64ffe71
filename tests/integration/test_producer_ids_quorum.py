"""Producer id blocks on the 3-node dev cluster (issue 14): every node hands out ids from
its own controller-allocated block; after the active controller is SIGKILLed a survivor
that exhausts its block gets the next one from the new controller, and the killed node,
restarted, gets a block after every other: no producer id is ever handed out twice."""

from __future__ import annotations

import time
from typing import Any

import pytest

from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.messages import InitProducerIdRequest
from riverbed.testing.quorum_cluster import QuorumCluster

from .test_quorum import OVERRIDES, wait_leader
from .test_wire_protocol import Client

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    c = QuorumCluster(tmp_path_factory.mktemp("pids"), 3, overrides=OVERRIDES)
    try:
        c.start(timeout_s=60)
        yield c
    finally:
        c.stop()


def init_pids(port: int, n: int) -> list[int]:
    c = Client(port)
    out: list[int] = []
    try:
        deadline = time.monotonic() + 30
        while len(out) < n:
            r = c.call(
                ApiKey.INIT_PRODUCER_ID,
                4,
                InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000),
            )
            if r.error_code == 0:
                out.append(r.producer_id)
            else:  # retriable while the controller moves
                assert time.monotonic() < deadline, f"InitProducerId error {r.error_code}"
                time.sleep(0.1)
    finally:
        c.close()
    return out


def test_blocks_are_unique_across_nodes_failover_and_restart(cluster: QuorumCluster) -> None:
    seen: list[int] = []
    per_node = {i: init_pids(cluster.ports[i][0], 3) for i in cluster.ids}
    for ids in per_node.values():
        seen += ids
    assert len({ids[0] // 1000 for ids in per_node.values()}) == 3  # one block per node
    leader, _ = wait_leader(cluster, cluster.ids, 15)
    cluster.kill(leader)
    survivors = [i for i in cluster.ids if i != leader]
    wait_leader(cluster, survivors, 15)
    survivor = survivors[0]
    more = init_pids(cluster.ports[survivor][0], 1000)  # exhausts its block
    seen += more
    cluster.start_nodes([leader], timeout_s=60)
    seen += init_pids(cluster.ports[leader][0], 3)
    assert len(seen) == len(set(seen)), "a producer id was handed out twice"
    assert max(more) >= 3000  # a fourth block, from the new controller
