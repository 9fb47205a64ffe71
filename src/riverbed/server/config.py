"""Broker/controller configuration: Kafka's keys, defaults and validation.

Input format: Java `.properties` text (server.properties), plus `key=value` overrides
(`riverbed server start --override log.retention.ms=1000`).  Keys and defaults are
Kafka's (KafkaConfig / ServerLogConfigs / KRaftConfigs); values are validated when the
config is built and the first bad key raises `ConfigError` naming it.  Unknown keys are
kept (Kafka only warns about them) so that configs written for Kafka load unchanged.

With no file at all riverbed runs the embedded default: one combined node
(`process.roles=broker,controller`, `node.id=1`), `listeners=PLAINTEXT://localhost:9092`,
`log.dirs=./riverbed-data`, internal topics with replication factor 1, and storage
formatted automatically on first start (`riverbed.storage.auto.format=true`).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from riverbed.metadata.config_defs import (
    INT_MAX,
    LONG_MAX,
    ConfigDef,
    ConfigEntry,
    ConfigSource,
    ConfigSynonym,
    ConfigType,
    ConfigValueError,
    Validator,
    at_least,
    between,
    defs_by_name,
    one_of,
)
from riverbed.metadata.controller import ControllerConfig

log = logging.getLogger(__name__)

#: Largest server.properties we read; a config is a few KiB, anything larger is a mistake.
PROPERTIES_FILE_BYTES_MAX = 1_048_576

_B, _S, _I, _SH, _L, _D, _LI, _P = (
    ConfigType.BOOLEAN,
    ConfigType.STRING,
    ConfigType.INT,
    ConfigType.SHORT,
    ConfigType.LONG,
    ConfigType.DOUBLE,
    ConfigType.LIST,
    ConfigType.PASSWORD,
)
_LMAX = str(LONG_MAX)
_IMAX = str(INT_MAX)


def _d(
    name: str,
    type_: ConfigType,
    default: str | None,
    validator: Validator | None = None,
    doc: str = "",
) -> ConfigDef:
    return ConfigDef(name, type_, default, doc, validator, nullable=default is None)


_DEFAULT_PROTOCOL_MAP = (
    "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"
)

BROKER_CONFIGS: tuple[ConfigDef, ...] = (
    # --- node and roles (KRaft)
    _d("node.id", _I, "-1", at_least(-1), "The node id of this broker/controller."),
    _d("process.roles", _LI, "", one_of("broker", "controller"),
       "The roles this process plays: broker, controller, or both."),
    _d("controller.quorum.voters", _LI, ""),
    _d("controller.quorum.bootstrap.servers", _LI, ""),
    _d("controller.listener.names", _LI, None),
    _d("controller.quorum.election.timeout.ms", _I, "1000", at_least(0)),
    _d("controller.quorum.fetch.timeout.ms", _I, "2000", at_least(0)),
    _d("controller.quorum.election.backoff.max.ms", _I, "1000", at_least(0)),
    _d("controller.quorum.request.timeout.ms", _I, "2000", at_least(0)),
    _d("controller.quorum.append.linger.ms", _I, "25", at_least(0)),
    _d("controller.quorum.retry.backoff.ms", _I, "20", at_least(0)),
    _d("broker.heartbeat.interval.ms", _I, "2000", at_least(1)),
    _d("broker.session.timeout.ms", _I, "9000", at_least(1)),
    _d("broker.rack", _S, None),
    # --- listeners and network
    _d("listeners", _LI, "PLAINTEXT://:9092"),
    _d("advertised.listeners", _LI, None),
    _d("listener.security.protocol.map", _LI, _DEFAULT_PROTOCOL_MAP),
    _d("inter.broker.listener.name", _S, None),
    _d("security.inter.broker.protocol", _S, "PLAINTEXT",
       one_of("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")),
    _d("socket.request.max.bytes", _I, "104857600", at_least(1)),
    _d("socket.send.buffer.bytes", _I, "102400"),
    _d("socket.receive.buffer.bytes", _I, "102400"),
    _d("socket.listen.backlog.size", _I, "50", at_least(1)),
    _d("connections.max.idle.ms", _L, "600000"),
    _d("max.connections", _I, _IMAX, at_least(0)),
    _d("max.connections.per.ip", _I, _IMAX, at_least(0)),
    _d("num.network.threads", _I, "3", at_least(1)),
    _d("num.io.threads", _I, "8", at_least(1)),
    _d("queued.max.requests", _I, "500", at_least(1)),
    _d("request.timeout.ms", _I, "30000", at_least(0)),
    # --- logs
    _d("log.dir", _S, "/tmp/kafka-logs"),
    _d("log.dirs", _LI, None),
    _d("metadata.log.dir", _S, None),
    _d("metadata.log.segment.bytes", _I, "1073741824", at_least(12)),
    _d("metadata.log.max.record.bytes.between.snapshots", _L, "20971520", at_least(1)),
    _d("metadata.log.max.snapshot.interval.ms", _L, "3600000", at_least(0)),
    _d("metadata.max.retention.bytes", _L, "104857600"),
    _d("metadata.max.retention.ms", _L, "604800000"),
    _d("metadata.max.idle.interval.ms", _I, "500", at_least(0)),
    _d("num.partitions", _I, "1", at_least(1)),
    _d("default.replication.factor", _I, "1", at_least(1)),
    _d("auto.create.topics.enable", _B, "true"),
    _d("delete.topic.enable", _B, "true"),
    _d("auto.leader.rebalance.enable", _B, "true"),
    _d("message.max.bytes", _I, "1048588", at_least(0)),
    _d("log.segment.bytes", _I, "1073741824", at_least(14)),
    _d("log.roll.ms", _L, None, at_least(1)),
    _d("log.roll.hours", _I, "168", at_least(1)),
    _d("log.roll.jitter.ms", _L, None, at_least(0)),
    _d("log.roll.jitter.hours", _I, "0", at_least(0)),
    _d("log.retention.ms", _L, None),
    _d("log.retention.minutes", _I, None),
    _d("log.retention.hours", _I, "168"),
    _d("log.retention.bytes", _L, "-1"),
    _d("log.retention.check.interval.ms", _L, "300000", at_least(1)),
    _d("log.local.retention.ms", _L, "-2", at_least(-2)),
    _d("log.local.retention.bytes", _L, "-2", at_least(-2)),
    _d("log.segment.delete.delay.ms", _L, "60000", at_least(0)),
    _d("log.index.size.max.bytes", _I, "10485760", at_least(4)),
    _d("log.index.interval.bytes", _I, "4096", at_least(0)),
    _d("log.message.timestamp.type", _S, "CreateTime", one_of("CreateTime", "LogAppendTime")),
    _d("log.message.timestamp.before.max.ms", _L, _LMAX, at_least(0)),
    _d("log.message.timestamp.after.max.ms", _L, "3600000", at_least(0)),
    _d("log.cleanup.policy", _LI, "delete", one_of("delete", "compact")),
    _d("log.cleaner.enable", _B, "true"),
    _d("log.cleaner.threads", _I, "1", at_least(0)),
    _d("log.cleaner.delete.retention.ms", _L, "86400000", at_least(0)),
    _d("log.cleaner.min.compaction.lag.ms", _L, "0", at_least(0)),
    _d("log.cleaner.max.compaction.lag.ms", _L, _LMAX, at_least(1)),
    _d("log.cleaner.min.cleanable.ratio", _D, "0.5", between(0, 1)),
    _d("log.cleaner.dedupe.buffer.size", _L, "134217728"),
    _d("log.cleaner.backoff.ms", _L, "15000", at_least(0)),
    _d("log.preallocate", _B, "false"),
    _d("log.flush.interval.messages", _L, _LMAX, at_least(1)),
    _d("log.flush.interval.ms", _L, None),
    _d("log.flush.scheduler.interval.ms", _L, _LMAX),
    _d("log.flush.offset.checkpoint.interval.ms", _I, "60000", at_least(0)),
    _d("log.flush.start.offset.checkpoint.interval.ms", _I, "60000", at_least(0)),
    _d("num.recovery.threads.per.data.dir", _I, "2", at_least(1)),
    _d("compression.type", _S, "producer",
       one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer", case_sensitive=False)),
    _d("compression.gzip.level", _I, "-1", between(-1, 9)),
    _d("compression.lz4.level", _I, "9", between(1, 17)),
    _d("compression.zstd.level", _I, "3", between(-131072, 22)),
    _d("min.insync.replicas", _I, "1", at_least(1)),
    _d("unclean.leader.election.enable", _B, "false"),
    # --- replication
    _d("replica.lag.time.max.ms", _L, "30000"),
    _d("replica.fetch.max.bytes", _I, "1048576", at_least(0)),
    _d("replica.fetch.min.bytes", _I, "1"),
    _d("replica.fetch.wait.max.ms", _I, "500"),
    _d("replica.fetch.backoff.ms", _I, "1000", at_least(0)),
    _d("replica.fetch.response.max.bytes", _I, "10485760", at_least(0)),
    _d("replica.socket.timeout.ms", _I, "30000"),
    _d("replica.high.watermark.checkpoint.interval.ms", _L, "5000"),
    _d("num.replica.fetchers", _I, "1"),
    _d("fetch.max.bytes", _I, "57671680", at_least(1024)),
    # --- groups and offsets
    _d("group.initial.rebalance.delay.ms", _I, "3000"),
    _d("group.min.session.timeout.ms", _I, "6000"),
    _d("group.max.session.timeout.ms", _I, "1800000"),
    _d("group.max.size", _I, _IMAX, at_least(1)),
    _d("offsets.topic.replication.factor", _SH, "3", at_least(1)),
    _d("offsets.topic.num.partitions", _I, "50", at_least(1)),
    _d("offsets.topic.segment.bytes", _I, "104857600", at_least(1)),
    _d("offsets.topic.compression.codec", _I, "0"),
    _d("offsets.retention.minutes", _I, "10080", at_least(1)),
    _d("offsets.retention.check.interval.ms", _L, "600000", at_least(1)),
    _d("offsets.commit.timeout.ms", _I, "5000", at_least(1)),
    _d("offsets.load.buffer.size", _I, "5242880", at_least(1)),
    _d("offset.metadata.max.bytes", _I, "4096"),
    # --- transactions and producer ids
    _d("transaction.state.log.replication.factor", _SH, "3", at_least(1)),
    _d("transaction.state.log.num.partitions", _I, "50", at_least(1)),
    _d("transaction.state.log.min.isr", _I, "2", at_least(1)),
    _d("transaction.state.log.segment.bytes", _I, "104857600", at_least(1)),
    _d("transactional.id.expiration.ms", _I, "604800000", at_least(1)),
    _d("transaction.max.timeout.ms", _I, "900000", at_least(1)),
    _d("producer.id.expiration.ms", _I, "86400000", at_least(1)),
    # --- tiered storage
    _d("remote.log.storage.system.enable", _B, "false"),
    # --- riverbed's own keys
    _d("riverbed.storage.auto.format", _B, "false", None,
       "Format unformatted log dirs on start (true in the embedded default)."),
)  # fmt: skip

CONFIG_DEFS: dict[str, ConfigDef] = defs_by_name(BROKER_CONFIGS)

#: Broker keys that stand in for one another (most specific first), as Kafka reports them.
BROKER_SYNONYMS: dict[str, tuple[str, ...]] = {
    "log.retention.ms": ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    "log.retention.minutes": ("log.retention.minutes", "log.retention.hours"),
    "log.roll.ms": ("log.roll.ms", "log.roll.hours"),
    "log.roll.jitter.ms": ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    "log.flush.interval.ms": ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
}

EMBEDDED_DEFAULTS: dict[str, str] = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "listeners": "PLAINTEXT://localhost:9092",
    "controller.listener.names": "CONTROLLER",
    "log.dirs": "./riverbed-data",
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "riverbed.storage.auto.format": "true",
}

SUPPORTED_SECURITY_PROTOCOLS = frozenset({"PLAINTEXT"})
_VOTER_RE = re.compile(r"^(\d+)@(\[[^\]]*\]|[^:\[\]@]+):(\d+)$")
_LISTENER_RE = re.compile(r"^([A-Za-z0-9_]+)://(\[[^\]]*\]|[^:\[\]]*):(-?\d+)$")


class ConfigError(ValueError):
    """A bad server configuration; `.key` names the offending key."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message if key in message else f"{key}: {message}")
        self.key = key


