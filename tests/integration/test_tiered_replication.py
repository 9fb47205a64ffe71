"""Tiered storage on 3 replicating nodes: leader fail-over mid-copy, followers' indexes.

The three nodes share one ``file://`` remote tier. Segments roll every 300 ms,
so the leader is copying when it is SIGKILLed; the new leader must continue from the
remote listing with no gap and no lost segment, every acknowledged record must stay
readable from offset 0, and every replica must build the same remote log index from the
entries shipped with the remote segments.
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from riverbed.testing.quorum_cluster import QuorumCluster
from riverbed.tiered.remote_log_index import RemoteLogIndexEntry, decode_entries
from riverbed.tiered.rsm import FsspecRemoteStorageManager

from .test_replication import OVERRIDES as REPLICATION_OVERRIDES
from .test_replication import Production, create_topic, partition_state, read_all, wait_for
from .test_tiered_storage import TOPIC_CONFIGS

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def tiered_cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    base = tmp_path_factory.mktemp("tiered-replication")
    overrides = {
        **REPLICATION_OVERRIDES,
        "remote.log.storage.system.enable": "true",
        "rsm.config.url": f"file://{base / 'remote'}",
        "remote.log.manager.task.interval.ms": "200",
        "remote.log.manager.task.retry.backoff.ms": "100",
        "remote.log.manager.task.retry.backoff.max.ms": "1000",
        "log.retention.check.interval.ms": "300",
    }
    c = QuorumCluster(base / "nodes", 3, overrides=overrides)
    try:
        c.start(timeout_s=60)
        yield c, base / "remote"
    finally:
        c.stop()


def _index_entries(cluster: QuorumCluster, node: int, topic: str) -> list[RemoteLogIndexEntry]:
    part = cluster.data_dir(node) / f"{topic}-0"
    out: list[RemoteLogIndexEntry] = []
    for path in sorted(part.glob("*.remotelogindex")):
        out += decode_entries(path.read_bytes())
    return out


def _local_logs(cluster: QuorumCluster, node: int, topic: str) -> list[Path]:
    return sorted((cluster.data_dir(node) / f"{topic}-0").glob("*.log"))


def test_leader_failover_mid_copy(tiered_cluster: Any) -> None:
    cluster, remote_dir = tiered_cluster
    topic = "tiered-failover"
    admin = create_topic(cluster, topic)
    for fut in admin.alter_configs([_topic_configs(topic)]).values():
        fut.result(15)
    leader, _, _ = partition_state(admin, topic)
    with Production(cluster, topic) as prod:
        wait_for("3000 acks before the kill", lambda: len(prod.acked) >= 3000, 90)
        cluster.kill(leader)  # copying all the time: segments roll every 300 ms
        killed_at = len(prod.acked)

        def new_leader() -> bool:
            now, _, isr = partition_state(admin, topic)
            return now not in (-1, leader) and leader not in isr

        wait_for("a new leader", new_leader, 60)
        wait_for("acks after the fail-over", lambda: len(prod.acked) >= killed_at + 3000, 90)
    assert not prod.errors, prod.errors[:5]
    cluster.nodes[leader].start(60)
    wait_for("the ISR whole again", lambda: partition_state(admin, topic)[2] == [1, 2, 3], 90)
    end = max(prod.acked.values()) + 1
    time.sleep(0.5)  # one more record after segment.ms: the segment holding `end` rolls
    tail = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    tail.produce(topic, b"tail")
    assert tail.flush(30) == 0
    # the remote tier: no gap, no lost segment from offset 0 on
    rsm = FsspecRemoteStorageManager(f"file://{remote_dir}")
    topic_dir = next(remote_dir.glob(f"{topic}-*"))
    topic_id = topic_dir.name[len(topic) + 1 :]

    def tiered_far() -> Any:
        segs = rsm.list_segments(topic, 0, topic_id)
        return segs if segs and segs[-1].end_offset >= end - 1 else None

    segments = wait_for("the remote tier past the fail-over", tiered_far, 60)
    assert segments[0].base_offset == 0
    for before, after in itertools.pairwise(segments):
        assert after.base_offset <= before.end_offset + 1, (before, after)
    # every acknowledged record readable from offset 0 (remote tier, then local)
    got = read_all(cluster, topic, end)
    missing = [(v, o) for v, o in prod.acked.items() if got.get(o) != v]
    assert not missing, f"{len(missing)} acknowledged records lost: {missing[:5]}"
    # every replica builds the same remote log index and keeps only what is not remote
    wait_for(
        "identical remote indexes on the 3 replicas",
        lambda: (
            len({tuple(_index_entries(cluster, n, topic)) for n in cluster.ids}) == 1
            and _index_entries(cluster, 1, topic)
        ),
        60,
    )
    highest = max(e.last_offset for e in _index_entries(cluster, 1, topic))
    for node in cluster.ids:
        first_local = int(_local_logs(cluster, node, topic)[0].name[:20])
        assert first_local <= highest + 1, (node, first_local, highest)


def _topic_configs(topic: str) -> Any:
    from confluent_kafka.admin import ConfigResource

    # roll by time (a fail-over backlog makes batches larger than TOPIC_CONFIGS' segments)
    configs = {**TOPIC_CONFIGS, "segment.bytes": str(1024 * 1024), "segment.ms": "300"}
    return ConfigResource("topic", topic, set_config=configs)
