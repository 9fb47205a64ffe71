"""Names of partition directories in a log dir, and the metadata log's (Kafka's layout).

A partition's directory is ``<topic>-<partition>`` (``orders-3``). The KRaft metadata log
is the partition ``__cluster_metadata-0`` under ``metadata.log.dir``; the storage layer
skips it when it lists partition logs, the Raft layer names it on the wire, the metadata
layer in its records. Named here, in the lowest layer, once.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "METADATA_PARTITION",
    "METADATA_PARTITION_DIR",
    "METADATA_TOPIC",
    "partition_dir_name",
]


def partition_dir_name(topic: str, partition: int) -> str:
    """``my-topic-3`` for partition 3 of ``my-topic``."""
    return f"{topic}-{partition}"


METADATA_TOPIC: Final = "__cluster_metadata"
METADATA_PARTITION: Final = 0
METADATA_PARTITION_DIR: Final = partition_dir_name(METADATA_TOPIC, METADATA_PARTITION)
