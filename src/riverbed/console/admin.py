"""The console's admin-client adapter: blocking confluent-kafka calls, run off the event loop.

Every method here blocks (librdkafka futures, a producer flush); the views call them
through ``Console.call``, which runs them on a bounded thread pool so that the event loop
keeps serving pages and server-sent events. confluent-kafka reaches any Kafka-compatible
cluster with the client settings of ``--command-config`` (SASL, TLS), so the console sees
what that principal may see. Failures become `ConsoleError` with an HTTP status chosen by
the Kafka error (unknown topic 404, already exists 409, invalid request 400, not
authorised 403, time-outs 504, anything else from the cluster 502).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

#: ListOffsets' special timestamps: the log start offset, the high watermark.
EARLIEST = -2
LATEST = -1
#: How long one admin call waits for the cluster, seconds.
ADMIN_TIMEOUT_S = 15.0
#: How long a produce from the console waits for its acknowledgement, seconds.
PRODUCE_TIMEOUT_S = 15.0

_NOT_FOUND = {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.GROUP_ID_NOT_FOUND}
_CONFLICT = {KafkaError.TOPIC_ALREADY_EXISTS, KafkaError.NON_EMPTY_GROUP}
_TIMEOUT = {KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT, KafkaError._TRANSPORT}


class ConsoleError(Exception):
    """A failure the console shows as an error page with ``status``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def cluster_error(exc: BaseException, what: str) -> ConsoleError:
    """``what`` failed with ``exc``: a `ConsoleError` whose status fits the Kafka error."""
    if isinstance(exc, ConsoleError):
        return exc
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    if not isinstance(err, KafkaError):
        return ConsoleError(502, f"{what}: {exc or type(exc).__name__}")
    code, name = err.code(), err.name()
    text = f"{what}: {name}: {err.str()}"
    if code in _NOT_FOUND:
        return ConsoleError(404, text)
    if code in _CONFLICT:
        return ConsoleError(409, text)
    if code in _TIMEOUT:
        return ConsoleError(504, text)
    if name.endswith("AUTHORIZATION_FAILED"):
        return ConsoleError(403, text)
    if name.startswith(("INVALID", "POLICY_VIOLATION", "UNSUPPORTED")):
        return ConsoleError(400, text)
    return ConsoleError(502, text)


@dataclass(frozen=True, slots=True)
class Broker:
    id: int
    host: str
    port: int
    rack: str | None


@dataclass(frozen=True, slots=True)
class PartitionRow:
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    earliest: int | None = None
    latest: int | None = None

    @property
    def offline(self) -> bool:
        return self.leader < 0

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)

    @property
    def records(self) -> int | None:
        if self.earliest is None or self.latest is None:
            return None
        return self.latest - self.earliest


@dataclass(frozen=True, slots=True)
class TopicRow:
    name: str
    partitions: tuple[PartitionRow, ...]

    @property
    def internal(self) -> bool:
        return self.name.startswith("__")

    @property
    def replication_factor(self) -> int:
        return len(self.partitions[0].replicas) if self.partitions else 0

    @property
    def under_replicated(self) -> int:
        return sum(p.under_replicated for p in self.partitions)

    @property
    def offline(self) -> int:
        return sum(p.offline for p in self.partitions)

    @property
    def records(self) -> int | None:
        counts = [p.records for p in self.partitions]
        return None if any(c is None for c in counts) else sum(c or 0 for c in counts)


@dataclass(frozen=True, slots=True)
class ClusterView:
    cluster_id: str | None
    controller_id: int
    brokers: tuple[Broker, ...]
    topics: tuple[TopicRow, ...]


@dataclass(frozen=True, slots=True)
class ConfigRow:
    name: str
    value: str | None
    source: str
    is_default: bool
    read_only: bool
    sensitive: bool


@dataclass(frozen=True, slots=True)
class Produced:
    partition: int
    offset: int


