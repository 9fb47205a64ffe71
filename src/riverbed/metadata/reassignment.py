"""Partition reassignment (KIP-455 as KRaft does it): AlterPartitionReassignments and
ListPartitionReassignments, plus completing a reassignment when the new replicas are in sync.

A reassignment of a partition with replicas R to target T is recorded as one
PartitionChangeRecord: replicas = T followed by the members of R not in T, adding = T - R,
removing = R - T (the ISR is untouched).  The new replicas then catch up and the leader adds
them to the ISR with AlterPartition; as soon as every replica of T is in the ISR the
controller completes it: replicas = T, ISR = ISR ∩ T, adding = removing = [], and a new leader
from T if the old one was removed.  Cancelling (target null) reverts to R: the adding
replicas leave the replicas and the ISR.  A new target for a partition that is already
moving first reverts the ongoing move, as Kafka does.
"""

from __future__ import annotations

import uuid

from riverbed.metadata.control_common import (
    ControllerBase,
    ControllerError,
    ControllerResult,
    check_request_items,
    hosted_partition,
)
from riverbed.metadata.image import (
    NO_LEADER,
    NO_LEADER_CHANGE,
    MetadataImage,
    PartitionRegistration,
)
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
    Message,
    PartitionChangeRecord,
)


def _full_change(
    topic_id: uuid.UUID,
    index: int,
    part: PartitionRegistration,
    *,
    replicas: tuple[int, ...],
    isr: tuple[int, ...],
    adding: tuple[int, ...],
    removing: tuple[int, ...],
    leader: int,
) -> PartitionChangeRecord | None:
    if (replicas, isr, adding, removing, leader) == (
        part.replicas,
        part.isr,
        part.adding_replicas,
        part.removing_replicas,
        part.leader,
    ):
        return None
    return PartitionChangeRecord(
        partition_id=index,
        topic_id=topic_id,
        replicas=None if replicas == part.replicas else list(replicas),
        isr=None if isr == part.isr else list(isr),
        adding_replicas=None if adding == part.adding_replicas else list(adding),
        removing_replicas=None if removing == part.removing_replicas else list(removing),
        leader=NO_LEADER_CHANGE if leader == part.leader else leader,
    )


def _leader_among(image: MetadataImage, replicas: tuple[int, ...], isr: tuple[int, ...]) -> int:
    for r in replicas:
        if r in isr and image.broker_is_active(r):
            return r
    return NO_LEADER


def reverted(part: PartitionRegistration) -> PartitionRegistration:
    """The partition as it was before its ongoing reassignment."""
    adding = set(part.adding_replicas)
    replicas = tuple(r for r in part.replicas if r not in adding)
    isr = tuple(r for r in part.isr if r not in adding) or part.isr
    return part._replace(replicas=replicas, isr=isr, adding_replicas=(), removing_replicas=())


def completion(
    image: MetadataImage, topic_id: uuid.UUID, index: int, part: PartitionRegistration
) -> PartitionChangeRecord | None:
    """The record that finishes `part`'s reassignment, if all its targets are in sync."""
    if not part.adding_replicas and not part.removing_replicas:
        return None
    removing = set(part.removing_replicas)
    target = tuple(r for r in part.replicas if r not in removing)
    if not all(r in part.isr for r in target):
        return None
    isr = tuple(r for r in part.isr if r in target)  # not empty: every target is in sync
    leader = part.leader if part.leader in target else _leader_among(image, target, isr)
    return _full_change(
        topic_id, index, part, replicas=target, isr=isr, adding=(), removing=(), leader=leader
    )


def check_same_replication_factor(
    image: MetadataImage, name: str, index: int, target: list[int] | None
) -> None:
    """KIP-860 (AlterPartitionReassignments v1, ``AllowReplicationFactorChange`` false): a
    target of another size than the partition's current replica set (its target while a
    reassignment runs) is INVALID_REPLICATION_FACTOR; a cancellation (null) is allowed."""
    if target is None:
        return
    _topic, part = hosted_partition(image, name, index)
    current = len(part.replicas) - len(part.removing_replicas)
    if len(target) != current:
        raise ControllerError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"The replication factor is changed from {current} to {len(target)}",
        )


