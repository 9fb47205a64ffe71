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

from riverbed.testing.cluster import free_base_port, scaled_s

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
        # Kafka's quickstart value: a new group's first join is not held 3 s
        from confluent_kafka.admin import ConfigResource  # type: ignore[attr-defined]

        node = ConfigResource(ConfigResource.Type.BROKER, "1")
        configs = admin.describe_configs([node])[node].result(30)
        assert configs["group.initial.rebalance.delay.ms"].value == "0"
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


def _start_dev(tmp_path: Path, *extra: str) -> tuple[subprocess.Popen[bytes], Path, str]:
    """`riverbed dev --nodes 3` with ``extra`` options; (process, its output file, text
    printed once it is ready)."""
    base = free_base_port()
    out_path = tmp_path / "dev.out"
    argv = [sys.executable, "-m", "riverbed.cli.main", "dev", "--nodes", "3"]
    argv += ["--dir", str(tmp_path / "cluster"), "--base-port", str(base), *extra]
    with open(out_path, "wb") as out:
        proc = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    _wait_output(proc, out_path, "Ctrl-C stops every node.")
    return proc, out_path, out_path.read_text()


def _wait_output(proc: subprocess.Popen[bytes], out_path: Path, line: str) -> None:
    deadline = time.monotonic() + scaled_s(60)
    while line not in (text := out_path.read_text()):
        assert proc.poll() is None, f"riverbed dev exited early:\n{text}"
        assert time.monotonic() < deadline, f"no {line!r} from riverbed dev:\n{text}"
        time.sleep(0.2)


def test_dev_keep_running_survives_a_killed_node_and_stops_without_a_quorum(
    tmp_path: Path,
) -> None:
    """--keep-running: a SIGKILLed node is reported and the other two keep serving (every
    partition takes records with acks=all and they are read back); with a second node
    killed the quorum is gone, and Ctrl-C stops the last node without waiting out the
    controlled shutdown (its log says the wait was skipped: no controller can answer)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    proc, out_path, text = _start_dev(tmp_path, "--keep-running")
    try:
        pids = {int(i): int(p) for i, p in re.findall(r"node (\d): pid (\d+)", text)}
        bootstrap = re.findall(r"bootstrap servers:\s+(\S+)", text)[0]
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("failover", 6)])["failover"].result(30)
        os.kill(pids[1], signal.SIGKILL)
        _wait_output(proc, out_path, "node 1 exited (code -9); the others keep running")
        survivors = ",".join(b for b in bootstrap.split(",")[1:])
        producer = Producer(
            {"bootstrap.servers": survivors, "message.timeout.ms": int(scaled_s(60) * 1000)}
        )
        for p in range(6):
            producer.produce("failover", value=f"after-kill-{p}".encode(), partition=p)
        assert producer.flush(scaled_s(90)) == 0
        consumer = Consumer(
            {
                "bootstrap.servers": survivors,
                "group.id": "failover-reader",  # assigned: no group coordinator needed
                "enable.auto.commit": False,
            }
        )
        consumer.assign([TopicPartition("failover", p, OFFSET_BEGINNING) for p in range(6)])
        seen: set[bytes] = set()
        deadline = time.monotonic() + scaled_s(60)
        while len(seen) < 6 and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                seen.add(msg.value())
        consumer.close()
        assert seen == {f"after-kill-{p}".encode() for p in range(6)}
        assert proc.poll() is None and alive(pids[2]) and alive(pids[3])
        os.kill(pids[2], signal.SIGKILL)
        _wait_output(proc, out_path, "node 2 exited (code -9); the others keep running")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(scaled_s(60)) == 0
        assert not alive(pids[3])
        log3 = (tmp_path / "cluster" / "node-3" / "broker-3.log").read_text()
        assert "controlled shutdown skipped: no controller answered" in log3, log3[-3000:]
        assert "node 3 stopped" in log3
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
