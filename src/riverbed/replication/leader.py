"""The leader side of one partition: follower progress, ISR, high watermark, acks=all.

Rules (Kafka's ``Partition`` in KRaft mode):

- each follower's log end offset is the offset of its last valid fetch; it was *caught up*
  at the time of a fetch that reached the leader's log end, or at the time of the previous
  fetch when this one reached the log end the leader had then (``lastCaughtUpTimeMs``);
- the high watermark is the smallest log end offset over the maximal ISR (``isr.py``) and
  never moves backwards; a follower whose log end is unknown (no fetch yet at this epoch)
  holds it where it is;
- an ISR member not caught up within ``replica.lag.time.max.ms`` (and not at the log end)
  is proposed for removal; a replica outside the ISR whose log end reached both the high
  watermark and the start of this leader epoch is proposed for addition; one change in
  flight at a time;
- a follower's fetch from an incarnation older than its registration (KIP-903 broker
  epochs) is refused with NOT_LEADER_OR_FOLLOWER and counts for nothing;
- acks=all: NOT_ENOUGH_REPLICAS before the append when the committed ISR is smaller than
  ``min.insync.replicas``; afterwards the produce waits until the high watermark covers
  its last offset (NONE, or NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrank below the
  minimum meanwhile), REQUEST_TIMED_OUT after its ``timeout.ms``, NOT_LEADER_OR_FOLLOWER
  when leadership moves away first.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from riverbed.metadata.image import PartitionRegistration
from riverbed.protocol.errors import ErrorCode
from riverbed.replication.actions import (
    Action,
    AlterIsrResult,
    FetchAnswer,
    FetchPosition,
    HighWatermarkChanged,
    ProduceCompleted,
    StateChange,
)
from riverbed.replication.config import ReplicaConfig
from riverbed.replication.isr import IsrState
from riverbed.replication.log import ReplicaLog

UNKNOWN_OFFSET = -1
_NEVER_MS = 2**62


@dataclass
class RemoteReplica:
    """What the leader knows of one follower (Kafka's ``Replica`` state)."""

    broker_id: int
    log_end_offset: int = UNKNOWN_OFFSET
    last_caught_up_ms: int = 0
    last_fetch_leader_end: int = UNKNOWN_OFFSET
    last_fetch_ms: int = 0
    broker_epoch: int = -1

    def on_fetch(self, fetch_offset: int, leader_end: int, broker_epoch: int, now_ms: int) -> None:
        if fetch_offset >= leader_end:
            self.last_caught_up_ms = max(self.last_caught_up_ms, now_ms)
        elif fetch_offset >= self.last_fetch_leader_end >= 0:
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_ms)
        self.log_end_offset = fetch_offset
        self.last_fetch_leader_end = leader_end
        self.last_fetch_ms = now_ms
        self.broker_epoch = broker_epoch

    def caught_up(self, leader_end: int, now_ms: int, lag_max_ms: int) -> bool:
        return self.log_end_offset == leader_end or now_ms - self.last_caught_up_ms <= lag_max_ms


@dataclass
class _Produce:
    required_offset: int  # done once the high watermark reaches it
    deadline_ms: int


