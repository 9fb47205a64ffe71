"""Broker registration across restarts (issue 18, defect 2): a new incarnation is refused
while the old session lives, registrations start fenced and are unfenced once caught up,
and an unclean shutdown takes the broker out of every ISR, so a broker that restarted with
a shorter log is never elected by a clean election.

``Cluster`` runs the real controller and the real partition cores (over in-memory logs)
of three brokers by hand: fetches, AlterPartition, heartbeats and session expiry are
steps the test takes, so each scenario is exactly the issue's sequence.
"""

from __future__ import annotations

import uuid

import pytest

from riverbed.metadata.control_common import ControllerError
from riverbed.metadata.controller import Controller, ControllerConfig
from riverbed.metadata.image import BrokerEndpoint, MetadataImage, PartitionRegistration, replay_all
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import CreateTopicsRequest, Message
from riverbed.replication.actions import Action, AlterIsr, FetchResult
from riverbed.replication.config import ReplicaConfig
from riverbed.replication.partition import Partition
from riverbed.replication.wire import alter_partition_request, alter_partition_results
from riverbed.testing.replication_sim_parts import MemLog

SESSION_MS = 9000
CONFIG = ReplicaConfig(replica_lag_time_max_ms=30_000, min_insync_replicas=2)
TOPIC = "orders"
ACKED = 10


class Cluster:
    """Controller + three broker processes (``alive``: a process that applies metadata)."""

    def __init__(self, replicas: tuple[int, ...]) -> None:
        self.c = Controller(ControllerConfig(node_id=0))
        self.image = MetadataImage.EMPTY
        self.offset = 0
        self.now = 0
        self.logs = {b: MemLog() for b in replicas}
        self.cores: dict[int, Partition] = {}
        self.epochs: dict[int, int] = {}
        self.incarnations = {b: uuid.UUID(int=b) for b in replicas}
        self.last_heartbeat: dict[int, int] = {}
        self.stalled: set[int] = set()  # SIGSTOPped: no fetches, no heartbeats
        self.commit(self.c.bootstrap_records())
        for b in replicas:
            self.register(b)
            self.heartbeat(b)
        CT = CreateTopicsRequest
        assignment = CT.CreatableReplicaAssignment(partition_index=0, broker_ids=list(replicas))
        ct = CT.CreatableTopic(
            name=TOPIC, num_partitions=-1, replication_factor=-1, assignments=[assignment]
        )
        self.commit(self.c.create_topics(self.image, CreateTopicsRequest(topics=[ct]), 0).records)
        self.apply_all()

    # ---------------------------------------------------------------- controller side
    def commit(self, records: list[Message]) -> None:
        if records:
            self.offset += 1
            self.image = replay_all(self.image, records, offset=self.offset)

    def part(self) -> PartitionRegistration:
        reg = self.image.partition(TOPIC, 0)
        assert reg is not None
        return reg

    def session_live(self, b: int) -> bool:
        return self.now - self.last_heartbeat.get(b, -SESSION_MS - 1) <= SESSION_MS

    def register(self, b: int, previous_epoch: int = -1) -> None:
        old = self.image.brokers.get(b)
        live = old is not None and not old.fenced and self.session_live(b)
        result = self.c.register_broker(
            self.image,
            b,
            self.incarnations[b],
            [BrokerEndpoint("PLAINTEXT", "h", 9090 + b)],
            None,
            self.now,
            session_live=live,
            previous_broker_epoch=previous_epoch,
        )
        self.commit(list(result.records))
        self.epochs[b] = self.image.brokers[b].broker_epoch
        self.last_heartbeat[b] = self.now

    def heartbeat(self, b: int) -> None:
        """A heartbeat of a broker that has applied the image (caught up)."""
        self.last_heartbeat[b] = self.now
        result = self.c.unfence_broker(
            self.image, b, self.epochs[b], self.now, metadata_offset=self.image.offset
        )
        self.commit(list(result.records))

    def expire_sessions(self) -> None:
        for b, reg in sorted(self.image.brokers.items()):
            if not reg.fenced and not self.session_live(b):
                self.commit(list(self.c.fence_broker(self.image, b, self.now).records))

    # ---------------------------------------------------------------- broker side
    def apply_all(self) -> None:
        for b in self.cores.keys() | self.epochs.keys():
            self.apply(b)

    def apply(self, b: int) -> None:
        if b not in self.epochs:
            return  # not registered: a broker does not act on partition state before
        core = self.cores.get(b)
        if core is None:
            core = Partition(b, self.logs[b], CONFIG, broker_epoch=self.epochs[b])
            self.cores[b] = core
        core.set_broker_epoch(self.epochs[b])
        self.run(b, core.apply_registration(self.part(), self.now))

    def run(self, b: int, actions: list[Action]) -> None:
        for a in actions:
            if not isinstance(a, AlterIsr):
                continue
            topic = self.image.topic(TOPIC)
            assert topic is not None
            items = [(topic.topic_id, 0, a)]
            request = alter_partition_request(b, self.epochs[b], items)
            result = self.c.alter_partition(self.image, request, self.now)
            self.commit(list(result.records))
            (answer,) = alter_partition_results(items, result.response, ErrorCode.NONE)
            leader = self.cores[b].leader
            if leader is not None:
                self.run(b, leader.on_alter_partition_response(answer, self.now))
            self.apply_all()

    def fetch_rounds(self, rounds: int = 20) -> None:
        """Followers fetch from the leader until nothing moves (``rounds`` at most)."""
        for _ in range(rounds):
            for b, core in sorted(self.cores.items()):
                if b in self.stalled:
                    continue
                follower = core.follower
                leader_core = self.cores.get(follower.leader_id) if follower else None
                if follower is None or leader_core is None or leader_core.leader is None:
                    continue
                pos = follower.fetch_position(self.now)
                if pos is None:
                    continue
                answer, actions = leader_core.leader.on_follower_fetch(pos, self.now)
                self.run(follower.leader_id, actions)
                data = None
                if answer.read_records:
                    data = self.logs[follower.leader_id].read(pos.fetch_offset, 4) or None
                if core.follower is not None:
                    self.run(b, core.follower.on_fetch_result(FetchResult(pos, answer, data), 0))
            self.now += 10

    def produce_acked(self, count: int) -> list[str]:
        """acks=all: append on the leader, replicate, and return what the HW covers."""
        leader = self.cores[self.part().leader]
        assert leader.leader is not None
        assert leader.leader.check_produce(-1) is ErrorCode.NONE
        for i in range(count):
            self.logs[leader.broker_id].append_as_leader(f"v{i}", leader.leader_epoch)
            self.run(leader.broker_id, leader.leader.on_local_append(self.now))
        self.fetch_rounds()
        hw = leader.high_watermark
        assert hw == count and len(self.part().isr) >= CONFIG.min_insync_replicas
        return [value for _, value in self.logs[leader.broker_id].records[:hw]]

    def restart_with_empty_log(self, b: int) -> None:
        """SIGKILL and a new disk (or a lost unflushed tail): memory and log are gone."""
        self.cores.pop(b)
        self.epochs.pop(b)
        self.logs[b] = MemLog()
        self.incarnations[b] = uuid.uuid4()


