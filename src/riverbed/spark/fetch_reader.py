"""Executor side: read one offset range with riverbed's own Fetch requests.

A task gets ``[from_offset, until_offset)`` of one partition. It asks any bootstrap broker
for the partition's leader (Metadata), then sends Fetch requests (riverbed's protocol
engine, the highest version both sides speak up to 12, no fetch session) to the leader
alone, one at a time, and turns each response's record batches into Arrow record batches
with :mod:`riverbed.spark.columnar` (no Python step per record). Any Kafka-compatible
broker will do.

As the Java consumer:

- NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, FENCED/UNKNOWN_LEADER_EPOCH,
  REPLICA_NOT_AVAILABLE, KAFKA_STORAGE_ERROR and a lost connection: refresh the metadata and
  fetch from the (new) leader, after a short backoff;
- OFFSET_OUT_OF_RANGE: the log start and end are listed (ListOffsets); below the start,
  records were deleted: ``failOnDataLoss`` fails the task, otherwise it goes on from the
  log start; past the end the log was truncated: reported per ``failOnDataLoss``, and the
  range ends;
- UNKNOWN_TOPIC_OR_PARTITION with the partition gone from the metadata: the topic was
  deleted, reported per ``failOnDataLoss``;
- ``read_committed`` (the default): fetched with isolation level 1; rows stop at the last
  stable offset and aborted transactions are dropped (:mod:`riverbed.spark.columnar`).

Termination never waits for an offset that does not exist: the fetch position moves past
every batch the broker returned (markers, aborted and compacted-away offsets included), so
the range is complete once it reaches ``until_offset``. A range that makes no progress for
``kafkaConsumer.pollTimeoutMs`` fails naming the partition and offset.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from typing import Final

import pyarrow as pa

from riverbed.cli.wire import RESPONSE_BYTES_MAX, WireAuthError, WireClient, WireError
from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    Message,
    MetadataRequest,
    MetadataResponse,
)
from riverbed.spark.client import DataLossError, RiverbedSourceError, report_data_loss
from riverbed.spark.columnar import decode_records
from riverbed.spark.offsets import OffsetRange
from riverbed.spark.options import FetchSettings, fetch_settings

log = logging.getLogger(__name__)

# Waits between retries after a leader change or a lost connection (doubling up to the max).
retry_backoff_ms_min: Final = 50
retry_backoff_ms_max: Final = 1_000

_LEADER_ERRORS: Final = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.REPLICA_NOT_AVAILABLE,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.NOT_COORDINATOR,  # never for Fetch; harmless
    }
)
# How long a log end below the planned range must last before it counts as data loss.
log_end_grace_ms: Final = 2_000
# Room left in a response frame for everything but the records.
_RESPONSE_BODY_BYTES_MAX: Final = RESPONSE_BYTES_MAX - 64 * 1024
_EARLIEST: Final = -2
_LATEST: Final = -1


class PartitionClient:
    """Connections to one partition's leader (and the brokers that tell who it is)."""

    def __init__(self, settings: FetchSettings, topic: str, partition: int) -> None:
        self.settings = settings
        self.topic = topic
        self.partition = partition
        self.leader: int | None = None
        self.leader_epoch = -1
        self.brokers: dict[int, str] = {}
        self._conns: dict[int | str, WireClient] = {}

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()

    def _connect(self, key: int | str, address: str) -> WireClient:
        conn = self._conns.get(key)
        if conn is None:
            timeout_s = self.settings.request_timeout_ms / 1000
            try:
                conn = WireClient(
                    address,
                    timeout_s=timeout_s,
                    client_id=self.settings.client_id,
                    security=self.settings.security,
                )
            except WireAuthError as e:  # no retry cures credentials
                raise RiverbedSourceError(
                    f"reading {self.topic}-{self.partition}: authentication with {address} "
                    f"failed: {e}"
                ) from None
            self._conns[key] = conn
        return conn

    def _drop(self, key: int | str) -> None:
        conn = self._conns.pop(key, None)
        if conn is not None:
            conn.close()

    def _metadata(self) -> MetadataResponse:
        """Metadata of the topic from a known broker or else a bootstrap address."""
        request = MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name=self.topic)],
            allow_auto_topic_creation=False,
        )
        candidates: list[tuple[int | str, str]] = list(self.brokers.items())
        candidates += [(a.strip(), a.strip()) for a in self.settings.bootstrap_servers.split(",")]
        errors = []
        for key, address in candidates:
            try:
                response = self._connect(key, address).request(ApiKey.METADATA, request)
            except WireError as e:
                self._drop(key)
                errors.append(f"{address}: {e}")
                continue
            assert isinstance(response, MetadataResponse)
            return response
        raise WireError("no broker answered Metadata (" + "; ".join(errors) + ")")

    def refresh(self) -> bool:
        """Learn the partition's leader; False when the partition does not exist."""
        md = self._metadata()
        self.brokers = {b.node_id: f"{b.host}:{b.port}" for b in md.brokers}
        self.leader = None
        for t in md.topics:
            if t.name != self.topic:
                continue
            if t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                return False
            if t.error_code:
                return True  # e.g. LEADER_NOT_AVAILABLE: asked again after a backoff
            for p in t.partitions:
                if p.partition_index == self.partition:
                    if p.leader_id >= 0 and p.leader_id in self.brokers:
                        self.leader, self.leader_epoch = p.leader_id, p.leader_epoch
                    return True
            return False
        return False

    def _leader_conn(self) -> tuple[int, WireClient]:
        if self.leader is None and not self.refresh():
            raise _Gone()
        if self.leader is None:
            raise WireError(f"no leader for {self.topic}-{self.partition}")
        return self.leader, self._connect(self.leader, self.brokers[self.leader])

    def _to_leader(self, api_key: ApiKey, request: Message) -> Message:
        node, conn = self._leader_conn()
        try:
            return conn.request(api_key, request)
        except WireError:
            self._drop(node)
            self.leader = None
            raise

    def fetch(self, offset: int) -> FetchResponse.PartitionData:
        s = self.settings
        request = FetchRequest(
            replica_id=-1,
            max_wait_ms=s.fetch_wait_max_ms,
            min_bytes=s.fetch_min_bytes,
            # a response larger than the connection accepts would never get through
            max_bytes=min(s.fetch_bytes_max, _RESPONSE_BODY_BYTES_MAX),
            isolation_level=1 if s.read_committed else 0,
            topics=[
                FetchRequest.FetchTopic(
                    topic=self.topic,
                    partitions=[
                        FetchRequest.FetchPartition(
                            partition=self.partition,
                            current_leader_epoch=self.leader_epoch,
                            fetch_offset=offset,
                            partition_max_bytes=min(
                                s.partition_fetch_bytes_max,
                                s.fetch_bytes_max,
                                _RESPONSE_BODY_BYTES_MAX,
                            ),
                        )
                    ],
                )
            ],
        )
        response = self._to_leader(ApiKey.FETCH, request)
        assert isinstance(response, FetchResponse)
        if response.error_code:
            raise RiverbedSourceError(
                f"Fetch of {self.topic}-{self.partition} failed: {ErrorCode.of(response.error_code).name}"
            )
        for t in response.responses:
            for p in t.partitions:
                if p.partition_index == self.partition:
                    return p
        raise WireError(f"the Fetch response lacks {self.topic}-{self.partition}")

    def list_offset(self, timestamp: int) -> int:
        """The log start (-2) or end (-1) offset, from the leader."""
        request = ListOffsetsRequest(
            replica_id=-1,
            isolation_level=1 if self.settings.read_committed else 0,
            topics=[
                ListOffsetsRequest.ListOffsetsTopic(
                    name=self.topic,
                    partitions=[
                        ListOffsetsRequest.ListOffsetsPartition(
                            partition_index=self.partition, timestamp=timestamp
                        )
                    ],
                )
            ],
        )
        response = self._to_leader(ApiKey.LIST_OFFSETS, request)
        assert isinstance(response, ListOffsetsResponse)
        for t in response.topics:
            for p in t.partitions:
                if p.partition_index == self.partition:
                    if p.error_code:
                        raise _Retry(ErrorCode.of(p.error_code).name)
                    return int(p.offset)
        raise WireError(f"the ListOffsets response lacks {self.topic}-{self.partition}")


