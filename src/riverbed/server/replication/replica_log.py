"""``riverbed.replication.log.ReplicaLog`` over a storage ``PartitionLog``.

The partition core reads offsets and leader epochs through it and, on a follower, appends
the leader's batches (bytes from a Fetch response, kept as they are: offsets, epochs and
timestamps are the leader's) and truncates by leader epochs.
"""

from __future__ import annotations

from riverbed.protocol.records import Buffer
from riverbed.storage.log import PartitionLog


class PartitionReplicaLog:
    def __init__(self, plog: PartitionLog) -> None:
        self.plog = plog

    @property
    def log_start_offset(self) -> int:
        return self.plog.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.plog.log_end_offset

    def last_record_epoch(self) -> int:
        return self.plog.last_record_epoch()

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self.plog.end_offset_for_epoch(epoch)

    def assign_epoch(self, epoch: int, start_offset: int) -> None:
        self.plog.assign_epoch_start(epoch, start_offset)

    def forget_epochs_from(self, offset: int) -> None:
        self.plog.forget_epochs_from(offset)

    def truncate_to(self, offset: int) -> None:
        self.plog.truncate_to(offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self.plog.truncate_fully_and_start_at(offset)

    def append_as_follower(self, records: Buffer | None) -> None:
        if records:
            self.plog.append_as_follower(records)