def _issue_cluster() -> tuple[Cluster, list[str]]:
    # RF 3, min.insync.replicas 2: replica 3 restarts and is second in election order
    cluster = Cluster((1, 3, 2))
    cluster.fetch_rounds()
    assert set(cluster.part().isr) == {1, 2, 3} and cluster.part().leader == 1
    return cluster, cluster.produce_acked(ACKED)


def test_a_follower_restarted_with_an_empty_log_in_its_session_is_not_elected() -> None:
    cluster, acked = _issue_cluster()
    cluster.restart_with_empty_log(3)
    # the new incarnation registers while the old session is live: refused (Kafka's
    # DUPLICATE_BROKER_REGISTRATION), so it neither keeps the ISR seat nor acts on it
    with pytest.raises(ControllerError) as refused:
        cluster.register(3)
    assert refused.value.code == ErrorCode.DUPLICATE_BROKER_REGISTRATION
    # leader 1 stalls (SIGSTOP) past the session timeout; only broker 2 heartbeats, and
    # the new process of 3 keeps asking to register
    cluster.stalled.add(1)
    for _ in range(SESSION_MS // 1000 + 2):
        cluster.now += 1000
        cluster.heartbeat(2)
        cluster.expire_sessions()
        try:
            cluster.register(3)
        except ControllerError:
            continue
        cluster.apply(3)
        cluster.heartbeat(3)
    part = cluster.part()
    assert part.leader == 2, part
    assert 3 not in part.isr
    cluster.apply_all()
    cluster.fetch_rounds()
    leader_log = cluster.logs[part.leader].records
    assert [value for _, value in leader_log[:ACKED]] == acked  # nothing acknowledged lost
    assert [value for _, value in cluster.logs[3].records[:ACKED]] == acked  # 3 caught up
    assert set(cluster.part().isr) == {2, 3}  # and rejoined through AlterPartition


def test_an_unclean_restart_of_the_last_isr_member_leaves_the_partition_leaderless() -> None:
    cluster, acked = _issue_cluster()
    # 1 and 2 stop heartbeating: fenced, they leave the ISR; 3 is its last member
    cluster.now += SESSION_MS + 1
    cluster.heartbeat(3)
    cluster.expire_sessions()
    assert cluster.part().isr == (3,) and cluster.part().leader == 3
    # 3 loses its unflushed tail in a power failure (no clean-shutdown marker)
    cluster.now += SESSION_MS + 1
    cluster.expire_sessions()
    assert cluster.part().isr == (3,) and cluster.part().leader == -1
    cluster.restart_with_empty_log(3)
    cluster.register(3, previous_epoch=-1)
    assert cluster.part().isr == () and cluster.part().leader == -1
    cluster.apply(3)
    cluster.heartbeat(3)
    # unfenced, but not elected: only an unclean election (the user's choice) could
    assert not cluster.image.brokers[3].fenced
    assert cluster.part().leader == -1
    for b in (1, 2):  # the replicas holding the records come back, cleanly
        cluster.register(b, previous_epoch=cluster.epochs[b])
        cluster.apply(b)
        cluster.heartbeat(b)
    assert cluster.part().leader == -1  # outside the ISR: no clean election either
    assert acked == [value for _, value in cluster.logs[1].records[:ACKED]]


def test_a_clean_restart_keeps_the_last_isr_seat_and_leads_again() -> None:
    cluster, acked = _issue_cluster()
    cluster.now += SESSION_MS + 1
    cluster.heartbeat(3)
    cluster.expire_sessions()
    # 3, the last ISR member, shuts down cleanly (controlled shutdown fences it) ...
    shutdown = cluster.c.controlled_shutdown(cluster.image, 3, cluster.epochs[3], cluster.now)
    assert shutdown.response == 0
    cluster.commit(list(shutdown.records))
    assert cluster.image.brokers[3].fenced and cluster.part().isr == (3,)
    # ... and restarts at once with its epoch in the clean-shutdown marker
    epoch = cluster.epochs.pop(3)
    cluster.cores.pop(3)
    cluster.incarnations[3] = uuid.uuid4()
    cluster.register(3, previous_epoch=epoch)
    assert cluster.image.brokers[3].fenced and cluster.part().leader == -1  # fenced first
    cluster.apply(3)
    cluster.heartbeat(3)
    assert cluster.part().leader == 3 and cluster.part().isr == (3,)
    assert [value for _, value in cluster.logs[3].records[:ACKED]] == acked


def test_registration_starts_fenced_and_waits_for_the_metadata_offset() -> None:
    c = Controller(ControllerConfig(node_id=0))
    image = replay_all(MetadataImage.EMPTY, c.bootstrap_records(), offset=0)
    res = c.register_broker(image, 4, uuid.uuid4(), [], None, 0)
    image = replay_all(image, res.records, offset=5)
    reg = image.brokers[4]
    assert reg.fenced and reg.registered_offset == 5
    assert not any(type(r).__name__ == "UnfenceBrokerRecord" for r in res.records)
    early = c.unfence_broker(image, 4, reg.broker_epoch, 0, metadata_offset=4)
    assert early.records == [] and early.response.fenced
    done = c.unfence_broker(image, 4, reg.broker_epoch, 0, metadata_offset=5)
    assert not replay_all(image, done.records).brokers[4].fenced


def test_a_new_incarnation_is_refused_while_the_session_lives_but_a_retry_is_not() -> None:
    c = Controller(ControllerConfig(node_id=0))
    image = replay_all(MetadataImage.EMPTY, c.bootstrap_records(), offset=0)
    first = uuid.uuid4()
    image = replay_all(image, c.register_broker(image, 4, first, [], None, 0).records, offset=1)
    image = replay_all(
        image, c.unfence_broker(image, 4, -1, 0, metadata_offset=1).records, offset=2
    )
    with pytest.raises(ControllerError) as refused:
        c.register_broker(image, 4, uuid.uuid4(), [], None, 0, session_live=True)
    assert refused.value.code == ErrorCode.DUPLICATE_BROKER_REGISTRATION
    # the same incarnation asking again (a lost answer) is not a duplicate
    again = c.register_broker(image, 4, first, [], None, 0, session_live=True)
    assert replay_all(image, again.records).brokers[4].incarnation_id == first
    # once the session has expired, the new incarnation is taken (fenced)
    later = c.register_broker(image, 4, uuid.uuid4(), [], None, 0, session_live=False)
    assert replay_all(image, later.records).brokers[4].fenced