class PartitionLeader:
    """Leader state of one partition at one leader epoch."""

    def __init__(
        self,
        broker_id: int,
        reg: PartitionRegistration,
        log: ReplicaLog,
        config: ReplicaConfig,
        *,
        high_watermark: int,
        now_ms: int,
        previous: PartitionLeader | None = None,
    ) -> None:
        assert reg.leader == broker_id
        self.broker_id = broker_id
        self.log = log
        self.config = config
        self.leader_epoch = reg.leader_epoch
        self.replicas = reg.replicas
        self.isr = IsrState(reg.isr, reg.partition_epoch)
        leo = log.log_end_offset
        # followers must learn where this epoch starts (KIP-101): before any append
        log.assign_epoch(reg.leader_epoch, leo)
        self.epoch_start_offset = leo
        self.high_watermark = min(max(high_watermark, log.log_start_offset), leo)
        self.remotes: dict[int, RemoteReplica] = {}
        #: each replica's broker epoch in the leader's metadata (-1 / absent: unknown)
        self.registered_epochs: Mapping[int, int] = {}
        self._sync_remotes(now_ms, new_epoch=True)
        self._produces: dict[int, _Produce] = {}
        if previous is not None:
            # the same broker again at a newer epoch: parked produces keep waiting
            self._produces = previous._produces
            previous._produces = {}
            self.high_watermark = max(self.high_watermark, min(previous.high_watermark, leo))

    # ------------------------------------------------------------------ metadata
    def _sync_remotes(self, now_ms: int, *, new_epoch: bool) -> None:
        wanted = [r for r in self.replicas if r != self.broker_id]
        for r in list(self.remotes):
            if r not in wanted:
                del self.remotes[r]
        for r in wanted:
            if r not in self.remotes or new_epoch:
                # an ISR member gets a full lag period to fetch at this epoch
                caught_up = now_ms if r in self.isr.isr else 0
                self.remotes[r] = RemoteReplica(r, last_caught_up_ms=caught_up)

    def update_registration(self, reg: PartitionRegistration, now_ms: int) -> list[Action]:
        """Metadata at this leader epoch with a newer partition epoch (ISR, replicas)."""
        assert reg.leader == self.broker_id and reg.leader_epoch == self.leader_epoch
        if not self.isr.commit(reg.isr, reg.partition_epoch):
            return []
        self.replicas = reg.replicas
        self._sync_remotes(now_ms, new_epoch=False)
        out: list[Action] = [self._isr_line("committed (metadata)")]
        out += self._maybe_advance_hw()
        return out

    def mark_recovered(self, now_ms: int) -> list[Action]:
        """After an unclean election (leader recovery state RECOVERING) the new leader's log
        is the partition's truth: an AlterPartition with the same ISR records RECOVERED
        (the wire form always says RECOVERED), as Kafka's leader does once it leads."""
        if not self.isr.can_propose(now_ms):
            return []
        return self._propose(self.isr.isr, now_ms, "mark the partition RECOVERED")

    def resign(self) -> list[Action]:
        """Leadership moved away: every parked produce fails (the client retries)."""
        out: list[Action] = [
            ProduceCompleted(rid, ErrorCode.NOT_LEADER_OR_FOLLOWER) for rid in self._produces
        ]
        self._produces.clear()
        return out

    # ------------------------------------------------------------------ produce
    def check_produce(self, acks: int) -> ErrorCode:
        """Before an append: NOT_ENOUGH_REPLICAS for acks=all when the ISR is too small."""
        if acks == -1 and len(self.isr.isr) < self.config.min_insync_replicas:
            return ErrorCode.NOT_ENOUGH_REPLICAS
        return ErrorCode.NONE

    def on_local_append(self, now_ms: int) -> list[Action]:
        """The leader's own log grew (a produce was appended)."""
        del now_ms
        return self._maybe_advance_hw()

    def park_produce(
        self, request_id: int, required_offset: int, timeout_ms: int, now_ms: int
    ) -> list[Action]:
        """An acks=all produce whose last offset is ``required_offset - 1``."""
        if self.high_watermark >= required_offset:
            return [ProduceCompleted(request_id, self._committed_error())]
        if timeout_ms <= 0 or len(self._produces) >= self.config.pending_produces_max:
            return [ProduceCompleted(request_id, ErrorCode.REQUEST_TIMED_OUT)]
        self._produces[request_id] = _Produce(required_offset, now_ms + timeout_ms)
        return []

    def _committed_error(self) -> ErrorCode:
        if len(self.isr.isr) < self.config.min_insync_replicas:
            return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return ErrorCode.NONE

    @property
    def parked_produces(self) -> int:
        return len(self._produces)

    # ------------------------------------------------------------------ follower fetch
    def on_follower_fetch(
        self, pos: FetchPosition, now_ms: int
    ) -> tuple[FetchAnswer, list[Action]]:
        """A follower's Fetch as it arrives: judged, then recorded as the follower's
        progress (its log end, caught-up time, ISR expansion, high watermark)."""
        refused = self._judge_follower_fetch(pos)
        if refused is not None:
            return refused, []
        remote = self.remotes[pos.replica_id]
        remote.on_fetch(pos.fetch_offset, self.log.log_end_offset, pos.replica_epoch, now_ms)
        out = self._maybe_expand(remote, now_ms)
        out += self._maybe_advance_hw()
        return FetchAnswer(ErrorCode.NONE, self.high_watermark, self.log.log_start_offset), out

    def reread_follower_fetch(self, pos: FetchPosition) -> FetchAnswer:
        """The same Fetch read again when the purgatory completes it (an append woke it):
        judged as on arrival, with the current high watermark, and recorded nothing.
        Kafka's ``readFromLog(..., readFromPurgatory = true)`` passes ``updateFetchState =
        false``: a follower's progress is the fetch it sent, at the time it sent it.
        Recording it again at the wake-up would date the follower's catch-up to the
        leader's append (``last_fetch_leader_end`` the new log end, ``last_fetch_ms`` the
        wake-up), not to its fetch."""
        refused = self._judge_follower_fetch(pos)
        if refused is not None:
            return refused
        return FetchAnswer(ErrorCode.NONE, self.high_watermark, self.log.log_start_offset)

    def _judge_follower_fetch(self, pos: FetchPosition) -> FetchAnswer | None:
        """The answer to a Fetch the leader does not serve from ``pos`` (an unknown replica
        or stale incarnation, a fenced or unknown epoch, KIP-320 divergence, an offset out
        of range); None for one it serves."""
        log = self.log
        remote = self.remotes.get(pos.replica_id)
        if remote is None or self._stale_incarnation(pos):
            return FetchAnswer(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if pos.current_leader_epoch >= 0 and pos.current_leader_epoch != self.leader_epoch:
            if pos.current_leader_epoch < self.leader_epoch:
                return FetchAnswer(ErrorCode.FENCED_LEADER_EPOCH)
            return FetchAnswer(ErrorCode.UNKNOWN_LEADER_EPOCH)
        lso, leo = log.log_start_offset, log.log_end_offset
        if pos.last_fetched_epoch >= 0:
            epoch, end = log.end_offset_for_epoch(pos.last_fetched_epoch)
            if epoch < 0 or end < 0 or pos.fetch_offset < lso:
                return FetchAnswer(ErrorCode.OFFSET_OUT_OF_RANGE, self.high_watermark, lso)
            if epoch < pos.last_fetched_epoch or end < pos.fetch_offset:
                # KIP-320: the follower's log diverges; it truncates and asks again
                return FetchAnswer(ErrorCode.NONE, self.high_watermark, lso, (epoch, end))
        if not lso <= pos.fetch_offset <= leo:
            return FetchAnswer(ErrorCode.OFFSET_OUT_OF_RANGE, self.high_watermark, lso)
        return None

    def _stale_incarnation(self, pos: FetchPosition) -> bool:
        """KIP-903 (Kafka's ``Replica.updateFetchStateOrThrow``): a fetch whose broker epoch
        (Fetch v15 ReplicaState.ReplicaEpoch) is older than the replica's registration in
        the leader's metadata comes from an incarnation that has since restarted: it must
        not count as the replica's progress (NOT_LEADER_OR_FOLLOWER). An unknown epoch
        (-1, a Fetch before v15) is not checked, as in Kafka."""
        registered = self.registered_epochs.get(pos.replica_id, -1)
        return pos.replica_epoch >= 0 and registered > pos.replica_epoch

    # ------------------------------------------------------------------ ISR
    def _maybe_expand(self, remote: RemoteReplica, now_ms: int) -> list[Action]:
        if remote.broker_id in self.isr.maximal or not self.isr.can_propose(now_ms):
            return []
        end = remote.log_end_offset
        if end < self.high_watermark or end < self.epoch_start_offset:
            return []
        new_isr = (*self.isr.isr, remote.broker_id)
        return self._propose(new_isr, now_ms, f"expand with {remote.broker_id} at {end}")

    def _maybe_shrink(self, now_ms: int) -> list[Action]:
        if not self.isr.can_propose(now_ms):
            return []
        leo, lag = self.log.log_end_offset, self.config.replica_lag_time_max_ms
        out_of_sync = [
            r
            for r in self.isr.isr
            if r != self.broker_id
            and (remote := self.remotes.get(r)) is not None
            and not remote.caught_up(leo, now_ms, lag)
        ]
        if not out_of_sync:
            return []
        new_isr = tuple(r for r in self.isr.isr if r not in out_of_sync)
        return self._propose(new_isr, now_ms, f"shrink: {out_of_sync} lag > {lag} ms")

    def _propose(self, new_isr: tuple[int, ...], now_ms: int, why: str) -> list[Action]:
        epochs = tuple(self.remotes[r].broker_epoch if r in self.remotes else -1 for r in new_isr)
        req = self.isr.propose(self.leader_epoch, new_isr, epochs, now_ms)
        line = StateChange(
            f"leader {self.broker_id} epoch {self.leader_epoch}: AlterPartition ISR "
            f"{list(self.isr.isr)} -> {list(new_isr)} at partition epoch "
            f"{self.isr.partition_epoch} ({why})"
        )
        return [line, req]

    def on_alter_partition_response(self, result: AlterIsrResult, now_ms: int) -> list[Action]:
        changed = self.isr.on_result(
            result,
            self.leader_epoch,
            now_ms,
            self.config.replica_fetch_backoff_ms,
            self.config.alter_partition_timeout_ms,
        )
        if not changed:
            return []
        self._sync_remotes(now_ms, new_epoch=False)
        return [self._isr_line("committed"), *self._maybe_advance_hw()]

    def _isr_line(self, how: str) -> StateChange:
        return StateChange(
            f"leader {self.broker_id} epoch {self.leader_epoch}: ISR {list(self.isr.isr)} "
            f"{how} at partition epoch {self.isr.partition_epoch}"
        )

    # ------------------------------------------------------------------ high watermark
    def _maybe_advance_hw(self) -> list[Action]:
        new_hw = self.log.log_end_offset
        for r in self.isr.maximal:
            if r == self.broker_id:
                continue
            remote = self.remotes.get(r)
            if remote is None:
                continue  # not a replica any more (reassignment); the controller drops it
            new_hw = min(new_hw, remote.log_end_offset)
        if new_hw <= self.high_watermark:
            return []
        self.high_watermark = new_hw
        out: list[Action] = [HighWatermarkChanged(new_hw)]
        done = [rid for rid, p in self._produces.items() if p.required_offset <= new_hw]
        if done:
            error = self._committed_error()
            for rid in done:
                del self._produces[rid]
                out.append(ProduceCompleted(rid, error))
        return out

    # ------------------------------------------------------------------ time
    def next_tick_ms(self, now_ms: int) -> tuple[int, bool]:
        """(the earliest time a ``tick`` can do something, whether the next local append
        may make it earlier): a parked produce expiring, an AlterPartition due again, or
        an ISR member falling out of sync. The timer ticks a leader only then, so a broker
        leading 10,000 partitions does not walk them all every tick. An ISR member is out
        of sync once it is behind the log end and was last caught up more than
        ``replica.lag.time.max.ms`` ago; one at the log end whose time has passed falls
        out only when the log grows (True: ask again after the next append). A time
        after ``now_ms`` can be too early (a fetch since moves it), never too late."""
        due = min((p.deadline_ms for p in self._produces.values()), default=_NEVER_MS)
        resend = self.isr.next_deadline_ms(self.config.alter_partition_timeout_ms)
        if resend is not None:
            due = min(due, resend)
        if self.isr.pending is not None:
            return due, False  # no shrink while a change is in flight (its answer reschedules)
        leo, lag = self.log.log_end_offset, self.config.replica_lag_time_max_ms
        on_append = False
        for r in self.isr.isr:
            remote = self.remotes.get(r) if r != self.broker_id else None
            if remote is None:
                continue
            behind_at = remote.last_caught_up_ms + lag + 1
            if behind_at > now_ms or remote.log_end_offset != leo:
                due = min(due, max(behind_at, self.isr.quiet_until_ms))
            else:
                on_append = True
        return due, on_append

    def tick(self, now_ms: int) -> list[Action]:
        """Expire parked produces, shrink the ISR, resend an overdue AlterPartition."""
        out: list[Action] = []
        expired = [rid for rid, p in self._produces.items() if p.deadline_ms <= now_ms]
        for rid in expired:
            del self._produces[rid]
            out.append(ProduceCompleted(rid, ErrorCode.REQUEST_TIMED_OUT))
        pending = self.isr.pending
        if self.isr.refresh and pending is not None:
            # the same ISR again, with the broker epochs of the replicas' latest fetches
            epochs = tuple(
                self.remotes[r].broker_epoch if r in self.remotes else -1 for r in pending.new_isr
            )
            self.isr.pending = replace(pending, broker_epochs=epochs)
            self.isr.refresh = False
        again = self.isr.due_resend(now_ms, self.config.alter_partition_timeout_ms)
        if again is not None:
            out.append(again)
        out += self._maybe_shrink(now_ms)
        return out
