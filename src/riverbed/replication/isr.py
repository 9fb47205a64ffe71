"""The leader's view of the in-sync replica set: committed by the controller, plus at most
one AlterPartition in flight (Kafka's ``PendingExpandIsr`` / ``PendingShrinkIsr``).

While a change is in flight the high watermark uses the *maximal* ISR, the union of the
committed and the proposed set: an expansion counts the new member at once (it has already
reached the high watermark), a shrink keeps counting the leaving member until the
controller has agreed, so an ack never rests on a set the controller did not record.

How the controller's answers are handled (Kafka's ``handleAlterPartitionError``):

===================================  ===================================================
NONE                                 commit the returned ISR and partition epoch (when
                                     newer than what metadata already gave us)
NOT_CONTROLLER, REQUEST_TIMED_OUT,   still in flight: the same request is sent again
any other error                      after the back-off
INELIGIBLE_REPLICA,                  not applied: back to the committed state, no new
OPERATION_NOT_ATTEMPTED              proposal before the back-off. But when the request was
                                     resent and its first copy left less than
                                     ``COPY_LIFETIME_TIMEOUTS`` timeouts ago, an earlier copy
                                     may still be applied: it stays in flight (maximal ISR;
                                     a reset would let the high watermark pass a replica
                                     the controller then adds) and is proposed again with
                                     fresh broker epochs after the back-off
FENCED_LEADER_EPOCH,                 our view is stale: stay in flight and send nothing
INVALID_UPDATE_VERSION,              until metadata brings a newer partition or leader
NEW_LEADER_ELECTED,                  epoch (which clears the pending change)
NOT_LEADER_OR_FOLLOWER, UNKNOWN_*
===================================  ===================================================
"""

from __future__ import annotations

from dataclasses import dataclass

from riverbed.protocol.errors import ErrorCode
from riverbed.replication.actions import AlterIsr, AlterIsrResult

_AWAIT_METADATA = frozenset(
    {
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.INVALID_UPDATE_VERSION,
        ErrorCode.NEW_LEADER_ELECTED,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.UNKNOWN_TOPIC_ID,
    }
)
_NOT_APPLIED = frozenset({ErrorCode.INELIGIBLE_REPLICA, ErrorCode.OPERATION_NOT_ATTEMPTED})


@dataclass
class IsrState:
    isr: tuple[int, ...]  # committed: the controller recorded it at partition_epoch
    partition_epoch: int
    pending: AlterIsr | None = None
    sent_ms: int = 0
    sends: int = 0  # copies of ``pending`` sent (1 + resends)
    first_sent_ms: int = 0
    refresh: bool = False  # the leader re-proposes ``pending`` with fresh broker epochs
    resend_at_ms: int | None = None  # when to send ``pending`` again (None: do not)
    quiet_until_ms: int = 0  # no new proposal before (after a refused one)

    @property
    def in_flight(self) -> bool:
        return self.pending is not None

    @property
    def maximal(self) -> tuple[int, ...]:
        if self.pending is None:
            return self.isr
        return self.isr + tuple(r for r in self.pending.new_isr if r not in self.isr)

    def can_propose(self, now_ms: int) -> bool:
        return self.pending is None and now_ms >= self.quiet_until_ms

    def propose(
        self, leader_epoch: int, new_isr: tuple[int, ...], epochs: tuple[int, ...], now_ms: int
    ) -> AlterIsr:
        req = AlterIsr(leader_epoch, self.partition_epoch, new_isr, epochs)
        self.pending = req
        self.sent_ms = self.first_sent_ms = now_ms
        self.sends = 1
        self.refresh = False
        return req

    def commit(self, isr: tuple[int, ...], partition_epoch: int) -> bool:
        """A newer committed state (from metadata or an answer); False when stale."""
        if partition_epoch <= self.partition_epoch:
            # the same epoch again says nothing about a request still in flight
            return False
        self.isr, self.partition_epoch = isr, partition_epoch
        self.pending, self.resend_at_ms = None, None
        return True

    def due_resend(self, now_ms: int, timeout_ms: int) -> AlterIsr | None:
        """The pending request again, when its answer is overdue or a retry is due."""
        if self.pending is None:
            return None
        overdue = self.resend_at_ms is None and now_ms - self.sent_ms >= timeout_ms
        retry = self.resend_at_ms is not None and now_ms >= self.resend_at_ms
        if not (overdue or retry):
            return None
        self.sent_ms, self.resend_at_ms = now_ms, None
        self.sends += 1
        return self.pending

    def next_deadline_ms(self, timeout_ms: int) -> int | None:
        if self.pending is None:
            return None
        if self.resend_at_ms is not None:
            return self.resend_at_ms
        return self.sent_ms + timeout_ms

    def on_result(
        self,
        result: AlterIsrResult,
        leader_epoch: int,
        now_ms: int,
        backoff_ms: int,
        timeout_ms: int = 0,
    ) -> bool:
        """Apply the controller's answer; True when the committed ISR changed."""
        if self.pending is None or result.request != self.pending:
            return False  # an answer to an older request (resent or superseded)
        err = result.error
        if err is ErrorCode.NONE:
            if result.leader_epoch != leader_epoch:
                self.resend_at_ms = _NEVER  # a new leader epoch: metadata will tell
                return False
            if result.partition_epoch <= self.partition_epoch:
                self.pending, self.resend_at_ms = None, None  # metadata was faster
                return False
            return self.commit(result.isr, result.partition_epoch)
        copies_alive = now_ms - self.first_sent_ms < COPY_LIFETIME_TIMEOUTS * timeout_ms
        if err in _NOT_APPLIED and self.sends > 1 and copies_alive:
            self.resend_at_ms = now_ms + backoff_ms  # an earlier copy may yet apply
            self.refresh = True
            return False
        if err in _NOT_APPLIED:
            self.pending, self.resend_at_ms = None, None
            self.quiet_until_ms = now_ms + backoff_ms
            return False
        if err in _AWAIT_METADATA:
            self.resend_at_ms = _NEVER
            return False
        self.resend_at_ms = now_ms + backoff_ms
        return False


_NEVER = 2**62  # "wait for metadata": never resent by the timer
#: A copy of an AlterPartition request older than this many timeouts is presumed gone
#: (answered or dropped); the shell's own request timeout is shorter.
COPY_LIFETIME_TIMEOUTS = 4
