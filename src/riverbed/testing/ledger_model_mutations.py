"""Deliberately broken rules for the producer ledger's model check
(:mod:`riverbed.testing.ledger_model`), each the rule as it was before issue 18 or a step
of the fix left out; ``tests/unit/producer/test_ledger_model.py`` asserts the check
catches every one. Each is a context manager that patches the real class and restores it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

from riverbed.producer.complete import iter_fd_fields, merge_newest
from riverbed.producer.ledger import PidLedger
from riverbed.producer.ledger_files import Fields
from riverbed.producer.ledger_truncation import LedgerTruncation
from riverbed.producer.manager import ProducerStateManager

__all__ = ["MUTATIONS"]


@contextlib.contextmanager
def _patched(cls: type, name: str, value: object) -> Iterator[None]:
    original = cls.__dict__[name]
    setattr(cls, name, value)
    try:
        yield
    finally:
        setattr(cls, name, original)


def _carry_to_active(
    self: PidLedger,
    offset: int,
    doomed: list[Path],
    mapped: list[Fields],
    keep: Callable[[Fields], bool],
) -> None:
    """The carry-forward before the fix: a deleted file's entry that no newer file
    holds (complete files not counted) goes into the active mapped file, where it is
    newer than everything, and unsynced."""
    fds = [os.open(p, os.O_RDONLY) for p in doomed]
    try:
        for fields in merge_newest([iter_fd_fields(fd) for fd in fds]):
            pid = fields[0]
            mapped_home = any(f is not None and f.get(pid) for f in (self.active, *self.retired))
            sealed_home = any(
                s.offset >= offset
                and s.offset not in self._complete
                and s.lookup(pid, self._fds) is not None
                for s in self._sealed
            )
            if keep(fields) and not mapped_home and not sealed_home:
                self._put(fields)
    finally:
        for fd in fds:
            os.close(fd)


def carry_to_active() -> AbstractContextManager[None]:
    # the class that defines it (PidLedger inherits it), so that restoring puts it back
    return _patched(LedgerTruncation, "_carry_forward", _carry_to_active)


def _replay_from_log_start(self: ProducerStateManager, log_end: int) -> None:
    """The replay before the fix: from the newest sealed file but never below the log
    start, so DeleteRecords drops the producers of the batches it deleted at a crash."""
    newest = self.ledger.replay_offset()
    assert self._log is not None
    start = (
        self._log.log_start_offset if newest is None else max(newest, self._log.log_start_offset)
    )
    self.store.clear()
    for h in self._headers_from(start):
        self.table.apply(h)
    self.table.map_end_offset = log_end


def replay_from_log_start() -> AbstractContextManager[None]:
    return _patched(ProducerStateManager, "_replay", _replay_from_log_start)


def _replay_without_base_files(self: ProducerStateManager, log_end: int) -> None:
    """The replay without sealing the segment bases a crash left without a file."""
    self.store.clear()
    for h in self._headers_from(self.ledger.replay_start(self._first_offset())):
        self.table.apply(h)
    self.table.map_end_offset = log_end


def replay_without_base_files() -> AbstractContextManager[None]:
    return _patched(ProducerStateManager, "_replay", _replay_without_base_files)


MUTATIONS: dict[str, Callable[[], AbstractContextManager[None]]] = {
    "carry-to-active": carry_to_active,
    "replay-from-log-start": replay_from_log_start,
    "replay-without-base-files": replay_without_base_files,
}
