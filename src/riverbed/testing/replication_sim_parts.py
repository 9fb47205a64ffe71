"""Pieces of the replication simulation (``replication_sim``): the in-memory replica log,
the lossy network, and the invariant checker.

Invariants (checked after every simulated step; a violation raises ``InvariantError``):

1. no record below a high watermark is ever lost or changed on any ISR member: the
   *ledger* is every record any leader ever exposed below its high watermark (a record
   once in the ledger never changes), and every replica in the controller's ISR holds the
   whole ledger, byte for byte, as a prefix of its log;
2. ISR members agree below the high watermark (they all hold the same ledger prefix);
3. at most one leader per leader epoch (of the partition);
4. the high watermark never goes backwards on a leader (one leader incarnation at one
   leader epoch);
5. every acknowledged acks=all record is in the ledger at the offset it was acknowledged
   with.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from riverbed.storage.epoch_cache import LeaderEpochCache


class InvariantError(AssertionError):
    pass


Record = tuple[int, str]  # (leader epoch, value)


class CheckedLog(Protocol):
    """What the checker reads of a replica's log (``MemLog``, or a view of a real one)."""

    verified: int  # how far it was compared with the ledger

    @property
    def records(self) -> Sequence[Record]: ...

    @property
    def log_end_offset(self) -> int: ...


