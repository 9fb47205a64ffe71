"""New partitions: replica placement, manual assignments, the first leader and ISR, and
CreatePartitions.

A mixin of `riverbed.metadata.controller.Controller`; `topic_control` creates its topics'
partitions with the same helpers. Kafka's rules: replicas are placed from a random start
broker and replica shift (`placement`), and partitions added to a topic continue from
partition 0's first replica; a manual assignment names registered brokers, each once; a new
partition's ISR is every active replica and its leader the first of them, so acks=all works
at once (see the `controller` module docstring). A topic's partition count only grows.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence

from riverbed.metadata.control_common import (
    ControllerBase,
    ControllerError,
    ControllerResult,
    check_partitions_per_request,
    check_request_items,
)
from riverbed.metadata.image import MetadataImage, PartitionRegistration
from riverbed.metadata.placement import assign_replicas
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    Message,
)


class PartitionCreationControl(ControllerBase):
    """Places and registers new partitions (see module docstring)."""

    #: draws the start broker and replica shift of new topics (set by Controller.__init__)
    _rng: random.Random

    @staticmethod
    def usable_brokers(image: MetadataImage) -> list[int]:
        return sorted(b.broker_id for b in image.brokers.values() if not b.fenced)

    def _place(
        self, image: MetadataImage, start: int, count: int, rf: int, first_leader: int = -1
    ) -> list[list[int]]:
        """Kafka's placement (`placement`): random start broker and replica shift for a
        new topic; for added partitions both are partition 0's leader's index."""
        brokers = self.usable_brokers(image)
        if rf > len(brokers):
            raise ControllerError(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"Unable to replicate the partition {rf} time(s): The target replication "
                f"factor of {rf} cannot be reached because only {len(brokers)} broker(s) "
                "are registered.",
            )
        n = len(brokers)
        if first_leader >= 0:
            # Kafka: the index of the first broker >= partition 0's first replica
            fixed = next((i for i, b in enumerate(brokers) if b >= first_leader), 0)
            start_index, shift = fixed, fixed
        else:
            start_index, shift = self._rng.randrange(n), self._rng.randrange(n)
        racks = {b: reg.rack for b in brokers if (reg := image.brokers.get(b)) is not None}
        return assign_replicas(
            brokers,
            racks,
            count,
            rf,
            start_partition=start,
            start_index=start_index,
            replica_shift=shift,
        )

    def _check_assignment(self, image: MetadataImage, broker_ids: Sequence[int]) -> list[int]:
        if not broker_ids:
            raise ControllerError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                "The manual partition assignment includes an empty replica list.",
            )
        seen: set[int] = set()
        for broker_id in broker_ids:
            if broker_id in seen:
                raise ControllerError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"The manual partition assignment includes the broker {broker_id} more "
                    "than once.",
                )
            seen.add(broker_id)
            if broker_id not in image.brokers:
                raise ControllerError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"The manual partition assignment includes broker {broker_id}, but no "
                    "such broker is registered.",
                )
        return list(broker_ids)

    def _new_partition(self, image: MetadataImage, replicas: list[int]) -> PartitionRegistration:
        """A new partition's ISR is every active replica (registered, unfenced, not in
        controlled shutdown) and its leader the first of them, as Kafka's
        ReplicationControlManager creates partitions (``replicas.filter(isActive)``):
        acks=all works at once. A follower that has not fetched yet holds back the high
        watermark (its leader takes its log end as unknown until it fetches) and leaves
        the ISR after ``replica.lag.time.max.ms`` if it never does. With no active
        replica the first one is the ISR, so the partition gets a leader as soon as
        that broker registers."""
        active = [
            r
            for r in replicas
            if (b := image.brokers.get(r)) is not None
            and not b.fenced
            and not b.in_controlled_shutdown
        ]
        return PartitionRegistration(
            replicas=tuple(replicas),
            isr=tuple(active) if active else (replicas[0],),
            leader=active[0] if active else -1,
            leader_epoch=0,
            partition_epoch=0,
        )

    # ------------------------------------------------------------------ create partitions
    def create_partitions(
        self, image: MetadataImage, request: CreatePartitionsRequest, now_ms: int
    ) -> ControllerResult:
        del now_ms
        topics = list(request.topics)
        counts = Counter(t.name for t in topics)
        added = 0
        for t in topics:
            current = image.topic(t.name)
            added += max(0, t.count - (len(current.partitions) if current else 0))
        records: list[Message] = []
        results = []
        for t in topics:
            result = CreatePartitionsResponse.CreatePartitionsTopicResult(name=t.name)
            results.append(result)
            try:
                check_request_items(len(topics))
                check_partitions_per_request(added)
                if counts[t.name] > 1:
                    raise ControllerError(ErrorCode.INVALID_REQUEST, "Duplicate topic name.")
                records.extend(self._create_partitions(image, t))
            except ControllerError as err:
                result.error_code = int(err.code)
                result.error_message = err.message
        response = CreatePartitionsResponse(throttle_time_ms=0, results=results)
        return ControllerResult([] if request.validate_only else records, response)

    def _create_partitions(
        self, image: MetadataImage, t: CreatePartitionsRequest.CreatePartitionsTopic
    ) -> list[Message]:
        topic = image.topic(t.name)
        if topic is None:
            raise ControllerError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                "This server does not host this topic-partition.",
            )
        current = len(topic.partitions)
        if t.count < current:
            raise ControllerError(
                ErrorCode.INVALID_PARTITIONS,
                f"The topic {t.name} currently has {current} partition(s); {t.count} would "
                "not be an increase.",
            )
        if t.count == current:
            raise ControllerError(
                ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partition(s)."
            )
        added = t.count - current
        first = topic.partitions.get(0)
        rf = len(first.replicas) if first is not None else self.config.default_replication_factor
        if t.assignments:
            if len(t.assignments) != added:
                raise ControllerError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"Attempted to add {added} additional partition(s), but only "
                    f"{len(t.assignments)} assignment(s) were specified.",
                )
            assignment = [self._check_assignment(image, a.broker_ids) for a in t.assignments]
        else:
            leader0 = first.replicas[0] if first is not None and first.replicas else -1
            assignment = self._place(image, current, added, rf, leader0)
        return [
            self._new_partition(image, replicas).to_record(topic.topic_id, current + i)
            for i, replicas in enumerate(assignment)
        ]
