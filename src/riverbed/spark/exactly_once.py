"""The exactly-once sink: Spark tasks write, the Spark driver commits (KIP-939).

A Kafka transaction can only be completed by the client holding its transactional id and
epoch, but Spark's tasks write and its driver decides (SPARK-28908). With KIP-939 it is a
two-phase commit:

1. Task (`write_task`): transactional id ``<prefix>-<Spark partition id>``. InitProducerId
   with ``transaction.timeout.ms`` (a task that dies while writing is aborted by that
   timeout; the next attempt's InitProducerId fences and aborts it at once), AddPartitions
   and Produce, then *prepare*: InitProducerId(Enable2Pc, KeepPreparedTxn) keeps the
   transaction Ongoing with no timeout and fences the task's own producer (nothing more can
   be added). The commit message carries (transactional id, producer id, epoch) of the
   prepared transaction.
2. Driver (`SinkCoordinator.commit`): first the decision, one record (batch id and every
   task's transaction) appended with acks=all to a compacted commit-log topic under the
   prefix; then each transaction is completed: InitProducerId(KeepPreparedTxn) answers the
   kept transaction's (producer id, epoch), which must be the task's, and EndTxn(commit)
   with the new client epoch.
3. Recovery (`SinkCoordinator.start`, whenever Spark makes the writer: before a query's
   first batch and for every commit): the last decision is rolled forward (its
   transactions still Ongoing are committed). Spark re-runs a batch whose commit it did
   not record: its ``commit`` with a batch id already decided aborts the re-run's
   transactions (the first run's are committed), so each batch is written once. After a
   commit, any other Ongoing transaction under the prefix is undecided (a run that
   crashed before its decision) and aborted.

The decision record is the commit point: before it, nothing of the batch is visible and
everything is aborted; after it, all of it becomes visible (a crash in between leaves the
rest prepared, never timed out, until recovery commits it).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from pyspark.sql.datasource import WriterCommitMessage

from riverbed.cli.wire import WireError
from riverbed.protocol.compression import CompressionType
from riverbed.protocol.records import SimpleRecord, build_batch, frame_batch
from riverbed.spark.options import WriteOptions, librdkafka_settings, wire_client_security
from riverbed.spark.txn_client import Cluster, TxnProducer, TxnSinkError, murmur2_partition

#: Bytes of records a task buffers for one partition before producing them as one batch.
batch_bytes_max: Final = 1_048_576
#: How long the driver waits for the commit log (create, read to its end, append).
commit_log_timeout_s: Final = 60.0
commit_log_timeout_ms: Final = 60_000
Txn = tuple[str, int, int]  # (transactional id, producer id, epoch)


@dataclass
class TxnCommitMessage(WriterCommitMessage):
    """A task's prepared transaction (producer id -1: the task wrote no row)."""

    records: int
    transactional_id: str
    producer_id: int
    producer_epoch: int

    @property
    def txn(self) -> Txn:
        return (self.transactional_id, self.producer_id, self.producer_epoch)


def cluster_of(options: WriteOptions) -> Cluster:
    """The brokers of ``options``, with their ``kafka.*`` TLS and SASL settings."""
    config = options.client_config
    return Cluster(config["bootstrap.servers"], security=wire_client_security(config))


# ---------------------------------------------------------------------------- tasks
def write_task(options: WriteOptions, batches: Iterator[pa.RecordBatch], partition_id: int
               ) -> TxnCommitMessage:  # fmt: skip
    """Write every row in one transaction and prepare it (see the module docstring)."""
    from riverbed.spark.sink import rows_of

    cluster = cluster_of(options)
    try:
        producer = TxnProducer(
            cluster, f"{options.prefix()}-{partition_id}", options.transaction_timeout_ms
        )
        producer.init()
        writer = _PartitionedWriter(producer, cluster, partition_id)
        for batch in batches:
            add = writer.add
            for topic, part, key, value, ts, headers in rows_of(options, batch):
                add(topic, part, (key, value, ts, headers))
        writer.flush_all()
        if not writer.count:
            return TxnCommitMessage(0, producer.tid, -1, -1)
        pid, epoch = producer.producer_id, producer.producer_epoch
        kept = producer.init(enable_2pc=True, keep=True)  # prepare
        if (kept.ongoing_txn_producer_id, kept.ongoing_txn_producer_epoch) != (pid, epoch):
            raise TxnSinkError(
                f"the transaction of {producer.tid} ({pid}, epoch {epoch}) was aborted before "
                "it was prepared (transaction.timeout.ms passed, or another attempt fenced it)"
            )
        return TxnCommitMessage(writer.count, producer.tid, pid, epoch)
    finally:
        cluster.close()


