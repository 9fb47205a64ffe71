"""`riverbed server start` with no config (what `make run` runs) and clean shutdown.

The node starts from the embedded default in its working directory (only the ports are
overridden, so tests never take 9092 or 9644), formats ./riverbed-data on first start, serves
kcat, and on SIGTERM / SIGINT answers the request in flight (a long-poll fetch parked in
the purgatory), writes the clean-shutdown marker and exits 0, well before that fetch's
max wait would have ended.
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.headers import RequestHeader, decode_response, encode_request
from riverbed.protocol.messages import CreateTopicsRequest, FetchRequest
from riverbed.storage.log_manager import CLEAN_SHUTDOWN_FILE
from riverbed.testing.cluster import free_port

pytestmark = pytest.mark.integration

#: Liveness bounds (not timings under test): start-up and the shutdown under test.
READY_WAIT_S = 30.0
STOP_WAIT_S = 10.0
#: The fetch's max wait: far longer than a clean shutdown may take.
LONG_POLL_MS = 60_000


def _start(cwd: Path, port: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "riverbed.cli.main", "server", "start",
         "--override", f"listeners=PLAINTEXT://localhost:{port}",
         "--override", f"riverbed.http.listeners=http://127.0.0.1:{free_port()}"],
        cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "RIVERBED_EXIT_WITH_PARENT": str(os.getpid())},
    )  # fmt: skip
    assert proc.stdout is not None
    deadline = time.monotonic() + READY_WAIT_S
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if "ready:" in line:
            assert f"PLAINTEXT://localhost:{port}" in line
            return proc
    proc.kill()
    raise AssertionError(f"no ready line; output: {proc.stdout.read()}")


def _call(sock: socket.socket, cid: int, api: int, version: int, body: object) -> object:
    header = RequestHeader(api, version, cid, "embedded-test")
    sock.sendall(encode_request(header, body))
    return decode_response(header, _read_frame(sock))


def _read_frame(sock: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            assert chunk, "connection closed"
            buf += chunk
        return buf

    (size,) = struct.unpack(">i", exactly(4))
    return exactly(size)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "ctrl-c"])
def test_embedded_default_serves_and_stops_cleanly(tmp_path: Path, sig: signal.Signals) -> None:
    port = free_port()
    proc = _start(tmp_path, port)
    try:
        data = tmp_path / "riverbed-data"
        assert (data / "meta.properties").is_file()  # formatted on first start
        assert not (data / CLEAN_SHUTDOWN_FILE).exists()  # running: no marker
        meta = subprocess.run(
            ["kcat", "-b", f"localhost:{port}", "-L", "-m", "10"],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert "broker 1 at localhost:" in meta.stdout, meta.stderr

        sock = socket.create_connection(("localhost", port), timeout=STOP_WAIT_S + 5)
        create = CreateTopicsRequest(
            topics=[CreateTopicsRequest.CreatableTopic(name="t", num_partitions=1, replication_factor=1)],
            timeout_ms=10_000,
        )  # fmt: skip
        assert _call(sock, 1, ApiKey.CREATE_TOPICS, 7, create).topics[0].error_code == 0  # type: ignore[attr-defined]
        F = FetchRequest
        fetch = F(
            replica_id=-1, max_wait_ms=LONG_POLL_MS, min_bytes=1, max_bytes=1 << 20,
            isolation_level=0, session_id=0, session_epoch=-1,
            topics=[F.FetchTopic(topic="t", partitions=[
                F.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])],
        )  # fmt: skip
        header = RequestHeader(ApiKey.FETCH, 12, 2, "embedded-test")
        sock.sendall(encode_request(header, fetch))
        time.sleep(0.5)  # let the fetch park in the purgatory
        proc.send_signal(sig)
        # The in-flight fetch is answered (empty), not dropped.
        resp = decode_response(header, _read_frame(sock))
        assert [p.error_code for p in resp.responses[0].partitions] == [0]
        # Exits 0 within STOP_WAIT_S, far inside the fetch's LONG_POLL_MS.
        assert proc.wait(timeout=STOP_WAIT_S) == 0
        assert (data / CLEAN_SHUTDOWN_FILE).is_file()
        sock.close()
        out = proc.stdout.read() if proc.stdout else ""
        assert "node 1 stopped" in out
        assert "Traceback" not in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
