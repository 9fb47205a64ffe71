"""A key/value state machine for the Raft tests (driver, storage log): test support only."""

from __future__ import annotations

from riverbed.raft.messages import Entry, EntryKind, SnapshotId


class KV:
    """A key/value state machine fed ``set <key> <value>`` entries; its snapshot is one
    ``key=value`` record per key. Entries must arrive in order, each exactly once."""

    def __init__(self) -> None:
        self.state: dict[str, str] = {}
        self.position = 0
        self.loads: list[SnapshotId] = []

    def apply(self, entries: tuple[Entry, ...]) -> None:
        for e in entries:
            assert e.offset == self.position
            self.position += 1
            if e.kind is EntryKind.DATA:
                _, k, v = e.value.decode().split(" ")
                self.state[k] = v

    def snapshot_records(self) -> list[bytes]:
        return [f"{k}={v}".encode() for k, v in sorted(self.state.items())]

    def load_snapshot(self, snapshot_id: SnapshotId, records: list[bytes]) -> None:
        self.state = dict(r.decode().split("=", 1) for r in records)
        self.position = snapshot_id.end_offset
        self.loads.append(snapshot_id)
