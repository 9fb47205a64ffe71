"""Controller logic: admin requests in, metadata records and a response out.

Every operation is a pure function of (image, request, now_ms): it validates the request
the way Kafka's QuorumController does and returns `ControllerResult(records, response)`.
Nothing here changes state; the caller appends `records` to the metadata log and replays
them (see `riverbed.server.metadata_service`).  Within one request, later items see the effect of
earlier ones (two creations of the same name, or of names that collide): CreateTopics keeps
the names and ids its earlier topics took beside the image (`topic_names.TakenTopics`), so
a request of N topics costs O(existing + N).

Requests and responses are the protocol's CreateTopics / DeleteTopics / CreatePartitions /
AlterConfigs / IncrementalAlterConfigs / DescribeConfigs messages; the response fields are
filled for the newest version and the encoder drops what an older version lacks.

Topic operations live in `topic_control` (name rules in `topic_names`), new partitions
(placement, first ISR, CreatePartitions) in `partition_creation`, config operations in
`config_control`, broker and partition leadership/ISR operations in `partition_control`,
reassignments in `reassignment`; `Controller` combines them and registers brokers.

In-sync replicas: a new partition's ISR is every active replica of its assignment
(registered, unfenced, not in controlled shutdown) and its leader the first of them, as in
Kafka, so acks=all works as soon as the topic exists. That is safe because the leader's
high watermark is the least log end over the ISR and it takes a follower's log end as
unknown until that follower fetches: nothing is acknowledged that an ISR member lacks. A
member that never fetches leaves the ISR after ``replica.lag.time.max.ms`` (AlterPartition,
`partition_control`) and joins again once caught up. Every election is from the ISR: when
the ISR's last live member is fenced or shuts down, the partition stays leaderless (-1)
until a member registers again, unless ``unclean.leader.election.enable`` (or an UNCLEAN
ElectLeaders) picks a live replica outside the ISR, accepting the loss of what only the old ISR held.

Broker restarts (`register_broker`, `PartitionControl.unfence_broker`): a new incarnation
is refused while the old one's session lives, starts fenced, and is unfenced once its
heartbeat shows it has applied the metadata up to its registration; after an unclean
shutdown it leaves every ISR, so a log that lost its tail never wins a clean election.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Sequence

from riverbed.metadata.acl_control import AclControl
from riverbed.metadata.client_quota_control import ClientQuotaControl
from riverbed.metadata.config_control import (
    OP_APPEND,
    OP_DELETE,
    OP_SET,
    OP_SUBTRACT,
    ConfigControl,
)
from riverbed.metadata.control_common import (
    ControllerBase,
    ControllerConfig,
    ControllerError,
    ControllerResult,
)
from riverbed.metadata.feature_control import FeatureControl
from riverbed.metadata.image import (
    BrokerEndpoint,
    BrokerRegistration,
    MetadataImage,
    replay_all,
)
from riverbed.metadata.partition_control import PartitionControl
from riverbed.metadata.partition_creation import PartitionCreationControl
from riverbed.metadata.producer_id_control import ProducerIdControl
from riverbed.metadata.reassignment import ReassignmentControl
from riverbed.metadata.records import (
    METADATA_VERSION_FEATURE,
    METADATA_VERSION_LEVEL,
    TRANSACTION_VERSION_FEATURE,
    TRANSACTION_VERSION_LEVEL,
)
from riverbed.metadata.scram_control import ScramControl
from riverbed.metadata.topic_control import TopicControl
from riverbed.metadata.topic_names import TOPIC_NAME_LENGTH_MAX, topic_name_error
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import FeatureLevelRecord, Message


class Controller(
    TopicControl,
    PartitionCreationControl,
    ConfigControl,
    PartitionControl,
    ReassignmentControl,
    ProducerIdControl,
    ScramControl,
    AclControl,
    ClientQuotaControl,
    FeatureControl,
    ControllerBase,
):
    """Pure controller operations over a MetadataImage (see module docstring)."""

    def __init__(
        self,
        config: ControllerConfig,
        uuid_factory: Callable[[], uuid.UUID] = uuid.uuid4,
        rng: random.Random | None = None,
    ) -> None:
        self.config = config
        self._uuid_factory = uuid_factory
        # draws the start broker and replica shift of new topics (`placement`)
        self._rng = rng if rng is not None else random.Random()

    # ------------------------------------------------------------------ bootstrap
    @staticmethod
    def bootstrap_records() -> list[Message]:
        """The records a new metadata log starts with."""
        return [
            FeatureLevelRecord(name=METADATA_VERSION_FEATURE, feature_level=METADATA_VERSION_LEVEL),
            FeatureLevelRecord(
                name=TRANSACTION_VERSION_FEATURE, feature_level=TRANSACTION_VERSION_LEVEL
            ),
        ]

    def register_broker(
        self,
        image: MetadataImage,
        broker_id: int,
        incarnation_id: uuid.UUID,
        endpoints: Sequence[BrokerEndpoint],
        rack: str | None,
        now_ms: int,
        *,
        session_live: bool = False,
        previous_broker_epoch: int = -1,
    ) -> ControllerResult:
        """Register (or re-register after a restart) a broker, fenced.

        Kafka's ClusterControlManager.registerBroker: a new incarnation while the current
        registration's session is live (``session_live``, the shell's heartbeat clock) is
        refused with DUPLICATE_BROKER_REGISTRATION; the broker retries until the old
        session expires and the controller has fenced it (which takes it out of every ISR
        it is not the last member of), so a restarted process never inherits the old one's
        ISR seats. The registration is fenced: `unfence_broker` lifts that once a
        heartbeat shows the broker has applied the metadata up to this registration.

        An unclean shutdown (``previous_broker_epoch``, BrokerRegistration v3's
        PreviousBrokerEpoch from the clean-shutdown marker, differs from the registered
        epoch: the log may have lost its unflushed tail) takes the broker out of every ISR
        in the same batch, the last seat included (`leave_isrs_after_unclean_shutdown`).
        An old registration still unfenced (its session expired, the fencing not yet
        written) is fenced in the same batch first.

        The new broker epoch is above every epoch this broker had and above the image's
        offset, so a stale incarnation's requests are recognisable.
        """
        del now_ms
        previous = image.brokers.get(broker_id)
        new_incarnation = previous is None or previous.incarnation_id != incarnation_id
        if previous is not None and new_incarnation and session_live and not previous.fenced:
            raise ControllerError(
                ErrorCode.DUPLICATE_BROKER_REGISTRATION,
                f"Another broker is registered with that broker id ({broker_id}).",
            )
        records: list[Message] = []
        if previous is not None and not previous.fenced:
            records += self.fence_broker(image, broker_id, 0).records
        epoch = max(image.offset + 1, previous.broker_epoch + 1 if previous else 0)
        registration = BrokerRegistration(
            broker_id=broker_id,
            incarnation_id=incarnation_id,
            broker_epoch=epoch,
            endpoints=tuple(endpoints),
            rack=rack,
            fenced=True,
        )
        records.append(registration.to_record())
        clean = previous is not None and previous.broker_epoch == previous_broker_epoch
        if new_incarnation and not clean:
            records += self.leave_isrs_after_unclean_shutdown(replay_all(image, records), broker_id)
        response = replay_all(image, records).brokers[broker_id]
        return ControllerResult(records, response)


__all__ = [
    "OP_APPEND",
    "OP_DELETE",
    "OP_SET",
    "OP_SUBTRACT",
    "TOPIC_NAME_LENGTH_MAX",
    "Controller",
    "ControllerConfig",
    "ControllerError",
    "ControllerResult",
    "topic_name_error",
]
