"""Driver-side Kafka look-ups: partition discovery, ListOffsets, data-loss checks.

One confluent-kafka (librdkafka) consumer, never subscribed and never committing, answers:
topic metadata (``list_topics``), earliest/latest offsets (``get_watermark_offsets``,
i.e. ListOffsets -2/-1 against the leader) and offsets by timestamp (``offsets_for_times``,
ListOffsets against the broker's time index). Any Kafka-compatible cluster will do.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from riverbed.cli.wire import WireAuthError, WireClient, WireError
from riverbed.spark.offsets import OffsetRange, PartitionOffsets
from riverbed.spark.options import (
    EARLIEST,
    LATEST,
    OffsetSpec,
    ReadOptions,
    RiverbedOptionError,
    TopicPartition,
    librdkafka_settings,
    wire_client_security,
)

log = logging.getLogger(__name__)

# Per-call timeout of metadata and ListOffsets requests made on the driver.
request_timeout_s = 30.0

_DATA_LOSS_HINT = (
    " Some data may have been lost because they are not available in Kafka any more; either"
    " the data was aged out by Kafka or the topic may have been deleted before all the data"
    " in the topic was processed. If you don't want your streaming query to fail on such"
    ' cases, set the source option "failOnDataLoss" to "false".'
)


class RiverbedSourceError(RuntimeError):
    """The cluster could not answer a look-up the source needs (names topic/partition)."""


class KafkaAuthenticationError(RuntimeError):
    """The brokers refused the ``kafka.*`` credentials or the TLS handshake failed."""


def check_login(client_config: Mapping[str, str]) -> None:
    """With TLS or SASL settings, log in once to a bootstrap broker with riverbed's wire
    client and raise KafkaAuthenticationError if it is refused. librdkafka retries a
    refused login until its request times out and then reports a bare "Broker transport
    failure" (30 s later): the driver's look-ups would hide a wrong password."""
    security = wire_client_security(client_config)
    if security.protocol == "PLAINTEXT":
        return
    for address in client_config["bootstrap.servers"].split(","):
        try:
            WireClient(address.strip(), timeout_s=request_timeout_s, security=security).close()
            return
        except WireAuthError as e:
            how = f"kafka.security.protocol={security.protocol}" + (
                f", kafka.sasl.mechanism={security.mechanism}" if security.mechanism else ""
            )
            raise KafkaAuthenticationError(
                f"authentication with {address.strip()} failed ({how}): {e}; check "
                "kafka.sasl.jaas.config (username, password) and the ssl.truststore settings"
            ) from None
        except WireError:
            continue  # unreachable: the next address (the look-ups report it otherwise)


class DataLossError(RiverbedSourceError):
    """Offsets the query needs are gone (retention, DeleteRecords, deleted topic)."""


def report_data_loss(fail_on_data_loss: bool, message: str) -> None:
    if fail_on_data_loss:
        raise DataLossError(message + _DATA_LOSS_HINT)
    log.warning("%s (failOnDataLoss=false: continuing)", message)


def consumer_config(
    client_config: Mapping[str, str], **extra: str | int | bool
) -> dict[str, object]:
    config: dict[str, object] = dict(librdkafka_settings(client_config))
    # A fresh group per client: the source never joins or commits to a group.
    config.setdefault("group.id", f"riverbed-spark-{uuid.uuid4().hex[:12]}")
    config["enable.auto.commit"] = False
    config.update(extra)
    return config


def new_client(kind: Any, config: Mapping[str, object]) -> Any:
    """A confluent-kafka client; a bad ``kafka.*`` setting becomes a RiverbedOptionError."""
    try:
        return kind(dict(config))
    except (KafkaException, ValueError, TypeError) as e:
        raise RiverbedOptionError(f"invalid Kafka client option (kafka.*): {e}") from None


def _tp_name(tp: TopicPartition) -> str:
    return f"{tp[0]}-{tp[1]}"