def _zigzag(n: int) -> bytes:
    v = (n << 1) ^ (n >> 63)
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


#: Zigzag varints of 0 .. _VARINTS_MAX - 1 (lengths and offset deltas), and of -1 (null).
_VARINTS_MAX: Final = 1 << 15
_VARINTS: Final = [_zigzag(i) for i in range(_VARINTS_MAX)]
_NULL: Final = _zigzag(-1)
Buffered = tuple[Any, Any, int, Any]  # key, value, timestamp ms (0: now), headers


def encode_plain(rows: Sequence[Buffered]) -> bytes:
    """The records of a v2 batch for rows without headers or timestamps (every record
    at the batch's first timestamp): KIP-98's record format, varints from a table."""
    table, null = _VARINTS, _NULL
    parts: list[bytes] = []
    append = parts.append
    for delta, (key, value, _ts, _headers) in enumerate(rows):
        k = null if key is None else _varint(len(key), table) + key
        v = null if value is None else _varint(len(value), table) + value
        record = b"\x00\x00" + _varint(delta, table) + k + v + b"\x00"
        append(_varint(len(record), table))
        append(record)
    return b"".join(parts)


def _varint(n: int, table: list[bytes]) -> bytes:
    return table[n] if n < _VARINTS_MAX else _zigzag(n)


def build_rows(rows: Sequence[Buffered], pid: int, epoch: int, seq: int, now_ms: int) -> bytes:
    """One transactional batch of ``rows``: `encode_plain` when no row has headers or a
    timestamp, else riverbed's general record builder."""
    if any(ts or headers for _k, _v, ts, headers in rows):
        records = [SimpleRecord(v, k, h or (), ts or None) for k, v, ts, h in rows]
        return build_batch(records, producer_id=pid, producer_epoch=epoch, now_ms=now_ms,
                           base_sequence=seq, is_transactional=True)  # fmt: skip
    return frame_batch(
        encode_plain(rows),
        len(rows),
        base_offset=0,
        compression=CompressionType.NONE,
        timestamp_type=0,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        partition_leader_epoch=-1,
        first_timestamp=now_ms,
        max_timestamp=now_ms,
        last_offset_delta=len(rows) - 1,
        is_transactional=True,
    )


class _PartitionedWriter:
    """Rows buffered per partition, produced as one batch once ``batch_bytes_max``."""

    def __init__(self, producer: TxnProducer, cluster: Cluster, seed: int) -> None:
        self.producer = producer
        self.cluster = cluster
        self.leaders: dict[tuple[str, int], int] = {}
        self.partitions: dict[str, int] = {}
        self.buffers: dict[tuple[str, int], list[Buffered]] = {}
        self.sizes: dict[tuple[str, int], int] = {}
        self.count = 0
        self._next_unkeyed = seed

    def _lookup(self, refresh: bool) -> dict[tuple[str, int], int]:
        if refresh or not self.leaders:
            topics = sorted({t for t, _ in self.leaders} | set(self.partitions))
            for t, parts in self.cluster.metadata(topics).items():
                self.partitions[t] = len(parts)
                self.leaders.update({(t, p): leader for p, leader in parts.items()})
        return self.leaders

    def _count(self, topic: str) -> int:
        if topic not in self.partitions:
            found = self.cluster.metadata([topic]).get(topic)
            if not found:
                raise TxnSinkError(f"delivery to {topic} failed: UNKNOWN_TOPIC_OR_PARTITION")
            self.partitions[topic] = len(found)
            self.leaders.update({(topic, p): leader for p, leader in found.items()})
        return self.partitions[topic]

    def add(self, topic: str, partition: int, row: Buffered) -> None:
        n = self.partitions.get(topic) or self._count(topic)
        key = row[0]
        if partition < 0:
            if key is not None:
                partition = murmur2_partition(key, n)
            else:  # unkeyed: spread over the partitions, as a sticky partitioner would
                partition = self._next_unkeyed % n
        elif partition >= n:
            raise TxnSinkError(f"delivery to {topic}-{partition} failed: UNKNOWN_PARTITION")
        tp = (topic, partition)
        buffer = self.buffers.get(tp)
        if buffer is None:
            buffer = self.buffers[tp] = []
        buffer.append(row)
        value = row[1]
        size = self.sizes.get(tp, 0) + (len(value) if value else 0) + 16
        self.sizes[tp] = size
        if size >= batch_bytes_max:
            self.flush(tp)
            self._next_unkeyed += 1

    def flush(self, tp: tuple[str, int]) -> None:
        rows = self.buffers.pop(tp, [])
        self.sizes.pop(tp, None)
        if not rows:
            return
        now_ms = int(time.time() * 1000)

        def build(pid: int, epoch: int, seq: int) -> bytes:
            return build_rows(rows, pid, epoch, seq, now_ms)

        self.producer.produce(tp, build, len(rows), self._lookup)
        self.count += len(rows)

    def flush_all(self) -> None:
        for tp in list(self.buffers):
            self.flush(tp)


