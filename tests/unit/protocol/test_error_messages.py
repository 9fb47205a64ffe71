"""Default error messages are Kafka 4.x's (``Errors.java``'s default exception messages,
which Kafka puts in a response's error_message and clients print), copied here by hand
so that a drift in ``riverbed.protocol.error_table`` shows."""

from __future__ import annotations

import pytest

from riverbed.protocol.errors import ErrorCode

#: Kafka 4.x's org.apache.kafka.common.protocol.Errors, verbatim
KAFKA_MESSAGES = {
    ErrorCode.OFFSET_OUT_OF_RANGE: (
        "The requested offset is not within the range of offsets maintained by the server."
    ),
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "This server does not host this topic-partition.",
    ErrorCode.INVALID_FETCH_SIZE: "The requested fetch size is invalid.",
    ErrorCode.LEADER_NOT_AVAILABLE: (
        "There is no leader for this topic-partition as we are in the middle of a "
        "leadership election."
    ),
    ErrorCode.REQUEST_TIMED_OUT: "The request timed out.",
    ErrorCode.BROKER_NOT_AVAILABLE: "The broker is not available.",
    ErrorCode.MESSAGE_TOO_LARGE: (
        "The request included a message larger than the max message size the server will accept."
    ),
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: (
        "The coordinator is loading and hence can't process requests."
    ),
    ErrorCode.NOT_COORDINATOR: "This is not the correct coordinator.",
    ErrorCode.INVALID_TOPIC_EXCEPTION: (
        "The request attempted to perform an operation on an invalid topic."
    ),
    ErrorCode.NOT_ENOUGH_REPLICAS: (
        "Messages are rejected since there are fewer in-sync replicas than required."
    ),
    ErrorCode.ILLEGAL_GENERATION: "Specified group generation id is not valid.",
    ErrorCode.UNKNOWN_MEMBER_ID: "The coordinator is not aware of this member.",
    ErrorCode.INVALID_SESSION_TIMEOUT: (
        "The session timeout is not within the range allowed by the broker (as configured "
        "by group.min.session.timeout.ms and group.max.session.timeout.ms)."
    ),
    ErrorCode.REBALANCE_IN_PROGRESS: "The group is rebalancing, so a rejoin is needed.",
    ErrorCode.INVALID_PARTITIONS: "Number of partitions is below 1.",
    ErrorCode.INVALID_REPLICATION_FACTOR: (
        "Replication factor is below 1 or larger than the number of available brokers."
    ),
    ErrorCode.INVALID_REPLICA_ASSIGNMENT: "Replica assignment is invalid.",
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: "Topic authorization failed.",
    ErrorCode.UNSUPPORTED_VERSION: "The version of API is not supported.",
}


@pytest.mark.parametrize("code", list(KAFKA_MESSAGES), ids=lambda c: c.name)
def test_default_message_is_kafkas(code: ErrorCode) -> None:
    assert code.message == KAFKA_MESSAGES[code]
