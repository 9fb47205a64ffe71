"""Issue 20: which listener a node uses for inter-broker traffic, as Kafka's
KafkaConfig.getInterBrokerListenerNameAndSecurityProtocol decides it.

``inter.broker.listener.name`` names it; unset, it is the listener *named* after
``security.inter.broker.protocol`` (default PLAINTEXT), not some other listener of that
protocol, and a node without such a listener is refused; setting both keys is refused.
The real-process side (replication over the chosen listener) is
tests/integration/test_security_inter_broker_protocol.py.
"""

from __future__ import annotations

import pytest

from riverbed.server.config import ConfigError, ServerConfig
from riverbed.server.listener_security import INTER_BROKER_MECHANISM, client_security


def _config(listeners: str, protocol_map: str, *extra: str) -> ServerConfig:
    return ServerConfig.load(
        overrides=[
            f"listeners={listeners},CONTROLLER://127.0.0.1:0",
            f"listener.security.protocol.map={protocol_map},CONTROLLER:PLAINTEXT",
            *extra,
        ]
    )


def test_security_inter_broker_protocol_picks_the_listener_so_named() -> None:
    c = _config(
        "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "PLAINTEXT:PLAINTEXT,SSL:SSL",
        "security.inter.broker.protocol=SSL",
    )
    assert c.inter_broker_listener_name == "SSL"
    # the login replica fetchers and marker senders use: TLS, as that listener
    assert client_security(c, c.inter_broker_listener_name, INTER_BROKER_MECHANISM).protocol == (
        "SSL"
    )


def test_a_listener_of_that_protocol_under_another_name_is_not_it() -> None:
    """Kafka takes the listener named SSL; an INTERNAL listener mapped to SSL is not
    chosen in its place (riverbed used to take the first listener of the protocol)."""
    with pytest.raises(ConfigError) as info:
        _config(
            "PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
            "PLAINTEXT:PLAINTEXT,INTERNAL:SSL",
            "security.inter.broker.protocol=SSL",
        )
    assert info.value.key == "security.inter.broker.protocol"
    assert "the listener named SSL" in str(info.value)


def test_unset_means_the_listener_named_plaintext() -> None:
    c = _config(
        "INTERNAL://127.0.0.1:0,PLAINTEXT://127.0.0.1:0", "INTERNAL:PLAINTEXT,PLAINTEXT:PLAINTEXT"
    )
    assert c.inter_broker_listener_name == "PLAINTEXT"  # not the first listener
    # no listener named PLAINTEXT and neither key set: Kafka refuses the node
    with pytest.raises(ConfigError) as info:
        _config("SSL://127.0.0.1:0", "SSL:SSL")
    assert info.value.key == "inter.broker.listener.name"
    assert "must be a listener name defined in advertised.listeners" in str(info.value)
    assert _config("SSL://127.0.0.1:0", "SSL:SSL", "security.inter.broker.protocol=SSL")


def test_both_keys_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"Only one of inter\.broker\.listener\.name and"):
        _config(
            "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
            "PLAINTEXT:PLAINTEXT,SSL:SSL",
            "security.inter.broker.protocol=SSL",
            "inter.broker.listener.name=SSL",
        )
