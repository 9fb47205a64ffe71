"""Types shared by the controller's operation modules (no state, no I/O)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from riverbed.metadata.config_defs import ConfigEntry
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import Message

if TYPE_CHECKING:
    from riverbed.metadata.image import MetadataImage, PartitionRegistration, TopicImage

#: Items (topics, resources, partitions) one request may carry; Kafka bounds a user
#: operation by the records one atomic batch may hold (MAX_RECORDS_PER_USER_OP).
REQUEST_ITEMS_MAX = 10_000
#: New partitions one CreateTopics / CreatePartitions request may add (Kafka's
#: MAX_PARTITIONS_PER_BATCH).
PARTITIONS_PER_REQUEST_MAX = 10_000


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    node_id: int
    num_partitions: int = 1
    default_replication_factor: int = 1
    #: server.properties keys explicitly set (STATIC_BROKER_CONFIG source), as strings.
    static_broker_config: Mapping[str, str] = field(default_factory=dict)
    #: DescribeConfigs rows for this broker (from ServerConfig.describe()).
    broker_config_entries: tuple[ConfigEntry, ...] = ()
    delete_topic_enable: bool = True


@dataclass(frozen=True, slots=True)
class ControllerResult:
    records: list[Message]
    response: object


class ControllerError(Exception):
    """One item of a request failed: its error code and Kafka's message."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class ControllerBase:
    """What the operation mixins share: the config (set by Controller.__init__)."""

    config: ControllerConfig


def check_request_items(count: int) -> None:
    """Fail an item of an oversized request (the whole request fails, as in Kafka)."""
    if count > REQUEST_ITEMS_MAX:
        raise ControllerError(
            ErrorCode.POLICY_VIOLATION,
            f"Excessively large number of items per request ({count} > {REQUEST_ITEMS_MAX}).",
        )


def check_partitions_per_request(count: int) -> None:
    """Fail an item of a CreateTopics / CreatePartitions request that adds more than
    ``PARTITIONS_PER_REQUEST_MAX`` partitions in all (Kafka's message)."""
    if count > PARTITIONS_PER_REQUEST_MAX:
        raise ControllerError(
            ErrorCode.POLICY_VIOLATION, "Excessively large number of partitions per request."
        )


def hosted_partition(
    image: MetadataImage, name: str, index: int
) -> tuple[TopicImage, PartitionRegistration]:
    """Topic ``name`` and its partition ``index``; UNKNOWN_TOPIC_OR_PARTITION (Kafka's
    message) when either does not exist."""
    topic = image.topic(name)
    part = topic.partitions.get(index) if topic is not None else None
    if topic is None or part is None:
        raise ControllerError(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            "This server does not host this topic-partition.",
        )
    return topic, part