# ---------------------------------------------------------------------------- driver
def complete(cluster: Cluster, txn: Txn, commit: bool, timeout_ms: int) -> bool:
    """Complete the prepared transaction ``txn``: False when it is no longer the
    transactional id's ongoing one (already completed, or aborted). ``txn``'s producer
    id -1 completes whatever transaction is ongoing."""
    tid, pid, epoch = txn
    producer = TxnProducer(cluster, tid, timeout_ms)
    kept = producer.init(enable_2pc=True, keep=True)
    ongoing = (kept.ongoing_txn_producer_id, kept.ongoing_txn_producer_epoch)
    if ongoing[0] < 0 or (pid >= 0 and ongoing != (pid, epoch)):
        return False
    producer.end(commit)
    return True


class CommitLog:
    """The driver's decisions: one compacted single-partition topic, keyed by prefix."""

    def __init__(self, options: WriteOptions) -> None:
        self.topic = options.commit_log_topic
        self.config: dict[str, str | int | float | bool] = dict(
            librdkafka_settings(options.client_config)
        )
        self.config.pop("isolation.level", None)

    def ensure(self, cluster: Cluster) -> None:
        if cluster.metadata([self.topic]).get(self.topic):
            return
        admin = AdminClient(self.config)
        brokers = len(admin.list_topics(timeout=commit_log_timeout_s).brokers)
        new = NewTopic(self.topic, 1, min(3, brokers), config={"cleanup.policy": "compact"})
        for fut in admin.create_topics([new]).values():
            try:
                fut.result(commit_log_timeout_s)
            except KafkaException as e:
                if "TOPIC_ALREADY_EXISTS" not in str(e):
                    raise TxnSinkError(f"cannot create the commit log {self.topic}: {e}") from e

    def last(self, prefix: str) -> dict[str, Any] | None:
        """The last decision recorded under ``prefix`` (read to the end of the log)."""
        c = Consumer({**self.config, "group.id": "riverbed-sink", "enable.auto.commit": False})
        try:
            tp = TopicPartition(self.topic, 0)
            _low, high = c.get_watermark_offsets(tp, timeout=commit_log_timeout_s)
            c.assign([TopicPartition(self.topic, 0, 0)])
            found: dict[str, Any] | None = None
            position = 0
            while position < high:
                msg = c.poll(commit_log_timeout_s)
                if msg is None:
                    raise TxnSinkError(f"reading the commit log {self.topic} timed out")
                if msg.error():
                    raise TxnSinkError(f"reading the commit log {self.topic}: {msg.error()}")
                position = (msg.offset() or 0) + 1
                if msg.key() == prefix.encode() and msg.value() is not None:
                    found = json.loads(msg.value() or b"{}")
            return found
        finally:
            c.close()

    def record(self, cluster: Cluster, prefix: str, decision: dict[str, Any]) -> None:
        """Append the decision (acks=all). A retry may append it twice: the same record."""
        record = SimpleRecord(json.dumps(decision).encode(), prefix.encode())
        batch = build_batch([record], now_ms=int(time.time() * 1000))
        producer = TxnProducer(cluster, "", commit_log_timeout_ms)
        producer.append((self.topic, 0), batch)


