"""Options of the "riverbed" Spark data source, parsed and validated up front.

The names and meanings are those of Spark's Kafka source and sink (case-insensitive, as
Spark passes them lower-cased):

read   ``kafka.<client setting>`` (passed to librdkafka; ``kafka.bootstrap.servers`` is
       required), exactly one of ``subscribe`` (comma list) / ``subscribePattern`` (regex,
       full match) / ``assign`` (JSON ``{"topic": [0, 1]}``), at most one of
       ``startingOffsets`` / ``startingTimestamp`` / ``startingOffsetsByTimestamp``, at most
       one of ``endingOffsets`` / ``endingTimestamp`` / ``endingOffsetsByTimestamp`` (batch
       only), ``startingOffsetsByTimestampStrategy`` (error | latest), ``failOnDataLoss``,
       ``maxOffsetsPerTrigger`` (streaming only), ``minPartitions``,
       ``maxRecordsPerPartition``, ``includeHeaders``, ``kafkaConsumer.pollTimeoutMs``,
       ``reader`` (riverbed's own: ``fetch``, the default, or ``consumer``, see below).
write  ``kafka.<client setting>``, ``topic`` (overrides the ``topic`` column).

Executors read with riverbed's own Fetch requests (``reader=fetch``), which take these
``kafka.*`` settings with Kafka's meanings and defaults: ``bootstrap.servers``, ``client.id``,
``fetch.max.bytes``, ``max.partition.fetch.bytes``, ``fetch.max.wait.ms`` (librdkafka's
``fetch.wait.max.ms`` too), ``fetch.min.bytes``, ``request.timeout.ms`` (or
``socket.timeout.ms``), ``isolation.level`` (default ``read_committed``, as librdkafka's)
and the security settings Kafka's Spark connector takes (``kafka.security.protocol``
PLAINTEXT / SSL / SASL_PLAINTEXT / SASL_SSL, ``kafka.sasl.mechanism`` PLAIN / SCRAM-SHA-256 /
SCRAM-SHA-512, ``kafka.sasl.jaas.config``, ``kafka.ssl.truststore.location`` with
``kafka.ssl.truststore.type`` PEM or PKCS12, key stores for mutual TLS, or librdkafka's
names for them): read by `riverbed.cli.client_security`, the one reader of Kafka client
properties, for riverbed's wire client (the reader, the exactly-once sink) and rendered
into librdkafka's names for the confluent-kafka clients (the driver's look-ups,
``reader=consumer``, the at-least-once sink). Other settings only reach librdkafka.

Offsets JSON is Spark's: ``{"topic": {"0": 42, "1": -2}}`` with -2 = earliest and
-1 = latest; timestamps JSON has the same shape with epoch milliseconds. Spark lets
``startingTimestamp`` silently win over the other starting options; riverbed fails fast on
any such combination instead (a conflict the user did not mean), naming the options.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from riverbed.cli.client_security import ClientSecurityError, librdkafka_config, wire_security
from riverbed.server.client_login import PLAINTEXT_CLIENT, ClientSecurity

TopicPartition = tuple[str, int]

EARLIEST = -2
LATEST = -1

# librdkafka settings that Spark's Kafka source rejects too, each with the reason.
_UNSUPPORTED_CLIENT_SETTINGS = {
    "auto.offset.reset": "set startingOffsets (or failOnDataLoss) instead",
    "enable.auto.commit": "the source tracks offsets in Spark's checkpoint, not in Kafka",
    "key.deserializer": "keys are always returned as binary; cast them in Spark",
    "value.deserializer": "values are always returned as binary; cast them in Spark",
    "key.serializer": "keys are written as binary or string columns",
    "value.serializer": "values are written as binary or string columns",
    "interceptor.classes": "Java interceptors do not exist in librdkafka",
}

_READ_OPTIONS = {
    "subscribe",
    "subscribepattern",
    "assign",
    "startingoffsets",
    "endingoffsets",
    "startingtimestamp",
    "endingtimestamp",
    "startingoffsetsbytimestamp",
    "endingoffsetsbytimestamp",
    "startingoffsetsbytimestampstrategy",
    "failondataloss",
    "maxoffsetspertrigger",
    "minpartitions",
    "maxrecordsperpartition",
    "includeheaders",
    "kafkaconsumer.polltimeoutms",
    "reader",
}
_WRITE_OPTIONS = {
    "topic",
    "exactlyonce",
    "transactional.id.prefix",
    "transaction.timeout.ms",
    "exactlyonce.commitlogtopic",
}
# Options Spark itself adds or that belong to the stream, not the source.
_SPARK_OPTIONS = {"checkpointlocation", "queryname"}

_NOT_YET_SUPPORTED = {
    "minoffsetspertrigger": "minOffsetsPerTrigger (admission by minimum) is not supported",
    "maxtriggerdelay": "maxTriggerDelay is only meaningful with minOffsetsPerTrigger",
}

DEFAULT_POLL_TIMEOUT_MS = 120_000
READERS = ("fetch", "consumer")


class RiverbedOptionError(ValueError):
    """A missing, unknown, malformed or conflicting option; the message names them."""


@dataclass(frozen=True)
class OffsetSpec:
    """Where a range starts or ends.

    kind: "earliest" | "latest" | "offsets" (per partition, -2/-1 allowed) |
    "timestamp" (one timestamp for every partition) | "timestamps" (per partition).
    """

    kind: str
    offsets: dict[TopicPartition, int] = field(default_factory=dict)
    timestamp: int = 0


@dataclass(frozen=True)
class ReadOptions:
    client_config: dict[str, str]
    subscribe: tuple[str, ...] | None
    subscribe_pattern: str | None
    assign: tuple[TopicPartition, ...] | None
    starting: OffsetSpec
    ending: OffsetSpec
    starting_by_timestamp_strategy: str
    fail_on_data_loss: bool
    max_offsets_per_trigger: int | None
    min_partitions: int | None
    max_records_per_partition: int | None
    include_headers: bool
    poll_timeout_ms: int
    reader: str = "fetch"

    def strategy_description(self) -> str:
        if self.subscribe is not None:
            return f"subscribe={','.join(self.subscribe)}"
        if self.subscribe_pattern is not None:
            return f"subscribePattern={self.subscribe_pattern}"
        return f"assign={self.assign}"


@dataclass(frozen=True)
class FetchSettings:
    """The ``kafka.*`` settings of riverbed's own reader (Kafka's consumer defaults)."""

    bootstrap_servers: str
    client_id: str = "riverbed-spark"
    fetch_bytes_max: int = 52_428_800  # fetch.max.bytes
    partition_fetch_bytes_max: int = 1_048_576  # max.partition.fetch.bytes
    fetch_wait_max_ms: int = 500  # fetch.max.wait.ms
    fetch_min_bytes: int = 1
    request_timeout_ms: int = 30_000
    read_committed: bool = True
    #: TLS and SASL of every connection (built where the settings are: not pickled)
    security: ClientSecurity = PLAINTEXT_CLIENT


_FETCH_INT_SETTINGS = {
    "fetch.max.bytes": "fetch_bytes_max",
    "max.partition.fetch.bytes": "partition_fetch_bytes_max",
    "fetch.max.wait.ms": "fetch_wait_max_ms",
    "fetch.wait.max.ms": "fetch_wait_max_ms",
    "fetch.min.bytes": "fetch_min_bytes",
    "request.timeout.ms": "request_timeout_ms",
    "socket.timeout.ms": "request_timeout_ms",
}


def fetch_settings(client_config: Mapping[str, str]) -> FetchSettings:
    """The reader's settings from ``kafka.*`` (without the prefix); RiverbedOptionError for
    bad values (security settings included)."""
    values: dict[str, object] = {}
    for key, name in _FETCH_INT_SETTINGS.items():
        if key in client_config:
            values[name] = _parse_positive_int(f"kafka.{key}", client_config[key])
    if "client.id" in client_config:
        values["client_id"] = client_config["client.id"]
    level = client_config.get("isolation.level", "read_committed").strip().lower()
    if level not in ("read_committed", "read_uncommitted"):
        raise RiverbedOptionError(
            f"option 'kafka.isolation.level' must be read_committed or read_uncommitted, got {level!r}"
        )
    return FetchSettings(
        bootstrap_servers=client_config["bootstrap.servers"],
        read_committed=level == "read_committed",
        security=wire_client_security(client_config),
        **values,  # type: ignore[arg-type]
    )


def wire_client_security(client_config: Mapping[str, str]) -> ClientSecurity:
    """TLS and SASL of riverbed's wire client from the ``kafka.*`` settings (Kafka's or
    librdkafka's names); RiverbedOptionError naming what cannot be used."""
    try:
        return wire_security(client_config)
    except ClientSecurityError as e:
        raise RiverbedOptionError(f"invalid Kafka security option (kafka.*): {e}") from None


