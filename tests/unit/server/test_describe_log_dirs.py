"""DescribeLogDirs shows a replica moving between log dirs as a future replica (JBOD)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from riverbed.protocol.messages import DescribeLogDirsRequest
from riverbed.server.broker.admin import handle_describe_log_dirs


class MovingLogManager:
    def __init__(self, source: Path, target: Path) -> None:
        self.source, self.target = source, target

    def log_dir_of(self, topic: str, partition: int) -> Path:
        return self.source

    def future_logs(self) -> dict[tuple[str, int], tuple[Path, int, int]]:
        return {("t", 0): (self.target, 1234, 56)}

    def offline_dirs(self) -> dict[Path, str]:
        return {}


def test_a_moving_replica_is_listed_twice(tmp_path: Path) -> None:
    source, target = tmp_path / "d1", tmp_path / "d2"
    source.mkdir()
    target.mkdir()
    hosted = SimpleNamespace(log=SimpleNamespace(size_bytes=5000))
    broker: Any = SimpleNamespace(
        config=SimpleNamespace(log_dirs=[str(source), str(target)]),
        partitions=SimpleNamespace(
            partitions={("t", 0): hosted},
            log_manager=MovingLogManager(source, target),
            replicas=None,  # no replica manager: no follower lag
        ),
    )
    resp = asyncio.run(handle_describe_log_dirs(broker, None, DescribeLogDirsRequest(topics=None)))
    listed = {
        r.log_dir: [
            (t.name, p.partition_index, p.partition_size, p.offset_lag, p.is_future_key)
            for t in r.topics
            for p in t.partitions
        ]
        for r in resp.results
    }
    assert listed == {
        str(source): [("t", 0, 5000, 0, False)],
        str(target): [("t", 0, 1234, 56, True)],
    }
