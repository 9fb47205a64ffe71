"""One partition replica on one broker: leader, follower or neither, driven by metadata.

``apply_registration`` takes the partition as the controller last recorded it (Kafka's
``PartitionRegistration``: replicas, ISR, leader, leader epoch, partition epoch) and
switches role the way a KRaft broker applies a metadata delta:

- this broker is the leader at a newer leader epoch: become leader (the log records where
  the epoch starts; the same broker re-elected keeps its parked produces);
- the leader at the same epoch with a newer partition epoch: take the new ISR/replicas;
- a replica under another leader (or none) at a newer leader epoch: become follower
  (parked produces fail with NOT_LEADER_OR_FOLLOWER; no truncation now: the first fetch
  finds the divergence);
- not a replica any more: stop (the shell deletes the log).

Registrations with an older leader epoch, or the same epochs again, change nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum

from riverbed.metadata.image import PartitionRegistration
from riverbed.replication.actions import Action, StateChange
from riverbed.replication.config import ReplicaConfig
from riverbed.replication.follower import PartitionFollower
from riverbed.replication.leader import PartitionLeader
from riverbed.replication.log import ReplicaLog

#: PartitionRegistration.leader_recovery_state after an unclean election (KIP-704).
LEADER_RECOVERING = 1


class Role(Enum):
    NONE = "none"
    LEADER = "leader"
    FOLLOWER = "follower"


class Partition:
    def __init__(
        self,
        broker_id: int,
        log: ReplicaLog,
        config: ReplicaConfig,
        *,
        high_watermark: int = 0,
        broker_epoch: int = -1,
        name: str = "",
    ) -> None:
        self.broker_id = broker_id
        self.log = log
        self.config = config
        self.broker_epoch = broker_epoch
        self.name = name
        self._hw = min(high_watermark, log.log_end_offset)
        self.leader: PartitionLeader | None = None
        self.follower: PartitionFollower | None = None
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.registered_epochs: dict[int, int] = {}

    @property
    def role(self) -> Role:
        if self.leader is not None:
            return Role.LEADER
        if self.follower is not None:
            return Role.FOLLOWER
        return Role.NONE

    @property
    def high_watermark(self) -> int:
        if self.leader is not None:
            return self.leader.high_watermark
        if self.follower is not None:
            return self.follower.high_watermark
        return self._hw

    def set_registered_epochs(self, epochs: Mapping[int, int]) -> None:
        """The replicas' broker epochs in this broker's metadata: as leader, a fetch from
        an older incarnation is refused (`PartitionLeader._stale_incarnation`)."""
        self.registered_epochs = dict(epochs)
        if self.leader is not None:
            self.leader.registered_epochs = self.registered_epochs

    def set_broker_epoch(self, broker_epoch: int) -> None:
        """This broker registered again: its fetches carry the new epoch (KIP-903)."""
        self.broker_epoch = broker_epoch
        if self.follower is not None:
            self.follower.broker_epoch = broker_epoch

    def update_config(self, config: ReplicaConfig) -> None:
        """The topic's effective config changed (a dynamic config): every role uses it from
        now on (``min.insync.replicas`` at the next produce, ``replica.lag.time.max.ms`` at
        the next tick)."""
        self.config = config
        if self.leader is not None:
            self.leader.config = config
        if self.follower is not None:
            self.follower.config = config

    def apply_registration(self, reg: PartitionRegistration, now_ms: int) -> list[Action]:
        if reg.leader_epoch < self.leader_epoch or (
            reg.leader_epoch == self.leader_epoch and reg.partition_epoch <= self.partition_epoch
        ):
            return []
        same_epoch = reg.leader_epoch == self.leader_epoch
        self.partition_epoch = reg.partition_epoch
        if self.broker_id not in reg.replicas:
            return self.stop("removed from the replicas")
        if reg.leader == self.broker_id:
            if same_epoch and self.leader is not None:
                return self.leader.update_registration(reg, now_ms)
            return self._become_leader(reg, now_ms)
        if same_epoch and self.follower is not None:
            return []  # ISR/replica changes are the leader's business
        return self._become_follower(reg)

    def _become_leader(self, reg: PartitionRegistration, now_ms: int) -> list[Action]:
        previous = self.leader
        hw = self.high_watermark
        self.follower = None
        self.leader_epoch = reg.leader_epoch
        self.leader = PartitionLeader(
            self.broker_id,
            reg,
            self.log,
            self.config,
            high_watermark=hw,
            now_ms=now_ms,
            previous=previous,
        )
        self.leader.registered_epochs = self.registered_epochs
        line = StateChange(
            f"broker {self.broker_id}: {self.name} become-leader at leader epoch "
            f"{reg.leader_epoch} partition epoch {reg.partition_epoch}, ISR "
            f"{list(reg.isr)}, log end {self.log.log_end_offset}, HW "
            f"{self.leader.high_watermark}"
        )
        # an ISR of this leader alone commits its whole log at once (Kafka's
        # maybeIncrementLeaderHW on becoming leader)
        out: list[Action] = [line, *self.leader.on_local_append(now_ms)]
        if reg.leader_recovery_state == LEADER_RECOVERING:
            out += self.leader.mark_recovered(now_ms)
        return out

    def _become_follower(self, reg: PartitionRegistration) -> list[Action]:
        out: list[Action] = []
        hw = self.high_watermark
        if self.leader is not None:
            out += self.leader.resign()
            self.leader = None
        self.leader_epoch = reg.leader_epoch
        self.follower = PartitionFollower(
            self.broker_id,
            reg.leader,
            reg.leader_epoch,
            self.log,
            self.config,
            high_watermark=hw,
            broker_epoch=self.broker_epoch,
        )
        out.append(
            StateChange(
                f"broker {self.broker_id}: {self.name} become-follower of {reg.leader} at "
                f"leader epoch {reg.leader_epoch}, log end {self.log.log_end_offset}"
            )
        )
        return out

    def stop(self, why: str) -> list[Action]:
        out: list[Action] = []
        self._hw = self.high_watermark
        if self.leader is not None:
            out += self.leader.resign()
        self.leader = self.follower = None
        out.append(StateChange(f"broker {self.broker_id}: {self.name} stopped ({why})"))
        return out
