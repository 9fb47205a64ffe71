"""The follower side of one partition: what to fetch, and what a fetch response does.

A follower fetches from ``log_end_offset`` with ``LastFetchedEpoch`` = the epoch of its last
batch and ``CurrentLeaderEpoch`` = the epoch it follows. Truncation is by leader epochs only
(KIP-101/279/320), never to the high watermark: when the leader answers with a
``DivergingEpoch`` (epoch E ending at offset O) the follower looks up its own end of E:

- it knows E: truncate to min(O, its end of E, its log end);
- it only knows older epochs: truncate to the end of the largest one below E (the next
  fetch asks again with that epoch, converging one epoch per round);
- it knows no epoch at all: truncate to min(O, its log end).

OFFSET_OUT_OF_RANGE below the leader's log start (or with an empty log) restarts the log at
the leader's log start. NOT_LEADER_OR_FOLLOWER and UNKNOWN_LEADER_EPOCH from the replica
this follower's metadata names as leader mean, right after an election, that its broker has
not applied the election yet (the controller's own broker applies it first): they are
retried after ``LEADER_NOT_READY_BACKOFF_MS``, doubling up to ``replica.fetch.backoff.ms``
(waiting the whole back-off held every acks=all produce of the new leader a second, issue
23). Every other error backs off ``replica.fetch.backoff.ms``; FENCED_LEADER_EPOCH means
our metadata is behind and new metadata will restart us.
The follower's high watermark is min(leader's high watermark, own log end).
A response that does not answer the current position (offset, last fetched epoch or
leader epoch changed since it was sent: reordered, duplicated, stale) is ignored.
"""

from __future__ import annotations

from riverbed.protocol.errors import ErrorCode
from riverbed.replication.actions import (
    Action,
    FetchPosition,
    FetchResult,
    HighWatermarkChanged,
    StateChange,
)
from riverbed.replication.config import ReplicaConfig
from riverbed.replication.log import ReplicaLog

NO_LEADER = -1
#: First retry (ms) of a leader that has not taken over yet (doubling, up to the back-off).
LEADER_NOT_READY_BACKOFF_MS = 50
_NOT_READY = (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_LEADER_EPOCH)


class PartitionFollower:
    """Follower state of one partition at one leader epoch (leader -1: none known)."""

    def __init__(
        self,
        broker_id: int,
        leader_id: int,
        leader_epoch: int,
        log: ReplicaLog,
        config: ReplicaConfig,
        *,
        high_watermark: int,
        broker_epoch: int = -1,
    ) -> None:
        self.broker_id = broker_id
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.log = log
        self.config = config
        self.broker_epoch = broker_epoch
        self.high_watermark = min(max(high_watermark, log.log_start_offset), log.log_end_offset)
        # an epoch this replica started as leader without appending must not shadow the
        # epochs of the batches it is about to fetch
        log.forget_epochs_from(log.log_end_offset)
        self.backoff_until_ms = 0
        self.not_ready_answers = 0  # consecutive NOT_LEADER / UNKNOWN_LEADER_EPOCH answers
        self.truncations = 0
        # the leader's HW as of the last fetch answer (-1: none yet); lag is measured to it
        self.leader_high_watermark = -1

    def fetch_position(self, now_ms: int) -> FetchPosition | None:
        """What to fetch now; None while backing off or without a leader."""
        if self.leader_id == NO_LEADER or now_ms < self.backoff_until_ms:
            return None
        return FetchPosition(
            replica_id=self.broker_id,
            current_leader_epoch=self.leader_epoch,
            fetch_offset=self.log.log_end_offset,
            last_fetched_epoch=self.log.last_record_epoch(),
            replica_epoch=self.broker_epoch,
        )

    def _current(self, pos: FetchPosition) -> bool:
        return (
            pos.current_leader_epoch == self.leader_epoch
            and pos.fetch_offset == self.log.log_end_offset
            and pos.last_fetched_epoch == self.log.last_record_epoch()
        )

    def on_fetch_result(self, result: FetchResult, now_ms: int) -> list[Action]:
        if self.leader_id == NO_LEADER or not self._current(result.position):
            return []
        answer = result.answer
        if answer.error is ErrorCode.OFFSET_OUT_OF_RANGE:
            return self._out_of_range(result, now_ms)
        if answer.error in _NOT_READY:
            wait = LEADER_NOT_READY_BACKOFF_MS << min(self.not_ready_answers, 16)
            self.not_ready_answers += 1
            self.backoff_until_ms = now_ms + min(wait, self.config.replica_fetch_backoff_ms)
            return []
        if answer.error is not ErrorCode.NONE:
            self.backoff_until_ms = now_ms + self.config.replica_fetch_backoff_ms
            return []
        self.not_ready_answers = 0
        self.leader_high_watermark = answer.high_watermark
        if answer.diverging_epoch is not None:
            return self._truncate_on_divergence(*answer.diverging_epoch)
        if result.records is not None:
            self.log.append_as_follower(result.records)
        return self._set_hw(min(answer.high_watermark, self.log.log_end_offset))

    def offset_lag(self) -> int:
        """Kafka's replica fetcher lag: the leader's HW minus this replica's log end, never
        below 0 (0 until the first answer from the leader)."""
        if self.leader_high_watermark < 0:
            return 0
        return max(0, self.leader_high_watermark - self.log.log_end_offset)

    def _set_hw(self, hw: int) -> list[Action]:
        hw = max(hw, self.log.log_start_offset)
        if hw == self.high_watermark:
            return []
        self.high_watermark = hw
        return [HighWatermarkChanged(hw)]

    def _truncate_on_divergence(self, epoch: int, end_offset: int) -> list[Action]:
        log = self.log
        leo = log.log_end_offset
        own_epoch, own_end = log.end_offset_for_epoch(epoch)
        if own_epoch < 0:
            target = min(end_offset, leo)
        elif own_epoch != epoch:
            target = min(own_end, leo)
        else:
            target = min(own_end, end_offset, leo)
        target = max(target, log.log_start_offset)
        out: list[Action] = []
        if target < leo:
            log.truncate_to(target)
            self.truncations += 1
            out.append(
                StateChange(
                    f"follower {self.broker_id} epoch {self.leader_epoch}: truncated "
                    f"{leo} -> {log.log_end_offset} (leader {self.leader_id} diverges after "
                    f"epoch {epoch} at {end_offset})"
                    + (
                        f"; below high watermark {self.high_watermark}"
                        if target < self.high_watermark
                        else ""
                    )
                )
            )
        out += self._set_hw(min(self.high_watermark, log.log_end_offset))
        return out

    def _out_of_range(self, result: FetchResult, now_ms: int) -> list[Action]:
        log, leader_start = self.log, result.answer.log_start_offset
        empty = log.log_start_offset == log.log_end_offset
        if leader_start >= 0 and (result.position.fetch_offset < leader_start or empty):
            log.truncate_fully_and_start_at(leader_start)
            self.high_watermark = leader_start
            return [
                StateChange(
                    f"follower {self.broker_id} epoch {self.leader_epoch}: log restarted at "
                    f"the leader's log start {leader_start}"
                ),
                HighWatermarkChanged(leader_start),
            ]
        self.backoff_until_ms = now_ms + self.config.replica_fetch_backoff_ms
        return []