@dataclass(frozen=True, slots=True)
class Listener:
    name: str
    host: str
    port: int
    security_protocol: str

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java `.properties` text (comments, `=`/`:`/whitespace separators, `\\`)."""
    props: dict[str, str] = {}
    logical: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].lstrip()
        i += 1
        if not logical and (not line or line[0] in "#!"):
            continue
        # An odd number of trailing backslashes continues the line.
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            logical.append(line[:-1])
            if i < len(lines):
                continue
            line = ""
        logical.append(line)
        key, value = _split_property("".join(logical))
        logical = []
        if key:
            props[key] = value
    return props


def _unescape(text: str) -> str:
    out: list[str] = []
    it = iter(range(len(text)))
    for idx in it:
        ch = text[idx]
        if ch != "\\" or idx + 1 >= len(text):
            out.append(ch)
            continue
        nxt = text[idx + 1]
        next(it, None)
        if nxt == "u" and idx + 5 < len(text):
            try:
                out.append(chr(int(text[idx + 2 : idx + 6], 16)))
                for _ in range(4):
                    next(it, None)
                continue
            except ValueError:
                pass
        out.append({"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(nxt, nxt))
    return "".join(out)


def _split_property(line: str) -> tuple[str, str]:
    idx = 0
    while idx < len(line):
        ch = line[idx]
        if ch == "\\":
            idx += 2
            continue
        if ch in "=: \t\f":
            break
        idx += 1
    key = line[:idx]
    rest = line[idx:].lstrip(" \t\f")
    if rest[:1] in ("=", ":") and (idx >= len(line) or line[idx] in " \t\f=:"):
        rest = rest[1:].lstrip(" \t\f")
    return _unescape(key), _unescape(rest)


def parse_override(item: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(item, f"override {item!r} must have the form key=value")
    return key, value.strip()


class ServerConfig:
    """A validated broker/controller configuration (see module docstring)."""

    def __init__(self, props: Mapping[str, str]) -> None:
        self.originals: Mapping[str, str] = dict(props)
        self._values: dict[str, object] = {}
        for name, cdef in CONFIG_DEFS.items():
            raw = props.get(name, cdef.default)
            try:
                self._values[name] = cdef.parse(raw)
            except ConfigValueError as exc:
                raise ConfigError(name, str(exc)) from None
        self.unknown_keys = tuple(sorted(k for k in props if k not in CONFIG_DEFS))
        for key in self.unknown_keys:
            log.warning("ignoring unknown config key %s", key)
        self._derive()

    # ----- construction
    @classmethod
    def from_props(cls, props: Mapping[str, str]) -> ServerConfig:
        return cls(props)

    @classmethod
    def embedded_default(cls) -> ServerConfig:
        return cls(EMBEDDED_DEFAULTS)

    @classmethod
    def load(
        cls, path: str | os.PathLike[str] | None = None, overrides: Sequence[str] = ()
    ) -> ServerConfig:
        if path is None:
            props = dict(EMBEDDED_DEFAULTS)
        else:
            props = read_properties_file(path)
        for item in overrides:
            key, value = parse_override(item)
            props[key] = value
        return cls(props)

    # ----- derived, typed attributes
    def _derive(self) -> None:
        v = self._values
        self.node_id: int = _int(v["node.id"])
        roles = _list(v["process.roles"])
        if not roles:
            raise ConfigError(
                "process.roles", "process.roles must be set to broker, controller or both"
            )
        self.process_roles: frozenset[str] = frozenset(roles)
        if self.node_id < 0:
            raise ConfigError("node.id", "node.id must be set to a non-negative integer")
        protocol_map = self._protocol_map()
        self.controller_listener_names: tuple[str, ...] = tuple(
            _list(v["controller.listener.names"] or [])
        )
        self.listeners = self._parse_listeners("listeners", _list(v["listeners"]), protocol_map)
        if not self.listeners:
            raise ConfigError("listeners", "listeners must name at least one listener")
        self.broker_listeners: tuple[Listener, ...] = tuple(
            lst for lst in self.listeners if lst.name not in self.controller_listener_names
        )
        if "broker" in self.process_roles and not self.broker_listeners:
            raise ConfigError("listeners", "a broker needs at least one non-controller listener")
        if v["advertised.listeners"] is None:
            self.advertised_listeners: tuple[Listener, ...] = self.broker_listeners
        else:
            self.advertised_listeners = self._parse_listeners(
                "advertised.listeners", _list(v["advertised.listeners"]), protocol_map
            )
            for lst in self.advertised_listeners:
                if lst.host in ("0.0.0.0", "::"):
                    raise ConfigError(
                        "advertised.listeners",
                        f"advertised.listeners cannot use the nonroutable meta-address {lst.host}",
                    )
        ibl = v["inter.broker.listener.name"]
        if ibl is None:
            wanted = str(v["security.inter.broker.protocol"])
            names = [lst.name for lst in self.broker_listeners if lst.security_protocol == wanted]
            ibl = names[0] if names else (self.broker_listeners or self.listeners)[0].name
        self.inter_broker_listener_name: str = str(ibl)
        dirs = v["log.dirs"]
        self.log_dirs: tuple[str, ...] = (
            tuple(_list(dirs)) if dirs is not None else (str(v["log.dir"]),)
        )
        if not self.log_dirs:
            raise ConfigError("log.dirs", "log.dirs must name at least one directory")
        self.metadata_log_dir: str = str(v["metadata.log.dir"] or self.log_dirs[0])
        self.num_partitions: int = _int(v["num.partitions"])
        self.default_replication_factor: int = _int(v["default.replication.factor"])
        self.auto_create_topics_enable: bool = bool(v["auto.create.topics.enable"])
        self.message_max_bytes: int = _int(v["message.max.bytes"])
        self.log_segment_bytes: int = _int(v["log.segment.bytes"])
        roll_ms = v["log.roll.ms"]
        self.log_roll_ms: int = (
            _int(roll_ms) if roll_ms is not None else _int(v["log.roll.hours"]) * 3_600_000
        )
        self.log_retention_ms: int = self._retention_ms()
        self.log_retention_bytes: int = _int(v["log.retention.bytes"])
        self.log_message_timestamp_type: str = str(v["log.message.timestamp.type"])
        self.socket_request_max_bytes: int = _int(v["socket.request.max.bytes"])
        self.connections_max_idle_ms: int = _int(v["connections.max.idle.ms"])
        self.num_network_threads: int = _int(v["num.network.threads"])
        self.num_io_threads: int = _int(v["num.io.threads"])
        self.queued_max_requests: int = _int(v["queued.max.requests"])
        self.log_flush_interval_messages: int = _int(v["log.flush.interval.messages"])
        fim = v["log.flush.interval.ms"]
        self.log_flush_interval_ms: int | None = _int(fim) if fim is not None else None
        self.log_flush_scheduler_interval_ms: int = _int(v["log.flush.scheduler.interval.ms"])
        self.group_initial_rebalance_delay_ms: int = _int(v["group.initial.rebalance.delay.ms"])
        self.offsets_topic_replication_factor: int = _int(v["offsets.topic.replication.factor"])
        self.offsets_topic_num_partitions: int = _int(v["offsets.topic.num.partitions"])
        self.controller_quorum_voters: str = ",".join(_list(v["controller.quorum.voters"]))
        self.quorum_voters: dict[int, tuple[str, int]] = self._parse_voters(
            _list(v["controller.quorum.voters"])
        )
        self.auto_format: bool = bool(v["riverbed.storage.auto.format"])
        self.broker_rack: str | None = v["broker.rack"]  # type: ignore[assignment]

    def _parse_voters(self, items: list[str]) -> dict[int, tuple[str, int]]:
        key = "controller.quorum.voters"
        voters: dict[int, tuple[str, int]] = {}
        for item in items:
            match = _VOTER_RE.match(item)
            if match is None:
                raise ConfigError(key, f"{key} entry {item!r} must look like id@host:port")
            node_id, host, port = int(match[1]), match[2].strip("[]"), int(match[3])
            if node_id in voters:
                raise ConfigError(key, f"{key} names node {node_id} twice")
            if not 0 < port <= 65535:
                raise ConfigError(key, f"{key} entry {item!r} has port {port} outside 1..65535")
            voters[node_id] = (host, port)
        if voters and "controller" in self.process_roles and self.node_id not in voters:
            raise ConfigError(
                key,
                f"{key} must include this node (node.id={self.node_id}) when "
                "process.roles contains controller",
            )
        return voters

    def _retention_ms(self) -> int:
        v = self._values
        if v["log.retention.ms"] is not None:
            ms = _int(v["log.retention.ms"])
        elif v["log.retention.minutes"] is not None:
            ms = _int(v["log.retention.minutes"]) * 60_000
        else:
            ms = _int(v["log.retention.hours"]) * 3_600_000
        return -1 if ms < 0 else ms

    def _protocol_map(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for item in _list(self._values["listener.security.protocol.map"]):
            name, sep, proto = item.partition(":")
            if (
                not sep
                or not name
                or proto not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
            ):
                raise ConfigError(
                    "listener.security.protocol.map",
                    f"listener.security.protocol.map entry {item!r} must be NAME:PROTOCOL",
                )
            out[name] = proto
        return out

    def _parse_listeners(
        self, key: str, items: list[str], protocol_map: Mapping[str, str]
    ) -> tuple[Listener, ...]:
        out: list[Listener] = []
        seen_names: set[str] = set()
        seen_ports: set[int] = set()
        for item in items:
            match = _LISTENER_RE.match(item)
            if match is None:
                raise ConfigError(key, f"{key} entry {item!r} must look like NAME://host:port")
            name, host, port_text = match.groups()
            port = int(port_text)
            if not 0 <= port <= 65535:
                raise ConfigError(key, f"{key} entry {item!r} has port {port} outside 0..65535")
            if name in seen_names:
                raise ConfigError(key, f"{key} names listener {name} twice")
            if port and port in seen_ports and key == "listeners":
                raise ConfigError(key, f"{key} uses port {port} twice")
            proto = protocol_map.get(name)
            if proto is None and name in self.controller_listener_names:
                proto = "PLAINTEXT"  # KRaft: unmapped controller listeners are PLAINTEXT
            if proto is None:
                raise ConfigError(
                    key,
                    f"{key}: listener {name} has no security protocol in "
                    "listener.security.protocol.map",
                )
            if proto not in SUPPORTED_SECURITY_PROTOCOLS:
                raise ConfigError(
                    key,
                    f"{key}: security protocol {proto} of listener {name} is not supported by riverbed (only PLAINTEXT)",
                )
            seen_names.add(name)
            seen_ports.add(port)
            out.append(Listener(name, host.strip("[]"), port, proto))
        return tuple(out)

    # ----- access
    def get(self, key: str) -> object:
        if key not in self._values:
            raise KeyError(f"unknown config key {key}")
        return self._values[key]

    def listener(self, name: str) -> Listener:
        for lst in self.listeners:
            if lst.name == name:
                return lst
        raise KeyError(f"no listener named {name}")

    def with_overrides(self, overrides: Mapping[str, str]) -> ServerConfig:
        props = dict(self.originals)
        props.update(overrides)
        return ServerConfig(props)

    def static_config(self) -> dict[str, str]:
        """The explicitly set, known keys as strings (STATIC_BROKER_CONFIG)."""
        return {k: v for k, v in self.originals.items() if k in CONFIG_DEFS}

    def describe(self) -> list[ConfigEntry]:
        """DescribeConfigs rows for this broker (every known key, sorted by name)."""
        static = self.static_config()
        entries: list[ConfigEntry] = []
        for name in sorted(CONFIG_DEFS):
            cdef = CONFIG_DEFS[name]
            sensitive = cdef.type == ConfigType.PASSWORD
            chain = BROKER_SYNONYMS.get(name, (name,))
            synonyms: list[ConfigSynonym] = []
            for syn in chain:
                if syn in static:
                    synonyms.append(
                        ConfigSynonym(syn, static[syn], ConfigSource.STATIC_BROKER_CONFIG)
                    )
            for syn in chain:
                sdef = CONFIG_DEFS[syn]
                if sdef.default is not None:
                    synonyms.append(ConfigSynonym(syn, sdef.default, ConfigSource.DEFAULT_CONFIG))
            if name in static:
                value: str | None = static[name]
                source = ConfigSource.STATIC_BROKER_CONFIG
            else:
                value = cdef.default
                source = ConfigSource.DEFAULT_CONFIG
            entries.append(
                ConfigEntry(
                    name=name,
                    value=None if sensitive else value,
                    source=source,
                    read_only=True,
                    sensitive=sensitive,
                    synonyms=tuple(synonyms),
                    config_type=cdef.type,
                    documentation=cdef.doc or None,
                )
            )
        return entries

    def controller_config(self) -> ControllerConfig:
        return ControllerConfig(
            node_id=self.node_id,
            num_partitions=self.num_partitions,
            default_replication_factor=self.default_replication_factor,
            static_broker_config=self.static_config(),
            broker_config_entries=tuple(self.describe()),
        )

    def __repr__(self) -> str:
        return f"ServerConfig(node.id={self.node_id}, listeners={[str(x) for x in self.listeners]})"


def read_properties_file(path: str | os.PathLike[str]) -> dict[str, str]:
    p = Path(path)
    try:
        size = p.stat().st_size
        if size > PROPERTIES_FILE_BYTES_MAX:
            raise ConfigError(
                str(p), f"config file {p} is {size} bytes, more than {PROPERTIES_FILE_BYTES_MAX}"
            )
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(str(p), f"config file {p} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(str(p), f"cannot read config file {p}: {exc}") from None
    return parse_properties(text)


def _int(value: object) -> int:
    assert isinstance(value, int) and not isinstance(value, bool), value
    return value


def _list(value: object) -> list[str]:
    assert isinstance(value, list), value
    return value
