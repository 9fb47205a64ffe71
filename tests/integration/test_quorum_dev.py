"""`riverbed dev --nodes 3` end to end: it prints the bootstrap servers and the quorum,
`riverbed quorum describe` answers against any controller endpoint (a follower passes
DescribeQuorum on to the leader), and SIGTERM stops every node (by PID) with exit code 0."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from riverbed.testing.cluster import free_base_port

pytestmark = pytest.mark.timeout(120)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_dev_three_nodes(tmp_path: Path) -> None:
    base = free_base_port()
    out_path = tmp_path / "dev.out"
    with open(out_path, "wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "riverbed.cli.main",
                "dev",
                "--nodes",
                "3",
                "--dir",
                str(tmp_path / "cluster"),
                "--base-port",
                str(base),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        deadline = time.monotonic() + 60
        text = ""
        while "Ctrl-C stops every node." not in text:
            assert proc.poll() is None, f"riverbed dev exited early:\n{text}"
            assert time.monotonic() < deadline, f"riverbed dev not ready:\n{text}"
            time.sleep(0.2)
            text = out_path.read_text()
        expected = ",".join(f"127.0.0.1:{base + 2 * i}" for i in range(3))
        assert f"bootstrap servers:   {expected}" in text
        voters = ",".join(f"{i + 1}@127.0.0.1:{base + 2 * i + 1}" for i in range(3))
        assert f"controller quorum:   {voters}" in text
        pids = [int(p) for p in re.findall(r"node \d: pid (\d+)", text)]
        assert len(pids) == 3 and all(alive(p) for p in pids)
        for i in range(3):
            describe = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "riverbed.cli.main",
                    "quorum",
                    "describe",
                    "--bootstrap-controller",
                    f"127.0.0.1:{base + 2 * i + 1}",
                ],
                capture_output=True,
                text=True,
                timeout=30,
            )
            assert describe.returncode == 0, describe.stderr
            assert re.search(r"LeaderId: [123]\s", describe.stdout), describe.stdout
        # topics are replicated by default (replication factor 3, min.insync.replicas 2)
        from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

        admin = AdminClient({"bootstrap.servers": expected})
        admin.create_topics([NewTopic("dev-default", 1)])["dev-default"].result(30)
        part = admin.list_topics("dev-default", timeout=10).topics["dev-default"].partitions[0]
        assert sorted(part.replicas) == [1, 2, 3]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        deadline = time.monotonic() + 10
        while any(alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(alive(p) for p in pids), "a node outlived riverbed dev"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
