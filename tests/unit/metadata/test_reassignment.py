from riverbed.metadata.image import replay_all
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionRequest,
    ListPartitionReassignmentsRequest,
)

from .conftest import cluster_image, make_controller
from .test_controller import create, topic

AR = AlterPartitionReassignmentsRequest
AP = AlterPartitionRequest


def setup(rf_assignment=((1, 2),)):
    """Partition r-0 on (1, 2), led by 1, with follower 2 in sync: a new partition's ISR
    is every active replica (Kafka's rule)."""
    c = make_controller()
    image = cluster_image(c, brokers=4)
    _, image = create(c, image, topic("r", assignments=[list(a) for a in rf_assignment]))
    assert image.partition("r", 0).isr == tuple(rf_assignment[0])
    return c, image


def reassign(c, image, target, index=0):
    req = AR(
        topics=[
            AR.ReassignableTopic(
                name="r",
                partitions=[AR.ReassignablePartition(partition_index=index, replicas=target)],
            )
        ]
    )
    res = c.alter_partition_reassignments(image, req, 0)
    return res, replay_all(image, res.records)


def set_isr(c, image, isr):
    p = image.partition("r", 0)
    t = image.topic("r")
    req = AP(
        broker_id=p.leader,
        broker_epoch=-1,
        topics=[
            AP.TopicData(
                topic_id=t.topic_id,
                partitions=[
                    AP.PartitionData(
                        partition_index=0,
                        leader_epoch=p.leader_epoch,
                        new_isr=list(isr),
                        partition_epoch=p.partition_epoch,
                    )
                ],
            )
        ],
    )
    res = c.alter_partition(image, req, 0)
    assert res.response.topics[0].partitions[0].error_code == 0
    return res, replay_all(image, res.records)


def code(res):
    return res.response.responses[0].partitions[0].error_code


def test_move_to_new_brokers_completes_when_in_sync():
    c, image = setup()
    res, image = reassign(c, image, [3, 4])
    assert code(res) == 0
    p = image.partition("r", 0)
    assert p.replicas == (3, 4, 1, 2) and p.adding_replicas == (3, 4)
    assert p.removing_replicas == (1, 2) and p.isr == (1, 2) and p.leader == 1
    listed = c.list_partition_reassignments(image, ListPartitionReassignmentsRequest(topics=None))
    (t,) = listed.topics
    assert t.name == "r" and t.partitions[0].adding_replicas == [3, 4]
    _, image = set_isr(c, image, (1, 2, 3))
    assert image.partition("r", 0).adding_replicas == (3, 4)  # 4 not in sync yet
    epoch = image.partition("r", 0).leader_epoch
    res, image = set_isr(c, image, (1, 2, 3, 4))
    p = image.partition("r", 0)
    assert p.replicas == (3, 4) and p.isr == (3, 4)
    assert p.adding_replicas == () and p.removing_replicas == ()
    assert p.leader == 3 and p.leader_epoch == epoch + 1
    # the AlterPartition answer reports the final state
    part = res.response.topics[0].partitions[0]
    assert part.leader_id == 3 and list(part.isr) == [3, 4]
    listed = c.list_partition_reassignments(image, ListPartitionReassignmentsRequest(topics=None))
    assert listed.topics == []


def test_cancel_reverts():
    c, image = setup()
    _, image = reassign(c, image, [3, 4])
    _, image = set_isr(c, image, (1, 2, 3))  # 3 caught up, 4 not: still moving
    res, image = reassign(c, image, None)
    assert code(res) == 0
    p = image.partition("r", 0)
    assert p.replicas == (1, 2) and p.isr == (1, 2) and p.leader == 1
    assert p.adding_replicas == () and p.removing_replicas == ()
    res, _ = reassign(c, image, None)
    assert code(res) == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
    # As in Kafka, reverting drops the adding replicas from the merged list (target first),
    # so the original set comes back, possibly in another order.
    _, image = reassign(c, image, [3, 2])
    _, image = reassign(c, image, None)
    assert image.partition("r", 0).replicas == (2, 1)


def test_reorder_and_shrink_finish_at_once():
    c, image = setup()
    res, image = reassign(c, image, [2, 1])
    p = image.partition("r", 0)
    assert code(res) == 0 and p.replicas == (2, 1) and p.adding_replicas == ()
    assert p.leader == 1  # still a replica, so it keeps leading
    res, image = reassign(c, image, [2])
    p = image.partition("r", 0)
    assert p.replicas == (2,) and p.isr == (2,) and p.leader == 2


def test_new_target_replaces_an_ongoing_move():
    c, image = setup()
    _, image = reassign(c, image, [3, 4])
    _, image = reassign(c, image, [1, 3])
    p = image.partition("r", 0)
    assert p.replicas == (1, 3, 2) and p.adding_replicas == (3,) and p.removing_replicas == (2,)


def test_reassignment_errors():
    c, image = setup()
    for target, err in (
        ([], ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        ([1, 1], ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        ([9], ErrorCode.INVALID_REPLICA_ASSIGNMENT),
    ):
        res, _ = reassign(c, image, target)
        assert code(res) == err and res.records == []
    res, _ = reassign(c, image, [1], index=7)
    assert code(res) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_a_replication_factor_change_is_refused_when_not_allowed():
    """KIP-860 (v1 ``AllowReplicationFactorChange`` false): a target of another size than
    the current replica set (an ongoing move's target) is INVALID_REPLICATION_FACTOR;
    the same size, a cancellation and the default (true, all v0 requests) are accepted."""
    c, image = setup()

    def reassign_strict(image, target):
        req = AR(
            allow_replication_factor_change=False,
            topics=[
                AR.ReassignableTopic(
                    name="r",
                    partitions=[AR.ReassignablePartition(partition_index=0, replicas=target)],
                )
            ],
        )
        res = c.alter_partition_reassignments(image, req, 0)
        assert res.response.allow_replication_factor_change is False  # echoed (v1)
        return res, replay_all(image, res.records)

    for target in ([1, 2, 3], [3]):
        res, _ = reassign_strict(image, target)
        assert code(res) == ErrorCode.INVALID_REPLICATION_FACTOR and res.records == []
        assert res.response.responses[0].partitions[0].error_message == (
            f"The replication factor is changed from 2 to {len(target)}"
        )
    res, image = reassign_strict(image, [3, 4])  # same size: a move
    assert code(res) == 0 and image.partition("r", 0).adding_replicas == (3, 4)
    res, _ = reassign_strict(image, [1, 2, 3])  # against the move's target of 2
    assert code(res) == ErrorCode.INVALID_REPLICATION_FACTOR
    res, image = reassign_strict(image, None)  # cancelling is not a change of size
    assert code(res) == 0 and image.partition("r", 0).replicas == (1, 2)
    res, image = reassign(c, image, [1, 2, 3])  # allowed by default
    assert code(res) == 0 and image.partition("r", 0).adding_replicas == (3,)
