"""Metadata records: which versions riverbed writes and how they are framed.

Records are the protocol's generated message classes (`TopicRecord`, `PartitionRecord`,
...; see ../shared/kafka-reference/metadata/).  On disk and on the wire each record is one
value of a record batch in `__cluster_metadata-0`, framed as Kafka does
(`riverbed.protocol.metadata_records`): frame version (uvarint, 1), api key (uvarint),
record version (uvarint), then the record body in that version.
"""

from __future__ import annotations

import enum
import uuid

from riverbed.metadata.config_defs import ConfigSource
from riverbed.protocol.messages import Message
from riverbed.protocol.metadata_records import decode_metadata_record, encode_metadata_record
from riverbed.raft.wire import METADATA_TOPIC_ID
from riverbed.storage.layout import METADATA_PARTITION, METADATA_TOPIC

FRAME_VERSION = 1
ZERO_UUID = uuid.UUID(int=0)
__all__ = [  # re-exported for callers of this module
    "METADATA_PARTITION",
    "METADATA_TOPIC",
    "METADATA_TOPIC_ID",
    "ConfigSource",
]

#: metadata.version riverbed bootstraps with (Kafka 3.9-IV0).
METADATA_VERSION_FEATURE = "metadata.version"
METADATA_VERSION_LEVEL = 21
#: KIP-890's feature: its level is the transaction version (0: TransactionLogValue v0;
#: 1: flexible records; 2: a new producer epoch per transaction). New clusters start at
#: 2, as Kafka 4.x formats them.
TRANSACTION_VERSION_FEATURE = "transaction.version"
TRANSACTION_VERSION_LEVEL = 2

#: The version riverbed writes for each record type (decoding accepts every version).
RECORD_VERSIONS: dict[str, int] = {
    "RegisterBrokerRecord": 3,
    "UnregisterBrokerRecord": 0,
    "TopicRecord": 0,
    "PartitionRecord": 0,
    "ConfigRecord": 0,
    "PartitionChangeRecord": 0,
    "FenceBrokerRecord": 0,
    "UnfenceBrokerRecord": 0,
    "RemoveTopicRecord": 0,
    "FeatureLevelRecord": 0,
    "ProducerIdsRecord": 0,
    "BrokerRegistrationChangeRecord": 1,
    "NoOpRecord": 0,
    "UserScramCredentialRecord": 0,
    "RemoveUserScramCredentialRecord": 0,
    "AccessControlEntryRecord": 0,
    "RemoveAccessControlEntryRecord": 0,
    "ClientQuotaRecord": 0,
}


class ResourceType(enum.IntEnum):
    """Kafka's ConfigResource.Type ids (DescribeConfigs, ConfigRecord)."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32


def encode_record(msg: Message) -> bytes:
    name = type(msg).__name__
    version = RECORD_VERSIONS.get(name)
    if version is None:
        raise ValueError(f"riverbed does not write metadata record {name}")
    return encode_metadata_record(msg, version)


def decode_record(data: bytes) -> Message:
    """Decode one framed record (raises ProtocolError on bad bytes)."""
    return decode_metadata_record(data)[0]
