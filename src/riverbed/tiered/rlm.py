"""The remote log manager's logic (KIP-405), sans I/O: scheduling and planning.

Scheduling (the seed's "RLM thread pool"): every partition the manager watches has a next
processing time. A new partition (or one whose leadership changed) is due at once; a
task that succeeded is due again after ``task_interval_ms``; a failed one after a
back-off doubling from ``retry_backoff_ms`` to ``retry_backoff_max_ms`` (with jitter
from the injected ``random.Random``); a segment roll makes its partition due at once
(rolls notify, nothing polls every partition). A partition removed while its task runs
is dropped when the task ends. :meth:`RlmScheduler.due` hands out at most ``limit``
tasks, earliest first, and never two for one partition.

Planning, given what the shell read (local segments, the remote listing):

- :func:`segments_to_copy`: rolled segments (never the active one) entirely below the
  high watermark holding offsets past what the remote tier has, earliest first;
- :func:`remote_segments_to_delete`: the leader's remote retention (Kafka's order):
  segments entirely below the log start offset (DeleteRecords), then the oldest while
  the remote size plus the local bytes not yet in the remote tier exceed
  ``retention.bytes``, then those whose largest timestamp is older than
  ``retention.ms``; always a leading run of the oldest segments.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Final

from riverbed.tiered.rsm import RemoteSegmentMetadata

__all__ = [
    "LocalSegmentInfo",
    "RlmScheduler",
    "TaskAssignment",
    "remote_segments_to_delete",
    "segments_to_copy",
]

#: Fraction of random jitter added to each retry back-off (Kafka's retry.jitter 0.2).
RETRY_JITTER: Final = 0.2
_NEVER: Final = 2**63 - 1


@dataclass(frozen=True, slots=True)
class LocalSegmentInfo:
    """A local segment as planning sees it."""

    base_offset: int
    next_offset: int
    size_bytes: int
    active: bool = False


@dataclass(frozen=True, slots=True)
class TaskAssignment:
    key: Hashable
    leader: bool


@dataclass
class _Entry:
    leader: bool
    next_run_ms: int
    running: bool = False
    removed: bool = False
    failures: int = 0


class RlmScheduler:
    """Per-partition next processing times (see the module docstring)."""

    def __init__(
        self,
        *,
        task_interval_ms: int,
        retry_backoff_ms: int,
        retry_backoff_max_ms: int,
        rng: random.Random,
    ) -> None:
        self.task_interval_ms = task_interval_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = retry_backoff_max_ms
        self._rng = rng
        self._entries: dict[Hashable, _Entry] = {}

    def __contains__(self, key: Hashable) -> bool:
        entry = self._entries.get(key)
        return entry is not None and not entry.removed

    def is_leader(self, key: Hashable) -> bool:
        entry = self._entries.get(key)
        return entry is not None and not entry.removed and entry.leader

    def assign(self, key: Hashable, leader: bool, now_ms: int) -> None:
        """Watch ``key`` (as leader or follower); due at once if new or its role changed."""
        entry = self._entries.get(key)
        if entry is None or entry.removed:
            if entry is not None and entry.running:
                entry.removed, entry.leader, entry.next_run_ms = False, leader, now_ms
                return
            self._entries[key] = _Entry(leader, now_ms)
        elif entry.leader != leader:
            entry.leader = leader
            entry.next_run_ms = now_ms
            entry.failures = 0

    def unassign(self, key: Hashable) -> None:
        """Stop watching ``key`` (after its running task, if any)."""
        entry = self._entries.get(key)
        if entry is None:
            return
        if entry.running:
            entry.removed = True
        else:
            del self._entries[key]

    def notify_roll(self, key: Hashable, now_ms: int) -> None:
        entry = self._entries.get(key)
        if entry is not None and not entry.removed:
            entry.next_run_ms = min(entry.next_run_ms, now_ms)

    def due(self, now_ms: int, limit: int) -> list[TaskAssignment]:
        """Up to ``limit`` due partitions (earliest first), now marked running."""
        ready = [
            (e.next_run_ms, i, k)
            for i, (k, e) in enumerate(self._entries.items())
            if not e.running and not e.removed and e.next_run_ms <= now_ms
        ]
        out: list[TaskAssignment] = []
        for _, _, key in heapq.nsmallest(max(limit, 0), ready):
            entry = self._entries[key]
            entry.running = True
            entry.next_run_ms = _NEVER  # until it ends, or a roll makes it due again
            out.append(TaskAssignment(key, entry.leader))
        return out

    def finished(self, key: Hashable, ok: bool, now_ms: int) -> None:
        """The task of ``key`` ended; schedule its next run (or drop it if removed)."""
        entry = self._entries.get(key)
        if entry is None:
            return
        entry.running = False
        if entry.removed:
            del self._entries[key]
            return
        if ok:
            entry.failures = 0
            # a roll during the task moved next_run_ms from "never" to the roll's time
            entry.next_run_ms = min(entry.next_run_ms, now_ms + self.task_interval_ms)
            return
        entry.failures += 1
        backoff = min(self.retry_backoff_ms * 2 ** (entry.failures - 1), self.retry_backoff_max_ms)
        backoff += int(backoff * RETRY_JITTER * self._rng.random())
        entry.next_run_ms = now_ms + backoff

    def next_due_ms(self) -> int | None:
        times = [e.next_run_ms for e in self._entries.values() if not e.running and not e.removed]
        return min(times) if times else None

    def failures(self, key: Hashable) -> int:
        entry = self._entries.get(key)
        return entry.failures if entry is not None else 0


def segments_to_copy(
    segments: Sequence[LocalSegmentInfo], highest_remote_offset: int, high_watermark: int
) -> list[LocalSegmentInfo]:
    """Rolled segments to upload, earliest first (see the module docstring)."""
    out = []
    for seg in segments:
        if seg.active or seg.size_bytes == 0:
            continue
        if seg.next_offset > high_watermark:
            break  # not committed yet: neither it nor any later one
        if seg.next_offset - 1 > highest_remote_offset:
            out.append(seg)
    return out


def remote_segments_to_delete(
    remote: Sequence[RemoteSegmentMetadata],
    *,
    log_start_offset: int,
    retention_ms: int,
    retention_bytes: int,
    local_only_bytes: int,
    now_ms: int,
) -> list[RemoteSegmentMetadata]:
    """The leading run of remote segments remote retention deletes (module docstring)."""
    ordered = sorted(remote, key=lambda m: m.base_offset)
    doomed: list[RemoteSegmentMetadata] = []
    total = sum(m.size_bytes for m in ordered) + local_only_bytes
    for meta in ordered:
        below_start = meta.end_offset < log_start_offset
        # Kafka's rule: delete while what remains still holds retention.bytes
        over_size = retention_bytes >= 0 and total - meta.size_bytes >= retention_bytes
        too_old = retention_ms >= 0 and now_ms - meta.max_timestamp > retention_ms
        if not (below_start or over_size or too_old):
            break
        doomed.append(meta)
        total -= meta.size_bytes
    return doomed
