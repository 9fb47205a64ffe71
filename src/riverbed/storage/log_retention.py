"""Retention and DeleteRecords of a partition log.

Kafka's rules, in Kafka's order: segments entirely below the log start offset go first;
then (``cleanup.policy`` containing ``delete``) the oldest segments while the rest still
holds ``retention.bytes``; then segments whose largest timestamp is more than
``retention.ms`` old (KIP-32: the last message's timestamp, not the file time). Only a
leading run of segments entirely below the high watermark is deleted, the retention hook
may stop it, and when every segment would go the log rolls first so the active segment
itself is never deleted. Deleted segments are renamed ``*.deleted`` and unlinked after
``file.delete.delay.ms``.

A tiered log (KIP-405, see ``LogBase.tiered``) applies ``local.retention.ms`` /
``local.retention.bytes`` (-2: the ``retention.*`` value) to its local segments, deletes
a segment only once the remote tier holds all of it (its last offset <= the "copied up
to" offset the remote log manager publishes: the seed's copy-done guard, read here
without any remote I/O), and keeps its log start offset: local deletion moves only the
local log start offset; the remote log manager moves the log start offset when remote
retention deletes remote segments (:meth:`LogRetention.advance_log_start_offset`). Past
the total ``retention.ms`` a rolled segment is deleted even if it was never copied (and
the log start moves past it): a remote tier that stays down does not fill the disk forever.
The active segment is never copied and stays (Kafka's copy guard keeps it too; it goes
once it rolls), so remote retention of an old tiered log ends with the log starting at
the local start.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from riverbed.storage.errors import OffsetOutOfRangeError
from riverbed.storage.log_base import LogBase, log
from riverbed.storage.log_files import SegmentSpan
from riverbed.storage.segment import LogSegment

__all__ = ["LogRetention"]

#: Decides whether retention may delete a segment (the span gives its end offset).
Deletable = Callable[[SegmentSpan], bool]


class LogRetention(LogBase):
    """Retention and log start offset movement (mixed into PartitionLog); the segments
    are the local log's: this decides which go, the local log deletes them."""

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
            self._records_deleted_before = max(self._records_deleted_before, offset)
            if offset > self._log_start_offset:
                self._log_start_offset = offset
                with self._failing_dir("delete records"):
                    self.epoch_cache.truncate_from_start(offset)
                    self._delete_segments(self._deletable(lambda s: s.end_offset <= offset))
            return self._log_start_offset

    def delete_old_segments(self, now_ms: int) -> int:
        """Retention: delete segments past retention.ms / retention.bytes / log start.

        ``retention.ms`` compares ``now_ms`` with a segment's largest timestamp (KIP-32),
        ``retention.bytes`` the partition size. Only segments entirely below the high
        watermark go, and the retention hook may veto. Returns segments deleted.
        """
        with self._lock, self._failing_dir("retention"):
            if self._local.closed or self.log_dir.offline:
                return 0
            lso = self._log_start_offset
            deleted = self._delete_segments(self._deletable(lambda s: s.end_offset <= lso))
            cfg = self.config
            if not cfg.delete_enabled:
                return deleted
            tiered = self.tiered
            retention_bytes = cfg.local_retention_bytes_effective if tiered else cfg.retention_bytes
            retention_ms = cfg.local_retention_ms_effective if tiered else cfg.retention_ms
            if retention_bytes >= 0:
                excess = self._local.size_bytes - retention_bytes

                def over_size(span: SegmentSpan) -> bool:
                    nonlocal excess
                    if excess - span.size < 0:
                        return False
                    excess -= span.size
                    return True

                deleted += self._delete_segments(self._deletable(over_size))
            if retention_ms >= 0:
                deleted += self._delete_segments(
                    self._deletable(self._older_than(retention_ms, now_ms))
                )
            if tiered and cfg.retention_ms >= 0:
                # past the total retention.ms a segment goes even if never copied (the
                # remote tier would delete it at once anyway; KIP-405's follower rule);
                # rolled segments only: the active one is never copied, and Kafka keeps
                # it (its copy guard), so remote retention leaves the log starting at the
                # local start rather than racing this rule past the active segment
                older = self._older_than(cfg.retention_ms, now_ms)
                doomed = self._deletable(older, copy_guard=False, keep_active=True)
                if doomed:
                    deleted += self._delete_segments(doomed)
                    # nothing below survives anywhere: the log starts after them
                    self._log_start_offset = max(self._log_start_offset, self._local.start_offset)
            return deleted

    def _older_than(self, limit_ms: int, now_ms: int) -> Deletable:
        """Is a segment's largest timestamp (KIP-32; file time without one) older?"""

        def too_old(span: SegmentSpan) -> bool:
            return now_ms - self._local.retention_timestamp(span.segment) > limit_ms

        return too_old

    def _deletable(
        self, predicate: Deletable, *, copy_guard: bool = True, keep_active: bool = False
    ) -> list[LogSegment]:
        out: list[LogSegment] = []
        for span in self._local.spans():
            if span.last and (span.size == 0 or keep_active):
                break
            if self._high_watermark < span.end_offset or not predicate(span):
                break
            uncopied = span.end_offset - 1 > self._highest_offset_in_remote
            if copy_guard and self.tiered and span.end_offset > self._log_start_offset and uncopied:
                break  # data not (entirely) in the remote tier yet: the copy-done guard
            if self.retention_hook is not None and not self.retention_hook(self, span.segment):
                break
            out.append(span.segment)
        return out

    def _delete_segments(self, doomed: list[LogSegment]) -> int:
        if not doomed:
            return 0
        if len(doomed) == self._local.segment_count:
            self._roll(self.log_end_offset)  # never delete the active segment: roll first
        n = len(doomed)
        first_base = self._local.delete_oldest(doomed)
        if not self.tiered:  # a tiered log's start stays in the remote tier
            self._log_start_offset = max(self._log_start_offset, first_base)
        # from the log start, not the local start: a tiered log keeps the epochs of its
        # remote range (OffsetForLeaderEpoch answers them; Kafka does the same)
        self.epoch_cache.truncate_from_start(self._log_start_offset)
        if self.producer_state is not None:
            self.producer_state.on_segments_deleted(first_base)
        log.info(
            "%s: deleted %d segment(s); log start offset %d, local log start offset %d",
            self.name,
            n,
            self._log_start_offset,
            self.local_log_start_offset,
        )
        return n

    def update_highest_offset_in_remote(self, offset: int) -> None:
        """The remote tier now holds everything up to ``offset`` (the remote log
        manager's "copied up to"; it never goes back while the remote data exists)."""
        with self._lock:
            self._highest_offset_in_remote = offset

    def adopt_remote_log_start(self, offset: int) -> bool:
        """A tiered log restarted at its leader's local log start (a follower that was
        behind it) takes the remote tier's start as its log start, once the remote tier
        reaches its first local offset. Returns True when the log start moved back.

        Never below a DeleteRecords offset: records deleted at exactly the local start
        must not come back while remote retention has yet to delete their segments."""
        with self._lock:
            offset = max(offset, self._records_deleted_before)
            local = self.local_log_start_offset
            if not (
                self.tiered
                and offset < self._log_start_offset == local
                and self._highest_offset_in_remote >= local - 1
            ):
                return False
            self._log_start_offset = offset
            log.info("%s: log start offset %d (the remote tier's start)", self.name, offset)
            return True

    def advance_log_start_offset(self, offset: int) -> int:
        """Remote retention deleted remote data: the log now starts at ``offset`` (at
        most the high watermark; never moves back). Local segments entirely below it go
        with the next retention run. Returns the log start offset."""
        with self._lock:
            offset = min(offset, self._high_watermark)
            if offset > self._log_start_offset:
                self._log_start_offset = offset
                self.epoch_cache.truncate_from_start(offset)
                log.info("%s: log start offset %d (remote retention)", self.name, offset)
            return self._log_start_offset

    def install_remote_epochs(self, entries: Sequence[tuple[int, int]]) -> bool:
        """A log restarted at its leader's local start takes the leader epochs of the
        remote range (from the remote segments, Kafka's buildRemoteLogAuxState) before
        its first own entry, from the log start on. True when the cache changed."""
        with self._lock:
            before = self.epoch_cache.entries()
            self.epoch_cache.prepend(entries)
            self.epoch_cache.truncate_from_start(self._log_start_offset)
            return self.epoch_cache.entries() != before

    @property
    def deletes_pending(self) -> bool:
        """Segments renamed ``*.deleted`` wait for their ``file.delete.delay.ms``."""
        return self._local.deletes_pending

    def delete_expired_files(self, now_ms: int) -> int:
        """Remove ``.deleted`` files whose ``file.delete.delay.ms`` has passed."""
        return self._local.delete_expired_files(now_ms)
