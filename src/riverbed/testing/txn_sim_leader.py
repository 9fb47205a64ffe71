"""A partition leader for `riverbed.testing.txn_sim` made of riverbed's own partition
code: `ProducerStateTable` (``producer/state.py``) validates and applies real record
batches (a transactional data batch built with `build_batch`, a marker built with
`build_end_txn_marker_batch` as the WriteTxnMarkers handler builds it, its `TxnMarker`
read back from the bytes), and the aborted transactions it yields form the partition's
``.txnindex`` entries, which a read_committed read uses as Kafka's fetch does
(`collect_aborted` up to the last stable offset, the consumer dropping an aborted
producer's batches from the entry's first offset to its ABORT marker).

What the leader did is judged from its log alone (never from the table it checks):

- every transaction's data records are decided by the first marker of their producer
  that follows them: a transaction is all committed or all aborted on every partition
  (`TxnLeader.outcomes`, checked across partitions by the simulation);
- the last stable offset never passes a record whose transaction has no marker yet;
- a read_committed read from offset 0 returns no record of an aborted transaction and no
  record above the LSO, and returns every committed record below it;
- the coordinator epochs of one producer's applied markers never go back (a marker of a
  fenced coordinator epoch is never applied).

A leader crashes as Kafka's log recovers (`TxnLeader.crash`): the log keeps its flushed
prefix (what was acknowledged; an append or a marker caught between its write and its
flush is lost), and the producer state is rebuilt the way ``ProducerStateManager`` does
it: the newest producer snapshot (Kafka's snapshot file, written by `take_snapshot` with
the real codec, ``producer/snapshot.py``) at or below the log end is decoded, the open
transactions of its entries seed the table (``currentTxnFirstOffset``), and the batches
after it are replayed through ``ProducerStateTable.apply``, which re-creates the
``.txnindex`` entries of the replayed range.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from riverbed.producer.snapshot import decode_snapshot, encode_snapshot
from riverbed.producer.state import ProducerStateTable
from riverbed.protocol.control_records import build_end_txn_marker_batch
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.record_batch import parse_header, patch_base_offset
from riverbed.protocol.records import SimpleRecord, build_batch
from riverbed.storage.errors import StorageError
from riverbed.storage.producer_hook import txn_marker_of
from riverbed.storage.txn_index import AbortedTxn, collect_aborted
from riverbed.transaction.markers import TxnMarker
from riverbed.transaction.records import TopicPartition

TxnId = tuple[str, int]  # (transactional id, the client's transaction number)
#: (open transactions, producer id -> (epoch, last sequence, coordinator epoch, open
#: transaction's first offset), the LSO): what a leader's recovery must restore
LeaderState = tuple[dict[int, int], dict[int, tuple[int, int, int, int]], int]
NOW_MS = 1_000_000


@dataclass(frozen=True)
class LogEntry:
    offset: int
    producer_id: int
    txn: TxnId | None  # a data record's transaction; None: a marker
    commit: bool = False  # a marker's kind
    coordinator_epoch: int = -1
    batch: bytes = b""  # as appended (its base offset patched): what recovery replays


@dataclass
class TxnLeader:
    """One partition's leader: its log, its producer state and its txn index."""

    tp: TopicPartition
    table: ProducerStateTable = field(default_factory=ProducerStateTable)
    log: list[LogEntry] = field(default_factory=list)
    index: list[AbortedTxn] = field(default_factory=list)
    #: the durable prefix of the log: an acknowledged write is flushed first
    flushed: int = 0
    #: the newest producer snapshot (Kafka's file format) and the offset it is taken at
    snapshot: bytes = field(default_factory=lambda: encode_snapshot([]))
    snapshot_offset: int = 0

    def append(self, pid: int, epoch: int, txn: TxnId) -> ErrorCode:
        """A client's transactional batch of one record (its next sequence)."""
        entry = self.table.get(pid)
        seq = entry.last_seq + 1 if entry is not None and entry.epoch == epoch else 0
        batch = build_batch(
            [SimpleRecord(repr(txn).encode())],
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=max(seq, 0),
            is_transactional=True,
            now_ms=NOW_MS,
        )
        return self._append(bytearray(batch), LogEntry(len(self.log), pid, txn))

    def write_marker(self, m: TxnMarker) -> ErrorCode:
        batch = build_end_txn_marker_batch(
            m.committed,
            producer_id=m.producer_id,
            producer_epoch=m.producer_epoch,
            coordinator_epoch=m.coordinator_epoch,
            now_ms=NOW_MS,
        )
        entry = LogEntry(len(self.log), m.producer_id, None, m.committed, m.coordinator_epoch)
        return self._append(bytearray(batch), entry)

    def _append(self, batch: bytearray, entry: LogEntry) -> ErrorCode:
        header = parse_header(batch)
        marker = txn_marker_of(batch, header) if header.is_control else None
        try:
            self.table.check([header], [marker])
        except StorageError as exc:
            return ErrorCode.of(exc.error_code)
        patch_base_offset(batch, 0, entry.offset)
        header = parse_header(batch)
        aborted = self.table.apply(header, marker)
        if aborted is not None:
            self.index.append(aborted)
        self.log.append(replace(entry, batch=bytes(batch)))
        return ErrorCode.NONE

    # ------------------------------------------------------------------ persistence
    def flush(self) -> None:
        self.flushed = len(self.log)

    def take_snapshot(self) -> None:
        """A producer snapshot at the flushed log end (Kafka writes one at a roll)."""
        self.flush()
        self.snapshot = encode_snapshot(self.table.producers.entries())
        self.snapshot_offset = self.flushed

    def state(self) -> LeaderState:
        """What recovery must restore (see `LeaderState`)."""
        producers = {
            e.producer_id: (e.epoch, e.last_seq, e.coordinator_epoch, e.current_txn_first_offset)
            for e in self.table.producers.entries()
        }
        return dict(self.table.ongoing), producers, self.lso()

    def crash(self) -> int:
        """Crash and recover (see the module's docstring); how many entries were lost."""
        lost = len(self.log) - self.flushed
        del self.log[self.flushed :]
        end = len(self.log)
        if self.snapshot_offset > end:  # Kafka deletes snapshots above the log end
            self.snapshot, self.snapshot_offset = encode_snapshot([]), 0
        table = ProducerStateTable(self.snapshot_offset)
        entries = decode_snapshot(self.snapshot)
        for e in entries:
            table.producers.put(e)
        table.seed_ongoing(
            {e.producer_id: e.current_txn_first_offset for e in entries
             if 0 <= e.current_txn_first_offset < end}
        )  # fmt: skip
        index = [a for a in self.index if a.last_offset < self.snapshot_offset]
        for logged in self.log[self.snapshot_offset :]:
            header = parse_header(logged.batch)
            marker = txn_marker_of(logged.batch, header) if header.is_control else None
            aborted = table.apply(header, marker)
            if aborted is not None:
                index.append(aborted)
        table.map_end_offset = end
        self.table, self.index = table, index
        return lost

    # ------------------------------------------------------------------ judged from the log
    def decisions(self) -> dict[int, bool | None]:
        """Offset of each data record -> committed (True), aborted (False), open (None):
        decided by its producer's next marker in the log."""
        out: dict[int, bool | None] = {}
        undecided: dict[int, list[int]] = {}
        for e in self.log:
            if e.txn is not None:
                undecided.setdefault(e.producer_id, []).append(e.offset)
                out[e.offset] = None
            else:
                for offset in undecided.pop(e.producer_id, []):
                    out[offset] = e.commit
        return out

    @property
    def outcomes(self) -> dict[TxnId, bool]:
        """Transaction -> its decision here (its first record's; see `violations`)."""
        decided: dict[TxnId, bool] = {}
        for offset, d in self.decisions().items():
            txn = self.log[offset].txn
            if d is not None and txn is not None:
                decided.setdefault(txn, d)
        return decided

    @property
    def applied(self) -> list[tuple[int, int]]:
        return [(e.producer_id, e.coordinator_epoch) for e in self.log if e.txn is None]

    def has_open(self) -> bool:
        return bool(self.table.ongoing)

    def lso(self) -> int:
        return self.table.last_stable_offset(len(self.log))

    def read_committed(self) -> list[int]:
        """The data offsets a read_committed consumer gets from offset 0 (Kafka's
        collectAbortedTxns up to the LSO; the consumer skips an aborted producer's batches
        from the entry's first offset until its ABORT marker)."""
        upper = self.lso()
        aborted = sorted(
            collect_aborted(self.index, 0, upper).aborted, key=lambda a: a.first_offset
        )
        skipping: set[int] = set()
        out = []
        for e in self.log[:upper]:
            while aborted and aborted[0].first_offset <= e.offset:
                skipping.add(aborted.pop(0).producer_id)
            if e.txn is None:
                if not e.commit:
                    skipping.discard(e.producer_id)
            elif e.producer_id not in skipping:
                out.append(e.offset)
        return out

    def violations(self) -> list[str]:
        """What the log says is wrong now (empty: nothing)."""
        found = []
        decisions = self.decisions()
        split: dict[TxnId, set[bool | None]] = {}
        for offset, d in decisions.items():
            txn = self.log[offset].txn
            if txn is not None:
                split.setdefault(txn, set()).add(d)
        found += [
            f"{self.tp}: {t} decided {sorted(map(str, ds))}"
            for t, ds in split.items()
            if len(ds) > 1
        ]
        lso = self.lso()
        open_below = [o for o, d in decisions.items() if d is None and o < lso]
        if open_below:
            found.append(f"{self.tp}: LSO {lso} passes open transaction records {open_below}")
        read = self.read_committed()
        bad = [o for o in read if decisions[o] is not True]
        if bad:
            found.append(f"{self.tp}: read_committed returned uncommitted records {bad}")
        missed = [o for o, d in decisions.items() if d is True and o < lso and o not in read]
        if missed:
            found.append(f"{self.tp}: read_committed missed committed records {missed}")
        last: dict[int, int] = {}
        for pid, epoch in self.applied:
            if epoch < last.get(pid, -1):
                found.append(f"{self.tp}: a marker of coordinator epoch {epoch} after {last[pid]}")
            last[pid] = epoch
        return found
