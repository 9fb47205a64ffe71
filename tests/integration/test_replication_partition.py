"""A network partition between real nodes (fault proxy): the partition leader is cut off
from the controller quorum while its followers still reach it.

Every node reaches the other voters through its own ``FaultProxy`` per peer (its
``controller.quorum.voters`` names the proxies), so cutting the proxies to and from node L
isolates L's metadata and heartbeats but not the data plane. Then, under idempotent acks=all
production: L is fenced and another ISR member is elected; L, still believing it leads, can
no longer acknowledge acks=all writes (its followers follow the new leader); after healing
L truncates what it alone appended and rejoins; nothing acknowledged is lost.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from riverbed.testing.fault_proxy import FaultProxy
from riverbed.testing.quorum_cluster import QuorumCluster

from .test_replication import (
    OVERRIDES,
    Production,
    create_topic,
    partition_state,
    read_all,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]
#: After a cut, time for the cut node to apply what reached it before the cut.
VIEW_SETTLE_S = 1.0


@pytest.fixture
def proxied(tmp_path: Path) -> Iterator[tuple[QuorumCluster, dict[tuple[int, int], FaultProxy]]]:
    c = QuorumCluster(tmp_path, 3, overrides=OVERRIDES)
    proxies: dict[tuple[int, int], FaultProxy] = {}
    for i in c.ids:
        voters = []
        for j in c.ids:
            port = c.ports[j][1]
            if i != j:
                proxies[(i, j)] = FaultProxy("127.0.0.1", port)
                port = proxies[(i, j)].port
            voters.append(f"{j}@127.0.0.1:{port}")
        c.nodes[i].extra_overrides["controller.quorum.voters"] = ",".join(voters)
    try:
        c.start(timeout_s=60)
        yield c, proxies
    finally:
        c.stop()
        for p in proxies.values():
            p.close()


def _leads_by_its_own_view(
    admin: AdminClient, cluster: QuorumCluster, topic: str, node: int
) -> bool:
    """Whether ``node``'s own metadata names it the partition's leader."""
    try:
        return bool(partition_state(admin, topic, _client_address(cluster, node))[0] == node)
    except Exception:  # a node that cannot answer does not lead
        return False


def _client_address(cluster: QuorumCluster, node: int) -> str:
    return f"127.0.0.1:{cluster.ports[node][0]}"


def _cut(proxies: dict[tuple[int, int], FaultProxy], node: int, others: list[int]) -> None:
    for j in others:
        proxies[(node, j)].cut()
        proxies[(j, node)].cut()


def _heal(proxies: dict[tuple[int, int], FaultProxy]) -> None:
    for p in proxies.values():
        p.heal()


def _cut_off_the_leader(
    admin: AdminClient,
    cluster: QuorumCluster,
    proxies: dict[tuple[int, int], FaultProxy],
    topic: str,
) -> int:
    """Cut the partition's leader off from the quorum and return it. The leader is read
    right before the cut and confirmed by the cut node's own (now frozen) metadata after
    it: on a loaded machine leadership can move during the warm-up (a heartbeat missed
    for ``broker.session.timeout.ms`` fences a broker), and a node cut off while it does
    not lead is not the scenario under test: a cut-off follower's metadata sends the
    test's producer to the real leader, which acknowledges (the signature of one CI
    failure, ``AssertionError: [None]``, reproduced by cutting off a follower). Then:
    heal, wait, cut again."""
    attempts_max = 3
    for _ in range(attempts_max):
        leader = wait_for("a leader", lambda: partition_state(admin, topic)[0], 30)
        others = [i for i in cluster.ids if i != leader]
        _cut(proxies, leader, others)
        # what the quorum sent before the cut may still be applied: the view is frozen
        # only once that is done (a leader change already on the wire at the cut was
        # applied after a single look, and the producer below was acknowledged by the
        # real leader: the same `[None]`, in a 2-worker make test)
        time.sleep(VIEW_SETTLE_S)
        if _leads_by_its_own_view(admin, cluster, topic, leader):
            return int(leader)
        _heal(proxies)
        wait_for(
            "the whole ISR back before cutting again",
            lambda: partition_state(admin, topic)[2] == [1, 2, 3],
            60,
        )
    raise AssertionError(f"the leader moved at each of {attempts_max} cuts")


def test_leader_cut_off_from_the_controller_loses_nothing_acknowledged(
    proxied: tuple[QuorumCluster, dict[tuple[int, int], FaultProxy]],
) -> None:
    cluster, proxies = proxied
    topic = "partitioned"
    admin = create_topic(cluster, topic)
    # records sent to the isolated leader time out (never acknowledged): 10 s, not 60
    with Production(cluster, topic, timeout_ms=10000) as prod:
        wait_for("acks before the cut", lambda: len(prod.acked) >= 1000, 60)
        leader = _cut_off_the_leader(admin, cluster, proxies, topic)
        others = [i for i in cluster.ids if i != leader]
        via = _client_address(cluster, others[0])
        wait_for(
            "a new leader elected by the majority side",
            lambda: partition_state(admin, topic, via)[0] in others,
            30,
        )
        # the isolated node still answers as leader but cannot commit acks=all writes
        stale: list[Any] = []
        direct = Producer(
            {
                "bootstrap.servers": f"127.0.0.1:{cluster.ports[leader][0]}",
                "acks": "all",
                "retries": 0,
                "request.timeout.ms": 3000,
                "message.timeout.ms": 6000,
            }
        )
        direct.produce(topic, b"isolated", on_delivery=lambda e, m: stale.append(e))
        direct.flush(20)
        cut_off_view = partition_state(admin, topic, _client_address(cluster, leader))
        assert len(stale) == 1 and stale[0] is not None, (stale, leader, cut_off_view)
        at_cut = len(prod.acked)
        wait_for("acks through the new leader", lambda: len(prod.acked) >= at_cut + 1000, 90)
        _heal(proxies)
        wait_for(
            "the healed node back in the ISR",
            lambda: partition_state(admin, topic, via)[2] == [1, 2, 3],
            60,
        )
    got = read_all(cluster, topic, max(prod.acked.values()) + 1)
    missing = [(v, o) for v, o in prod.acked.items() if got.get(o) != v]
    assert not missing, f"{len(missing)} acknowledged records lost: {missing[:5]}"
    assert b"isolated" not in got.values()  # truncated away on rejoining
