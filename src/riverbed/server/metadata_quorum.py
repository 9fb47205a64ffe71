"""The metadata layer on a Raft quorum: the glue between `riverbed.raft` and the service.

`RaftMetadataLog` implements `MetadataLog` with a `RaftDriver`: each append (one controller
operation's records) is one Raft batch, committed when a majority of voters has it
(`driver.append` returns the last offset then). Commits reach `MetadataStateMachine.apply`
in whole batches, so every image a replica publishes is the replay of whole operations.
`MetadataStateMachine` is the driver's state machine: committed entries (decoded with
`decode_record`; LeaderChange control entries skipped) and snapshots flow into the
`MetadataService` through the same replay path as the local log; the snapshot the Raft node
asks for is `iter_image_values(image)` (the encoded records of `image_to_records(image)`).

The active controller commits through the service (`create_topics`, ...): the records come
back through `apply` before `append` returns, so the service does not replay them twice
(`MetadataService.apply_committed` skips offsets it already has).  The bootstrap records
are written once, by the first leader that finds no `metadata.version`
(`MetadataService.bootstrap_if_needed`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from riverbed.metadata.image import iter_image_values
from riverbed.metadata.records import decode_record, encode_record
from riverbed.protocol.messages import Message
from riverbed.raft.messages import Entry, EntryKind, SnapshotId

if TYPE_CHECKING:
    from riverbed.server.metadata_service import MetadataService
    from riverbed.server.raft_driver import RaftDriver


class MetadataStateMachine:
    """`riverbed.raft.state_machine.StateMachine` over a MetadataService."""

    def __init__(self, service: MetadataService) -> None:
        self.service = service

    def apply(self, entries: tuple[Entry, ...]) -> None:
        batch = [(e.offset, decode_record(e.value)) for e in entries if e.kind is EntryKind.DATA]
        self.service.apply_committed(batch)

    def snapshot_records(self) -> Iterator[bytes]:
        # Taken now, consumed later (maybe on a worker thread): the image is immutable.
        image = self.service.image
        return iter_image_values(image)

    def load_snapshot(self, snapshot_id: SnapshotId, records: list[bytes]) -> None:
        # decoded as replayed: a million decoded records never exist at once
        self.service.load_snapshot((decode_record(v) for v in records), snapshot_id.end_offset)


class RaftMetadataLog:
    """`MetadataLog` on a RaftDriver (replays happen through `MetadataStateMachine`)."""

    def __init__(self, driver: RaftDriver) -> None:
        self.driver = driver

    def read_committed(self) -> Iterator[tuple[int, Message]]:
        # The driver replays the snapshot and the committed log through the state machine.
        return iter(())

    async def append(self, records: Sequence[Message]) -> int:
        """One controller operation = one Raft batch: committed, replicated, delivered to
        every replica's image and truncated as a whole, never half (issue 11).

        Raises `riverbed.raft.node.NotLeaderError` on a replica that is not the leader."""
        return await self.driver.append([encode_record(r) for r in records])

    def snapshot_due(self) -> bool:
        return False  # the Raft node schedules snapshots (CreateSnapshot) itself

    async def write_snapshot(self, records: Iterable[Message], end_offset: int) -> None:
        raise NotImplementedError("snapshots of a Raft log are taken by the Raft node")

    def close(self) -> None:
        """The driver is closed by its owner (`await driver.close()`)."""
