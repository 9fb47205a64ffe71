"""A transaction coordinator with one ``__transaction_state`` partition, for unit tests."""

from __future__ import annotations

from dataclasses import dataclass, field

from riverbed.protocol.errors import ErrorCode
from riverbed.transaction.api import Answer, Result, Step, TxnConfig, TxnWrite
from riverbed.transaction.coordinator import TransactionCoordinator
from riverbed.transaction.records import TxnMetadata, key_bytes, replay_all, value_bytes
from riverbed.transaction.shard import TransactionShard

E = ErrorCode


@dataclass
class Allocator:
    next_id: int = 1000
    available: bool = True

    def allocate(self) -> int | None:
        if not self.available:
            return None
        self.next_id += 1
        return self.next_id - 1


@dataclass
class Harness:
    config: TxnConfig = field(default_factory=lambda: TxnConfig(num_partitions=1))
    alloc: Allocator = field(default_factory=Allocator)
    now_ms: int = 1_000_000
    log: list[tuple[bytes, bytes | None]] = field(default_factory=list)
    answers: dict[int, Result] = field(default_factory=dict)
    writes: list[TxnWrite] = field(default_factory=list)
    _rid: int = 0

    def __post_init__(self) -> None:
        self.c = TransactionCoordinator(self.config, self.alloc)
        self.c.begin_load(0, 1)
        self.c.load(0, 1, [], self.now_ms)

    @property
    def shard(self) -> TransactionShard:
        return self.c.shards[0]

    def rid(self) -> int:
        self._rid += 1
        return self._rid

    def take(self, step: Step) -> None:
        for a in step.answers:
            assert a.request_id not in self.answers, f"answered twice: {a}"
            self.answers[a.request_id] = a.result
        self.writes += step.writes

    def commit(self, code: ErrorCode = E.NONE, count: int | None = None) -> None:
        """Complete the pending writes (and the writes they lead to) with ``code``."""
        n = 0
        while self.writes and (count is None or n < count):
            w = self.writes.pop(0)
            if code is E.NONE:
                self.log.append((w.key, w.value))
            self.take(
                self.c.complete_write(w.partition, w.coordinator_epoch, w.token, code, self.now_ms)
            )
            n += 1

    def ask(self, step: Step, commit: bool = True) -> Result | None:
        rids = [a.request_id for a in step.answers]
        self.take(step)
        if commit:
            self.commit()
        return self.answers.get(rids[0]) if rids else None

    def init(self, tid: str | None, timeout_ms: int = 60_000, expected: tuple[int, int] | None = None,
             version: int = 4, commit: bool = True, enable_2pc: bool = False,
             keep: bool = False) -> Result | None:  # fmt: skip
        r = self.rid()
        two_phase = (enable_2pc, keep)
        self.take(
            self.c.init_producer_id(r, tid, timeout_ms, expected, version, self.now_ms, two_phase)
        )
        if commit:
            self.commit()
        return self.answers.get(r)

    def add(self, tid: str, pid: int, epoch: int, *parts: tuple[str, int], version: int = 3,
            commit: bool = True) -> Result | None:  # fmt: skip
        r = self.rid()
        self.take(self.c.add_partitions(r, tid, pid, epoch, frozenset(parts), version, self.now_ms))
        if commit:
            self.commit()
        return self.answers.get(r)

    def end(self, tid: str, pid: int, epoch: int, commit_txn: bool = True, version: int = 3,
            commit: bool = True) -> Result | None:  # fmt: skip
        r = self.rid()
        self.take(self.c.end_txn(r, tid, pid, epoch, commit_txn, version, self.now_ms))
        if commit:
            self.commit()
        return self.answers.get(r)

    def meta(self, tid: str) -> TxnMetadata:
        return self.shard.txns[tid]

    def replayed(self) -> dict[str, TxnMetadata]:
        return replay_all(self.log)

    def seed(self, meta: TxnMetadata) -> None:
        """Put ``meta`` in the log and reload the partition from it."""
        self.log.append((key_bytes(meta.transactional_id), value_bytes(meta, 2)))
        self.reload()

    def reload(self, epoch: int | None = None) -> None:
        epoch = self.shard.coordinator_epoch + 1 if epoch is None else epoch
        self.take(self.c.begin_load(0, epoch))
        self.writes.clear()
        assert self.c.load(0, epoch, list(self.log), self.now_ms)


def answer_of(step: Step) -> Answer:
    assert len(step.answers) == 1, step
    return step.answers[0]