class ReassignmentControl(ControllerBase):
    def alter_partition_reassignments(
        self, image: MetadataImage, request: AlterPartitionReassignmentsRequest, now_ms: int
    ) -> ControllerResult:
        del now_ms
        total = sum(len(t.partitions) for t in request.topics)
        records: list[Message] = []
        responses = []
        for t in request.topics:
            out = AlterPartitionReassignmentsResponse.ReassignableTopicResponse(
                name=t.name, partitions=[]
            )
            responses.append(out)
            for p in t.partitions:
                res = AlterPartitionReassignmentsResponse.ReassignablePartitionResponse(
                    partition_index=p.partition_index, error_code=0, error_message=None
                )
                out.partitions.append(res)
                try:
                    check_request_items(total)
                    if not request.allow_replication_factor_change:
                        check_same_replication_factor(image, t.name, p.partition_index, p.replicas)
                    records += self._reassign_one(image, t.name, p.partition_index, p.replicas)
                except ControllerError as err:
                    res.error_code = int(err.code)
                    res.error_message = err.message
        response = AlterPartitionReassignmentsResponse(
            throttle_time_ms=0,
            error_code=0,
            error_message=None,
            allow_replication_factor_change=request.allow_replication_factor_change,
            responses=responses,
        )
        return ControllerResult(records, response)

    def _reassign_one(
        self, image: MetadataImage, name: str, index: int, target: list[int] | None
    ) -> list[Message]:
        topic, part = hosted_partition(image, name, index)
        moving = bool(part.adding_replicas or part.removing_replicas)
        if target is None:
            if not moving:
                raise ControllerError(
                    ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                    f"No ongoing reassignment for {name}-{index}.",
                )
            back = reverted(part)
            leader = (
                part.leader
                if part.leader in back.replicas
                else _leader_among(image, back.replicas, back.isr)
            )
            rec = _full_change(
                topic.topic_id,
                index,
                part,
                replicas=back.replicas,
                isr=back.isr,
                adding=(),
                removing=(),
                leader=leader,
            )
            return [rec] if rec is not None else []
        wanted = tuple(target)
        if not wanted:
            raise ControllerError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Empty replica list.")
        if len(set(wanted)) != len(wanted):
            raise ControllerError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Duplicate replicas in the target."
            )
        for broker_id in wanted:
            if broker_id not in image.brokers:
                raise ControllerError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"The target includes broker {broker_id}, but no such broker is registered.",
                )
        base = reverted(part) if moving else part
        adding = tuple(r for r in wanted if r not in base.replicas)
        removing = tuple(r for r in base.replicas if r not in wanted)
        merged = wanted + removing
        leader = base.leader
        after = base._replace(replicas=merged, adding_replicas=adding, removing_replicas=removing)
        if leader not in merged or leader == NO_LEADER:
            leader = _leader_among(image, merged, base.isr)
        after = after._replace(leader=leader)
        done = completion(image, topic.topic_id, index, after)
        if done is not None:
            # Already in sync (e.g. a reorder or a shrink): finish in the same record.
            final = after.merge(done)
        else:
            final = after
        rec = _full_change(
            topic.topic_id,
            index,
            part,
            replicas=final.replicas,
            isr=final.isr,
            adding=final.adding_replicas,
            removing=final.removing_replicas,
            leader=final.leader,
        )
        return [rec] if rec is not None else []

    def list_partition_reassignments(
        self, image: MetadataImage, request: ListPartitionReassignmentsRequest
    ) -> ListPartitionReassignmentsResponse:
        R = ListPartitionReassignmentsResponse
        wanted: dict[str, set[int] | None] = {}
        if request.topics is None:
            wanted = dict.fromkeys(image.topics_by_name)
        else:
            for t in request.topics:
                wanted[t.name] = set(t.partition_indexes)
        topics = []
        for name in sorted(wanted):
            topic = image.topic(name)
            if topic is None:
                continue
            parts = [
                R.OngoingPartitionReassignment(
                    partition_index=i,
                    replicas=list(p.replicas),
                    adding_replicas=list(p.adding_replicas),
                    removing_replicas=list(p.removing_replicas),
                )
                for i, p in sorted(topic.partitions.items())
                if (p.adding_replicas or p.removing_replicas)
                and (wanted[name] is None or i in wanted[name])  # type: ignore[operator]
            ]
            if parts:
                topics.append(R.OngoingTopicReassignment(name=name, partitions=parts))
        return R(throttle_time_ms=0, error_code=0, error_message=None, topics=topics)
