"""Each listener advertises exactly what it serves, following the specs' ``listeners``.

Kafka's request specs say which listener types serve an API (``"listeners": ["zkBroker",
"broker", "controller"]``); riverbed keeps that field in its generated tables. A broker
(client) listener advertises the handled APIs that list ``broker``; a controller listener
those that list ``controller``. Advertising a controller-only API on a client listener
made clients call it and lose their connection.
"""

from __future__ import annotations

from riverbed.protocol.api_versions import (
    API_LISTENERS,
    BROKER_LISTENER,
    CONTROLLER_LISTENER,
    SUPPORTED_VERSIONS,
    ApiKey,
)
from riverbed.protocol.messages import message_spec, request_class
from riverbed.server.broker.dispatch import BROKER_API_VERSIONS, HANDLERS
from riverbed.server.quorum import CONTROLLER_API_VERSIONS

CONTROLLER_ONLY = {
    ApiKey.VOTE,
    ApiKey.BEGIN_QUORUM_EPOCH,
    ApiKey.END_QUORUM_EPOCH,
    ApiKey.ALTER_PARTITION,
    ApiKey.BROKER_REGISTRATION,
    ApiKey.BROKER_HEARTBEAT,
    ApiKey.FETCH_SNAPSHOT,
    ApiKey.ALLOCATE_PRODUCER_IDS,
}


def test_listeners_come_from_the_generated_spec_tables() -> None:
    assert API_LISTENERS[ApiKey.VOTE] == {"controller"}
    assert API_LISTENERS[ApiKey.PRODUCE] == {"broker"}  # Kafka 4.1's spec
    assert API_LISTENERS[ApiKey.DESCRIBE_QUORUM] == {"broker", "controller"}
    assert message_spec(request_class(ApiKey.UNREGISTER_BROKER)).listeners == {
        "broker",
        "controller",
    }
    assert len(API_LISTENERS) == len(ApiKey)


def test_broker_listener_advertises_no_controller_only_api() -> None:
    advertised = set(BROKER_API_VERSIONS)
    assert not advertised & CONTROLLER_ONLY
    assert all(BROKER_LISTENER in API_LISTENERS[k] for k in advertised)
    # served on broker listeners too, passed on to the quorum
    assert {ApiKey.DESCRIBE_QUORUM, ApiKey.UNREGISTER_BROKER} <= advertised
    assert {ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.METADATA, ApiKey.API_VERSIONS} <= advertised
    # everything a broker handles is something Kafka serves on a broker listener
    assert set(HANDLERS) == advertised
    for key, versions in BROKER_API_VERSIONS.items():
        assert versions == SUPPORTED_VERSIONS[key]


def test_controller_listener_advertises_only_controller_apis() -> None:
    advertised = set(CONTROLLER_API_VERSIONS)
    assert all(CONTROLLER_LISTENER in API_LISTENERS[k] for k in advertised)
    assert {
        ApiKey.API_VERSIONS,
        ApiKey.VOTE,
        ApiKey.BEGIN_QUORUM_EPOCH,
        ApiKey.END_QUORUM_EPOCH,
        ApiKey.DESCRIBE_QUORUM,
        ApiKey.FETCH_SNAPSHOT,
        ApiKey.FETCH,
        ApiKey.BROKER_REGISTRATION,
        ApiKey.BROKER_HEARTBEAT,
        ApiKey.UNREGISTER_BROKER,
        ApiKey.CREATE_TOPICS,
    } <= advertised
    assert not advertised & {ApiKey.PRODUCE, ApiKey.METADATA, ApiKey.LIST_OFFSETS}
