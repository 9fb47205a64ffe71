"""Envelopes (Kafka's EnvelopeRequest, API 58): a client's CreateTopics travels to the
active controller at the client's version with its principal, client id and address; the
controller's answer comes back as the client's response; what cannot be opened is an
envelope error, an error while running is the embedded request's own error response."""

from __future__ import annotations

import asyncio

import pytest

from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.headers import RequestHeader
from riverbed.protocol.messages import (
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    EnvelopeRequest,
    EnvelopeResponse,
    Message,
    MetadataRequest,
)
from riverbed.raft.node import NotLeaderError
from riverbed.security.principal import KafkaPrincipal
from riverbed.server.forwarding import (
    EnvelopeError,
    Origin,
    host_bytes,
    principal_bytes,
    serve_envelope,
    unwrap_response,
    wrap_request,
)

ALICE = KafkaPrincipal.user("alice")
Topic = CreateTopicsRequest.CreatableTopic


def _create(name: str = "t") -> CreateTopicsRequest:
    return CreateTopicsRequest(
        topics=[Topic(name=name, num_partitions=3, replication_factor=1)], timeout_ms=1000
    )


def test_the_principal_is_kafkas_version_prefixed_default_principal_data() -> None:
    # int16 version 0, compact strings "User" and "alice", tokenAuthenticated, no tags
    assert principal_bytes(ALICE) == b"\x00\x00" + b"\x05User" + b"\x06alice" + b"\x00\x00"
    assert host_bytes("10.1.2.3:52044") == bytes([10, 1, 2, 3])
    assert host_bytes("::1:9092") == bytes(15) + b"\x01"
    assert host_bytes("localhost:9092") == b""


def test_a_create_topics_travels_at_the_clients_version_and_back() -> None:
    origin = Origin(ALICE, "spread", 5, "10.1.2.3:52044")
    seen: list[tuple[Message, Origin]] = []

    async def run_for(header: RequestHeader, body: Message, who: Origin) -> Message:
        # the embedded header is the client's: the controller authorizes and answers it so
        assert (header.api_key, header.api_version, header.client_id) == (19, 5, "spread")
        seen.append((body, who))
        R = CreateTopicsResponse.CreatableTopicResult
        return CreateTopicsResponse(throttle_time_ms=1234, topics=[R(name="t", error_code=0)])

    envelope = wrap_request(ApiKey.CREATE_TOPICS, _create(), origin)
    answer = asyncio.run(serve_envelope(envelope, run_for))
    [(body, who)] = seen
    assert isinstance(body, CreateTopicsRequest) and [t.name for t in body.topics] == ["t"]
    assert who == Origin(ALICE, "spread", 5, "10.1.2.3")
    response = unwrap_response(ApiKey.CREATE_TOPICS, origin, answer)
    assert isinstance(response, CreateTopicsResponse)
    assert response.throttle_time_ms == 1234
    assert [(t.name, t.error_code) for t in response.topics] == [("t", 0)]


def test_an_old_delete_topics_keeps_its_names() -> None:
    """DeleteTopics v4 names topics in TopicNames (v6 moved them to Topics[].Name)."""
    origin = Origin(ALICE, "legacy", 4)
    seen: list[Message] = []

    async def run_for(header: RequestHeader, body: Message, who: Origin) -> Message:
        seen.append(body)
        return DeleteTopicsResponse()

    request = DeleteTopicsRequest(topic_names=["a", "b"], timeout_ms=1000)
    asyncio.run(serve_envelope(wrap_request(ApiKey.DELETE_TOPICS, request, origin), run_for))
    [body] = seen
    assert isinstance(body, DeleteTopicsRequest) and body.topic_names == ["a", "b"]


def test_an_error_while_running_is_the_embedded_requests_answer() -> None:
    origin = Origin(ALICE, "spread", 7)

    async def not_active(header: RequestHeader, body: Message, who: Origin) -> Message:
        raise NotLeaderError(2, 5)

    envelope = wrap_request(ApiKey.CREATE_TOPICS, _create(), origin)
    answer = asyncio.run(serve_envelope(envelope, not_active))
    assert answer.error_code == 0
    response = unwrap_response(ApiKey.CREATE_TOPICS, origin, answer)
    assert isinstance(response, CreateTopicsResponse)
    assert [(t.name, t.error_code) for t in response.topics] == [
        ("t", int(ErrorCode.NOT_CONTROLLER))
    ]


def _refused(envelope: EnvelopeRequest) -> int:
    async def never(header: RequestHeader, body: Message, who: Origin) -> Message:
        raise AssertionError("an envelope that cannot be opened is not run")

    return asyncio.run(serve_envelope(envelope, never)).error_code


def test_envelopes_that_cannot_be_opened_are_refused() -> None:
    good = wrap_request(ApiKey.CREATE_TOPICS, _create(), Origin(ALICE, "c", 7))
    metadata = wrap_request(ApiKey.METADATA, MetadataRequest(topics=None), Origin(ALICE, "c", 12))
    assert _refused(metadata) == ErrorCode.INVALID_REQUEST
    garbage = EnvelopeRequest(request_data=b"\x00\x13", request_principal=good.request_principal)
    assert _refused(garbage) == ErrorCode.INVALID_REQUEST
    no_principal = EnvelopeRequest(request_data=good.request_data, request_principal=None)
    assert _refused(no_principal) == ErrorCode.PRINCIPAL_DESERIALIZATION_FAILURE
    bad_version = EnvelopeRequest(request_data=good.request_data, request_principal=b"\x00\x07")
    assert _refused(bad_version) == ErrorCode.PRINCIPAL_DESERIALIZATION_FAILURE


def test_an_envelope_error_is_raised_to_the_forwarding_broker() -> None:
    origin = Origin(ALICE, "c", 7)
    refused = EnvelopeResponse(error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED))
    with pytest.raises(EnvelopeError) as err:
        unwrap_response(ApiKey.CREATE_TOPICS, origin, refused)
    assert err.value.code is ErrorCode.CLUSTER_AUTHORIZATION_FAILED