def librdkafka_settings(client_config: Mapping[str, str]) -> dict[str, str]:
    """The ``kafka.*`` settings in librdkafka's names (``sasl.jaas.config`` becomes
    ``sasl.username``/``sasl.password``, a PEM or PKCS12 trust store ``ssl.ca.pem``...)."""
    try:
        return librdkafka_config(client_config)
    except ClientSecurityError as e:
        raise RiverbedOptionError(f"invalid Kafka security option (kafka.*): {e}") from None


#: Where the exactly-once sink's driver records each commit decision (a compacted topic).
DEFAULT_COMMIT_LOG_TOPIC = "__riverbed_spark_sink_commits"
DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000


@dataclass(frozen=True)
class WriteOptions:
    client_config: dict[str, str]
    topic: str | None
    #: None: the default of the write (streaming: on, batch: off)
    exactly_once: bool | None = None
    transactional_id_prefix: str | None = None
    transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS
    commit_log_topic: str = DEFAULT_COMMIT_LOG_TOPIC

    def with_default_exactly_once(self, streaming: bool) -> WriteOptions:
        """Exactly-once by default for streaming writes, at-least-once (as Spark's Kafka
        sink) by default for batch writes; the default transactional id prefix of each
        kind of write (a batch write's never fences a streaming query's transactions, nor
        replaces its decisions)."""
        exactly_once = streaming if self.exactly_once is None else self.exactly_once
        prefix = self.transactional_id_prefix
        if prefix is None and self.topic is not None:
            prefix = (
                f"riverbed-spark-{self.topic}"
                if streaming
                else f"riverbed-spark-batch-{self.topic}"
            )
        return replace(self, exactly_once=exactly_once, transactional_id_prefix=prefix)

    def prefix(self) -> str:
        """The transactional id prefix: the option, else one derived from the topic."""
        if self.transactional_id_prefix:
            return self.transactional_id_prefix
        if self.topic is None:
            raise RiverbedOptionError(
                "the exactly-once sink needs option 'transactional.id.prefix' when rows name "
                "their topic (no 'topic' option)"
            )
        return f"riverbed-spark-{self.topic}"


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def _client_config(opts: Mapping[str, str]) -> dict[str, str]:
    config: dict[str, str] = {}
    bad: list[str] = []
    for key, value in opts.items():
        if not key.startswith("kafka."):
            continue
        name = key[len("kafka.") :]
        if name in _UNSUPPORTED_CLIENT_SETTINGS:
            bad.append(f"'kafka.{name}' ({_UNSUPPORTED_CLIENT_SETTINGS[name]})")
            continue
        config[name] = value
    if bad:
        raise RiverbedOptionError("unsupported Kafka client option(s): " + ", ".join(bad))
    if not config.get("bootstrap.servers"):
        raise RiverbedOptionError("option 'kafka.bootstrap.servers' is required")
    return config


