import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from riverbed.metadata.control_common import ControllerError
from riverbed.metadata.image import MetadataImage, image_to_records, replay_all
from riverbed.metadata.partition_control import ELECTION_PREFERRED, ELECTION_UNCLEAN
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionRequest,
    CreatePartitionsRequest,
    ElectLeadersRequest,
)

from .conftest import cluster_image, make_controller, register_live
from .test_controller import create, topic

AP = AlterPartitionRequest


def three_brokers(rf=3, partitions=3, configs=None, *, in_sync=True):
    """Topic t on 3 brokers. A new partition's ISR is every active replica (Kafka's
    rule); without `in_sync` each leader then shrank its ISR to itself with
    AlterPartition (its followers fell behind)."""
    c = make_controller()
    image = cluster_image(c, brokers=3)
    _, image = create(c, image, topic("t", partitions, rf, configs=configs))
    for p in image.topic("t").partitions.values():
        assert p.isr == p.replicas and p.leader == p.replicas[0]
    if not in_sync:
        for index, p in sorted(image.topic("t").partitions.items()):
            res = c.alter_partition(image, isr_change(image, p.leader, (p.leader,), index=index), 0)
            assert res.response.topics[0].partitions[0].error_code == 0
            image = apply(image, res)
    return c, image


def apply(image, result):
    return replay_all(image, result.records)


def test_fencing_moves_leaders_and_shrinks_isr():
    c, image = three_brokers()
    before = image.topic("t").partitions
    led_by_1 = [i for i, p in before.items() if p.leader == 1]
    assert led_by_1
    image = apply(image, c.fence_broker(image, 1, 0))
    assert image.brokers[1].fenced
    for i, p in image.topic("t").partitions.items():
        assert 1 not in p.isr and p.leader != 1
        assert p.partition_epoch == before[i].partition_epoch + 1
        bumped = before[i].leader_epoch + 1 if i in led_by_1 else before[i].leader_epoch
        assert p.leader_epoch == bumped
    # fencing again changes nothing
    assert c.fence_broker(image, 1, 0).records == []


def test_last_isr_member_stays_and_comes_back_as_leader():
    c, image = three_brokers()
    for b in (1, 2, 3):
        image = apply(image, c.fence_broker(image, b, 0))
    for p in image.topic("t").partitions.values():
        assert p.leader == -1 and len(p.isr) == 1
    last = image.topic("t").partitions[0].isr[0]
    others = [b for b in (1, 2, 3) if b != last]
    # an out-of-ISR broker coming back cannot lead (clean election only)
    image = apply(image, c.unfence_broker(image, others[0], -1, 0, metadata_offset=image.offset))
    assert image.topic("t").partitions[0].leader == -1
    image = apply(image, c.unfence_broker(image, last, -1, 0, metadata_offset=image.offset))
    assert image.topic("t").partitions[0].leader == last


def test_unclean_election_when_topic_allows_it():
    c, image = three_brokers(configs={"unclean.leader.election.enable": "true"})
    for b in (1, 2, 3):
        image = apply(image, c.fence_broker(image, b, 0))
    p0 = image.topic("t").partitions[0]
    other = next(b for b in (1, 2, 3) if b not in p0.isr)
    image = apply(image, c.unfence_broker(image, other, -1, 0, metadata_offset=image.offset))
    p0 = image.topic("t").partitions[0]
    assert p0.leader == other and p0.isr == (other,) and p0.leader_recovery_state == 1


def test_controlled_shutdown():
    c, image = three_brokers()
    epoch = image.brokers[2].broker_epoch
    res = c.controlled_shutdown(image, 2, epoch, 0)
    assert res.response == 0
    image = apply(image, res)
    assert image.brokers[2].in_controlled_shutdown
    assert all(p.leader != 2 for p in image.topic("t").partitions.values())
    with pytest.raises(ControllerError) as info:
        c.controlled_shutdown(image, 2, epoch + 7, 0)
    assert info.value.code == ErrorCode.STALE_BROKER_EPOCH
    # with one replica there is nowhere to move: the partitions become leaderless
    c1 = make_controller()
    img1 = cluster_image(c1, brokers=1)
    _, img1 = create(c1, img1, topic("solo", 2, 1))
    res = c1.controlled_shutdown(img1, 1, img1.brokers[1].broker_epoch, 0)
    assert res.response == 0
    img1 = apply(img1, res)
    assert all(p.leader == -1 and p.isr == (1,) for p in img1.topic("solo").partitions.values())
    # done: fenced in the same batch (Kafka's SHUTDOWN_NOW), so a restart registers at once
    assert img1.brokers[1].fenced
    # unfencing does not end a controlled shutdown; registering again (a restart) does
    assert c1.unfence_broker(img1, 1, -1, 0, metadata_offset=img1.offset).records == []
    img1 = register_live(c1, img1, 1)
    assert not img1.brokers[1].in_controlled_shutdown
    assert all(p.leader == 1 for p in img1.topic("solo").partitions.values())