class _Gone(Exception):
    """The partition is not in the cluster's metadata (topic deleted)."""


class _Retry(Exception):
    """A retriable answer: refresh the leader and try again."""


def read_range(
    client_config: Mapping[str, str],
    r: OffsetRange,
    *,
    include_headers: bool,
    fail_on_data_loss: bool,
    poll_timeout_ms: int,
) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``r`` as Arrow batches (never a record outside the range)."""
    if r.size <= 0:
        return
    settings = fetch_settings(client_config)
    client = PartitionClient(settings, r.topic, r.partition)
    try:
        yield from _read(client, r, include_headers, fail_on_data_loss, poll_timeout_ms)
    finally:
        client.close()


def _read(
    client: PartitionClient,
    r: OffsetRange,
    include_headers: bool,
    fail_on_data_loss: bool,
    poll_timeout_ms: int,
) -> Iterator[pa.RecordBatch]:
    name = f"{r.topic}-{r.partition}"
    position = r.from_offset
    last_progress = time.monotonic()
    backoff_ms = retry_backoff_ms_min
    short_since: float | None = None  # when the log was first seen to end before the range
    while position < r.until_offset:
        if (time.monotonic() - last_progress) * 1000 > poll_timeout_ms:
            raise RiverbedSourceError(
                f"no records from {name} at offset {position} for {poll_timeout_ms} ms "
                "(kafkaConsumer.pollTimeoutMs); is the broker reachable?"
            )
        try:
            part = client.fetch(position)
            code = part.error_code
            if code == ErrorCode.NONE:
                start = position
                position, batches = _take(client, part, r, position, include_headers)
                yield from batches
                if position > start:
                    last_progress = time.monotonic()
                    backoff_ms = retry_backoff_ms_min
                    short_since = None
                    continue
                if not 0 <= part.high_watermark <= position:
                    # an open transaction holds the LSO below the range's end: the broker's
                    # max wait paces the polls, the short sleep a broker that answers at once
                    time.sleep(retry_backoff_ms_min / 1000)
                    continue
                # The log ends before the range planned below its high watermark. A new
                # leader may show a lagging high watermark for a moment: only a shortfall
                # that lasts is lost data.
                now = time.monotonic()
                short_since = now if short_since is None else short_since
                if now - short_since > log_end_grace_ms / 1000:
                    report_data_loss(
                        fail_on_data_loss,
                        f"{name} ends at offset {part.high_watermark} but offsets up to "
                        f"{r.until_offset - 1} were planned (log truncated or topic recreated?).",
                    )
                    return
                time.sleep(retry_backoff_ms_min / 1000)
                continue
            if code == ErrorCode.OFFSET_OUT_OF_RANGE:
                next_position = _out_of_range(client, name, position, r, fail_on_data_loss)
                if next_position is None:
                    return
                position = next_position
                continue
            _leader_error(client, code, name, position)
        except _Gone:
            report_data_loss(fail_on_data_loss, f"{name} is gone (topic deleted?).")
            return
        except (WireError, _Retry) as e:
            log.info("%s: %s; retrying with fresh metadata", name, e)
            client.leader = None
        time.sleep(backoff_ms / 1000)
        backoff_ms = min(backoff_ms * 2, retry_backoff_ms_max)


def _leader_error(client: PartitionClient, code: int, name: str, position: int) -> None:
    """A Fetch error that a fresh leader may cure; raises for every other one."""
    if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and not client.refresh():
        raise _Gone()
    if code not in _LEADER_ERRORS and code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        raise RiverbedSourceError(
            f"reading {name} at offset {position} failed: {ErrorCode.of(code).name}"
        )
    log.info("%s: %s; refreshing its leader", name, ErrorCode.of(code).name)
    client.leader = None


def _take(
    client: PartitionClient,
    part: FetchResponse.PartitionData,
    r: OffsetRange,
    position: int,
    include_headers: bool,
) -> tuple[int, list[pa.RecordBatch]]:
    aborted = part.aborted_transactions
    decoded = decode_records(
        part.records or b"",
        topic=r.topic,
        partition=r.partition,
        from_offset=position,
        until_offset=r.until_offset,
        include_headers=include_headers,
        read_committed=client.settings.read_committed,
        last_stable_offset=part.last_stable_offset,
        aborted=None if aborted is None else [(a.producer_id, a.first_offset) for a in aborted],
    )
    if decoded.oversized_batch_bytes:
        raise RiverbedSourceError(
            f"the record batch at offset {position} of {r.topic}-{r.partition} has "
            f"{decoded.oversized_batch_bytes} bytes, more than a fetch may return; raise "
            "kafka.max.partition.fetch.bytes and kafka.fetch.max.bytes above it"
        )
    return decoded.next_offset, decoded.batches


def _out_of_range(
    client: PartitionClient, name: str, position: int, r: OffsetRange, fail_on_data_loss: bool
) -> int | None:
    """Where to go on after OFFSET_OUT_OF_RANGE at ``position`` (None: the range ends)."""
    earliest = client.list_offset(_EARLIEST)
    if position < earliest:
        if fail_on_data_loss:
            raise DataLossError(
                f"Cannot fetch offset {position} of {name}: it is out of range (deleted by "
                f"retention or DeleteRecords; the log starts at {earliest}). Set the source "
                'option "failOnDataLoss" to "false" to skip lost records.'
            )
        log.warning("%s: offsets %d..%d are gone; continuing", name, position, earliest - 1)
        return earliest if earliest < r.until_offset else None
    latest = client.list_offset(_LATEST)
    if position >= latest:
        report_data_loss(
            fail_on_data_loss,
            f"{name} ends at offset {latest} but offsets up to {r.until_offset - 1} were "
            "planned (log truncated or topic recreated?).",
        )
        return None
    return position  # moved meanwhile (a new leader): fetch again