class MemLog:
    """A replica log in memory (one record per batch), with a real leader-epoch cache.

    It survives its broker's crash (the model is SIGKILL: the page cache keeps what was
    written). ``verified`` is how far the checker has compared it with the ledger; a
    truncation below it resets it."""

    def __init__(self) -> None:
        self.records: list[Record] = []
        self.cache = LeaderEpochCache(None)
        self.verified = 0

    @property
    def log_start_offset(self) -> int:
        return 0

    @property
    def log_end_offset(self) -> int:
        return len(self.records)

    def last_record_epoch(self) -> int:
        return self.records[-1][0] if self.records else -1

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self.cache.end_offset_for(epoch, len(self.records))

    def assign_epoch(self, epoch: int, start_offset: int) -> None:
        self.cache.assign(epoch, start_offset)

    def forget_epochs_from(self, offset: int) -> None:
        self.cache.truncate_from_end(offset)

    def truncate_to(self, offset: int) -> None:
        if offset >= len(self.records):
            return  # as PartitionLog.truncate_to: nothing removed, epochs untouched
        del self.records[offset:]
        self.cache.truncate_from_end(offset)
        self.verified = min(self.verified, offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        assert offset == 0, "the simulation keeps every record (no retention)"
        self.records.clear()
        self.cache.clear()
        self.verified = 0

    def append_as_follower(self, records: Any) -> None:
        for offset, epoch, value in records:
            if offset != len(self.records):
                raise InvariantError(f"follower append at {offset} but log end {len(self.records)}")
            self.cache.assign(epoch, offset)
            self.records.append((epoch, value))

    def append_as_leader(self, value: str, epoch: int) -> int:
        self.cache.assign(epoch, len(self.records))
        self.records.append((epoch, value))
        return len(self.records) - 1

    def read(self, offset: int, count: int) -> tuple[tuple[int, int, str], ...]:
        end = min(len(self.records), offset + count)
        return tuple((o, *self.records[o]) for o in range(offset, end))


CONTROLLER = 0
CLIENT = -1


@dataclass
class Net:
    """Messages with random delays (so reordering), drops, duplicates, cut links and slow
    nodes. Every decision comes from the simulation's one ``random.Random``."""

    rng: random.Random
    drop_p: float = 0.0
    dup_p: float = 0.0
    cut: dict[frozenset[int], int] = field(default_factory=dict)  # link -> until_ms
    slow: dict[int, int] = field(default_factory=dict)  # node -> until_ms
    queue: list[tuple[int, int, int, int, Any]] = field(default_factory=list)
    seq: int = 0
    sent: int = 0
    dropped: int = 0

    def blocked(self, a: int, b: int, now_ms: int) -> bool:
        return self.cut.get(frozenset((a, b)), -1) > now_ms

    def send(self, src: int, dst: int, msg: Any, now_ms: int) -> None:
        self.sent += 1
        if self.blocked(src, dst, now_ms) or self.rng.random() < self.drop_p:
            self.dropped += 1
            return
        # Kafka's request channel is TCP: a request to or an answer from the controller is
        # delivered at most once (resends are the sender's); data-plane messages may repeat
        to_controller = CONTROLLER in (src, dst)
        copies = 2 if not to_controller and self.rng.random() < self.dup_p else 1
        for _ in range(copies):
            delay = self.rng.randint(1, 25)
            if self.slow.get(src, -1) > now_ms or self.slow.get(dst, -1) > now_ms:
                delay += self.rng.randint(300, 1500)
            self.seq += 1
            heapq.heappush(self.queue, (now_ms + delay, self.seq, src, dst, msg))

    def deliver_at(self, src: int, dst: int, msg: Any, at_ms: int) -> None:
        """Deliver ``msg`` at ``at_ms`` (a message held up in the network)."""
        self.seq += 1
        heapq.heappush(self.queue, (at_ms, self.seq, src, dst, msg))

    def due(self, now_ms: int) -> list[tuple[int, int, Any]]:
        out = []
        while self.queue and self.queue[0][0] <= now_ms:
            _, _, src, dst, msg = heapq.heappop(self.queue)
            if not self.blocked(src, dst, now_ms):
                out.append((src, dst, msg))
        return out

    def heal(self) -> None:
        self.cut.clear()
        self.slow.clear()
        self.drop_p = self.dup_p = 0.0


class Checker:
    """The ledger and the invariants of the module docstring."""

    def __init__(self) -> None:
        self.ledger: list[Record] = []
        self.leader_of_epoch: dict[int, int] = {}
        self.leader_hw: dict[tuple[int, int, int], int] = {}  # (broker, incarnation, epoch)
        self.acked = 0

    def _verify(self, who: str, log: CheckedLog, upto: int) -> None:
        for o in range(log.verified, upto):
            if log.records[o] != self.ledger[o]:
                raise InvariantError(
                    f"{who}: offset {o} is {log.records[o]} but {self.ledger[o]} was committed"
                )
        log.verified = max(log.verified, upto)

    def on_leader_hw(
        self, broker: int, incarnation: int, epoch: int, log: CheckedLog, hw: int
    ) -> None:
        key = (broker, incarnation, epoch)
        if hw < self.leader_hw.get(key, -1):
            raise InvariantError(
                f"leader {broker} epoch {epoch}: high watermark went back "
                f"{self.leader_hw[key]} -> {hw}"
            )
        self.leader_hw[key] = hw
        if hw > log.log_end_offset:
            raise InvariantError(f"leader {broker}: high watermark {hw} above its log end")
        self._verify(f"leader {broker} epoch {epoch}", log, min(hw, len(self.ledger)))
        for o in range(len(self.ledger), hw):
            self.ledger.append(log.records[o])
        log.verified = max(log.verified, hw)

    def on_leader(self, broker: int, epoch: int) -> None:
        first = self.leader_of_epoch.setdefault(epoch, broker)
        if first != broker:
            raise InvariantError(f"two leaders at leader epoch {epoch}: {first} and {broker}")

    def on_ack(self, offset: int, value: str) -> None:
        self.acked += 1
        if offset >= len(self.ledger) or self.ledger[offset][1] != value:
            got = self.ledger[offset] if offset < len(self.ledger) else "nothing"
            raise InvariantError(
                f"acknowledged {value!r} at offset {offset} but the ledger has {got}"
            )

    def check_isr(self, isr: tuple[int, ...], logs: Mapping[int, CheckedLog]) -> None:
        end = len(self.ledger)
        for b in isr:
            log = logs[b]
            if log.log_end_offset < end:
                raise InvariantError(
                    f"ISR member {b} has log end {log.log_end_offset} below the committed "
                    f"end {end} (committed records lost)"
                )
            self._verify(f"ISR member {b}", log, end)

    def new_history(self, logs: Sequence[CheckedLog]) -> None:
        """An unclean election the user asked for: what was committed may be gone, the
        new leader's log is the history from now on (the invariants hold again from
        here; the raft simulation's wiped disk starts a new history the same way)."""
        self.ledger = []
        for log in logs:
            log.verified = 0