class OffsetClient:
    """Look-ups for one query, on the driver. Close it (or use ``with``) when done."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        check_login(options.client_config)
        self._consumer = new_client(Consumer, consumer_config(options.client_config))

    def close(self) -> None:
        self._consumer.close()

    def __enter__(self) -> OffsetClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def partitions(self) -> list[TopicPartition]:
        """The partitions the subscription covers now (sorted)."""
        opts = self.options
        if opts.assign is not None:
            return list(opts.assign)
        try:
            md = self._consumer.list_topics(timeout=request_timeout_s)
        except KafkaException as e:
            raise RiverbedSourceError(
                f"cannot fetch metadata from {opts.client_config.get('bootstrap.servers')}: {e}"
            ) from e
        if opts.subscribe is not None:
            wanted = set(opts.subscribe)
            topics = [t for t in md.topics if t in wanted]
        else:
            assert opts.subscribe_pattern is not None
            rx = re.compile(opts.subscribe_pattern)
            # Internal topics (__consumer_offsets, ...) are excluded, as in Kafka.
            topics = [t for t in md.topics if not t.startswith("__") and rx.fullmatch(t)]
        out: list[TopicPartition] = []
        for t in topics:
            meta = md.topics[t]
            if meta.error is not None:
                continue
            out.extend((t, p) for p in meta.partitions)
        return sorted(out)

    def _watermarks(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
        out: dict[TopicPartition, tuple[int, int]] = {}
        for tp in tps:
            try:
                low, high = self._consumer.get_watermark_offsets(
                    KafkaTopicPartition(tp[0], tp[1]), timeout=request_timeout_s, cached=False
                )
            except KafkaException as e:
                raise RiverbedSourceError(f"cannot list offsets of {_tp_name(tp)}: {e}") from e
            out[tp] = (int(low), int(high))
        return out

    def earliest(self, tps: Iterable[TopicPartition]) -> PartitionOffsets:
        return {tp: lo for tp, (lo, _) in self._watermarks(tps).items()}

    def latest(self, tps: Iterable[TopicPartition]) -> PartitionOffsets:
        return {tp: hi for tp, (_, hi) in self._watermarks(tps).items()}

    def for_times(self, stamps: Mapping[TopicPartition, int]) -> dict[TopicPartition, int | None]:
        """First offset whose timestamp >= the given one; None when there is none."""
        if not stamps:
            return {}
        query = [KafkaTopicPartition(t, p, ts) for (t, p), ts in stamps.items()]
        try:
            result = self._consumer.offsets_for_times(query, timeout=request_timeout_s)
        except KafkaException as e:
            raise RiverbedSourceError(f"cannot list offsets by timestamp: {e}") from e
        out: dict[TopicPartition, int | None] = {}
        for r in result:
            tp = (r.topic, r.partition)
            if r.error is not None:
                raise RiverbedSourceError(
                    f"cannot list offsets by timestamp of {_tp_name(tp)}: {r.error}"
                )
            out[tp] = int(r.offset) if r.offset >= 0 else None
        return out

    def resolve(
        self, spec: OffsetSpec, tps: list[TopicPartition], *, is_start: bool, option: str
    ) -> PartitionOffsets:
        """Concrete offsets of ``tps`` for a starting or ending spec."""
        if spec.kind == "earliest":
            return self.earliest(tps)
        if spec.kind == "latest":
            return self.latest(tps)
        if spec.kind in ("offsets", "timestamps"):
            given = set(spec.offsets)
            if given != set(tps):
                missing = sorted(set(tps) - given)
                extra = sorted(given - set(tps))
                raise RiverbedOptionError(
                    f"option '{option}' must name every partition of the subscription "
                    f"({self.options.strategy_description()}); "
                    + (f"missing: {', '.join(map(_tp_name, missing))}" if missing else "")
                    + ("; " if missing and extra else "")
                    + (
                        f"not in the subscription: {', '.join(map(_tp_name, extra))}"
                        if extra
                        else ""
                    )
                    + (". Use -2 for earliest, -1 for latest." if spec.kind == "offsets" else "")
                )
        if spec.kind == "offsets":
            out = dict(spec.offsets)
            need_low = [tp for tp, o in out.items() if o == EARLIEST]
            need_high = [tp for tp, o in out.items() if o == LATEST]
            out.update(self.earliest(need_low))
            out.update(self.latest(need_high))
            return {tp: out[tp] for tp in tps}
        stamps = spec.offsets if spec.kind == "timestamps" else {tp: spec.timestamp for tp in tps}
        found = self.for_times(stamps)
        missing_tps = [tp for tp in tps if found.get(tp) is None]
        if missing_tps and is_start and self.options.starting_by_timestamp_strategy == "error":
            raise RiverbedSourceError(
                f"no offset matched the timestamp of option '{option}' in "
                + ", ".join(f"{_tp_name(tp)} (timestamp {stamps[tp]})" for tp in missing_tps)
                + "; set startingOffsetsByTimestampStrategy=latest to start at the latest offset"
            )
        # No record at or after the timestamp: the range starts/ends at the latest offset.
        latest = self.latest(missing_tps)
        return {tp: found[tp] if found.get(tp) is not None else latest[tp] for tp in tps}  # type: ignore[misc]


def plan_ranges(
    start: Mapping[TopicPartition, int],
    end: Mapping[TopicPartition, int],
    earliest: Mapping[TopicPartition, int],
    fail_on_data_loss: bool,
) -> list[OffsetRange]:
    """Offset ranges from resolved start/end offsets, reporting data loss as Spark does.

    ``earliest`` holds the log start offsets of the partitions in ``end``; partitions new
    since ``start`` begin there, and a start below it means records were deleted.
    """
    gone = sorted(set(start) - set(end))
    if gone:
        report_data_loss(
            fail_on_data_loss, f"{', '.join(map(_tp_name, gone))} are gone (topic deleted?)."
        )
    ranges: list[OffsetRange] = []
    for tp in sorted(end):
        until = end[tp]
        low = earliest.get(tp, 0)
        frm = start.get(tp)
        if frm is None:
            if low != 0:
                report_data_loss(
                    fail_on_data_loss,
                    f"Added partition {_tp_name(tp)} starts from {low} instead of 0.",
                )
            frm = low
        if until < frm:
            report_data_loss(
                fail_on_data_loss,
                f"Partition {_tp_name(tp)}'s offset was changed from {frm} to {until}.",
            )
            continue
        if frm < low:
            report_data_loss(
                fail_on_data_loss,
                f"Cannot fetch offsets {frm}..{low - 1} of {_tp_name(tp)}: the log now starts at {low}.",
            )
            frm = min(low, until)
        ranges.append(OffsetRange(tp[0], tp[1], frm, until))
    return ranges
