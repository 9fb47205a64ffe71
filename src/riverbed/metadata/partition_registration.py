"""One partition's registration in the metadata image (Kafka's PartitionRegistration).

The fields of a PartitionRecord: replicas, ISR, the replicas a reassignment is removing
and adding, leader (``NO_LEADER`` = -1: none), leader recovery state, leader epoch and
partition epoch. A PartitionChangeRecord merges into it (`PartitionRegistration.merge`):
each of its fields left out (None, or ``NO_LEADER_CHANGE`` = -2 for the leader, -1 for
the recovery state) keeps the current value; a leader field, even the same leader, starts
a new leader epoch; every change bumps the partition epoch.
"""

from __future__ import annotations

import uuid
from typing import NamedTuple

from riverbed.protocol.messages import Message, PartitionChangeRecord, PartitionRecord

NO_LEADER = -1
NO_LEADER_CHANGE = -2

_new_tuple = tuple.__new__


class PartitionRegistration(NamedTuple):
    """One partition's assignment and leadership (immutable).

    A NamedTuple rather than a frozen dataclass: images hold one per partition (a million
    in a large cluster) and tuple construction is several times cheaper on replay. Replay
    builds them with the C fast path when it is there (``_fastpath.registration``: equal
    to ``from_record``'s, and untracked by the garbage collector, which never untracks a
    tuple subclass by itself: a million tracked registrations made every full collection
    walk them all)."""

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    leader: int = NO_LEADER
    leader_recovery_state: int = 0
    leader_epoch: int = 0
    partition_epoch: int = 0

    @classmethod
    def from_record(
        cls, rec: PartitionRecord, shared: dict[tuple[int, ...], tuple[int, ...]] | None = None
    ) -> PartitionRegistration:
        """The registration a PartitionRecord makes. With ``shared``, equal replica lists
        become one tuple object: a cluster has few distinct replica sets and many
        partitions (10 brokers, replication factor 3: 720), which halves an image's
        memory per partition."""
        replicas, isr = tuple(rec.replicas), tuple(rec.isr)
        if shared is not None:
            replicas = shared.setdefault(replicas, replicas)
            isr = shared.setdefault(isr, isr)
        # tuple.__new__ skips NamedTuple's Python-level __new__ (a replay makes millions)
        return _new_tuple(
            cls,
            (
                replicas,
                isr,
                tuple(rec.removing_replicas) if rec.removing_replicas else (),
                tuple(rec.adding_replicas) if rec.adding_replicas else (),
                rec.leader,
                rec.leader_recovery_state,
                rec.leader_epoch,
                rec.partition_epoch,
            ),
        )

    def merge(self, change: PartitionChangeRecord) -> PartitionRegistration:
        """Apply a PartitionChangeRecord (Kafka's PartitionRegistration.merge)."""
        leader, leader_epoch = self.leader, self.leader_epoch
        if change.leader != NO_LEADER_CHANGE:
            # A leader field in the record, even the same leader, starts a new epoch.
            leader, leader_epoch = change.leader, self.leader_epoch + 1
        recovery = self.leader_recovery_state
        if change.leader_recovery_state != -1:
            recovery = change.leader_recovery_state
        return PartitionRegistration(
            replicas=self.replicas if change.replicas is None else tuple(change.replicas),
            isr=self.isr if change.isr is None else tuple(change.isr),
            removing_replicas=self.removing_replicas
            if change.removing_replicas is None
            else tuple(change.removing_replicas),
            adding_replicas=self.adding_replicas
            if change.adding_replicas is None
            else tuple(change.adding_replicas),
            leader=leader,
            leader_recovery_state=recovery,
            leader_epoch=leader_epoch,
            partition_epoch=self.partition_epoch + 1,
        )

    def to_record(self, topic_id: uuid.UUID, partition_id: int) -> Message:
        return PartitionRecord(
            partition_id=partition_id,
            topic_id=topic_id,
            replicas=list(self.replicas),
            isr=list(self.isr),
            removing_replicas=list(self.removing_replicas),
            adding_replicas=list(self.adding_replicas),
            leader=self.leader,
            leader_recovery_state=self.leader_recovery_state,
            leader_epoch=self.leader_epoch,
            partition_epoch=self.partition_epoch,
        )
