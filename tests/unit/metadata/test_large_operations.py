"""The largest operations the controller accepts fit the metadata log's append queue,
and one that does not is refused with a clear error, not UNKNOWN_SERVER_ERROR.

Found when 100 topics of 100 partitions each (10,000 partitions, the most one CreateTopics
may add, Kafka's MAX_PARTITIONS_PER_BATCH) were created in one request: the controller's
10,100 records were over the Raft leader's append queue of 10,000 and every topic failed
with "Unknown broker error"."""

from __future__ import annotations

from riverbed.metadata.control_common import PARTITIONS_PER_REQUEST_MAX
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import CreateTopicsRequest
from riverbed.raft.config import RaftConfig
from riverbed.raft.node import AppendQueueFullError
from riverbed.server.broker.error_response import error_code_of

from .conftest import cluster_image, make_controller

CT = CreateTopicsRequest

#: configs a user may set on each topic of a large request (a generous handful)
CONFIGS_PER_TOPIC = 3


def _create(topics: int, partitions: int) -> list[object]:
    controller = make_controller()
    image = cluster_image(controller)
    configs = {"retention.ms": "1000", "segment.bytes": "1048576", "cleanup.policy": "delete"}
    request = CT(
        topics=[
            CT.CreatableTopic(
                name=f"t{i}",
                num_partitions=partitions,
                replication_factor=1,
                configs=[CT.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()],
            )
            for i in range(topics)
        ]
    )
    res = controller.create_topics(image, request, now_ms=0)
    assert all(t.error_code == 0 for t in res.response.topics)
    return list(res.records)


def _queue_max() -> int:
    return RaftConfig(voters=frozenset({1})).append_queue_records_max


def test_the_largest_create_topics_fits_the_append_queue() -> None:
    per_topic = PARTITIONS_PER_REQUEST_MAX // 100
    records = _create(100, per_topic)
    assert len(records) == 100 * (1 + CONFIGS_PER_TOPIC) + PARTITIONS_PER_REQUEST_MAX
    assert len(records) <= _queue_max()


def test_as_many_single_partition_topics_as_allowed_fit_the_append_queue() -> None:
    records = _create(PARTITIONS_PER_REQUEST_MAX, 1)
    assert len(records) <= _queue_max()


def test_a_full_append_queue_answers_a_clear_error() -> None:
    alone = AppendQueueFullError(op_records=20, pending_records=0, limit=10)
    behind_others = AppendQueueFullError(op_records=5, pending_records=8, limit=10)
    assert alone.alone_too_large and not behind_others.alone_too_large
    # too large alone: retrying cannot help; behind others: retriable
    assert error_code_of(alone) is ErrorCode.POLICY_VIOLATION
    assert error_code_of(behind_others) is ErrorCode.REQUEST_TIMED_OUT
    assert "append_queue_records_max (10)" in str(alone)
