"""Partition log file work off the event loop: creations and deletions in worker threads.

Creating a partition log is a mkdir and a few files, deleting one a close and a rename
(and a wait for its in-flight fsync): about 1.5-2 ms of system time per new partition on
the test machines. Done on the event loop as the metadata image applies, 10,000 new
partitions on one broker held every client of the node for seconds. Kafka does this work
on the metadata publisher's thread (``ReplicaManager.applyDelta`` -> ``makeLeaders`` /
``makeFollowers`` -> ``Partition.createLogIfNotExists``, under the replica state change
lock) while its request handler threads keep serving, and a partition the image has but
the broker does not host yet answers NOT_LEADER_OR_FOLLOWER
(``ReplicaManager.getPartitionOrError``); riverbed's broker does the same (see
`riverbed.server.broker.partitions`), with the file work here:

- at most ``LOG_WORK_THREADS`` jobs run at once, in worker threads of their own (the
  default executor is shared with other work and the event loop's own to_thread calls);
- the jobs of one partition run one after another, in the order they were queued (a
  deletion of the old topic's log before the creation of the re-created topic's log), and
  ``submit(first=True)`` puts a job before the partition's queued ones;
- each job is prepared on the loop when its turn comes (``Job.prepare``: the blocking call
  to run, or None when the job is no longer wanted, e.g. its topic was deleted while it
  waited) and finished on the loop with the call's result or exception (``Job.finish``),
  so the loop-side bookkeeping of one partition happens in one loop turn and the loop
  serves other clients between partitions; at most ``PREPARES_PER_TURN_MAX`` jobs are
  prepared in one turn;
- ``idle()`` waits until nothing is queued or running (CreateTopics answers then).

An exception a job's ``finish`` does not handle escapes to the supervisor: the node halts
with a FATAL line (crash-only; a wedged creator would leave partitions unserved forever).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Final

from riverbed.server.fault_handler import FaultHandler
from riverbed.server.supervise import supervise

Key = tuple[str, int]

#: Partition log creations / deletions running at once (worker threads). The work is mostly
#: system time in the file system: two overlap well on two cores, more only queue there.
LOG_WORK_THREADS: Final = 2
#: Jobs prepared (on the event loop) in one loop turn before the loop serves others again.
PREPARES_PER_TURN_MAX: Final = 64


@dataclass(frozen=True)
class Job:
    """One partition's file work (see the module docstring)."""

    #: on the loop when the job's turn comes: the blocking call, or None to skip the job
    prepare: Callable[[], Callable[[], object] | None]
    #: on the loop with the call's result, or None and the exception it raised
    finish: Callable[[object, BaseException | None], None]


class LogWork:
    """Runs partition log jobs in worker threads, in order per partition."""

    def __init__(self, fault_handler: FaultHandler, threads: int = LOG_WORK_THREADS) -> None:
        assert threads >= 1
        self.threads = threads
        self.fault_handler = fault_handler
        # queued jobs per partition, partitions in the order their first job came; bounded
        # by the partitions of the image (at most a few jobs each)
        self._queues: dict[Key, deque[Job]] = {}
        self._running: dict[asyncio.Future[object], tuple[Key, Job]] = {}
        self._busy: set[Key] = set()  # partitions with a job in a worker thread
        self._executor: ThreadPoolExecutor | None = None
        self._task: asyncio.Task[None] | None = None
        self._idle = asyncio.Event()
        self._idle.set()
        self._closed = False

    # ------------------------------------------------------------------ callers
    def submit(self, key: Key, job: Job, *, first: bool = False) -> None:
        """Queue ``job`` for partition ``key`` (``first``: before its queued jobs)."""
        if self._closed:
            return  # the node is stopping: nothing new starts (the start-up path recovers)
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = deque()
        if first:
            queue.appendleft(job)
        else:
            queue.append(job)
        self._idle.clear()
        if self._task is None or self._task.done():
            self._task = supervise("partition log work", self._run(), self.fault_handler)

    def pending(self) -> int:
        """Jobs queued or running."""
        return sum(len(q) for q in self._queues.values()) + len(self._running)

    async def idle(self) -> None:
        """Wait until no job is queued or running."""
        await self._idle.wait()

    async def close(self) -> None:
        """Stop: queued jobs are dropped, running ones end (their logs stay on disk, as
        after a crash mid-creation: the start-up path loads them)."""
        self._closed = True
        self._queues.clear()
        if self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.wait([self._task])
        executor, self._executor = self._executor, None
        if executor is not None:
            await asyncio.to_thread(executor.shutdown, wait=True, cancel_futures=True)
        self._running.clear()
        self._busy.clear()
        self._idle.set()

    # ------------------------------------------------------------------ the worker
    async def _run(self) -> None:
        while self._queues or self._running:
            if self._start_jobs() or not self._running:
                await asyncio.sleep(0)  # the turn's budget is spent: serve others first
                continue
            done, _ = await asyncio.wait(self._running, return_when=asyncio.FIRST_COMPLETED)
            for fut in done:
                key, job = self._running.pop(fut)
                self._busy.discard(key)
                error = fut.exception()
                job.finish(None if error is not None else fut.result(), error)
        self._idle.set()

    def _start_jobs(self) -> bool:
        """Prepare queued jobs of idle partitions, in order, until every thread has one;
        True when the turn's budget ran out first (more may be startable)."""
        loop = asyncio.get_running_loop()
        prepared = 0
        while len(self._running) < self.threads:
            if prepared >= PREPARES_PER_TURN_MAX:
                return True
            # the first partition without a running job (skips at most `threads` of them)
            key = next((k for k in self._queues if k not in self._busy), None)
            if key is None:
                return False
            queue = self._queues[key]
            job = queue.popleft()
            if not queue:
                del self._queues[key]
            prepared += 1
            work = job.prepare()
            if work is None:
                continue
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    self.threads, thread_name_prefix="partition-log-work"
                )
            self._running[loop.run_in_executor(self._executor, work)] = (key, job)
            self._busy.add(key)
        return False