def isr_change(
    image,
    leader_broker,
    new_isr,
    *,
    leader_epoch=None,
    partition_epoch=None,
    broker_epoch=None,
    index=0,
):
    t = image.topic("t")
    p = t.partitions[index]
    return AP(
        broker_id=leader_broker,
        broker_epoch=image.brokers[leader_broker].broker_epoch if broker_epoch is None else broker_epoch,
        topics=[
            AP.TopicData(
                topic_id=t.topic_id,
                partitions=[
                    AP.PartitionData(
                        partition_index=index,
                        leader_epoch=p.leader_epoch if leader_epoch is None else leader_epoch,
                        new_isr_with_epochs=[AP.BrokerState(broker_id=b) for b in new_isr],
                        partition_epoch=p.partition_epoch if partition_epoch is None else partition_epoch,
                    )
                ],
            )
        ],
    )  # fmt: skip


def test_alter_partition_shrink_and_expand():
    c, image = three_brokers()
    p = image.topic("t").partitions[0]
    leader = p.leader
    follower = next(r for r in p.replicas if r != leader)
    smaller = tuple(r for r in p.isr if r != follower)
    res = c.alter_partition(image, isr_change(image, leader, smaller), 0)
    (part,) = res.response.topics[0].partitions
    assert res.response.error_code == 0 and part.error_code == 0
    assert tuple(part.isr) == smaller and part.partition_epoch == p.partition_epoch + 1
    image = apply(image, res)
    assert image.topic("t").partitions[0].isr == smaller
    assert image.topic("t").partitions[0].leader_epoch == p.leader_epoch
    # the same request again is stale
    res = c.alter_partition(
        image, isr_change(image, leader, smaller, partition_epoch=p.partition_epoch), 0
    )
    assert res.response.topics[0].partitions[0].error_code == ErrorCode.INVALID_UPDATE_VERSION
    # expand back
    res = c.alter_partition(image, isr_change(image, leader, p.isr), 0)
    assert res.response.topics[0].partitions[0].error_code == 0
    assert apply(image, res).topic("t").partitions[0].isr == p.isr


def test_alter_partition_errors():
    c, image = three_brokers()
    p = image.topic("t").partitions[0]
    leader = p.leader
    follower = next(r for r in p.replicas if r != leader)

    def code(req):
        res = c.alter_partition(image, req, 0)
        assert res.records == []
        return res.response.error_code or res.response.topics[0].partitions[0].error_code

    assert code(isr_change(image, follower, p.isr)) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert (
        code(isr_change(image, leader, p.isr, leader_epoch=p.leader_epoch - 1))
        == ErrorCode.FENCED_LEADER_EPOCH
    )
    assert code(isr_change(image, leader, (follower,))) == ErrorCode.INVALID_REQUEST
    assert code(isr_change(image, leader, (leader, 99))) == ErrorCode.INELIGIBLE_REPLICA
    assert (
        code(isr_change(image, leader, p.isr, broker_epoch=12345)) == ErrorCode.STALE_BROKER_EPOCH
    )
    # a fenced broker cannot rejoin the ISR
    shrunk = apply(image, c.alter_partition(image, isr_change(image, leader, (leader,)), 0))
    fenced = apply(shrunk, c.fence_broker(shrunk, follower, 0))
    res = c.alter_partition(fenced, isr_change(fenced, leader, (leader, follower)), 0)
    assert res.response.topics[0].partitions[0].error_code == ErrorCode.INELIGIBLE_REPLICA


