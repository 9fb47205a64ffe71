"""A node's metadata writes, one method per Kafka API (CreateTopics, DeleteTopics, ...,
AlterPartition): each runs on the active controller, or is forwarded to it
(`riverbed.server.write_forwarding.WriteForwarding._write`), and a forwarded one returns
once this node's replica of the image shows its result (``settled``), so a client that
changed something through a follower sees the change there next. `MetadataWrites` also runs a
forwarded write on the active controller (`MetadataWrites._run_locally`), under the mutation
quota of the client it acts for (KIP-599; Kafka's ControllerApis applies it for every
broker's clients at once).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TypeVar

from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode
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
    ElectLeadersRequest,
    ElectLeadersResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    Message,
    UpdateFeaturesRequest,
    UpdateFeaturesResponse,
)
from riverbed.security.acl import StandardAcl
from riverbed.server.controller_channel import expect_response
from riverbed.server.forwarding import Origin
from riverbed.server.metadata_service import MetadataService
from riverbed.server.mutation_quota import ControllerMutationQuotas, Run, run_with_quota
from riverbed.server.raft_driver import monotonic_ms

#: Seconds a forwarded request may take (connect + the leader's commit) in one attempt:
#: ``controller.socket.timeout.ms``'s default (the config sets it per node).
FORWARD_TIMEOUT_S = 30.0
ResponseT = TypeVar("ResponseT", bound=Message)


class MetadataWrites(ABC):
    """The metadata write API of a node (`riverbed.server.quorum.QuorumMetadata`)."""

    service: MetadataService
    #: KIP-599's buckets, used while this node is the active controller
    mutation_quotas: ControllerMutationQuotas
    #: ``num.partitions``: what a CreateTopics of -1 partitions costs against the quota
    _default_partitions: int

    @abstractmethod
    def is_active(self) -> bool:
        """Is this node the active controller?"""

    @abstractmethod
    async def _write(
        self,
        api_key: int,
        request: Message,
        response_type: type[ResponseT],
        settled: Callable[[ResponseT], bool] | None = None,
        origin: Origin | None = None,
    ) -> ResponseT:
        """Run ``request`` on the active controller (here, or forwarded)."""

    @abstractmethod
    async def _wait_until(self, settled: Callable[[], bool]) -> None:
        """Until this node's image shows ``settled()`` (bounded)."""

    async def create_topics(
        self, request: CreateTopicsRequest, origin: Origin | None = None
    ) -> CreateTopicsResponse:
        def settled(response: CreateTopicsResponse) -> bool:
            image = self.service.image
            created = [t.name for t in response.topics if t.error_code == 0]
            return all(image.topic(n) is not None for n in created)

        return await self._write(
            ApiKey.CREATE_TOPICS,
            request,
            CreateTopicsResponse,
            None if request.validate_only else settled,
            origin,
        )

    async def auto_create_topic(
        self, name: str, origin: Origin | None = None
    ) -> CreateTopicsResponse:
        """Create ``name`` with the defaults (Metadata's auto-creation) for ``origin``, the
        client whose Metadata asked: under its mutation quota, as Kafka's KRaft broker
        forwards the creation in an Envelope with that client's principal and client id
        at the controller's latest CreateTopics version (strict: a topic over the quota is
        refused THROTTLING_QUOTA_EXCEEDED, and the client, not muted, asks again); a
        forwarded one returns once this replica shows the topic, or after
        ``riverbed.server.write_forwarding.FORWARD_APPLY_WAIT_S``."""
        request = CreateTopicsRequest(
            topics=[
                CreateTopicsRequest.CreatableTopic(
                    name=name, num_partitions=-1, replication_factor=-1
                )
            ],
            timeout_ms=int(FORWARD_TIMEOUT_S * 1000),
        )
        if self.is_active():
            return expect_response(
                await self._run_for(
                    request, origin, lambda _: self.service.auto_create_topic(name)
                ),
                CreateTopicsResponse,
            )
        response = await self.create_topics(request, origin)
        if any(t.error_code == ErrorCode.TOPIC_ALREADY_EXISTS for t in response.topics):
            # another node's Metadata created it a moment ago: this replica may not have
            # applied it yet, and its Metadata answer must wait for it as for one it made
            await self._wait_until(lambda: self.service.image.topic(name) is not None)
        return response

    async def delete_topics(
        self, request: DeleteTopicsRequest, origin: Origin | None = None
    ) -> DeleteTopicsResponse:
        def settled(response: DeleteTopicsResponse) -> bool:
            image = self.service.image
            deleted = [r.name for r in response.responses if r.error_code == 0 and r.name]
            return all(image.topic(n) is None for n in deleted)

        if origin is None and request.topic_names and not request.topics:
            # forwarded at v6+, where the names moved from TopicNames to Topics[].Name (a
            # client's request goes at the client's version)
            request = DeleteTopicsRequest(
                topics=[DeleteTopicsRequest.DeleteTopicState(name=n) for n in request.topic_names],
                topic_names=[],
                timeout_ms=request.timeout_ms,
            )
        R = DeleteTopicsResponse
        return await self._write(ApiKey.DELETE_TOPICS, request, R, settled, origin)

    async def create_partitions(
        self, request: CreatePartitionsRequest, origin: Origin | None = None
    ) -> CreatePartitionsResponse:
        R = CreatePartitionsResponse
        if request.validate_only:
            return await self._write(ApiKey.CREATE_PARTITIONS, request, R, None, origin)
        counts = {t.name: t.count for t in request.topics}

        def settled(response: CreatePartitionsResponse) -> bool:
            image = self.service.image
            for result in response.results:
                topic = image.topic(result.name) if result.error_code == 0 else None
                if result.error_code == 0 and (
                    topic is None or len(topic.partitions) < counts.get(result.name, 0)
                ):
                    return False
            return True

        return await self._write(ApiKey.CREATE_PARTITIONS, request, R, settled, origin)

    async def alter_configs(
        self, request: AlterConfigsRequest, origin: Origin | None = None
    ) -> AlterConfigsResponse:
        return await self._write(ApiKey.ALTER_CONFIGS, request, AlterConfigsResponse, None, origin)

    async def incremental_alter_configs(
        self, request: IncrementalAlterConfigsRequest, origin: Origin | None = None
    ) -> IncrementalAlterConfigsResponse:
        R = IncrementalAlterConfigsResponse
        return await self._write(ApiKey.INCREMENTAL_ALTER_CONFIGS, request, R, None, origin)

    async def alter_partition_reassignments(
        self, request: AlterPartitionReassignmentsRequest, origin: Origin | None = None
    ) -> AlterPartitionReassignmentsResponse:
        """Through the controller's reassignment logic; a forwarded answer returns once this
        node's image shows every accepted target (or cancellation)."""
        targets = {
            (t.name, p.partition_index): p.replicas for t in request.topics for p in t.partitions
        }

        def settled(response: AlterPartitionReassignmentsResponse) -> bool:
            image = self.service.image
            for t in response.responses:
                topic = image.topic(t.name)
                for p in t.partitions:
                    part = topic.partitions.get(p.partition_index) if topic else None
                    target = targets.get((t.name, p.partition_index))
                    if p.error_code != 0 or part is None:
                        continue
                    if target is None:
                        if part.adding_replicas or part.removing_replicas:
                            return False
                    elif tuple(part.replicas[: len(target)]) != tuple(target):
                        return False
            return True

        R = AlterPartitionReassignmentsResponse
        return await self._write(ApiKey.ALTER_PARTITION_REASSIGNMENTS, request, R, settled, origin)

    async def allocate_producer_ids(
        self, request: AllocateProducerIdsRequest
    ) -> AllocateProducerIdsResponse:
        """A block of producer ids for this broker (AllocateProducerIds, forwarded)."""
        R = AllocateProducerIdsResponse
        return await self._write(ApiKey.ALLOCATE_PRODUCER_IDS, request, R)

    async def elect_leaders(
        self, request: ElectLeadersRequest, origin: Origin | None = None
    ) -> ElectLeadersResponse:
        """ElectLeaders on the active controller; a forwarded one returns once this node's
        image shows every election it reports as done (a new leader epoch)."""
        image = self.service.image
        epochs = {
            (topic.name, index): part.leader_epoch
            for topic in image.topics_by_id.values()
            for index, part in topic.partitions.items()
        }

        def settled(response: ElectLeadersResponse) -> bool:
            now = self.service.image
            for result in response.replica_election_results:
                for p in result.partition_result:
                    part = now.partition(result.topic, p.partition_id)
                    before = epochs.get((result.topic, p.partition_id), -1)
                    if p.error_code == 0 and (part is None or part.leader_epoch <= before):
                        return False
            return True

        R = ElectLeadersResponse
        return await self._write(ApiKey.ELECT_LEADERS, request, R, settled, origin)

    async def alter_user_scram_credentials(
        self, request: AlterUserScramCredentialsRequest, origin: Origin | None = None
    ) -> AlterUserScramCredentialsResponse:
        """SCRAM credentials changed on the active controller; a forwarded change returns
        once this node's image shows it (a client authenticates here next)."""
        from riverbed.metadata.scram_control import upsertion_record

        def settled(response: AlterUserScramCredentialsResponse) -> bool:
            ok = {r.user for r in response.results if r.error_code == 0}
            creds = self.service.image.scram_credentials
            for item in request.upsertions:
                rec = upsertion_record(item)
                have = creds.get((item.name, item.mechanism))
                if item.name in ok and (have is None or have.stored_key != rec.stored_key):
                    return False
            return all(
                (d.name, d.mechanism) not in creds for d in request.deletions if d.name in ok
            )

        R = AlterUserScramCredentialsResponse
        return await self._write(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, request, R, settled, origin)

    async def alter_client_quotas(
        self, request: AlterClientQuotasRequest, origin: Origin | None = None
    ) -> AlterClientQuotasResponse:
        """Quotas changed on the active controller; a forwarded change returns once this
        node's image shows every accepted entry (the next request here is measured by it)."""
        R = AlterClientQuotasResponse
        if request.validate_only:
            return await self._write(ApiKey.ALTER_CLIENT_QUOTAS, request, R, None, origin)

        def settled(response: AlterClientQuotasResponse) -> bool:
            quotas = self.service.image.client_quotas
            for entry, result in zip(request.entries, response.entries, strict=False):
                if result.error_code != 0:
                    continue
                entity = tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity))
                have = quotas.get(entity, {})
                for op in entry.ops:
                    if have.get(op.key) != (None if op.remove else op.value):
                        return False
            return True

        return await self._write(ApiKey.ALTER_CLIENT_QUOTAS, request, R, settled, origin)

    async def create_acls(
        self, request: CreateAclsRequest, origin: Origin | None = None
    ) -> CreateAclsResponse:
        """New ACLs on the active controller; a forwarded request returns once this node's
        image holds every ACL created (the next request here is authorized with them)."""
        from riverbed.metadata.acl_control import acl_of_creation

        def settled(response: CreateAclsResponse) -> bool:
            have = set(self.service.image.acls.values())
            return all(
                acl_of_creation(c) in have
                for c, r in zip(request.creations, response.results, strict=False)
                if r.error_code == 0
            )

        return await self._write(ApiKey.CREATE_ACLS, request, CreateAclsResponse, settled, origin)

    async def delete_acls(
        self, request: DeleteAclsRequest, origin: Origin | None = None
    ) -> DeleteAclsResponse:
        """ACLs deleted on the active controller; a forwarded request returns once this
        node's image no longer holds the ACLs the filters matched."""

        def settled(response: DeleteAclsResponse) -> bool:
            have = set(self.service.image.acls.values())
            return not any(
                _matched_acl(m) in have for r in response.filter_results for m in r.matching_acls
            )

        return await self._write(ApiKey.DELETE_ACLS, request, DeleteAclsResponse, settled, origin)

    async def update_features(
        self, request: UpdateFeaturesRequest, origin: Origin | None = None
    ) -> UpdateFeaturesResponse:
        """Finalized feature levels on the active controller; a forwarded answer returns
        once this node's image has the levels it accepted."""
        wanted = {u.feature: u.max_version_level for u in request.feature_updates}

        def settled(response: UpdateFeaturesResponse) -> bool:
            if response.error_code or request.validate_only:
                return True
            have = self.service.image.features
            return all(have.get(f, 0) == level for f, level in wanted.items())

        R = UpdateFeaturesResponse
        return await self._write(ApiKey.UPDATE_FEATURES, request, R, settled, origin)

    async def alter_partition(self, request: AlterPartitionRequest) -> AlterPartitionResponse:
        """A partition leader's ISR change (Kafka's AlterPartition), on the active
        controller; the caller learns the outcome from the response (its epochs)."""
        return await self._write(ApiKey.ALTER_PARTITION, request, AlterPartitionResponse)

    async def _run_for(
        self, request: Message, origin: Origin | None, run: Run | None = None
    ) -> Message:
        """``run`` (`_run_locally` by default), under the mutation quota of ``origin``
        (Kafka's ControllerApis: the active controller enforces it, for every broker's
        clients at once)."""
        run = run if run is not None else self._run_locally
        image = self.service.image
        quota = None
        if origin is not None:
            who = (origin.principal.name, origin.client_id, origin.api_version)
            quota = self.mutation_quotas.quota_for(image, request, *who)
        if quota is None:
            return await run(request)
        assert isinstance(
            request, CreateTopicsRequest | DeleteTopicsRequest | CreatePartitionsRequest
        )
        return await run_with_quota(
            quota, image, request, run, self._default_partitions, monotonic_ms
        )

    async def _run_locally(self, request: Message) -> Message:
        """One of `FORWARDED_APIS` on this node, the active controller."""
        s = self.service
        match request:
            case CreateTopicsRequest():
                return await s.create_topics(request)
            case DeleteTopicsRequest():
                return await s.delete_topics(request)
            case CreatePartitionsRequest():
                return await s.create_partitions(request)
            case AlterConfigsRequest():
                return await s.alter_configs(request)
            case IncrementalAlterConfigsRequest():
                return await s.incremental_alter_configs(request)
            case AllocateProducerIdsRequest():
                return await s.allocate_producer_ids(request)
            case AlterPartitionReassignmentsRequest():
                return await s.alter_partition_reassignments(request)
            case ElectLeadersRequest():
                return await s.elect_leaders(request)
            case AlterPartitionRequest():
                return await s.alter_partition(request)
            case AlterUserScramCredentialsRequest():
                return await s.alter_user_scram_credentials(request)
            case AlterClientQuotasRequest():
                return await s.alter_client_quotas(request)
            case CreateAclsRequest():
                return await s.create_acls(request)
            case DeleteAclsRequest():
                return await s.delete_acls(request)
            case UpdateFeaturesRequest():
                return await s.update_features(request)
        raise TypeError(f"{type(request).__name__} is not a forwarded metadata write")


def _matched_acl(m: DeleteAclsResponse.DeleteAclsMatchingAcl) -> StandardAcl:
    return StandardAcl(
        m.resource_type,
        m.resource_name,
        m.pattern_type,
        m.principal,
        m.host,
        m.operation,
        m.permission_type,
    )