def _check_unknown(opts: Mapping[str, str], known: set[str], role: str) -> None:
    unknown = sorted(
        k for k in opts if not k.startswith("kafka.") and k not in known and k not in _SPARK_OPTIONS
    )
    if unknown:
        reasons = [
            f"'{k}' ({_NOT_YET_SUPPORTED[k]})" if _NOT_YET_SUPPORTED.get(k) else f"'{k}'"
            for k in unknown
        ]
        raise RiverbedOptionError(
            f"unknown option(s) for the riverbed {role}: {', '.join(reasons)}; "
            f"known: {', '.join(sorted(known))} and kafka.*"
        )


def _parse_bool(name: str, value: str) -> bool:
    v = value.strip().lower()
    if v in ("true", "false"):
        return v == "true"
    raise RiverbedOptionError(f"option '{name}' must be true or false, got {value!r}")


def _parse_positive_int(name: str, value: str) -> int:
    try:
        n = int(value.strip())
    except ValueError:
        raise RiverbedOptionError(f"option '{name}' must be an integer, got {value!r}") from None
    if n <= 0:
        raise RiverbedOptionError(f"option '{name}' must be positive, got {n}")
    return n


def _parse_json(name: str, value: str) -> Any:
    try:
        return json.loads(value)
    except json.JSONDecodeError as e:
        raise RiverbedOptionError(
            f"option '{name}' is not valid JSON ({e.msg}): {value!r}"
        ) from None