class SinkCoordinator:
    """The driver's side: checks and the roll-forward of the last decision when a writer
    is made (Spark makes the streaming writer again for every commit and abort, and
    before a query's first batch), then each commit and abort. Plain data only (Spark
    pickles it into the tasks)."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options
        self.prefix = options.prefix()
        #: the last decided batch id and its transactions (None: nothing decided yet)
        self.decided_batch: int | None = None
        self.decided: list[Txn] = []

    def _cluster(self) -> Cluster:
        return cluster_of(self.options)

    def _complete(self, cluster: Cluster, txn: Txn, commit: bool) -> bool:
        return complete(cluster, txn, commit, self.options.transaction_timeout_ms)

    def start(self) -> None:
        """Fail clearly without KIP-939; roll the last decision forward (before a re-run
        batch's tasks could fence its prepared transactions)."""
        cluster = self._cluster()
        try:
            log = CommitLog(self.options)
            log.ensure(cluster)
            last = log.last(self.prefix)
            if last is None:  # a new writer: can the brokers do it? (a decided one could)
                self._probe(cluster)
                return
            self.decided_batch = last.get("batch")
            self.decided = [(t, p, e) for t, p, e in last["txns"]]
            ongoing = self._ongoing(cluster)
            for txn in self.decided:
                if txn[0] in ongoing:
                    self._complete(cluster, txn, True)
        finally:
            cluster.close()

    def _probe(self, cluster: Cluster) -> None:
        probe = TxnProducer(cluster, f"{self.prefix}-probe", self.options.transaction_timeout_ms)
        try:
            probe.init(enable_2pc=True)
        except WireError as e:
            raise TxnSinkError(
                f"the exactly-once sink needs KIP-939 two-phase commit (InitProducerId "
                f"v6) from the brokers: {e}; set option exactlyOnce=false to write "
                "at-least-once"
            ) from e

    def _ongoing(self, cluster: Cluster) -> set[str]:
        mine = f"{self.prefix}-"
        return {tid for tid, _ in cluster.ongoing_transactions() if tid.startswith(mine)}

    def commit(self, messages: Sequence[WriterCommitMessage | None], batch_id: int | None) -> None:
        txns = _txns(messages)
        cluster = self._cluster()
        try:
            if (
                batch_id is not None
                and self.decided_batch is not None
                and batch_id <= self.decided_batch
                and sorted(txns) != sorted(self.decided)
            ):
                # a re-run of a batch whose transactions were committed: drop its copy
                for txn in txns:
                    self._complete(cluster, txn, False)
                return
            fresh = sorted(txns) != sorted(self.decided) or batch_id != self.decided_batch
            if fresh:  # the commit point
                decision = {"batch": batch_id, "txns": txns}
                CommitLog(self.options).record(cluster, self.prefix, decision)
                self.decided_batch, self.decided = batch_id, txns
            for txn in txns:
                if not self._complete(cluster, txn, True) and fresh:
                    raise TxnSinkError(
                        f"the prepared transaction {txn} was aborted before its commit; "
                        "its rows are lost: fail the batch"
                    )
            self._abort_strays(cluster, {t for t, _, _ in txns})
        finally:
            cluster.close()

    def _abort_strays(self, cluster: Cluster, keep: set[str]) -> None:
        """Ongoing transactions under the prefix that no decision names (a task of a run
        that crashed before its decision, whose transactional id no later task reused)."""
        for tid in self._ongoing(cluster) - keep:
            self._complete(cluster, (tid, -1, -1), False)

    def abort(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        cluster = self._cluster()
        try:
            for txn in _txns(messages):
                self._complete(cluster, txn, False)
        finally:
            cluster.close()


def _txns(messages: Sequence[WriterCommitMessage | None]) -> list[Txn]:
    return [m.txn for m in messages if isinstance(m, TxnCommitMessage) and m.producer_id >= 0]
