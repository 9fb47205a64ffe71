"""The metadata service: the thin asyncio shell around controller logic and the log.

One operation at a time (a lock): take the current image, let the pure `Controller`
compute records + response, `MetadataLog.append` them (returns once committed), replay
them into a new image through `MetadataDelta` (the same path as startup replay), publish
it to listeners, and only then return the response.  A record that fails to replay after
it was committed means the log and the code disagree; the service then refuses further
writes (`MetadataServiceError`) instead of serving a state that diverges from its log.
When the log says a snapshot is due (`metadata.log.max.record.bytes.between.snapshots`),
the current image is written as one (`image_to_records`) after the commit.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import NoReturn, Protocol, cast

from riverbed.metadata.controller import Controller, ControllerResult
from riverbed.metadata.image import (
    BrokerEndpoint,
    BrokerRegistration,
    MetadataDelta,
    MetadataImage,
    iter_image_records,
)
from riverbed.metadata.state_change import decision_slices
from riverbed.protocol.messages import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    AlterConfigsRequest,
    AlterConfigsResponse,
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    AlterPartitionRequest,
    AlterPartitionResponse,
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    CreateAclsRequest,
    CreateAclsResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
    Message,
    UpdateFeaturesRequest,
    UpdateFeaturesResponse,
)
from riverbed.server.metadata_log import MetadataLog
from riverbed.storage.clock import Clock

log = logging.getLogger(__name__)

ImageListener = Callable[[MetadataImage, MetadataImage, MetadataDelta], None]
#: Listeners one service notifies; they are the broker's partition manager and a few views.
LISTENERS_MAX = 64


class ImageHolder(Protocol):
    """What shows a node's current image as an attribute (`MetadataService.mirror_image_to`)."""

    image: MetadataImage


class MetadataServiceError(RuntimeError):
    pass


