"""What the topic page asks over riverbed's own wire client, beyond the admin client:
each partition's leader epoch, an ongoing reassignment's adding/removing replicas and each
replica's lag (`riverbed.cli.replica_state`), and the active producers with riverbed's
producer-id ledger counts (DescribeProducers, `riverbed.cli.producers`).

These connect in plaintext (the wire client speaks neither TLS nor SASL): for a cluster
reached through ``security.protocol`` other than PLAINTEXT the page says they are not
shown, and any failure is shown in place of the extra columns, never as an error page
(DescribeProducers is Kafka's own API, so they work against Kafka too).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from riverbed.cli.replica_state import ReplicaState


@dataclass(frozen=True, slots=True)
class TopicExtras:
    replicas: ReplicaState = field(default_factory=ReplicaState)
    #: one row per partition: {"partition", "producers": [...], "ledger": {...} | None}
    producers: tuple[dict[str, Any], ...] = ()
    error: str | None = None


def plaintext(conf: dict[str, Any]) -> bool:
    return str(conf.get("security.protocol", "PLAINTEXT")).upper() == "PLAINTEXT"


def topic_extras(bootstrap: str, conf: dict[str, Any], topic: str) -> TopicExtras:
    """Blocking: run it on the console's pool."""
    from riverbed.cli.common import CliError
    from riverbed.cli.producers import describe
    from riverbed.cli.replica_state import replica_state
    from riverbed.cli.wire import WireError

    if not plaintext(conf):
        return TopicExtras(error="not shown over TLS/SASL (riverbed's wire client is plaintext)")
    try:
        replicas = replica_state(bootstrap, [topic])
        producers = tuple(describe(bootstrap, topic, None))
    except (CliError, WireError, OSError) as exc:
        return TopicExtras(error=f"not shown: {exc}")
    return TopicExtras(replicas, producers)