def test_preferred_and_unclean_elections():
    c, image = three_brokers()
    p0 = image.topic("t").partitions[0]
    preferred = p0.replicas[0]
    image = apply(image, c.fence_broker(image, preferred, 0))
    assert image.topic("t").partitions[0].leader != preferred
    # back, but not in the ISR yet: preferred election is not possible
    image = apply(image, c.unfence_broker(image, preferred, -1, 0, metadata_offset=image.offset))
    req = ElectLeadersRequest(
        election_type=ELECTION_PREFERRED,
        topic_partitions=[ElectLeadersRequest.TopicPartitions(topic="t", partitions=[0])],
    )
    res = c.elect_leaders(image, req, 0)
    assert (
        res.response.replica_election_results[0].partition_result[0].error_code
        == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    )
    # the leader adds it back to the ISR, then the election moves leadership home
    cur = image.topic("t").partitions[0]
    image = apply(
        image, c.alter_partition(image, isr_change(image, cur.leader, (*cur.isr, preferred)), 0)
    )
    res = c.elect_leaders(image, req, 0)
    assert res.response.replica_election_results[0].partition_result[0].error_code == 0
    image = apply(image, res)
    assert image.topic("t").partitions[0].leader == preferred
    again = c.elect_leaders(image, req, 0)
    assert (
        again.response.replica_election_results[0].partition_result[0].error_code
        == ErrorCode.ELECTION_NOT_NEEDED
    )
    unclean = c.elect_leaders(
        image, ElectLeadersRequest(election_type=ELECTION_UNCLEAN, topic_partitions=None), 0
    )
    # every partition has a leader, so nothing to do; as Kafka, an election over all
    # partitions (topic_partitions null) does not list the ones that need none
    assert unclean.records == []
    assert [(e.topic, e.partition_result) for e in unclean.response.replica_election_results] == [
        ("t", [])
    ]


def test_election_of_an_unknown_topic_or_partition_fails_that_item_only():
    c, image = three_brokers()
    req = ElectLeadersRequest(
        election_type=ELECTION_PREFERRED,
        topic_partitions=[
            ElectLeadersRequest.TopicPartitions(topic="t", partitions=[7]),
            ElectLeadersRequest.TopicPartitions(topic="nope", partitions=[0]),
        ],
    )
    res = c.elect_leaders(image, req, 0)
    by_topic = {
        e.topic: [(r.partition_id, r.error_code, r.error_message) for r in e.partition_result]
        for e in res.response.replica_election_results
    }
    missing = "This server does not host this topic-partition."
    assert by_topic == {
        "t": [(7, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, missing)],
        "nope": [(0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, missing)],
    }
    assert res.records == []


OPS = st.lists(
    st.tuples(
        st.sampled_from(
            ["fence", "unfence", "shutdown", "shrink", "expand", "preferred", "unclean"]
        ),
        st.integers(1, 3),
        st.integers(0, 3),
    ),
    max_size=25,
)


