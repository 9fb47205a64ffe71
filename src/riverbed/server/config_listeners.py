"""Kafka's cross-checks of the listener configs (KafkaConfig.validateValues), run once
`ServerConfig` has parsed ``listeners``, ``advertised.listeners`` and the protocol map.

Each returns the ConfigError to raise (naming the key) or None:

- a controller (``process.roles`` has controller) on a quorum: every name of
  ``controller.listener.names`` is one of ``listeners`` (the other voters connect to it);
  a single node without ``controller.quorum.voters`` may have no controller listener at
  all (the embedded default);
- a broker: ``advertised.listeners`` names only listeners of ``listeners``, and the
  inter-broker listener (``inter.broker.listener.name``, else the listener named after
  ``security.inter.broker.protocol``, default PLAINTEXT) is one of them;
- ``connection.failed.authentication.delay.ms`` below ``connections.max.idle.ms``.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Protocol


class _Listener(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def security_protocol(self) -> str: ...


def controller_listener_problem(
    roles: Collection[str],
    controller_names: Sequence[str],
    listener_names: Sequence[str],
    has_voters: bool,
) -> tuple[str, str] | None:
    """Kafka: controller.listener.names must only contain values appearing in listeners."""
    if "controller" not in roles:
        return None
    if not has_voters and not set(controller_names) & set(listener_names):
        return None  # a standalone node: nobody connects to its controller listener
    key = "controller.listener.names"
    missing = [name for name in controller_names if name not in listener_names]
    if controller_names and not missing:
        return None
    what = f"names {', '.join(missing)}, which" if missing else "is empty, but it"
    return key, (
        f"{key} {what} must only contain values appearing in listeners "
        f"({', '.join(listener_names)}) when running the KRaft controller role"
    )


def advertised_problem(
    advertised: Sequence[_Listener], listener_names: Sequence[str]
) -> tuple[str, str] | None:
    """Kafka: advertised.listeners names a subset of the listeners of ``listeners``."""
    unknown = [lst.name for lst in advertised if lst.name not in listener_names]
    if not unknown:
        return None
    key = "advertised.listeners"
    return key, (
        f"{key} listener names must be equal to or a subset of the ones defined in "
        f"listeners. Found {', '.join(unknown)}. The valid options based on the current "
        f"configuration are {', '.join(listener_names)}"
    )


def inter_broker_problem(
    name: str,
    explicit_protocol: str | None,
    advertised: Sequence[_Listener],
    known: Collection[str],
    explicit_name: bool,
) -> tuple[str, str] | None:
    """Kafka: the inter-broker listener is one of the advertised broker listeners; when
    ``security.inter.broker.protocol`` is set, the one named after it, of that protocol
    (Kafka would take a listener so named but mapped to another protocol, then connect to
    it with the wrong one); ``known``: the listener names of the protocol map and of
    ``listeners``."""
    usable = [
        lst.name
        for lst in advertised
        if explicit_protocol is None or lst.security_protocol == explicit_protocol
    ]
    if name in usable:
        return None
    valid = ", ".join(lst.name for lst in advertised)
    if explicit_protocol is not None:
        key = "security.inter.broker.protocol"
        named = ", ".join(f"{lst.name}:{lst.security_protocol}" for lst in advertised)
        return key, (
            f"{key}={explicit_protocol}: the inter-broker listener is then the listener "
            f"named {explicit_protocol}, of security protocol {explicit_protocol}, and "
            f"advertised.listeners has none (they are {named}); or name the inter-broker "
            "listener in inter.broker.listener.name instead"
        )
    key = "inter.broker.listener.name"
    if explicit_name and name not in known:
        return key, (
            f"Listener with name {name} defined in {key} not found in "
            "listener.security.protocol.map."
        )
    unset = (
        "" if explicit_name else " (unset: the listener named after security.inter.broker.protocol)"
    )
    return key, (
        f"{key}={name}{unset}: {key} must be a listener name defined in advertised.listeners "
        "(a controller listener is not). The valid options based on currently configured "
        f"listeners are {valid}"
    )


def authentication_delay_problem(delay_ms: int, idle_ms: int) -> tuple[str, str] | None:
    """Kafka: a failed authentication's delayed answer must come before the idle close."""
    if idle_ms < 0 or delay_ms < idle_ms:
        return None
    key = "connection.failed.authentication.delay.ms"
    return key, (
        f"{key}={delay_ms} should always be less than connections.max.idle.ms={idle_ms} "
        "to prevent failed authentication responses from timing out"
    )
