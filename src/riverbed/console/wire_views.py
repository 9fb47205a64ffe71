"""What the topic page asks over riverbed's own wire client, beyond the admin client:
each partition's leader epoch, an ongoing reassignment's adding/removing replicas and each
replica's lag (`riverbed.cli.replica_state`), and the active producers with riverbed's
producer-id ledger counts (DescribeProducers, `riverbed.cli.producers`).

They connect as the console's admin client does (`run_secured`: its librdkafka settings,
so the signed-in user's SASL login and the trust store), and the cluster shows them what
that principal may describe. Any failure is shown in place of the extra columns, never as
an error page (DescribeProducers is Kafka's own API, so they work against Kafka too).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from riverbed.cli.replica_state import ReplicaState
from riverbed.server.client_login import ClientSecurity

T = TypeVar("T")

#: ListOffsets' "earliest local" timestamp (KIP-405): the local log start offset.
EARLIEST_LOCAL = -4


@dataclass(frozen=True, slots=True)
class TopicExtras:
    replicas: ReplicaState = field(default_factory=ReplicaState)
    #: one row per partition: {"partition", "producers": [...], "ledger": {...} | None}
    producers: tuple[dict[str, Any], ...] = ()
    #: partition -> local log start offset (ListOffsets -4, KIP-405): below it, records
    #: live only in the remote tier (empty when the brokers do not say)
    local_start: dict[int, int] = field(default_factory=dict)
    error: str | None = None


def console_security(conf: Mapping[str, Any]) -> ClientSecurity:
    """How riverbed's wire client reaches the cluster as the admin client configured by
    ``conf`` (librdkafka's names) does; CliError naming what it cannot do."""
    from riverbed.cli.client_security import ClientSecurityError, wire_security
    from riverbed.cli.common import CliError

    try:
        return wire_security({k: str(v) for k, v in conf.items()})
    except ClientSecurityError as exc:
        raise CliError(f"riverbed's wire client cannot connect as configured: {exc}") from None


def run_secured(conf: Mapping[str, Any], fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` with every wire client it opens connecting as ``conf`` says.
    Blocking: run it on the console's pool (each thread has its own security)."""
    from riverbed.cli.wire import secured

    with secured(console_security(conf)):
        return fn(*args)


def topic_extras(bootstrap: str, conf: dict[str, Any], topic: str) -> TopicExtras:
    """Blocking: run it on the console's pool."""
    from riverbed.cli.common import CliError
    from riverbed.cli.producers import describe
    from riverbed.cli.replica_state import replica_state
    from riverbed.cli.wire import WireError

    def extras() -> TopicExtras:
        replicas = replica_state(bootstrap, [topic])
        producers = tuple(describe(bootstrap, topic, None))
        return TopicExtras(replicas, producers, _local_starts(bootstrap, topic, producers))

    try:
        return run_secured(conf, extras)
    except (CliError, WireError, OSError) as exc:
        return TopicExtras(error=f"not shown: {exc}")


def _local_starts(bootstrap: str, topic: str, rows: tuple[dict[str, Any], ...]) -> dict[int, int]:
    from riverbed.cli import group_admin
    from riverbed.cli.common import CliError

    try:
        found = group_admin.list_offsets(
            bootstrap, [(topic, r["partition"]) for r in rows], EARLIEST_LOCAL
        )
    except CliError:  # a broker without KIP-405's -4 (Tansu): no ranges shown
        return {}
    return {p: off for (_t, p), off in found.items() if off >= 0}


@dataclass(frozen=True, slots=True)
class LogDir:
    broker: int
    path: str
    error: str | None
    total_bytes: int
    usable_bytes: int
    #: bytes of the partition replicas in this dir
    size_bytes: int


@dataclass(frozen=True, slots=True)
class DiskUse:
    dirs: tuple[LogDir, ...] = ()
    #: topic -> bytes on disk over all its replicas
    topic_bytes: dict[str, int] = field(default_factory=dict)
    error: str | None = None


def disk_use(bootstrap: str, conf: dict[str, Any]) -> DiskUse:
    """DescribeLogDirs (every topic) to every broker: each log dir's capacity, free space
    and replica bytes, and each topic's bytes on disk. Blocking; a broker that does not
    answer within `BROKER_TIMEOUT_S` is left out and named in ``error``."""
    from riverbed.cli.common import CliError

    try:
        return run_secured(conf, _disk_use, bootstrap)
    except CliError as exc:
        return DiskUse(error=f"not shown: {exc}")


def _disk_use(bootstrap: str) -> DiskUse:
    from riverbed.cli.replica_state import BROKER_TIMEOUT_S
    from riverbed.cli.wire import WireClient, WireError
    from riverbed.protocol.api_versions import ApiKey
    from riverbed.protocol.errors import ErrorCode
    from riverbed.protocol.messages import DescribeLogDirsRequest, MetadataRequest

    try:
        with WireClient(bootstrap) as client:
            md: Any = client.request(ApiKey.METADATA, MetadataRequest(topics=[]))
    except WireError as exc:
        return DiskUse(error=f"not shown: {exc}")
    dirs: list[LogDir] = []
    topic_bytes: dict[str, int] = {}
    missing = []
    for b in sorted(md.brokers, key=lambda b: b.node_id):
        try:
            with WireClient(f"{b.host}:{b.port}", timeout_s=BROKER_TIMEOUT_S) as client:
                reply: Any = client.request(ApiKey.DESCRIBE_LOG_DIRS, DescribeLogDirsRequest(topics=None))  # fmt: skip
        except WireError:
            missing.append(str(b.node_id))
            continue
        for d in reply.results:
            size = 0
            for t in d.topics:
                for p in t.partitions:
                    size += p.partition_size
                    if not p.is_future_key:
                        topic_bytes[t.name] = topic_bytes.get(t.name, 0) + p.partition_size
            error = None if d.error_code == 0 else ErrorCode.of(d.error_code).name
            dirs.append(LogDir(b.node_id, d.log_dir, error, d.total_bytes, d.usable_bytes, size))
    error = f"broker(s) {', '.join(missing)} did not answer DescribeLogDirs" if missing else None
    return DiskUse(tuple(dirs), topic_bytes, error)