@settings(max_examples=120, deadline=None)
@given(ops=OPS, unclean=st.booleans())
def test_leadership_invariants_hold(ops, unclean):
    c = make_controller()
    image = cluster_image(c, brokers=3)
    cfg = {"unclean.leader.election.enable": "true"} if unclean else None
    _, image = create(c, image, topic("t", 4, 3, configs=cfg))
    log = image_to_records(image)
    epochs = {
        i: (p.leader_epoch, p.partition_epoch) for i, p in image.topic("t").partitions.items()
    }
    for kind, broker, index in ops:
        part = image.topic("t").partitions[index]
        if kind == "fence":
            res = c.fence_broker(image, broker, 0)
        elif kind == "unfence":
            res = c.unfence_broker(image, broker, -1, 0, metadata_offset=image.offset)
        elif kind == "shutdown":
            res = c.controlled_shutdown(image, broker, -1, 0)
        elif kind in ("shrink", "expand"):
            if part.leader == -1:
                continue
            isr = (
                tuple(r for r in part.isr if r != broker)
                if kind == "shrink"
                else (*part.isr, broker)
            )
            t = image.topic("t")
            req = AP(
                broker_id=part.leader,
                broker_epoch=-1,
                topics=[AP.TopicData(topic_id=t.topic_id, partitions=[AP.PartitionData(
                    partition_index=index, leader_epoch=part.leader_epoch,
                    new_isr=list(dict.fromkeys(isr)), partition_epoch=part.partition_epoch)])],
            )  # fmt: skip
            res = c.alter_partition(image, req, 0)
        elif kind in ("reassign", "cancel"):
            AR = AlterPartitionReassignmentsRequest
            target = None if kind == "cancel" else [broker, broker % 3 + 1][: 1 + index % 2]
            req = AR(topics=[AR.ReassignableTopic(name="t", partitions=[
                AR.ReassignablePartition(partition_index=index, replicas=target)])])  # fmt: skip
            res = c.alter_partition_reassignments(image, req, 0)
        else:
            req = ElectLeadersRequest(
                election_type=ELECTION_PREFERRED if kind == "preferred" else ELECTION_UNCLEAN,
                topic_partitions=[
                    ElectLeadersRequest.TopicPartitions(topic="t", partitions=[index])
                ],
            )
            res = c.elect_leaders(image, req, 0)
        image = replay_all(image, res.records)
        log += res.records
        for i, p in image.topic("t").partitions.items():
            assert p.isr, "the ISR never becomes empty"
            assert set(p.isr) <= set(p.replicas)
            assert set(p.adding_replicas) <= set(p.replicas)
            assert set(p.removing_replicas) <= set(p.replicas)
            assert not set(p.adding_replicas) & set(p.removing_replicas)
            assert len(set(p.replicas)) == len(p.replicas)
            assert p.leader == -1 or p.leader in p.isr
            if p.leader != -1:
                b = image.brokers[p.leader]
                assert not b.fenced and not b.in_controlled_shutdown
            le, pe = epochs[i]
            assert p.leader_epoch >= le and p.partition_epoch >= pe
            epochs[i] = (p.leader_epoch, p.partition_epoch)
    assert replay_all(MetadataImage.EMPTY, log) == image


# --- a new ISR is every active replica; leaders alone in their ISR (controller) -------


def elect(c, image, election_type, index=0):
    req = ElectLeadersRequest(
        election_type=election_type,
        topic_partitions=[ElectLeadersRequest.TopicPartitions(topic="t", partitions=[index])],
    )
    res = c.elect_leaders(image, req, 0)
    return res.response.replica_election_results[0].partition_result[0].error_code, apply(
        image, res
    )


def test_new_partitions_start_with_every_active_replica_in_sync():
    # Kafka's ReplicationControlManager: isr = replicas.filter(isActive), leader isr[0]
    c = make_controller()
    image = cluster_image(c, brokers=3)
    res, image = create(c, image, topic("t", 3, 3))
    records = [r for r in res.records if type(r).__name__ == "PartitionRecord"]
    assert len(records) == 3
    for rec in records:
        assert rec.isr == rec.replicas and rec.leader == rec.replicas[0]
    # a fenced broker and one in controlled shutdown are assigned but not in sync
    image = apply(image, c.fence_broker(image, 2, 0))
    image = apply(image, c.controlled_shutdown(image, 3, image.brokers[3].broker_epoch, 0))
    CP = CreatePartitionsRequest
    assignments = [[2, 3, 1], [3, 1, 2]]
    req = CP(
        topics=[
            CP.CreatePartitionsTopic(
                name="t",
                count=5,
                assignments=[CP.CreatePartitionsAssignment(broker_ids=a) for a in assignments],
            )
        ],
        timeout_ms=0,
    )
    res = c.create_partitions(image, req, 0)
    records = [r for r in res.records if type(r).__name__ == "PartitionRecord"]
    assert [(r.replicas, r.isr, r.leader) for r in records] == [
        ([2, 3, 1], [1], 1),
        ([3, 1, 2], [1], 1),
    ]


