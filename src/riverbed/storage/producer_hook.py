"""The seam between a partition log and the producer state kept beside it.

Storage knows nothing of producer ids, epochs or sequences (that is ``riverbed.producer``,
a layer above). A :class:`PartitionLog` optionally carries a :class:`ProducerStateHook`
and calls it, under the log's lock, at the points where producer state must follow the
log (Kafka's ``UnifiedLog`` calls its ``ProducerStateManager`` at the same points):

- ``check_leader_append(headers)`` before a leader assigns offsets: raises a typed
  ``StorageError`` (out of order sequence, fenced epoch) or returns the
  :class:`DuplicateBatch` an exact retry repeats (then nothing is appended and the append
  reports ``AppendInfo.duplicate``);
- ``on_batch(header)`` for every batch written (leader and follower alike, offsets final);
- ``on_roll(base_offset)`` when a new segment starts there (a snapshot is due);
- ``on_truncate(log_start_offset, log_end_offset)`` after a truncation (snapshots past the
  end go, the state is rebuilt from the log); ``on_truncate_fully(offset)`` when the log
  restarts empty (every snapshot goes);
- ``on_segments_deleted(first_segment_base)`` after retention deleted the segments below
  it (their snapshots go with them);
- ``on_close(log_end_offset)`` at a clean close (a snapshot at the log end).

Every hook method takes only batch headers and offsets (DESIGN principle 2).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from riverbed.protocol.records import BatchHeader

__all__ = ["DuplicateBatch", "ProducerStateHook"]


@dataclass(frozen=True, slots=True)
class DuplicateBatch:
    """An already appended batch that a produce repeats exactly (same producer, epoch and
    sequence range): acknowledged with its original offsets, never appended again."""

    first_offset: int
    last_offset: int
    timestamp: int


class ProducerStateHook(Protocol):
    def check_leader_append(self, headers: Sequence[BatchHeader]) -> DuplicateBatch | None: ...

    def on_batch(self, header: BatchHeader) -> None: ...

    def on_roll(self, base_offset: int) -> None: ...

    def on_truncate(self, log_start_offset: int, log_end_offset: int) -> None: ...

    def on_truncate_fully(self, offset: int) -> None: ...

    def on_segments_deleted(self, first_segment_base: int) -> None: ...

    def on_close(self, log_end_offset: int) -> None: ...
