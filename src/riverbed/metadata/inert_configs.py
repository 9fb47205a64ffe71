"""Kafka broker keys riverbed accepts (a Kafka server.properties starts unchanged, and
DescribeConfigs lists them with Kafka's defaults) but whose setting changes nothing here,
each with why. A broker started with one of them set says so in a WARNING line, so that
nobody tunes a knob that is not connected.

Every other key of `riverbed.metadata.broker_configs.CONFIG_DEFS` is read by the code that
does what it says (``tests/unit/metadata/test_inert_configs.py`` checks that each key is
either used or listed here).
"""

from __future__ import annotations

from collections.abc import Mapping

ACCEPTED_WITHOUT_EFFECT: Mapping[str, str] = {
    "controller.quorum.retry.backoff.ms": (
        "the Raft client retries at the quorum's own timers (fetch timeout, election back-off)"
    ),
    "metadata.max.retention.bytes": (
        "the metadata log before the latest snapshot is deleted at once (a lagging replica "
        "fetches the snapshot)"
    ),
    "metadata.max.retention.ms": (
        "the metadata log before the latest snapshot is deleted at once (a lagging replica "
        "fetches the snapshot)"
    ),
    "metadata.max.idle.interval.ms": (
        "the active controller writes no NoOpRecord: a broker's liveness is its heartbeats"
    ),
    "socket.receive.buffer.bytes": "socket buffers are left to the kernel's autotuning",
    "socket.send.buffer.bytes": "socket buffers are left to the kernel's autotuning",
}


def inert_settings(props: Mapping[str, str]) -> list[tuple[str, str]]:
    """The keys of ``props`` riverbed accepts without effect, with why (sorted by key)."""
    return sorted((k, why) for k, why in ACCEPTED_WITHOUT_EFFECT.items() if k in props)