def test_fenced_leader_leaves_its_partition_leaderless_until_it_registers_again():
    c, image = three_brokers(rf=3, partitions=3, in_sync=False)
    before = image.topic("t").partitions
    led_by_2 = [i for i, p in before.items() if p.leader == 2]
    assert led_by_2
    image = apply(image, c.fence_broker(image, 2, 0))
    for i, p in image.topic("t").partitions.items():
        if i in led_by_2:
            # no other ISR member to elect: leaderless, the last ISR member kept
            assert p.leader == -1 and p.isr == (2,)
            assert p.leader_epoch == before[i].leader_epoch + 1
        else:
            assert p == before[i]  # 2 was only a follower there, not in the ISR
    code, _ = elect(c, image, ELECTION_PREFERRED, led_by_2[0])
    assert code == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    # it comes back after a clean shutdown (its epoch in the clean-shutdown marker): its
    # ISR seat still vouches for its log, and its caught-up heartbeat elects it
    epoch = image.brokers[2].broker_epoch
    res = c.register_broker(image, 2, uuid.uuid4(), [], None, 0, previous_broker_epoch=epoch)
    image = apply(image, res)
    assert all(image.topic("t").partitions[i].leader == -1 for i in led_by_2)
    image = apply(image, c.unfence_broker(image, 2, -1, 0, metadata_offset=image.offset))
    for i in led_by_2:
        p = image.topic("t").partitions[i]
        assert p.leader == 2 and p.isr == (2,)
        assert p.leader_epoch == before[i].leader_epoch + 2


def test_controlled_shutdown_of_a_sole_isr_leader_leaves_it_leaderless():
    c, image = three_brokers(rf=3, partitions=3, in_sync=False)
    led_by_3 = [i for i, p in image.topic("t").partitions.items() if p.leader == 3]
    res = c.controlled_shutdown(image, 3, image.brokers[3].broker_epoch, 0)
    image = apply(image, res)
    assert res.response == 0  # it leads nothing any more
    for i in led_by_3:
        p = image.topic("t").partitions[i]
        assert p.leader == -1 and p.isr == (3,)


def test_unclean_topic_elects_a_live_replica_when_its_sole_isr_leader_is_fenced():
    c, image = three_brokers(
        rf=3, partitions=1, configs={"unclean.leader.election.enable": "true"}, in_sync=False
    )
    p = image.topic("t").partitions[0]
    image = apply(image, c.fence_broker(image, p.leader, 0))
    after = image.topic("t").partitions[0]
    assert after.leader == p.replicas[1] and after.isr == (after.leader,)
    assert after.leader_recovery_state == 1 and after.leader_epoch == p.leader_epoch + 1


def test_elect_leaders_unclean_moves_a_leaderless_partition_to_a_live_replica():
    c, image = three_brokers(rf=3, partitions=1, in_sync=False)
    p = image.topic("t").partitions[0]
    old = p.leader
    image = apply(image, c.fence_broker(image, old, 0))
    assert image.topic("t").partitions[0].leader == -1
    code, image = elect(c, image, ELECTION_UNCLEAN)
    moved = image.topic("t").partitions[0]
    assert code == 0 and moved.leader == p.replicas[1] and moved.isr == (moved.leader,)
    # the old leader comes back as a follower outside the ISR: its log may hold records
    # the new leader lacks, so a preferred election must not hand it leadership
    image = apply(image, c.register_broker(image, old, uuid.uuid4(), [], None, 0))
    assert image.topic("t").partitions[0].leader == moved.leader
    code, image = elect(c, image, ELECTION_PREFERRED)
    assert code == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    code, image = elect(c, image, ELECTION_UNCLEAN)
    assert code == ErrorCode.ELECTION_NOT_NEEDED


def test_unclean_election_when_the_cluster_wide_dynamic_default_allows_it():
    """The controller resolves unclean.leader.election.enable as every other topic config
    (issue 18: one resolution): the cluster's dynamic broker default counts, not only the
    topic override and server.properties."""
    from riverbed.metadata.records import ResourceType
    from riverbed.protocol.messages import ConfigRecord

    c, image = three_brokers()
    default = ConfigRecord(
        resource_type=int(ResourceType.BROKER),
        resource_name="",
        name="unclean.leader.election.enable",
        value="true",
    )
    image = replay_all(image, [default])
    for b in (1, 2, 3):
        image = apply(image, c.fence_broker(image, b, 0))
    p0 = image.topic("t").partitions[0]
    other = next(b for b in (1, 2, 3) if b not in p0.isr)
    image = apply(image, c.unfence_broker(image, other, -1, 0, metadata_offset=image.offset))
    p0 = image.topic("t").partitions[0]
    assert p0.leader == other and p0.isr == (other,) and p0.leader_recovery_state == 1
