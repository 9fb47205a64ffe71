"""Retention and DeleteRecords of a partition log.

Kafka's rules, in Kafka's order: segments entirely below the log start offset go first;
then (``cleanup.policy`` containing ``delete``) the oldest segments while the rest still
holds ``retention.bytes``; then segments whose largest timestamp is more than
``retention.ms`` old (KIP-32: the last message's timestamp, not the file time). Only a
leading run of segments entirely below the high watermark is deleted, the retention hook
may stop it, and when every segment would go the log rolls first so the active segment
itself is never deleted. Deleted segments are renamed ``*.deleted`` and unlinked after
``file.delete.delay.ms``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from riverbed.storage.errors import OffsetOutOfRangeError
from riverbed.storage.log_base import LogBase, log
from riverbed.storage.segment import LogSegment
from riverbed.storage.time_index import NO_TIMESTAMP

__all__ = ["LogRetention"]


@dataclass(frozen=True, slots=True)
class _NextSegment:
    """The offset bounding a segment from above (next segment base or the log end)."""

    base_offset: int


class LogRetention(LogBase):
    """Retention and log start offset movement (mixed into PartitionLog)."""

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: advance the log start offset to ``offset`` (<= high watermark).

        ``-1`` means the high watermark. Whole segments below the new log start are
        deleted at once; returns the new log start offset.
        """
        with self._lock:
            self._check_open()
            if offset == -1:
                offset = self._high_watermark
            if offset < 0 or offset > self._high_watermark:
                raise OffsetOutOfRangeError(
                    f"{self.name}: cannot delete records before {offset}: beyond the high "
                    f"watermark {self._high_watermark}"
                )
            if offset > self._log_start_offset:
                self._log_start_offset = offset
                with self._failing_dir("delete records"):
                    self.epoch_cache.truncate_from_start(offset)
                    self._delete_segments(
                        self._deletable(lambda seg, nxt: nxt.base_offset <= offset)
                    )
            return self._log_start_offset

    def delete_old_segments(self, now_ms: int) -> int:
        """Retention: delete segments past retention.ms / retention.bytes / log start.

        ``retention.ms`` compares ``now_ms`` with a segment's largest timestamp (KIP-32),
        ``retention.bytes`` the partition size. Only segments entirely below the high
        watermark go, and the retention hook may veto. Returns segments deleted.
        """
        with self._lock, self._failing_dir("retention"):
            if self._closed or self.log_dir.offline:
                return 0
            lso = self._log_start_offset
            deleted = self._delete_segments(self._deletable(lambda s, n: n.base_offset <= lso))
            cfg = self.config
            if not cfg.delete_enabled:
                return deleted
            if cfg.retention_bytes >= 0:
                excess = sum(s.size for s in self._segments) - cfg.retention_bytes

                def over_size(seg: LogSegment, _next: _NextSegment) -> bool:
                    nonlocal excess
                    if excess - seg.size < 0:
                        return False
                    excess -= seg.size
                    return True

                deleted += self._delete_segments(self._deletable(over_size))
            if cfg.retention_ms >= 0:

                def too_old(seg: LogSegment, _next: _NextSegment) -> bool:
                    largest = seg.largest_timestamp()
                    self._release(seg)
                    if largest == NO_TIMESTAMP:
                        largest = seg.modified_ms()
                    return now_ms - largest > cfg.retention_ms

                deleted += self._delete_segments(self._deletable(too_old))
            return deleted

    def _deletable(self, predicate: Callable[[LogSegment, _NextSegment], bool]) -> list[LogSegment]:
        out: list[LogSegment] = []
        for i, seg in enumerate(self._segments):
            is_last = i == len(self._segments) - 1
            nxt = _NextSegment(
                self.log_end_offset if is_last else self._segments[i + 1].base_offset
            )
            if is_last and seg.size == 0:
                break
            if self._high_watermark < nxt.base_offset or not predicate(seg, nxt):
                break
            if self.retention_hook is not None and not self.retention_hook(self, seg):
                break
            out.append(seg)
        return out

    def _delete_segments(self, doomed: list[LogSegment]) -> int:
        if not doomed:
            return 0
        if len(doomed) == len(self._segments):
            self._roll(self.log_end_offset)  # never delete the active segment: roll first
        n = len(doomed)
        for seg in doomed:
            self._schedule_delete(seg)
        del self._segments[:n], self._bases[:n]
        self._log_start_offset = max(self._log_start_offset, self._segments[0].base_offset)
        self.epoch_cache.truncate_from_start(self._log_start_offset)
        self._recovery_point = max(self._recovery_point, self._segments[0].base_offset)
        log.info(
            "%s: deleted %d segment(s); log start offset %d",
            self.name,
            n,
            self._log_start_offset,
        )
        return n

    @property
    def deletes_pending(self) -> bool:
        """Segments renamed ``*.deleted`` wait for their ``file.delete.delay.ms``."""
        return self._files.pending > 0

    def delete_expired_files(self, now_ms: int) -> int:
        """Remove ``.deleted`` files whose ``file.delete.delay.ms`` has passed."""
        with self._lock:
            return self._files.delete_expired(now_ms)