def parse_partition_map(name: str, value: str) -> dict[TopicPartition, int]:
    """Parse ``{"topic": {"0": 42}}`` (offsets or timestamps)."""
    data = _parse_json(name, value)
    if not isinstance(data, dict):
        raise RiverbedOptionError(
            f'option \'{name}\' must be a JSON object {{"topic": {{"0": n}}}}'
        )
    out: dict[TopicPartition, int] = {}
    for topic, parts in data.items():
        if not isinstance(parts, dict):
            raise RiverbedOptionError(
                f"option '{name}': topic {topic!r} must map partition numbers to integers"
            )
        for p, n in parts.items():
            try:
                partition = int(p)
            except ValueError:
                raise RiverbedOptionError(
                    f"option '{name}': partition {p!r} of topic {topic!r} is not an integer"
                ) from None
            if isinstance(n, bool) or not isinstance(n, int):
                raise RiverbedOptionError(
                    f"option '{name}': value for {topic}-{partition} must be an integer, got {n!r}"
                )
            out[(topic, partition)] = n
    return out


def parse_assign(value: str) -> tuple[TopicPartition, ...]:
    data = _parse_json("assign", value)
    if not isinstance(data, dict) or not data:
        raise RiverbedOptionError("option 'assign' must be a JSON object {\"topic\": [0, 1]}")
    out: list[TopicPartition] = []
    for topic, parts in data.items():
        if not isinstance(parts, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in parts
        ):
            raise RiverbedOptionError(
                f"option 'assign': topic {topic!r} must map to a list of partition numbers"
            )
        out.extend((topic, p) for p in parts)
    return tuple(sorted(set(out)))


def _offset_spec(
    opts: Mapping[str, str], side: str, default: str, *, streaming: bool
) -> OffsetSpec:
    names = {
        f"{side}offsets": "Offsets",
        f"{side}timestamp": "Timestamp",
        f"{side}offsetsbytimestamp": "OffsetsByTimestamp",
    }
    given = [k for k in names if k in opts]
    if len(given) > 1:
        raise RiverbedOptionError(
            "conflicting options: "
            + ", ".join(f"'{side}{names[k]}'" for k in given)
            + " (give only one)"
        )
    if not given:
        return OffsetSpec(default)
    key = given[0]
    value = opts[key]
    label = f"{side}{names[key]}"
    if key.endswith("offsetsbytimestamp"):
        stamps = parse_partition_map(label, value)
        if any(ts < 0 for ts in stamps.values()):
            raise RiverbedOptionError(f"option '{label}': timestamps must be >= 0")
        return OffsetSpec("timestamps", offsets=stamps)
    if key.endswith("timestamp"):
        try:
            ts = int(value.strip())
        except ValueError:
            raise RiverbedOptionError(
                f"option '{label}' must be epoch milliseconds, got {value!r}"
            ) from None
        if ts < 0:
            raise RiverbedOptionError(f"option '{label}' must be >= 0, got {ts}")
        return OffsetSpec("timestamp", timestamp=ts)
    v = value.strip()
    if v.lower() in ("earliest", "latest"):
        return OffsetSpec(v.lower())
    offsets = parse_partition_map(label, v)
    bad = {tp: o for tp, o in offsets.items() if o < EARLIEST}
    if bad:
        raise RiverbedOptionError(
            f"option '{label}': offsets must be >= 0, or -2 (earliest) / -1 (latest): {bad}"
        )
    return OffsetSpec("offsets", offsets=offsets)


def _strategy(
    opts: Mapping[str, str],
) -> tuple[tuple[str, ...] | None, str | None, tuple[TopicPartition, ...] | None]:
    """(subscribe, subscribePattern, assign): exactly one of them is given."""
    strategies = [k for k in ("subscribe", "subscribepattern", "assign") if k in opts]
    if len(strategies) != 1:
        what = "only one" if strategies else "one"
        raise RiverbedOptionError(
            f"{what} of the options 'subscribe', 'subscribePattern', 'assign' must be given"
            + (f"; got {', '.join(repr(s) for s in strategies)}" if strategies else "")
        )
    subscribe = pattern = assign = None
    if "subscribe" in opts:
        topics = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
        if not topics:
            raise RiverbedOptionError("option 'subscribe' must list at least one topic")
        subscribe = topics
    elif "subscribepattern" in opts:
        pattern = opts["subscribepattern"].strip()
        if not pattern:
            raise RiverbedOptionError("option 'subscribePattern' must not be empty")
        try:
            re.compile(pattern)
        except re.error as e:
            raise RiverbedOptionError(f"option 'subscribePattern' is not a regex: {e}") from None
    else:
        assign = parse_assign(opts["assign"])
    return subscribe, pattern, assign


