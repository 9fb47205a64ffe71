"""The quorum-state file: what a replica must remember across restarts to never vote twice
in an epoch or forget the epoch it is in.

File ``quorum-state`` in the metadata log directory (``__cluster_metadata-0``), JSON as
Kafka's QuorumStateData v1 (raft/QuorumStateData.json)::

    {"leaderId": 1, "leaderEpoch": 5, "votedId": -1, "votedDirectoryId": "...",
     "data_version": 1}

It is replaced atomically: write ``quorum-state.tmp``, fsync it, rename over
``quorum-state``, fsync the directory. The node never touches the file; it emits a
``PersistQuorumState`` action and the shell calls ``write_quorum_state_file``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from riverbed.storage.checkpoints import write_atomic

QUORUM_STATE_FILE = "quorum-state"
QUORUM_STATE_FILE_BYTES_MAX = 64 * 1024  # the file is a few dozen bytes; refuse garbage


class QuorumStateError(ValueError):
    """The quorum-state file is unreadable; the message names the file and the problem."""


@dataclass(frozen=True)
class QuorumState:
    leader_epoch: int = 0
    leader_id: int = -1
    voted_id: int = -1
    voted_directory_id: str = ""

    def __post_init__(self) -> None:
        assert self.leader_epoch >= 0, self
        assert self.leader_id == -1 or self.voted_id == -1 or self.leader_id >= 0, self

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "leaderId": self.leader_id,
                "leaderEpoch": self.leader_epoch,
                "votedId": self.voted_id,
                "votedDirectoryId": self.voted_directory_id,
                "data_version": 1,
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def from_json(cls, data: bytes, *, source: str = QUORUM_STATE_FILE) -> QuorumState:
        try:
            obj = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise QuorumStateError(f"{source}: not valid JSON ({exc})") from None
        if not isinstance(obj, dict):
            raise QuorumStateError(f"{source}: expected a JSON object")

        def int_field(name: str, default: int) -> int:
            value = obj.get(name, default)
            if not isinstance(value, int) or isinstance(value, bool):
                raise QuorumStateError(f"{source}: {name} must be an integer, got {value!r}")
            return value

        epoch = int_field("leaderEpoch", 0)
        if epoch < 0:
            raise QuorumStateError(f"{source}: leaderEpoch {epoch} is negative")
        directory = obj.get("votedDirectoryId", "")
        if not isinstance(directory, str):
            raise QuorumStateError(f"{source}: votedDirectoryId must be a string")
        return cls(
            leader_epoch=epoch,
            leader_id=int_field("leaderId", -1),
            voted_id=int_field("votedId", -1),
            voted_directory_id=directory,
        )


def write_quorum_state_file(directory: str | os.PathLike[str], state: QuorumState) -> None:
    """Atomically replace ``<directory>/quorum-state`` (temp + fsync + rename + dir fsync)."""
    write_atomic(Path(directory) / QUORUM_STATE_FILE, state.to_json().decode())


def read_quorum_state_file(directory: str | os.PathLike[str]) -> QuorumState | None:
    """The persisted state, or None when the file does not exist (a fresh replica)."""
    path = Path(directory) / QUORUM_STATE_FILE
    try:
        with open(path, "rb") as f:
            data = f.read(QUORUM_STATE_FILE_BYTES_MAX + 1)
    except FileNotFoundError:
        return None
    if len(data) > QUORUM_STATE_FILE_BYTES_MAX:
        raise QuorumStateError(f"{path}: larger than {QUORUM_STATE_FILE_BYTES_MAX} bytes")
    return QuorumState.from_json(data, source=str(path))
