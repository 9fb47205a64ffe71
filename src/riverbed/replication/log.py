"""What the partition core needs from a replica's local log.

``riverbed.storage.log.PartitionLog`` satisfies it through the shell's adapter; the
simulation uses an in-memory log. Offsets are Kafka's: ``log_end_offset`` is the next
offset to be written; ``last_record_epoch`` is the leader epoch of the last batch in the
log (the follower's LastFetchedEpoch), -1 when the log is empty.
"""

from __future__ import annotations

from typing import Any, Protocol


class ReplicaLog(Protocol):
    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    def last_record_epoch(self) -> int: ...

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (largest epoch <= ``epoch``, its end offset); (-1, -1)
        when unknown (see ``LeaderEpochCache.end_offset_for``)."""
        ...

    def assign_epoch(self, epoch: int, start_offset: int) -> None:
        """A new leader's epoch starts at ``start_offset`` (before its first append)."""
        ...

    def forget_epochs_from(self, offset: int) -> None:
        """Drop leader-epoch entries starting at or after ``offset`` (a former leader's
        epoch that never got a record: a follower takes the new leader's history)."""
        ...

    def truncate_to(self, offset: int) -> None: ...

    def truncate_fully_and_start_at(self, offset: int) -> None: ...

    def append_as_follower(self, records: Any) -> None: ...