class MetadataService:
    def __init__(
        self, controller: Controller, metadata_log: MetadataLog, clock: Clock, cluster_id: str = ""
    ) -> None:
        self.controller = controller
        self.log = metadata_log
        self.clock = clock
        self.cluster_id = cluster_id
        #: The current image, replaced whole at each publish (never changed in place; only
        #: `_publish` assigns it). An attribute, not a property: requests read it several
        #: times each, and a property is a Python call per read (`mirror_image_to`).
        self.image: MetadataImage = MetadataImage.EMPTY
        self._mirrors: list[ImageHolder] = []
        self._lock = asyncio.Lock()
        self._listeners: list[ImageListener] = []
        self._failed: str | None = None
        self._changed = asyncio.Event()
        #: records a new log starts with after Controller.bootstrap_records (SCRAM users
        #: of ``storage format --add-scram``: riverbed.metadata.bootstrap_file)
        self.extra_bootstrap: list[Message] = []

    def mirror_image_to(self, holder: ImageHolder) -> None:
        """Keep ``holder.image`` this service's current image: set now and at each
        publish, before any listener runs (a listener reading it sees the new image)."""
        holder.image = self.image
        self._mirrors.append(holder)

    def add_listener(self, listener: ImageListener) -> None:
        """`listener(old, new, delta)` runs after each published image (also at start)."""
        if len(self._listeners) >= LISTENERS_MAX:
            raise MetadataServiceError(f"more than {LISTENERS_MAX} image listeners")
        self._listeners.append(listener)

    def _publish(self, delta: MetadataDelta, offset: int) -> None:
        old = self.image
        new = delta.apply(offset)
        self.image = new
        for holder in self._mirrors:
            holder.image = new
        for listener in self._listeners:
            listener(old, new, delta)
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_for_change(self) -> None:
        await self._changed.wait()

    async def start(self, *, bootstrap: bool = True) -> None:
        """Replay the committed log; with `bootstrap`, write the bootstrap records into an
        empty one (a quorum-backed service passes False and lets its first leader call
        `bootstrap_if_needed`)."""
        delta = MetadataDelta(self.image)
        last = -1
        for offset, record in self.log.read_committed():
            delta.replay(record)
            last = offset
        if last >= 0:
            self._publish(delta, last)
            log.info("metadata replayed up to offset %d", last)
        if bootstrap and self.image.is_empty() and last < 0:
            await self._commit(Controller.bootstrap_records())

    async def bootstrap_if_needed(self) -> bool:
        """Write the bootstrap records unless `metadata.version` is already set."""
        async with self._lock:
            if self.image.metadata_version:
                return False
            await self._commit([*Controller.bootstrap_records(), *self.extra_bootstrap])
            return True

    # ----- records committed elsewhere (a Raft leader's log, seen by followers/brokers)
    def apply_committed(self, batch: Sequence[tuple[int, Message]]) -> None:
        """Replay records committed by the quorum (offset order) and publish the image.

        On every replica, the active controller's included. A record that fails to replay
        latches the service (no further writes or applies: its image would diverge from
        the log) and the exception goes on to the Raft driver, whose fault handler halts
        the node; a restart replays the log from the files."""
        self._check_not_failed()
        if not batch:
            return
        last = self.image.offset
        delta = MetadataDelta(self.image)
        replayed = False
        for offset, record in batch:
            if offset <= last:
                # The active controller already replayed its own records when it committed
                # them; anything else at or below the image's offset is a caller bug.
                continue
            try:
                delta.replay(record)
            except Exception as exc:
                self._fail(f"committed metadata record at offset {offset} failed to replay", exc)
            last = offset
            replayed = True
        if replayed:
            self._publish(delta, last)

    def load_snapshot(self, records: Iterable[Message], end_offset: int) -> None:
        """Replace the image by a snapshot's (every record below `end_offset`); a record
        that fails to replay latches the service as in `apply_committed`."""
        self._check_not_failed()
        delta = MetadataDelta(MetadataImage.EMPTY)
        for record in records:
            try:
                delta.replay(record)
            except Exception as exc:
                self._fail(f"metadata snapshot ending at {end_offset} failed to replay", exc)
        self._publish(delta, end_offset - 1)

    def _check_not_failed(self) -> None:
        if self._failed is not None:
            raise MetadataServiceError(self._failed)

    def _fail(self, what: str, exc: Exception) -> NoReturn:
        self._failed = f"{what}: {type(exc).__name__}: {exc}"
        raise MetadataServiceError(self._failed) from exc

    async def _commit(self, records: Sequence[Message]) -> None:
        if self._failed is not None:
            raise MetadataServiceError(self._failed)
        if not records:
            return
        # the operation's records in one append: one batch in the metadata log, never
        # committed, replicated or published in part
        offset = await self.log.append(records)
        if self.image.offset >= offset:
            return  # a quorum log already applied them through apply_committed
        delta = MetadataDelta(self.image)
        try:
            for record in records:
                delta.replay(record)
        except Exception as exc:
            self._failed = f"committed metadata records failed to replay: {exc}"
            log.error(self._failed)
            raise MetadataServiceError(self._failed) from exc
        self._publish(delta, offset)
        if self.log.snapshot_due():
            await self._snapshot()

    async def _snapshot(self) -> None:
        image = self.image
        try:
            # Lazy over the immutable image: the log encodes it off the event loop.
            await self.log.write_snapshot(iter_image_records(image), image.offset + 1)
        except Exception as exc:
            # The records are committed either way; a missed snapshot only costs replay time.
            log.error("writing a metadata snapshot at offset %d failed: %s", image.offset, exc)

    async def _run(self, op: Callable[[MetadataImage, int], ControllerResult]) -> object:
        async with self._lock:
            before = self.image
            result = op(before, self.clock.now_ms())
            await self._commit(result.records)
            after, node_id = self.image, self.controller.config.node_id
            for _ in decision_slices(node_id, before, after, result.records):
                await asyncio.sleep(0)  # the loop serves others between slices of lines
            return result.response

    # ----- admin operations (responses are protocol messages)
    async def create_topics(self, request: CreateTopicsRequest) -> CreateTopicsResponse:
        c = self.controller
        response = await self._run(lambda img, now: c.create_topics(img, request, now))
        return cast(CreateTopicsResponse, response)

    async def delete_topics(self, request: DeleteTopicsRequest) -> DeleteTopicsResponse:
        c = self.controller
        response = await self._run(lambda img, now: c.delete_topics(img, request, now))
        return cast(DeleteTopicsResponse, response)

    async def create_partitions(self, request: CreatePartitionsRequest) -> CreatePartitionsResponse:
        c = self.controller
        response = await self._run(lambda img, now: c.create_partitions(img, request, now))
        return cast(CreatePartitionsResponse, response)

    async def alter_configs(self, request: AlterConfigsRequest) -> AlterConfigsResponse:
        c = self.controller
        response = await self._run(lambda img, now: c.alter_configs(img, request, now))
        return cast(AlterConfigsResponse, response)

    async def incremental_alter_configs(
        self, request: IncrementalAlterConfigsRequest
    ) -> IncrementalAlterConfigsResponse:
        c = self.controller
        response = await self._run(lambda img, now: c.incremental_alter_configs(img, request, now))
        return cast(IncrementalAlterConfigsResponse, response)

    async def elect_leaders(self, request: ElectLeadersRequest) -> ElectLeadersResponse:
        c = self.controller
        response = await self._run(lambda img, now: c.elect_leaders(img, request, now))
        return cast(ElectLeadersResponse, response)

    async def alter_partition_reassignments(
        self, request: AlterPartitionReassignmentsRequest
    ) -> AlterPartitionReassignmentsResponse:
        c = self.controller
        response = await self._run(
            lambda img, now: c.alter_partition_reassignments(img, request, now)
        )
        return cast(AlterPartitionReassignmentsResponse, response)

    def list_partition_reassignments(
        self, request: ListPartitionReassignmentsRequest
    ) -> ListPartitionReassignmentsResponse:
        return self.controller.list_partition_reassignments(self.image, request)

    async def alter_partition(self, request: AlterPartitionRequest) -> AlterPartitionResponse:
        c = self.controller
        response = await self._run(lambda img, now: c.alter_partition(img, request, now))
        return cast(AlterPartitionResponse, response)

    async def allocate_producer_ids(
        self, request: AllocateProducerIdsRequest
    ) -> AllocateProducerIdsResponse:
        c = self.controller
        response = await self._run(lambda img, now: c.allocate_producer_ids(img, request, now))
        return cast(AllocateProducerIdsResponse, response)

    async def alter_user_scram_credentials(
        self, request: AlterUserScramCredentialsRequest
    ) -> AlterUserScramCredentialsResponse:
        c = self.controller
        response = await self._run(
            lambda img, now: c.alter_user_scram_credentials(img, request, now)
        )
        return cast(AlterUserScramCredentialsResponse, response)

    async def alter_client_quotas(
        self, request: AlterClientQuotasRequest
    ) -> AlterClientQuotasResponse:
        c = self.controller
        response = await self._run(lambda img, now: c.alter_client_quotas(img, request, now))
        return cast(AlterClientQuotasResponse, response)

    async def create_acls(self, request: CreateAclsRequest) -> CreateAclsResponse:
        c = self.controller
        response = await self._run(lambda img, now: c.create_acls(img, request, now))
        return cast(CreateAclsResponse, response)

    async def delete_acls(self, request: DeleteAclsRequest) -> DeleteAclsResponse:
        c = self.controller
        response = await self._run(lambda img, now: c.delete_acls(img, request, now))
        return cast(DeleteAclsResponse, response)

    async def update_features(self, request: UpdateFeaturesRequest) -> UpdateFeaturesResponse:
        c = self.controller
        response = await self._run(lambda img, now: c.update_features(img, request))
        return cast(UpdateFeaturesResponse, response)

    async def fence_broker(self, broker_id: int) -> BrokerRegistration:
        c = self.controller
        response = await self._run(lambda img, now: c.fence_broker(img, broker_id, now))
        return cast(BrokerRegistration, response)

    async def unfence_broker(
        self, broker_id: int, broker_epoch: int, metadata_offset: int
    ) -> BrokerRegistration:
        """Unfence `broker_id` if its applied metadata (``metadata_offset``) has reached
        its registration; the registration after the change (still fenced if not)."""
        c = self.controller
        response = await self._run(
            lambda img, now: c.unfence_broker(
                img, broker_id, broker_epoch, now, metadata_offset=metadata_offset
            )
        )
        return cast(BrokerRegistration, response)

    async def unregister_broker(self, broker_id: int) -> None:
        """Remove a broker's registration for good (ControllerError when it has none)."""
        c = self.controller
        await self._run(lambda img, now: c.unregister_broker(img, broker_id, now))

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int = -1) -> int:
        """Move leaderships off `broker_id`; returns the partitions it still leads."""
        c = self.controller
        response = await self._run(
            lambda img, now: c.controlled_shutdown(img, broker_id, broker_epoch, now)
        )
        return cast(int, response)

    async def auto_create_topic(
        self,
        name: str,
        *,
        num_partitions: int = -1,
        replication_factor: int = -1,
        configs: dict[str, str] | None = None,
    ) -> CreateTopicsResponse:
        """Create `name` with defaults unless it exists (then the response says so)."""
        return await self._run(  # type: ignore[return-value]
            lambda img, now: self.controller.auto_create_topic(
                img,
                name,
                now,
                num_partitions=num_partitions,
                replication_factor=replication_factor,
                configs=configs,
            )
        )

    async def register_broker(
        self,
        broker_id: int,
        endpoints: Sequence[BrokerEndpoint],
        rack: str | None = None,
        incarnation_id: uuid.UUID | None = None,
        *,
        session_live: bool = False,
        previous_broker_epoch: int = -1,
    ) -> BrokerRegistration:
        """Register a broker, fenced (see `Controller.register_broker`: ControllerError
        DUPLICATE_BROKER_REGISTRATION while ``session_live`` for another incarnation)."""
        inc = incarnation_id or uuid.uuid4()
        return await self._run(  # type: ignore[return-value]
            lambda img, now: self.controller.register_broker(
                img,
                broker_id,
                inc,
                endpoints,
                rack,
                now,
                session_live=session_live,
                previous_broker_epoch=previous_broker_epoch,
            )
        )

    def describe_configs(self, request: DescribeConfigsRequest) -> DescribeConfigsResponse:
        return self.controller.describe_configs(self.image, request)

    def close(self) -> None:
        self.log.close()
