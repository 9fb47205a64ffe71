"""Raft configuration with Kafka's config names and defaults.

``controller.quorum.voters`` is Kafka's static voter list ``id@host:port,id@host:port``;
``controller.quorum.bootstrap.servers`` (``host:port,...``) is accepted for observers that
discover the leader by fetching. Snapshot triggers: ``controller.snapshot.minimum.records``
(the KIP-630 seed), ``metadata.log.max.record.bytes.between.snapshots`` and
``metadata.log.max.snapshot.interval.ms`` (Kafka's); LBO advancement waits up to
``max.replication.lag.ms`` for slow replicas.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


class RaftConfigError(ValueError):
    """A raft config value is missing or malformed; the message names the key."""


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int


def parse_voters(text: str) -> dict[int, Endpoint]:
    """Parse ``controller.quorum.voters`` (``1@localhost:9093,2@localhost:9094``)."""
    voters: dict[int, Endpoint] = {}
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        node, sep, address = item.partition("@")
        host, colon, port = address.rpartition(":")
        if not sep or not colon or not host:
            raise RaftConfigError(
                f"controller.quorum.voters: {item!r} is not of the form id@host:port"
            )
        try:
            node_id, port_no = int(node), int(port)
        except ValueError:
            raise RaftConfigError(
                f"controller.quorum.voters: {item!r} has a non-numeric id or port"
            ) from None
        if node_id < 0 or not 0 < port_no < 65536:
            raise RaftConfigError(f"controller.quorum.voters: {item!r} id or port out of range")
        if node_id in voters:
            raise RaftConfigError(f"controller.quorum.voters: duplicate voter id {node_id}")
        voters[node_id] = Endpoint(host.strip("[]"), port_no)
    return voters


def parse_bootstrap_servers(text: str) -> list[Endpoint]:
    servers = []
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        host, colon, port = item.rpartition(":")
        if not colon or not host or not port.isdigit():
            raise RaftConfigError(f"controller.quorum.bootstrap.servers: {item!r} is not host:port")
        servers.append(Endpoint(host.strip("[]"), int(port)))
    return servers


@dataclass(frozen=True)
class RaftConfig:
    voters: frozenset[int]
    cluster_id: str = "riverbed"
    election_timeout_ms: int = 1000  # controller.quorum.election.timeout.ms
    fetch_timeout_ms: int = 2000  # controller.quorum.fetch.timeout.ms
    election_backoff_max_ms: int = 1000  # controller.quorum.election.backoff.max.ms
    append_linger_ms: int = 25  # controller.quorum.append.linger.ms
    request_timeout_ms: int = 2000  # controller.quorum.request.timeout.ms
    fetch_max_wait_ms: int = 500  # how long the leader parks an empty fetch
    snapshot_minimum_records: int = 20000  # controller.snapshot.minimum.records
    snapshot_max_bytes_between: int = (
        20 * 1024 * 1024
    )  # metadata.log.max.record.bytes.between.snapshots
    log_segment_bytes: int = 1024 * 1024 * 1024  # metadata.log.segment.bytes
    snapshot_max_interval_ms: int = 3_600_000  # metadata.log.max.snapshot.interval.ms
    max_replication_lag_ms: int = 30_000  # max.replication.lag.ms
    fetch_bytes_max: int = 1024 * 1024  # per Fetch response
    fetch_snapshot_bytes_max: int = 1024 * 1024  # per FetchSnapshot response
    # records waiting for the linger to expire; above the largest operation the controller
    # accepts (CreateTopics of PARTITIONS_PER_REQUEST_MAX partitions in as many topics,
    # with their config records), which is written as one atomic batch
    append_queue_records_max: int = 100_000
    # voter id -> directory id (KIP-853); a replica whose directory id differs from the
    # configured one lost its disk and must never vote again with that id.
    voter_directory_ids: Mapping[int, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.voters:
            raise RaftConfigError("controller.quorum.voters: at least one voter is required")
        for name in (
            "election_timeout_ms",
            "fetch_timeout_ms",
            "request_timeout_ms",
            "fetch_bytes_max",
            "fetch_snapshot_bytes_max",
            "append_queue_records_max",
            "snapshot_minimum_records",
        ):
            if getattr(self, name) <= 0:
                raise RaftConfigError(f"{name} must be positive, got {getattr(self, name)}")
        if self.election_backoff_max_ms < 0 or self.append_linger_ms < 0:
            raise RaftConfigError("backoff and linger must not be negative")

    @property
    def majority(self) -> int:
        return len(self.voters) // 2 + 1

    @classmethod
    def from_properties(
        cls, props: Mapping[str, str], *, voters: frozenset[int] | None = None
    ) -> RaftConfig:
        """Build from Kafka-named properties (strings, as in server.properties).

        ``voters``: the voter ids when ``controller.quorum.voters`` is not set (a single
        combined node is its own one voter, as in Kafka's standalone mode)."""
        voters_text = props.get("controller.quorum.voters", "")
        if voters_text:
            voters = frozenset(parse_voters(voters_text))
        elif voters is None:
            raise RaftConfigError("controller.quorum.voters is required")
        if "controller.quorum.bootstrap.servers" in props:
            parse_bootstrap_servers(props["controller.quorum.bootstrap.servers"])

        def num(key: str, default: int) -> int:
            value = props.get(key)
            if value is None:
                return default
            try:
                return int(value)
            except ValueError:
                raise RaftConfigError(f"{key}: {value!r} is not an integer") from None

        return cls(
            voters=voters,
            cluster_id=props.get("cluster.id", "riverbed"),
            election_timeout_ms=num("controller.quorum.election.timeout.ms", 1000),
            fetch_timeout_ms=num("controller.quorum.fetch.timeout.ms", 2000),
            election_backoff_max_ms=num("controller.quorum.election.backoff.max.ms", 1000),
            append_linger_ms=num("controller.quorum.append.linger.ms", 25),
            request_timeout_ms=num("controller.quorum.request.timeout.ms", 2000),
            snapshot_minimum_records=num("controller.snapshot.minimum.records", 20000),
            snapshot_max_bytes_between=num(
                "metadata.log.max.record.bytes.between.snapshots", 20 * 1024 * 1024
            ),
            snapshot_max_interval_ms=num("metadata.log.max.snapshot.interval.ms", 3_600_000),
            log_segment_bytes=num("metadata.log.segment.bytes", 1024 * 1024 * 1024),
            max_replication_lag_ms=num("max.replication.lag.ms", 30_000),
        )