class ConsoleAdmin:
    """One cluster's admin client, a shared producer and factories for consumers."""

    def __init__(self, conf: Mapping[str, Any]) -> None:
        self.conf = dict(conf)
        self.client = AdminClient(self.conf)
        self._producer: Producer | None = None
        self._producer_lock = threading.Lock()

    # -- cluster and topics ------------------------------------------------------------
    def cluster(self) -> ClusterView:
        """Brokers (with racks), the controller and every topic's partitions."""
        try:
            md = self.client.list_topics(timeout=ADMIN_TIMEOUT_S)
            described = self.client.describe_cluster(request_timeout=ADMIN_TIMEOUT_S).result(
                timeout=ADMIN_TIMEOUT_S
            )
        except Exception as exc:
            raise cluster_error(exc, "cannot describe the cluster") from None
        brokers = tuple(
            Broker(n.id, n.host, n.port, n.rack) for n in sorted(described.nodes, key=_node_id)
        )
        controller = described.controller.id if described.controller is not None else -1
        topics = tuple(_topic_row(t) for _name, t in sorted(md.topics.items()))
        return ClusterView(described.cluster_id, controller, brokers, topics)

    def topics(self) -> list[TopicRow]:
        """Every topic with each partition's earliest and latest offsets."""
        try:
            md = self.client.list_topics(timeout=ADMIN_TIMEOUT_S)
        except Exception as exc:
            raise cluster_error(exc, "cannot list topics") from None
        rows = [_topic_row(t) for _name, t in sorted(md.topics.items())]
        return self._with_offsets(rows)

    def topic(self, name: str) -> TopicRow:
        """One topic with offsets (404 when it does not exist)."""
        try:
            md = self.client.list_topics(timeout=ADMIN_TIMEOUT_S)
        except Exception as exc:
            raise cluster_error(exc, f"cannot describe topic {name}") from None
        tmd = md.topics.get(name)
        if tmd is None or (tmd.error is not None and not tmd.partitions):
            raise ConsoleError(404, f"unknown topic {name!r}")
        return self._with_offsets([_topic_row(tmd)])[0]

    def _with_offsets(self, rows: list[TopicRow]) -> list[TopicRow]:
        tps = [(t.name, p.partition) for t in rows for p in t.partitions if not p.offline]
        earliest = self.offsets(tps, EARLIEST)
        latest = self.offsets(tps, LATEST)
        return [
            TopicRow(
                t.name,
                tuple(
                    PartitionRow(
                        p.partition,
                        p.leader,
                        p.replicas,
                        p.isr,
                        earliest.get((t.name, p.partition)),
                        latest.get((t.name, p.partition)),
                    )
                    for p in t.partitions
                ),
            )
            for t in rows
        ]

    def offsets(self, tps: Iterable[tuple[str, int]], at: int) -> dict[tuple[str, int], int]:
        """ListOffsets for each partition at `EARLIEST`, `LATEST` or a time in ms (the
        first offset whose timestamp is at or after it; -1 when none is): partitions that
        fail are left out."""
        spec = _offset_spec(at)
        wanted = {TopicPartition(t, p): spec for t, p in tps}
        if not wanted:
            return {}
        try:
            futures = self.client.list_offsets(wanted, request_timeout=ADMIN_TIMEOUT_S)
        except Exception as exc:
            raise cluster_error(exc, "cannot list offsets") from None
        out: dict[tuple[str, int], int] = {}
        for tp, fut in futures.items():
            try:
                out[(tp.topic, tp.partition)] = fut.result(timeout=ADMIN_TIMEOUT_S).offset
            except Exception:
                continue
        return out

    def topic_configs(self, name: str) -> list[ConfigRow]:
        resource = ConfigResource(ResourceType.TOPIC, name)
        try:
            fut = self.client.describe_configs([resource], request_timeout=ADMIN_TIMEOUT_S)
            entries = next(iter(fut.values())).result(timeout=ADMIN_TIMEOUT_S)
        except Exception as exc:
            raise cluster_error(exc, f"cannot describe the configs of {name}") from None
        return [
            ConfigRow(
                e.name,
                None if e.is_sensitive else e.value,
                str(e.source).rsplit(".", 1)[-1] if not isinstance(e.source, int) else "",
                bool(e.is_default),
                bool(e.is_read_only),
                bool(e.is_sensitive),
            )
            for e in sorted(entries.values(), key=lambda e: e.name)
        ]

    def create_topic(
        self, name: str, partitions: int, replication_factor: int, configs: dict[str, str]
    ) -> None:
        new = NewTopic(
            name,
            num_partitions=partitions,
            replication_factor=replication_factor,
            config=configs,
        )
        futures = self.client.create_topics([new], operation_timeout=ADMIN_TIMEOUT_S)
        _wait_one(futures, f"cannot create topic {name}")

    def delete_topic(self, name: str) -> None:
        futures = self.client.delete_topics([name], operation_timeout=ADMIN_TIMEOUT_S)
        _wait_one(futures, f"cannot delete topic {name}")

    def alter_topic_config(self, name: str, set_: Mapping[str, str], delete: list[str]) -> None:
        """Incremental (KIP-339): SET each of ``set_``, DELETE (back to default) ``delete``."""
        entries = [
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in set_.items()
        ]
        entries += [
            ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in delete
        ]
        resource = ConfigResource(ResourceType.TOPIC, name, incremental_configs=entries)
        futures = self.client.incremental_alter_configs([resource])
        _wait_one(futures, f"cannot alter the configs of {name}")

    # -- records -------------------------------------------------------------------------
    def produce(
        self,
        topic: str,
        partition: int | None,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes]],
    ) -> Produced:
        """One record, acknowledged by the leader (acks=all) before this returns."""
        done: list[Any] = []

        def report(err: Any, msg: Any) -> None:
            done.append(err if err is not None else msg)

        producer = self._shared_producer()
        kwargs: dict[str, Any] = {"key": key, "value": value, "headers": headers or None}
        if partition is not None:
            kwargs["partition"] = partition
        try:
            producer.produce(topic, on_delivery=report, **kwargs)
        except (KafkaException, BufferError) as exc:
            raise cluster_error(exc, f"cannot produce to {topic}") from None
        producer.flush(PRODUCE_TIMEOUT_S)
        if not done:
            raise ConsoleError(504, f"no acknowledgement from {topic} in {PRODUCE_TIMEOUT_S} s")
        if isinstance(done[0], KafkaError):
            raise cluster_error(KafkaException(done[0]), f"cannot produce to {topic}")
        return Produced(done[0].partition(), done[0].offset())

    def _shared_producer(self) -> Producer:
        with self._producer_lock:
            if self._producer is None:
                conf = dict(self.conf)
                conf.update({"acks": "all", "linger.ms": 0, "client.id": "riverbed-console"})
                self._producer = Producer(conf)
            return self._producer

    def consumer(self) -> Consumer:
        """A consumer for one scan or tail: no group membership, nothing committed."""
        conf = dict(self.conf)
        conf.update(
            {
                "group.id": "riverbed-console",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "fetch.wait.max.ms": 100,
                "client.id": "riverbed-console",
            }
        )
        return Consumer(conf)

    def close(self) -> None:
        with self._producer_lock:
            if self._producer is not None:
                self._producer.flush(PRODUCE_TIMEOUT_S)
                self._producer = None


def _offset_spec(at: int) -> Any:
    if at == EARLIEST:
        return OffsetSpec.earliest()  # type: ignore[no-untyped-call]
    if at == LATEST:
        return OffsetSpec.latest()  # type: ignore[no-untyped-call]
    return OffsetSpec.for_timestamp(at)


def _node_id(node: Any) -> int:
    return int(node.id)


def _topic_row(tmd: Any) -> TopicRow:
    parts = tuple(
        PartitionRow(p.id, p.leader, tuple(p.replicas), tuple(p.isrs))
        for p in sorted(tmd.partitions.values(), key=lambda p: p.id)
    )
    return TopicRow(tmd.topic, parts)


def _wait_one(futures: Mapping[Any, Any], what: str) -> None:
    for fut in futures.values():
        try:
            fut.result(timeout=ADMIN_TIMEOUT_S)
        except Exception as exc:
            raise cluster_error(exc, what) from None
