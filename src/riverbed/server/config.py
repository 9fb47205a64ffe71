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

import ipaddress
import logging
import os
import re
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from riverbed.metadata.broker_configs import (
    BROKER_CONFIGS,
    BROKER_SYNONYMS,
    CONFIG_DEFS,
    DYNAMIC_BROKER_CONFIGS,
    describe_broker_config,
)
from riverbed.metadata.config_defs import ConfigEntry, ConfigValueError
from riverbed.metadata.controller import ControllerConfig
from riverbed.metadata.inert_configs import inert_settings
from riverbed.server.config_listeners import (
    advertised_problem,
    authentication_delay_problem,
    controller_listener_problem,
    inter_broker_problem,
)
from riverbed.server.connection_quotas import ConnectionLimits, normalize_ip
from riverbed.server.logging_config import LOG_LEVEL_PREFIX, LogLevelError, logger_levels

log = logging.getLogger(__name__)

#: Largest server.properties we read; a config is a few KiB, anything larger is a mistake.
PROPERTIES_FILE_BYTES_MAX = 1_048_576

EMBEDDED_DEFAULTS: dict[str, str] = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "listeners": "PLAINTEXT://localhost:9092",
    "controller.listener.names": "CONTROLLER",
    "log.dirs": "./riverbed-data",
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    # the Spark sink's exactly-once writes (KIP-939) work on the embedded node (Kafka's
    # default, false, stays for configured servers)
    "transaction.two.phase.commit.enable": "true",
    "riverbed.storage.auto.format": "true",
    "riverbed.http.listeners": "http://127.0.0.1:9644",
}

SUPPORTED_SECURITY_PROTOCOLS = frozenset({"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"})
_VOTER_RE = re.compile(r"^(\d+)@(\[[^\]]*\]|[^:\[\]@]+):(\d+)$")
_LISTENER_RE = re.compile(r"^([A-Za-z0-9_]+)://(\[[^\]]*\]|[^:\[\]]*):(-?\d+)$")
#: Kafka's per-listener override of max.connections (ListenerName.configPrefix).
_LISTENER_MAX_RE = re.compile(r"^listener\.name\.([a-z0-9_]+)\.max\.connections$")


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


