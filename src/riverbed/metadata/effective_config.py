"""The configuration a partition of a topic runs with on one broker, resolved in one place.

Kafka's precedence, most specific first (``DescribeConfigs``' sources):

1. the topic's dynamic override (DYNAMIC_TOPIC_CONFIG, a ConfigRecord for the TOPIC);
2. this broker's dynamic config (DYNAMIC_BROKER_CONFIG, resource BROKER "<id>");
3. the cluster's dynamic default (DYNAMIC_DEFAULT_BROKER_CONFIG, resource BROKER "");
4. server.properties (STATIC_BROKER_CONFIG);
5. the default (DEFAULT_CONFIG).

Topic keys reach layers 2-4 through their broker synonyms (``min.insync.replicas``,
``log.retention.ms`` for ``retention.ms``, ...: ``riverbed.metadata.topic_configs``);
broker keys without a topic key (``replica.lag.time.max.ms``) take layers 2-5 alone.
Storage's ``LogConfig`` and the replication core's ``ReplicaConfig`` are both built from
``partition_config`` of the current image, and the broker re-reads it for every hosted
partition on every metadata update, so a dynamic change binds at once (Kafka's
``DynamicConfigPublisher`` -> ``Partition.updateConfig``/``LogManager.updateTopicConfig``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Generic, TypeVar

from riverbed.metadata.broker_configs import broker_config_layers
from riverbed.metadata.topic_configs import topic_config_for

if TYPE_CHECKING:
    from riverbed.metadata.image import MetadataImage

__all__ = ["PerTopicConfigs", "broker_config", "partition_config", "topic_config_for"]

T = TypeVar("T")


def broker_config(
    image: MetadataImage, node_id: int, static_broker_config: Mapping[str, str]
) -> dict[str, str]:
    """Broker ``node_id``'s keys that are set in layers 2-4 (defaults left to the reader)."""
    values, _sources = broker_config_layers(
        static_broker_config, image.broker_config(""), image.broker_config(node_id)
    )
    return values


def partition_config(
    image: MetadataImage, topic: str, node_id: int, static_broker_config: Mapping[str, str]
) -> dict[str, str]:
    """Every key a partition of ``topic`` on broker ``node_id`` uses: the broker's keys with
    the topic's effective keys (every topic key, resolved through all five layers) over
    them."""
    return {
        **broker_config(image, node_id, static_broker_config),
        **topic_config_for(image, topic, node_id, static_broker_config),
    }


class PerTopicConfigs(Generic[T]):
    """A value computed from each topic's config (a ``LogConfig``, a ``ReplicaConfig``),
    once per image configs map: a resolution costs ~0.2 ms, and a broker asks for every
    partition on every image. An image without a config change shares its configs map."""

    def __init__(self, compute: Callable[[MetadataImage, str], T]) -> None:
        self._compute = compute
        self._values: dict[str, T] = {}  # bounded by the topics of one configs map
        self._of: object = None

    def get(self, image: MetadataImage, topic: str) -> T:
        if image.configs is not self._of:
            self._values.clear()
            self._of = image.configs
        value = self._values.get(topic)
        if value is None:
            value = self._values[topic] = self._compute(image, topic)
        return value
