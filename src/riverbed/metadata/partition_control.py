"""Controller operations on brokers and partition leadership: fencing, controlled
shutdown, unfencing, AlterPartition (ISR changes from leaders) and ElectLeaders.

All pure functions of (image, input, now_ms) returning records + response, like the rest of
the controller.  Leadership follows Kafka's KRaft rules (PartitionChangeBuilder):

- a leader is the first replica, in assignment order, that is in the ISR, registered,
  unfenced and not in controlled shutdown; if none qualifies the partition is leaderless
  (-1) unless unclean election is allowed, which picks the first live replica, sets the ISR
  to it alone and marks the partition RECOVERING (leader_recovery_state 1);
- a fenced broker leaves every ISR except where it is the last member (the ISR never
  becomes empty, so a later clean election is still possible);
- a new partition's ISR is every active replica of it (see `controller`); a follower
  that falls behind leaves through AlterPartition and joins again once caught up.  A fenced or shut-down last ISR member leaves its
  partitions leaderless until it registers again, or until an unclean election (topic
  config, or ElectLeaders UNCLEAN) picks a live replica;
- a registering broker is fenced until its heartbeat shows it caught up with the metadata
  (`unfence_broker`); one that shut down uncleanly leaves every ISR, the last seat included
  (`leave_isrs_after_unclean_shutdown`: the ISR may then be empty, and only an unclean
  election elects); a finished controlled shutdown fences the broker;
- every PartitionChangeRecord bumps the partition epoch; one that names a leader also bumps
  the leader epoch (see `PartitionRegistration.merge`).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace
from types import MappingProxyType

from riverbed.metadata.control_common import (
    REQUEST_ITEMS_MAX,
    ControllerBase,
    ControllerError,
    ControllerResult,
    check_request_items,
    hosted_partition,
)
from riverbed.metadata.image import (
    NO_LEADER,
    NO_LEADER_CHANGE,
    BrokerRegistration,
    MetadataImage,
    PartitionRegistration,
    TopicImage,
    replay_all,
)
from riverbed.metadata.reassignment import completion
from riverbed.metadata.records import ZERO_UUID
from riverbed.metadata.topic_configs import topic_config_for
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    AlterPartitionRequest,
    AlterPartitionResponse,
    BrokerRegistrationChangeRecord,
    ElectLeadersRequest,
    ElectLeadersResponse,
    FenceBrokerRecord,
    Message,
    PartitionChangeRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)

RECOVERED, RECOVERING = 0, 1
ELECTION_PREFERRED, ELECTION_UNCLEAN = 0, 1


def elect_leader(
    image: MetadataImage, part: PartitionRegistration, isr: tuple[int, ...], *, unclean: bool
) -> tuple[int, bool]:
    """(leader, was_unclean) for `part` with ISR `isr`; leader -1 when nobody qualifies."""
    for replica in part.replicas:
        if replica in isr and image.broker_is_active(replica):
            return replica, False
    if unclean:
        for replica in part.replicas:
            if image.broker_is_active(replica):
                return replica, True
    return NO_LEADER, False


def change_record(
    topic_id: uuid.UUID,
    index: int,
    part: PartitionRegistration,
    *,
    isr: tuple[int, ...] | None = None,
    leader: int = NO_LEADER_CHANGE,
    recovery: int = -1,
) -> PartitionChangeRecord | None:
    """A PartitionChangeRecord carrying only what differs from `part` (None: no change)."""
    new_isr = None if isr is None or isr == part.isr else list(isr)
    new_leader = NO_LEADER_CHANGE if leader == part.leader else leader
    new_recovery = -1 if recovery in (-1, part.leader_recovery_state) else recovery
    if new_isr is None and new_leader == NO_LEADER_CHANGE and new_recovery == -1:
        return None
    return PartitionChangeRecord(
        partition_id=index,
        topic_id=topic_id,
        isr=new_isr,
        leader=new_leader,
        leader_recovery_state=new_recovery,
    )


def _partitions_of(
    image: MetadataImage, broker_id: int
) -> Iterator[tuple[TopicImage, int, PartitionRegistration]]:
    for topic in image.topics_by_id.values():
        for index, part in topic.partitions.items():
            if broker_id in part.replicas:
                yield topic, index, part


def _unclean_allowed(
    image: MetadataImage, topic: TopicImage, node_id: int, static: dict[str, str]
) -> bool:
    """The topic's effective ``unclean.leader.election.enable`` as this controller resolves
    it (topic override, then its dynamic broker config, the cluster default, static)."""
    value = topic_config_for(image, topic.name, node_id, static)["unclean.leader.election.enable"]
    return value.strip().lower() == "true"


def _shrink(
    image: MetadataImage,
    topic: TopicImage,
    index: int,
    part: PartitionRegistration,
    broker_id: int,
    isr: tuple[int, ...],
    resolve: tuple[int, dict[str, str]],
) -> PartitionChangeRecord | None:
    """`part` with ISR `isr` (without `broker_id`), and a new leader when `broker_id` led
    it or nobody did: from `isr`, else unclean where the topic allows it (``resolve``:
    this controller's node id and static config, which the topic config falls back on)."""
    leader, recovery = part.leader, -1
    if leader in (broker_id, NO_LEADER):
        allowed = _unclean_allowed(image, topic, *resolve)
        leader, unclean = elect_leader(image, part, isr, unclean=allowed)
        if unclean:  # Kafka elects unclean at once when the topic allows it
            isr, recovery = (leader,), RECOVERING
    return change_record(topic.topic_id, index, part, isr=isr, leader=leader, recovery=recovery)


class PartitionControl(ControllerBase):
    # ------------------------------------------------------------------ brokers
    def _registered(self, image: MetadataImage, broker_id: int, epoch: int) -> BrokerRegistration:
        broker = image.brokers.get(broker_id)
        if broker is None:
            raise ControllerError(
                ErrorCode.BROKER_ID_NOT_REGISTERED, f"Broker {broker_id} is not registered."
            )
        if epoch != -1 and epoch != broker.broker_epoch:
            raise ControllerError(
                ErrorCode.STALE_BROKER_EPOCH,
                f"Broker {broker_id} has epoch {broker.broker_epoch}, not {epoch}.",
            )
        return broker

    def _move_away(self, image: MetadataImage, broker_id: int, *, keep_last: bool) -> list[Message]:
        """Changes that take `broker_id` out of leadership and (where possible) the ISR.

        `image` must already show the broker as fenced or shutting down."""
        out: list[Message] = []
        static = dict(self.config.static_broker_config)
        for topic, index, part in _partitions_of(image, broker_id):
            isr = tuple(r for r in part.isr if r != broker_id)
            if not isr and keep_last:
                isr = part.isr
            rec = _shrink(image, topic, index, part, broker_id, isr, (self.config.node_id, static))
            if rec is not None:
                out.append(rec)
        return out

    def fence_broker(self, image: MetadataImage, broker_id: int, now_ms: int) -> ControllerResult:
        """Fence a broker (session expired): it leaves ISRs and leaderships."""
        del now_ms
        broker = self._registered(image, broker_id, -1)
        if broker.fenced:
            return ControllerResult([], broker)
        fenced = _with_broker(image, broker_id, fenced=True)
        records: list[Message] = [FenceBrokerRecord(id=broker_id, epoch=broker.broker_epoch)]
        records += self._move_away(fenced, broker_id, keep_last=True)
        return ControllerResult(records, fenced.brokers[broker_id])

    def controlled_shutdown(
        self, image: MetadataImage, broker_id: int, broker_epoch: int, now_ms: int
    ) -> ControllerResult:
        """Start a controlled shutdown: move leaderships away before the broker stops.

        As in Kafka, the broker leaves every ISR it is not the last member of, and a
        partition with no other eligible replica becomes leaderless.  The response is the
        number of partitions the broker still leads (0 = it may stop).  Once it leads
        nothing it is fenced in the same batch (Kafka's SHUTDOWN_NOW), so that its next
        incarnation may register at once instead of waiting for this session to expire.
        A wrong broker epoch raises ControllerError(STALE_BROKER_EPOCH)."""
        del now_ms
        broker = self._registered(image, broker_id, broker_epoch)
        shutting = _with_broker(image, broker_id, in_controlled_shutdown=True)
        records: list[Message] = []
        if not broker.in_controlled_shutdown:
            records.append(
                BrokerRegistrationChangeRecord(
                    broker_id=broker_id, broker_epoch=broker.broker_epoch, in_controlled_shutdown=1
                )
            )
        moves = self._move_away(shutting, broker_id, keep_last=True)
        records += moves
        after = replay_all(shutting, moves)
        still_leading = sum(
            1 for _, _, p in _partitions_of(after, broker_id) if p.leader == broker_id
        )
        if not still_leading and not broker.fenced:
            records.append(FenceBrokerRecord(id=broker_id, epoch=broker.broker_epoch))
        return ControllerResult(records, still_leading)

    def unfence_broker(
        self,
        image: MetadataImage,
        broker_id: int,
        broker_epoch: int,
        now_ms: int,
        *,
        metadata_offset: int,
    ) -> ControllerResult:
        """Unfence a caught-up broker and give it leaderless partitions it can lead.

        Kafka's BrokerHeartbeatManager: a fenced broker asking to be unfenced is unfenced
        only once its heartbeat's CurrentMetadataOffset has reached the offset of its
        registration (``metadata_offset >= registered_offset``): before that it may act on
        partition state its new incarnation has not seen. A broker in controlled shutdown
        stays fenced until it registers again. The response is the registration after
        the change (still fenced when refused)."""
        del now_ms
        broker = self._registered(image, broker_id, broker_epoch)
        if broker.in_controlled_shutdown or metadata_offset < broker.registered_offset:
            return ControllerResult([], broker)
        records: list[Message] = []
        if broker.fenced:
            records.append(UnfenceBrokerRecord(id=broker_id, epoch=broker.broker_epoch))
        live = _with_broker(image, broker_id, fenced=False)
        records += self.elect_leaderless(live, broker_id)
        return ControllerResult(records, live.brokers[broker_id])

    def leave_isrs_after_unclean_shutdown(
        self, image: MetadataImage, broker_id: int
    ) -> list[Message]:
        """A broker that registers after an unclean shutdown leaves every ISR, even where
        it is the last member (the ISR is then empty and the partition leaderless).

        Its log may have lost an unflushed tail (``flush.messages`` is unlimited by
        default) or be a new empty disk, so its ISR seat no longer vouches for the
        acknowledged records. This is the guarantee of KIP-966 (an unclean-shutdown
        registration leaves the ISR and the ELR) with a simpler rule: riverbed keeps no
        ELR, so a partition whose last ISR member restarted uncleanly has no clean
        candidate and stays leaderless until an unclean election is asked for (the
        topic's ``unclean.leader.election.enable``, or ElectLeaders UNCLEAN), never
        electing the short log silently. KIP-966 would also elect an ELR member (a
        replica that left the ISR below min.insync.replicas while caught up to the high
        watermark); riverbed waits for the user there. A partition with this broker as
        its only replica keeps it: there is no other copy to wait for, and electing it is
        what an unclean election would do. ``image`` must show the broker fenced.
        """
        out: list[Message] = []
        static = dict(self.config.static_broker_config)
        for topic, index, part in _partitions_of(image, broker_id):
            if broker_id not in part.isr or len(part.replicas) == 1:
                continue
            isr = tuple(r for r in part.isr if r != broker_id)
            rec = _shrink(image, topic, index, part, broker_id, isr, (self.config.node_id, static))
            if rec is not None:
                out.append(rec)
        return out

    def elect_leaderless(self, image: MetadataImage, broker_id: int) -> list[Message]:
        """Leaders for partitions of `broker_id` that have none (it must be live in `image`)."""
        out: list[Message] = []
        static = dict(self.config.static_broker_config)
        for topic, index, part in _partitions_of(image, broker_id):
            if part.leader != NO_LEADER:
                continue
            leader, unclean = elect_leader(
                image,
                part,
                part.isr,
                unclean=_unclean_allowed(image, topic, self.config.node_id, static),
            )
            if leader == NO_LEADER:
                continue
            if unclean:
                rec = change_record(
                    topic.topic_id, index, part, isr=(leader,), leader=leader, recovery=RECOVERING
                )
            else:
                rec = change_record(topic.topic_id, index, part, leader=leader)
            if rec is not None:
                out.append(rec)
        return out

    def unregister_broker(
        self, image: MetadataImage, broker_id: int, now_ms: int
    ) -> ControllerResult:
        """Remove a broker for good (fencing it first if needed)."""
        result = self.fence_broker(image, broker_id, now_ms)
        broker = image.brokers[broker_id]
        records = [
            *result.records,
            UnregisterBrokerRecord(broker_id=broker_id, broker_epoch=broker.broker_epoch),
        ]
        return ControllerResult(records, None)

    # ------------------------------------------------------------------ AlterPartition
    def alter_partition(
        self, image: MetadataImage, request: AlterPartitionRequest, now_ms: int
    ) -> ControllerResult:
        """ISR changes proposed by partition leaders (Kafka's AlterPartition)."""
        del now_ms
        response = AlterPartitionResponse(throttle_time_ms=0, error_code=0, topics=[])
        try:
            self._registered(image, request.broker_id, request.broker_epoch)
        except ControllerError as err:
            response.error_code = int(err.code)
            return ControllerResult([], response)
        if sum(len(t.partitions) for t in request.topics) > REQUEST_ITEMS_MAX:
            response.error_code = int(ErrorCode.INVALID_REQUEST)
            return ControllerResult([], response)
        records: list[Message] = []
        for t in request.topics:
            by_id = t.topic_id != ZERO_UUID
            topic = image.topic_by_id(t.topic_id) if by_id else image.topic(t.topic_name)
            out = AlterPartitionResponse.TopicData(
                topic_name=t.topic_name, topic_id=t.topic_id, partitions=[]
            )
            response.topics.append(out)
            for p in t.partitions:
                result = AlterPartitionResponse.PartitionData(partition_index=p.partition_index)
                out.partitions.append(result)
                try:
                    if topic is None:
                        raise ControllerError(
                            ErrorCode.UNKNOWN_TOPIC_ID
                            if by_id
                            else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                            "unknown topic",
                        )
                    rec, part = self._alter_one(image, request.broker_id, topic, p)
                except ControllerError as err:
                    result.error_code = int(err.code)
                    continue
                if rec is not None:
                    records.append(rec)
                    part = part.merge(rec)
                    # New replicas in sync may finish a reassignment (KIP-455).
                    done = completion(image, topic.topic_id, p.partition_index, part)
                    if done is not None:
                        records.append(done)
                        part = part.merge(done)
                result.leader_id = part.leader
                result.leader_epoch = part.leader_epoch
                result.isr = list(part.isr)
                result.leader_recovery_state = part.leader_recovery_state
                result.partition_epoch = part.partition_epoch
        return ControllerResult(records, response)

    def _alter_one(
        self,
        image: MetadataImage,
        broker_id: int,
        topic: TopicImage,
        p: AlterPartitionRequest.PartitionData,
    ) -> tuple[PartitionChangeRecord | None, PartitionRegistration]:
        part = topic.partitions.get(p.partition_index)
        if part is None:
            raise ControllerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "unknown partition")
        if part.leader != broker_id:
            raise ControllerError(ErrorCode.NOT_LEADER_OR_FOLLOWER, "not the leader")
        if p.leader_epoch != part.leader_epoch:
            raise ControllerError(ErrorCode.FENCED_LEADER_EPOCH, "stale leader epoch")
        if p.partition_epoch != part.partition_epoch:
            raise ControllerError(ErrorCode.INVALID_UPDATE_VERSION, "stale partition epoch")
        if p.new_isr_with_epochs:
            new_isr = tuple(b.broker_id for b in p.new_isr_with_epochs)
            for b in p.new_isr_with_epochs:
                reg = image.brokers.get(b.broker_id)
                if b.broker_epoch != -1 and (reg is None or reg.broker_epoch != b.broker_epoch):
                    raise ControllerError(ErrorCode.INELIGIBLE_REPLICA, "stale replica epoch")
        else:
            new_isr = tuple(p.new_isr)
        if len(set(new_isr)) != len(new_isr) or broker_id not in new_isr:
            raise ControllerError(ErrorCode.INVALID_REQUEST, "the ISR must hold the leader once")
        for replica in new_isr:
            if replica not in part.replicas or (
                replica not in part.isr and not image.broker_is_active(replica)
            ):
                raise ControllerError(ErrorCode.INELIGIBLE_REPLICA, f"replica {replica}")
        recovery = p.leader_recovery_state
        if part.leader_recovery_state == RECOVERED and recovery == RECOVERING:
            raise ControllerError(ErrorCode.INVALID_REQUEST, "cannot go back to RECOVERING")
        rec = change_record(topic.topic_id, p.partition_index, part, isr=new_isr, recovery=recovery)
        return rec, part

    # ------------------------------------------------------------------ ElectLeaders
    def elect_leaders(
        self, image: MetadataImage, request: ElectLeadersRequest, now_ms: int
    ) -> ControllerResult:
        del now_ms
        wanted: list[tuple[str, int]] = []
        every = request.topic_partitions is None
        if request.topic_partitions is None:
            for topic in sorted(image.topics_by_id.values(), key=lambda t: t.name):
                wanted += [(topic.name, i) for i in sorted(topic.partitions)]
        else:
            for tp in request.topic_partitions:
                wanted += [(tp.topic, i) for i in tp.partitions]
        results: dict[str, ElectLeadersResponse.ReplicaElectionResult] = {}
        records: list[Message] = []
        for name, index in wanted:
            entry = results.get(name)
            if entry is None:
                entry = ElectLeadersResponse.ReplicaElectionResult(topic=name, partition_result=[])
                results[name] = entry
            res = ElectLeadersResponse.PartitionResult(partition_id=index, error_code=0)
            entry.partition_result.append(res)
            try:
                check_request_items(len(wanted))
                rec = self._elect_one(image, name, index, request.election_type)
            except ControllerError as err:
                if every and err.code == ErrorCode.ELECTION_NOT_NEEDED:
                    # As Kafka: an election over every partition leaves out the ones that
                    # already have the leader asked for.
                    entry.partition_result.pop()
                    continue
                res.error_code = int(err.code)
                res.error_message = err.message
                continue
            records.append(rec)
        response = ElectLeadersResponse(
            throttle_time_ms=0, error_code=0, replica_election_results=list(results.values())
        )
        return ControllerResult(records, response)

    def _elect_one(
        self, image: MetadataImage, name: str, index: int, election_type: int
    ) -> PartitionChangeRecord:
        topic, part = hosted_partition(image, name, index)
        if election_type == ELECTION_PREFERRED:
            preferred = part.replicas[0]
            if part.leader == preferred:
                raise ControllerError(ErrorCode.ELECTION_NOT_NEEDED, "Leader is already preferred.")
            if preferred not in part.isr or not image.broker_is_active(preferred):
                raise ControllerError(
                    ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                    f"Preferred replica {preferred} is not in the ISR or not live.",
                )
            rec = change_record(topic.topic_id, index, part, leader=preferred)
        elif election_type == ELECTION_UNCLEAN:
            if part.leader != NO_LEADER:
                raise ControllerError(ErrorCode.ELECTION_NOT_NEEDED, "Partition has a leader.")
            leader, unclean = elect_leader(image, part, part.isr, unclean=True)
            if leader == NO_LEADER:
                raise ControllerError(
                    ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, "No live replica can lead."
                )
            if unclean:
                rec = change_record(
                    topic.topic_id, index, part, isr=(leader,), leader=leader, recovery=RECOVERING
                )
            else:
                rec = change_record(topic.topic_id, index, part, leader=leader)
        else:
            raise ControllerError(
                ErrorCode.INVALID_REQUEST, f"Unknown election type {election_type}."
            )
        assert rec is not None
        return rec


def _with_broker(
    image: MetadataImage,
    broker_id: int,
    *,
    fenced: bool | None = None,
    in_controlled_shutdown: bool | None = None,
) -> MetadataImage:
    """`image` with one broker's flags changed (a scratch view for election decisions)."""
    brokers = dict(image.brokers)
    old = brokers[broker_id]
    brokers[broker_id] = replace(
        old,
        fenced=old.fenced if fenced is None else fenced,
        in_controlled_shutdown=old.in_controlled_shutdown
        if in_controlled_shutdown is None
        else in_controlled_shutdown,
    )
    return replace(image, brokers=MappingProxyType(brokers))