#: The config warnings already logged by this process: a node builds a ServerConfig more
#: than once (at start, and again for each dynamic change), and a key's warning is news once.
_WARNED: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        log.warning("%s", message)


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
        rsm_prefix = str(self._values["remote.log.storage.manager.impl.prefix"])
        self.unknown_keys = tuple(
            sorted(
                k
                for k in props
                if k not in CONFIG_DEFS
                and not _LISTENER_MAX_RE.match(k)
                and not _is_listener_security_key(k)
                and not k.startswith(rsm_prefix)  # the remote storage manager's own keys
                and not k.startswith(LOG_LEVEL_PREFIX)  # log.level.<logger>
            )
        )
        for key in self.unknown_keys:
            _warn_once(f"ignoring unknown config key {key}")
        for key, why in inert_settings(props):
            _warn_once(f"config key {key} is accepted but has no effect in riverbed: {why}")
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
        self._derive_listeners()
        self._derive_log()
        self.socket_request_max_bytes: int = _int(v["socket.request.max.bytes"])
        self.connections_max_idle_ms: int = _int(v["connections.max.idle.ms"])
        self.num_network_threads: int = _int(v["num.network.threads"])
        self.num_io_threads: int = _int(v["num.io.threads"])
        self.queued_max_requests: int = _int(v["queued.max.requests"])
        self.socket_listen_backlog_size: int = _int(v["socket.listen.backlog.size"])
        self.connection_limits: ConnectionLimits = connection_limits(self)
        self.group_initial_rebalance_delay_ms: int = _int(v["group.initial.rebalance.delay.ms"])
        self.offsets_topic_replication_factor: int = _int(v["offsets.topic.replication.factor"])
        self.offsets_topic_num_partitions: int = _int(v["offsets.topic.num.partitions"])
        for isr_problem in internal_topic_isr_problems(v):
            _warn_once(isr_problem)
        self.controller_quorum_voters: str = ",".join(_list(v["controller.quorum.voters"]))
        self.quorum_voters: dict[int, tuple[str, int]] = self._parse_voters(
            _list(v["controller.quorum.voters"])
        )
        problem = controller_listener_problem(
            self.process_roles,
            self.controller_listener_names,
            [lst.name for lst in self.listeners],
            bool(self.quorum_voters),
        )
        if problem is not None:
            raise ConfigError(*problem)
        self.auto_format: bool = bool(v["riverbed.storage.auto.format"])
        self.broker_rack: str | None = v["broker.rack"]  # type: ignore[assignment]
        self.http_listeners: tuple[str, ...] = tuple(_list(v["riverbed.http.listeners"]))
        self.http_console: bool = bool(v["riverbed.http.console.enable"])
        try:
            self.logger_levels: dict[str, int] = logger_levels(self.originals)
        except LogLevelError as exc:
            raise ConfigError(exc.key, str(exc)) from None
        self.log_json: bool = v["riverbed.log.format"] == "json"

    def _derive_listeners(self) -> None:
        v = self._values
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
            # Kafka's effectiveAdvertisedBrokerListeners: a controller listener named here
            # is the controllers' business (KIP-853), never a broker endpoint
            self.advertised_listeners = tuple(
                lst
                for lst in self._parse_listeners(
                    "advertised.listeners", _list(v["advertised.listeners"]), protocol_map
                )
                if lst.name not in self.controller_listener_names
            )
            for lst in self.advertised_listeners:
                if lst.host in ("0.0.0.0", "::"):
                    raise ConfigError(
                        "advertised.listeners",
                        f"advertised.listeners cannot use the nonroutable meta-address {lst.host}",
                    )
        ibl = v["inter.broker.listener.name"]
        if ibl is not None and "security.inter.broker.protocol" in self.originals:
            raise ConfigError(
                "inter.broker.listener.name",
                "Only one of inter.broker.listener.name and security.inter.broker.protocol "
                "should be set.",
            )
        if ibl is None:
            # Kafka (getInterBrokerListenerNameAndSecurityProtocol): the listener named after
            # security.inter.broker.protocol (default PLAINTEXT), not another listener of
            # that protocol; `_check_listeners` refuses a node that has none so named
            ibl = str(v["security.inter.broker.protocol"])
        self.inter_broker_listener_name: str = str(ibl)
        self._check_listeners(protocol_map)

    def _check_listeners(self, protocol_map: Mapping[str, str]) -> None:
        """Kafka's cross-checks of the listener configs (`riverbed.server.config_listeners`)."""
        names = [lst.name for lst in self.listeners]
        problems: list[tuple[str, str] | None] = []
        if "broker" in self.process_roles:
            explicit = "security.inter.broker.protocol" in self.originals
            problems += [
                advertised_problem(self.advertised_listeners, names),
                inter_broker_problem(
                    self.inter_broker_listener_name,
                    str(self._values["security.inter.broker.protocol"]) if explicit else None,
                    self.advertised_listeners,
                    {*protocol_map, *names},
                    self._values["inter.broker.listener.name"] is not None,
                ),
            ]
        problems.append(
            authentication_delay_problem(
                _int(self._values["connection.failed.authentication.delay.ms"]),
                _int(self._values["connections.max.idle.ms"]),
            )
        )
        for problem in problems:
            if problem is not None:
                raise ConfigError(*problem)

    def _derive_log(self) -> None:
        v = self._values
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
        self.log_flush_interval_messages: int = _int(v["log.flush.interval.messages"])
        fim = v["log.flush.interval.ms"]
        self.log_flush_interval_ms: int | None = _int(fim) if fim is not None else None
        self.log_flush_scheduler_interval_ms: int = _int(v["log.flush.scheduler.interval.ms"])

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
        if not voters and "controller" not in self.process_roles:
            # Kafka's check: a broker-only node must be told where the controllers are.
            raise ConfigError(
                key,
                f"{key} must name the controller quorum (id@host:port,...) when "
                "process.roles does not contain controller",
            )
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
                controllers = ",".join(self.controller_listener_names) or "(empty)"
                raise ConfigError(
                    key,
                    f"{key}: listener {name} has no security protocol in "
                    "listener.security.protocol.map (nor is it a controller listener: "
                    f"controller.listener.names={controllers})",
                )
            if proto not in SUPPORTED_SECURITY_PROTOCOLS:
                raise ConfigError(
                    key,
                    f"{key}: security protocol {proto} of listener {name} is not supported by riverbed",
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

    def get_int(self, key: str) -> int:
        """An INT/LONG key's value (TypeError for a key of another type: a bug)."""
        value = self.get(key)
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"config key {key} is not an integer: {value!r}")
        return value

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
        """DescribeConfigs rows for this broker's static config (every known key, sorted)."""
        return describe_broker_config(self.static_config())

    def controller_config(self) -> ControllerConfig:
        return ControllerConfig(
            node_id=self.node_id,
            num_partitions=self.num_partitions,
            default_replication_factor=self.default_replication_factor,
            static_broker_config=self.static_config(),
            broker_config_entries=tuple(self.describe()),
            delete_topic_enable=bool(self.get("delete.topic.enable")),
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


def connection_limits(cfg: ServerConfig) -> ConnectionLimits:
    """max.connections, max.connections.per.ip(.overrides) and
    listener.name.<listener>.max.connections, validated as Kafka does."""
    per_ip = _int(cfg.get("max.connections.per.ip"))
    key = "max.connections.per.ip.overrides"
    overrides: dict[str, int] = {}
    for item in str(cfg.get(key) or "").split(","):
        if not item.strip():
            continue
        host, sep, count_text = item.strip().rpartition(":")
        host = host.strip().strip("[]")
        try:
            count = int(count_text.strip())
        except ValueError:
            count = -1
        if not sep or not host or count < 0:
            raise ConfigError(
                key, f"{key} entry {item.strip()!r} must be host:count with a count >= 0"
            )
        for address in _resolve(key, host):
            overrides[address] = count
    if per_ip == 0 and not overrides:
        raise ConfigError(
            "max.connections.per.ip",
            "max.connections.per.ip can be set to zero only if "
            "max.connections.per.ip.overrides is set",
        )
    listener_max: dict[str, int] = {}
    names = {lst.name.lower(): lst.name for lst in cfg.listeners}
    for prop, raw in cfg.originals.items():
        match = _LISTENER_MAX_RE.match(prop)
        if match is None:
            continue
        try:
            value = int(str(raw).strip())
        except ValueError:
            value = -1
        if value < 0:
            raise ConfigError(prop, f"{prop}={raw!r} must be an integer >= 0")
        if match[1] not in names:
            raise ConfigError(prop, f"{prop}: there is no listener {match[1].upper()}")
        listener_max[names[match[1]]] = value
    return ConnectionLimits(
        max_connections=_int(cfg.get("max.connections")),
        max_connections_per_ip=per_ip,
        per_ip_overrides=overrides,
        listener_max_connections=listener_max,
        inter_broker_listener=cfg.inter_broker_listener_name,
    )


def _resolve(key: str, host: str) -> list[str]:
    """The addresses of ``host`` (Kafka: InetAddress.getByName), spelled as peers are."""
    try:
        return [normalize_ip(str(ipaddress.ip_address(host)))]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise ConfigError(key, f"{key}: cannot resolve host {host!r}: {exc}") from None
    return list(dict.fromkeys(normalize_ip(str(info[4][0])) for info in infos))


def _is_listener_security_key(key: str) -> bool:
    """``listener.name.<listener>.<security key>`` (and ``...<mechanism>.sasl.jaas.config``,
    ``...<mechanism>.connections.max.reauth.ms``): read by `riverbed.server.listener_security`."""
    if not key.startswith("listener.name."):
        return False
    rest = key[len("listener.name.") :].partition(".")[2]
    return rest.startswith(("ssl.", "sasl.", "connections.max.reauth.ms")) or rest.endswith(
        (".sasl.jaas.config", ".sasl.server.callback.handler.class", ".connections.max.reauth.ms")
    )


def internal_topic_isr_problems(values: Mapping[str, object]) -> list[str]:
    """The internal topics whose replication factor is below the in-sync replicas their
    writes need: every write to them is refused with NOT_ENOUGH_REPLICAS, so every
    consumer group (``__consumer_offsets``, under ``min.insync.replicas``) or every
    transactional producer (``__transaction_state``, under
    ``transaction.state.log.min.isr``) fails, its clients seeing COORDINATOR_NOT_AVAILABLE
    and retrying without end. Kafka starts with these silently; riverbed starts too (a
    topic-level ``min.insync.replicas`` may fix it) and says so."""
    pairs = (
        ("offsets.topic.replication.factor", "min.insync.replicas", "consumer group"),
        (
            "transaction.state.log.replication.factor",
            "transaction.state.log.min.isr",
            "transactional producer",
        ),
    )
    problems = []
    for rf_key, isr_key, clients in pairs:
        rf, isr = _int(values[rf_key]), _int(values[isr_key])
        if rf < isr:
            problems.append(
                f"{rf_key}={rf} is below {isr_key}={isr}: every {clients} write to the "
                f"internal topic will be refused (NOT_ENOUGH_REPLICAS; clients see "
                f"COORDINATOR_NOT_AVAILABLE); raise {rf_key} or lower {isr_key}"
            )
    return problems


def _int(value: object) -> int:
    assert isinstance(value, int) and not isinstance(value, bool), value
    return value


def _list(value: object) -> list[str]:
    assert isinstance(value, list), value
    return value


__all__ = [
    "BROKER_CONFIGS",
    "BROKER_SYNONYMS",
    "CONFIG_DEFS",
    "DYNAMIC_BROKER_CONFIGS",
    "ConfigError",
    "Listener",
    "ServerConfig",
    "parse_override",
    "parse_properties",
    "read_properties_file",
]