def _check_range(
    opts: Mapping[str, str], starting: OffsetSpec, ending: OffsetSpec, *, streaming: bool
) -> None:
    """Streaming queries have no end; batch queries start nowhere latest, end nowhere
    earliest."""
    if streaming:
        given = [
            k for k in ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp") if k in opts
        ]
        if given:
            raise RiverbedOptionError(
                f"option(s) {', '.join(repr(g) for g in given)} are not valid in streaming queries"
            )
    else:
        if starting.kind == "latest":
            raise RiverbedOptionError("startingOffsets='latest' is not valid for batch queries")
        if starting.kind == "offsets" and LATEST in starting.offsets.values():
            raise RiverbedOptionError(
                "startingOffsets for batch queries must not use -1 (latest): "
                + ", ".join(f"{t}-{p}" for (t, p), o in starting.offsets.items() if o == LATEST)
            )
        if ending.kind == "earliest":
            raise RiverbedOptionError("endingOffsets='earliest' is not valid for batch queries")
        if ending.kind == "offsets" and EARLIEST in ending.offsets.values():
            raise RiverbedOptionError(
                "endingOffsets must not use -2 (earliest): "
                + ", ".join(f"{t}-{p}" for (t, p), o in ending.offsets.items() if o == EARLIEST)
            )


def parse_read_options(options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    opts = _lower(options)
    _check_unknown(opts, _READ_OPTIONS, "source")
    client = _client_config(opts)
    subscribe, pattern, assign = _strategy(opts)
    starting = _offset_spec(
        opts, "starting", "latest" if streaming else "earliest", streaming=streaming
    )
    ending = _offset_spec(opts, "ending", "latest", streaming=streaming)
    _check_range(opts, starting, ending, streaming=streaming)
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise RiverbedOptionError(
            f"option 'startingOffsetsByTimestampStrategy' must be error or latest, got {strategy!r}"
        )
    max_per_trigger = None
    if "maxoffsetspertrigger" in opts:
        if not streaming:
            raise RiverbedOptionError(
                "option 'maxOffsetsPerTrigger' is only valid in streaming queries"
            )
        max_per_trigger = _parse_positive_int("maxOffsetsPerTrigger", opts["maxoffsetspertrigger"])
    min_parts = (
        _parse_positive_int("minPartitions", opts["minpartitions"])
        if "minpartitions" in opts
        else None
    )
    max_records = (
        _parse_positive_int("maxRecordsPerPartition", opts["maxrecordsperpartition"])
        if "maxrecordsperpartition" in opts
        else None
    )
    reader = opts.get("reader", "fetch").strip().lower()
    if reader not in READERS:
        raise RiverbedOptionError(f"option 'reader' must be fetch or consumer, got {reader!r}")
    if reader == "fetch":
        fetch_settings(client)  # fail on the driver, not in every task
    return ReadOptions(
        client_config=client,
        subscribe=subscribe,
        subscribe_pattern=pattern,
        assign=assign,
        starting=starting,
        ending=ending,
        starting_by_timestamp_strategy=strategy,
        fail_on_data_loss=_parse_bool("failOnDataLoss", opts.get("failondataloss", "true")),
        max_offsets_per_trigger=max_per_trigger,
        min_partitions=min_parts,
        max_records_per_partition=max_records,
        include_headers=_parse_bool("includeHeaders", opts.get("includeheaders", "false")),
        poll_timeout_ms=_parse_positive_int(
            "kafkaConsumer.pollTimeoutMs",
            opts.get("kafkaconsumer.polltimeoutms", str(DEFAULT_POLL_TIMEOUT_MS)),
        ),
        reader=reader,
    )


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    opts = _lower(options)
    _check_unknown(opts, _WRITE_OPTIONS, "sink")
    client = _client_config(opts)
    topic = opts.get("topic")
    if topic is not None and not topic.strip():
        raise RiverbedOptionError("option 'topic' must not be empty")
    exactly_once = None
    if "exactlyonce" in opts:
        exactly_once = _parse_bool("exactlyOnce", opts["exactlyonce"])
    prefix = opts.get("transactional.id.prefix")
    if prefix is not None and not prefix.strip():
        raise RiverbedOptionError("option 'transactional.id.prefix' must not be empty")
    return WriteOptions(
        client_config=client,
        topic=topic.strip() if topic else None,
        exactly_once=exactly_once,
        transactional_id_prefix=prefix.strip() if prefix else None,
        transaction_timeout_ms=_parse_positive_int(
            "transaction.timeout.ms",
            opts.get("transaction.timeout.ms", str(DEFAULT_TRANSACTION_TIMEOUT_MS)),
        ),
        commit_log_topic=opts.get("exactlyonce.commitlogtopic", DEFAULT_COMMIT_LOG_TOPIC),
    )
