"""A fresh node's first group and first transactional producer are served at once.

FindCoordinator creates ``__consumer_offsets`` / ``__transaction_state`` and names this
node from the metadata image, so the client's next request can arrive before the node
created the partition's replica or loaded its shard. That request is held until the
coordinator is ready (at most ``coordinator_log.READY_WAIT_MS``) instead of answered
NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS: librdkafka joins a group again only
~3 s after either answer (a fresh cluster's first consumer waited 3.15 s for its first
record, later groups 0.16 s). Each test here is the first of its kind on the module's
node, and asks right after FindCoordinator, as a client does.
"""

from __future__ import annotations

import pytest

from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    Message,
)
from riverbed.testing.cluster import BrokerProcess, scaled_s
from riverbed.testing.secure import wire_request

pytestmark = pytest.mark.integration

_GROUP, _TRANSACTION = 0, 1


def _ask(broker: BrokerProcess, body: Message, version: int) -> Message:
    return wire_request(broker.bootstrap, body, version=version, timeout_s=scaled_s(10))


def _find(broker: BrokerProcess, key_type: int, key: str) -> None:
    found = _ask(broker, FindCoordinatorRequest(key_type=key_type, coordinator_keys=[key]), 4)
    assert isinstance(found, FindCoordinatorResponse)
    ((coordinator,),) = [found.coordinators]
    assert (coordinator.error_code, coordinator.node_id) == (0, broker.node_id)


def test_the_first_join_right_after_find_coordinator_is_answered(broker: BrokerProcess) -> None:
    _find(broker, _GROUP, "first-group")
    join = JoinGroupRequest(
        group_id="first-group",
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
        member_id="",
        protocol_type="consumer",
        protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")],
    )
    answer = _ask(broker, join, 5)
    assert isinstance(answer, JoinGroupResponse)
    # v4+: a new member is first given its id (KIP-394); the coordinator answered it
    assert answer.error_code == ErrorCode.MEMBER_ID_REQUIRED, ErrorCode(answer.error_code).name
    assert answer.member_id


def test_the_first_transactional_producer_gets_its_id_at_once(broker: BrokerProcess) -> None:
    _find(broker, _TRANSACTION, "first-txn")
    init = InitProducerIdRequest(
        transactional_id="first-txn",
        transaction_timeout_ms=60_000,
        producer_id=-1,
        producer_epoch=-1,
    )
    answer = _ask(broker, init, 4)
    assert isinstance(answer, InitProducerIdResponse)
    assert answer.error_code == ErrorCode.NONE, ErrorCode(answer.error_code).name
    assert answer.producer_id >= 0 and answer.producer_epoch == 0
