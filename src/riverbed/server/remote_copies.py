"""The copy half of the remote log manager (KIP-405): one partition's task, run in the
copier pool (:class:`riverbed.server.remote_log.RemoteLogManager` schedules it; never two
for one partition).

Every node lists the partition's remote segments, drops those invalid under leader-epoch
fencing (riverbed.tiered.rsm) and brings its local remote indexes in step, then moves its
log start to the remote start and installs the remote range's leader epochs and producers
when its log restarted above the remote data. The leader at epoch E also deletes its own
failed uploads, fences older leaders' unfinished ones, deletes stale segments, copies rolled
segments below the last stable offset earliest first at epoch E (the manifest is published
only while it still leads at E, else the copy is abandoned and deleted), and applies remote
retention, moving the log start before each deletion so no reader is sent to a segment
being deleted. Nothing here runs under a log's lock across remote calls; a tier's own lock
guards its indexes and listing.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from riverbed.producer.snapshot import snapshot_name
from riverbed.server.broker.hosted import last_stable_offset, producer_state_of
from riverbed.server.metrics.remote import RemoteLogStats
from riverbed.server.remote_reads import Tier
from riverbed.storage.log import PartitionLog
from riverbed.tiered.remote_indexes import RemoteIndexes
from riverbed.tiered.rlm import LocalSegmentInfo, remote_segments_to_delete, segments_to_copy
from riverbed.tiered.rsm import (
    FsspecRemoteStorageManager,
    RemoteListing,
    RemoteSegmentMetadata,
    RemoteStorageError,
    SegmentUpload,
    UploadAbandonedError,
    fence_segments,
    new_segment_id,
    segment_id_epoch,
)
from riverbed.tiered.segment_chunks import chunk_segment

if TYPE_CHECKING:
    from riverbed.server.remote_log import RemoteLogSettings

#: the manager's logger: ``log.level.riverbed.server.remote_log`` keeps configuring these lines
log = logging.getLogger("riverbed.server.remote_log")


class RemoteCopies:
    """The copier-pool half of :class:`riverbed.server.remote_log.RemoteLogManager` (a
    mixin: the manager owns the attributes declared here)."""

    settings: RemoteLogSettings
    rsm: FsspecRemoteStorageManager
    stats: RemoteLogStats  # copies counted for the node's metrics
    _closing: bool
    _now_ms: Callable[[], int]

    # ---- one partition's task (copier thread) ---------------------------------------------

    def _process(self, tier: Tier, leader: bool) -> None:
        if self._closing:
            return
        topic, partition = tier.key
        plog = tier.plog
        listing = self.rsm.list_partition(topic, partition, tier.topic_id)
        remote, stale = fence_segments(listing.segments, listing.fenced)
        self._sync_indexes(tier, remote, leading=leader and tier.leader)
        if leader and tier.leader:
            self._sweep(tier, listing, stale)
            self._copy_rolled(tier)
            self._remote_retention(tier)
        with tier.lock:
            remote = list(tier.remote)
        if remote:
            # followers too: the leader's remote retention moved the start of the log,
            # or the log restarted at the leader's local start above the remote data
            plog.adopt_remote_log_start(remote[0].base_offset)
            plog.advance_log_start_offset(remote[0].base_offset)
            # a log restarted at the leader's local start lacks the epochs of the remote
            # range: take them from the remote segments (their leader-epoch slices)
            if plog.install_remote_epochs(_remote_epochs(remote)):
                tier.producers_pending_at = plog.local_log_start_offset
            self._install_remote_producers(tier, remote)
        elif plog.log_start_offset < plog.local_log_start_offset:
            plog.advance_log_start_offset(plog.local_log_start_offset)

    def _install_remote_producers(self, tier: Tier, remote: list[RemoteSegmentMetadata]) -> None:
        """Producer state of the remote range for a log restarted at its leader's local
        start: the snapshot shipped with the remote segment ending just below it."""
        plog, at = tier.plog, tier.producers_pending_at
        state = producer_state_of(plog)
        if at is None or state is None or at != plog.local_log_start_offset:
            tier.producers_pending_at = None
            return
        below = [m for m in remote if m.end_offset == at - 1 and ".snapshot" in m.files]
        if below:
            topic, partition = tier.key
            data = self.rsm.producer_snapshot(topic, partition, tier.topic_id, below[-1].segment_id)
            added = state.install_remote_snapshot(data)
            log.info("%s-%d: %d producer(s) of the remote range installed", topic, partition, added)
        tier.producers_pending_at = None

    def _sweep(
        self, tier: Tier, listing: RemoteListing, stale: list[RemoteSegmentMetadata]
    ) -> None:
        """The leader deletes unfinished uploads and stale segments (see the rsm docstring)."""
        topic, partition = tier.key
        epoch = tier.leader_epoch
        for orphan in listing.incomplete:
            upload_epoch = segment_id_epoch(orphan)
            if upload_epoch > epoch:
                continue  # a newer leader's running upload: this node is deposed
            if upload_epoch < epoch and orphan not in listing.fenced and upload_epoch >= 0:
                # an older leader's upload may still run: fence it, then delete it
                log.info(
                    "%s-%d: fencing remote upload %s of an older leader", topic, partition, orphan
                )
                self.rsm.fence_upload(topic, partition, tier.topic_id, orphan, epoch)
            else:
                # no upload of this leader runs now (one task at a time): a leftover
                log.info("%s-%d: deleting orphan remote upload %s", topic, partition, orphan)
                self.rsm.delete_segment(topic, partition, tier.topic_id, orphan)
        for meta in stale:
            if meta.copy_epoch > epoch:
                continue
            log.info("%s-%d: deleting stale remote segment %s", topic, partition, meta.segment_id)
            self.rsm.delete_segment(
                topic,
                partition,
                tier.topic_id,
                meta.segment_id,
                meta.files,
                fence_marker=meta.segment_id in listing.fenced,
            )

    def _sync_indexes(
        self, tier: Tier, remote: list[RemoteSegmentMetadata], *, leading: bool
    ) -> None:
        """Make the local remote indexes describe exactly the listed remote segments."""
        topic, partition = tier.key
        now = self._now_ms()
        with tier.lock:
            if tier.indexes is None:
                tier.indexes = RemoteIndexes(
                    tier.plog.directory,
                    now,
                    file_bytes_max=self.settings.index_file_bytes_max,
                    roll_ms=self.settings.index_roll_ms,
                )
            indexes = tier.indexes
            known = indexes.segment_ids
        listed = {m.segment_id for m in remote}
        missing = [m for m in remote if m.segment_id not in known]
        fetched = [
            (m, self.rsm.index_entries(topic, partition, tier.topic_id, m.segment_id))
            for m in missing
        ]
        with tier.lock:
            highest = indexes.highest_offset
            if any(m.end_offset <= highest for m, _ in fetched):
                # a segment below what is indexed (a new leader's overlap): rebuild in order
                indexes.delete_all()
                fetched = [
                    (m, self.rsm.index_entries(topic, partition, tier.topic_id, m.segment_id))
                    for m in remote
                ]
            for _, entries in fetched:
                indexes.add_segment(entries, now)
            indexes.retain_segments(listed)
            tier.remote = list(remote)
        epoch = None if leading else tier.leader_epoch
        tier.plog.update_highest_offset_in_remote(_copied_up_to(remote, epoch))

    def _copy_rolled(self, tier: Tier) -> None:
        plog = tier.plog
        topic, partition = tier.key
        segments = plog.segments
        infos = [LocalSegmentInfo(s.base_offset, s.next_offset, s.size, s.active) for s in segments]
        by_base = {s.base_offset: s for s in segments}
        # Kafka copies only segments below the last stable offset: every transaction in
        # a copied segment has ended, its aborts are in the txn indexes copied with it
        upper = last_stable_offset(plog)
        for info in segments_to_copy(infos, plog.highest_offset_in_remote, upper):
            if self._closing or not tier.leader:
                return  # leadership moved: the new leader continues from the remote listing
            seg = by_base[info.base_offset]
            epoch = tier.leader_epoch
            segment_id = new_segment_id(info.base_offset, epoch)
            summary = chunk_segment(seg.log_path, segment_id, size_bytes=info.size_bytes)
            epochs = _epoch_slice(plog.epoch_entries(), info.base_offset, info.next_offset)
            upload = SegmentUpload(
                segment_id=segment_id,
                log_path=seg.log_path,
                entries=summary.entries,
                base_offset=summary.base_offset,
                end_offset=summary.last_offset,
                max_timestamp=summary.max_timestamp,
                size_bytes=summary.size_bytes,
                leader_epochs=epochs,
                created_ms=self._now_ms(),
                offset_index_path=seg.offset_index.path,
                time_index_path=seg.time_index.path,
                txn_index_path=seg.txn_index.path,
                producer_snapshot_path=plog.directory / snapshot_name(info.next_offset),
                producer_snapshot=_complete_snapshot(plog, info.next_offset),
            )

            def still_leading(epoch: int = epoch) -> bool:
                return tier.leader and tier.leader_epoch == epoch and not self._closing

            try:
                meta = self.rsm.copy_segment(
                    topic, partition, tier.topic_id, upload, publish_if=still_leading
                )
            except UploadAbandonedError as e:
                log.info("%s-%d: copy abandoned: %s", topic, partition, e)
                return  # the new leader continues from the remote listing
            except RemoteStorageError:
                self.stats.copy_failed()
                # best effort now; the next task's orphan sweep catches what is left
                with contextlib.suppress(RemoteStorageError):
                    self.rsm.delete_segment(topic, partition, tier.topic_id, segment_id)
                raise
            with tier.lock:
                assert tier.indexes is not None
                tier.indexes.add_segment(summary.entries, self._now_ms())
                tier.remote.append(meta)
            plog.update_highest_offset_in_remote(meta.end_offset)
            self.stats.copied(meta.size_bytes)
            log.info(
                "%s-%d: copied segment %d..%d (%d bytes) to the remote tier as %s",
                topic,
                partition,
                meta.base_offset,
                meta.end_offset,
                meta.size_bytes,
                segment_id,
            )

    def _remote_retention(self, tier: Tier) -> None:
        plog = tier.plog
        topic, partition = tier.key
        cfg = plog.config
        with tier.lock:
            remote = list(tier.remote)
        if not remote:
            return
        highest = remote[-1].end_offset
        local_only = sum(s.size for s in plog.segments if s.base_offset > highest)
        doomed = remote_segments_to_delete(
            remote,
            log_start_offset=plog.log_start_offset,
            retention_ms=cfg.retention_ms,
            retention_bytes=cfg.retention_bytes,
            local_only_bytes=local_only,
            now_ms=self._now_ms(),
        )
        for meta in doomed:
            if self._closing or not tier.leader:
                return
            # the log start moves first: no reader is sent to a segment being deleted
            plog.advance_log_start_offset(meta.end_offset + 1)
            self.rsm.delete_segment(topic, partition, tier.topic_id, meta.segment_id, meta.files)
            with tier.lock:
                tier.remote = [m for m in tier.remote if m.segment_id != meta.segment_id]
                assert tier.indexes is not None
                tier.indexes.retain_segments(m.segment_id for m in tier.remote)
            log.info(
                "%s-%d: remote retention deleted segment %d..%d",
                topic,
                partition,
                meta.base_offset,
                meta.end_offset,
            )


def _copied_up_to(remote: list[RemoteSegmentMetadata], leader_epoch: int | None) -> int:
    """The "copied up to" offset local retention may rely on (-1: nothing).

    The leader relies on every valid segment (it continues after what it listed, so they
    stay valid). A follower relies only on segments copied at the current leader epoch or
    followed by a later leader's copy above them: an older leader's late upload that the
    current leader has not seen yet can still turn stale (riverbed.tiered.rsm), and the
    follower must not have dropped its local copy of that range then."""
    if leader_epoch is None:
        return max((m.end_offset for m in remote), default=-1)
    out = -1
    later_epoch = -1  # highest copy epoch among segments with a larger base offset
    for meta in sorted(remote, key=lambda m: m.base_offset, reverse=True):
        if meta.copy_epoch >= leader_epoch or later_epoch > meta.copy_epoch:
            out = max(out, meta.end_offset)
        later_epoch = max(later_epoch, meta.copy_epoch)
    return out


def _complete_snapshot(plog: PartitionLog, offset: int) -> bytes | None:
    """Every live producer as of ``offset`` (None: the log keeps no producer state)."""
    state = producer_state_of(plog)
    return None if state is None else state.complete_snapshot_bytes(offset)


def _remote_epochs(remote: list[RemoteSegmentMetadata]) -> list[tuple[int, int]]:
    """The leader epochs of the remote range (each segment's slice, in order)."""
    out: list[tuple[int, int]] = []
    for meta in remote:
        for epoch, start in meta.leader_epochs:
            if not out or (epoch > out[-1][0] and start > out[-1][1]):
                out.append((epoch, start))
    return out


def _epoch_slice(
    entries: list[tuple[int, int]], base_offset: int, next_offset: int
) -> tuple[tuple[int, int], ...]:
    """The leader epochs covering [base_offset, next_offset), the first clamped to base."""
    out: list[tuple[int, int]] = []
    for i, (epoch, start) in enumerate(entries):
        following = entries[i + 1][1] if i + 1 < len(entries) else None
        if start >= next_offset or (following is not None and following <= base_offset):
            continue
        out.append((epoch, max(start, base_offset)))
    return tuple(out)
