"""``riverbed.replication.log.ReplicaLog`` over a storage ``PartitionLog``.

The partition core reads offsets and leader epochs through it and, on a follower, appends
the leader's batches (bytes from a Fetch response, kept as they are: offsets, epochs and
timestamps are the leader's) and truncates by leader epochs.
"""

from __future__ import annotations

from riverbed.protocol.records import Buffer
from riverbed.storage.epoch_cache import UNDEFINED_EPOCH
from riverbed.storage.log import PartitionLog


class PartitionReplicaLog:
    def __init__(self, plog: PartitionLog) -> None:
        self.plog = plog

    @property
    def log_start_offset(self) -> int:
        return int(self.plog.log_start_offset)

    @property
    def log_end_offset(self) -> int:
        return int(self.plog.log_end_offset)

    def last_record_epoch(self) -> int:
        plog = self.plog
        if plog.log_end_offset <= plog.log_start_offset:
            return UNDEFINED_EPOCH
        return int(plog.epoch_cache.epoch_for_offset(plog.log_end_offset - 1))

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        epoch_found, end = self.plog.end_offset_for_epoch(epoch)
        return int(epoch_found), int(end)

    def assign_epoch(self, epoch: int, start_offset: int) -> None:
        self.plog.epoch_cache.assign(epoch, start_offset)

    def forget_epochs_from(self, offset: int) -> None:
        self.plog.epoch_cache.truncate_from_end(offset)  # under the cache's own lock

    def truncate_to(self, offset: int) -> None:
        self.plog.truncate_to(offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self.plog.truncate_fully_and_start_at(offset)

    def append_as_follower(self, records: Buffer | None) -> None:
        if records:
            self.plog.append_as_follower(records)
