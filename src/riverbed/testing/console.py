"""A `riverbed console` process for tests, on a free 127.0.0.1 port."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from riverbed.testing.cluster import free_port, scaled_s

#: How long the console may take to print its address, seconds (scaled with the load).
CONSOLE_START_TIMEOUT_S = 30.0
#: How long it may take to stop after SIGTERM, seconds.
CONSOLE_STOP_TIMEOUT_S = 15.0


@contextmanager
def console_process(args: list[str], log_path: Path, *, scheme: str = "http") -> Iterator[str]:
    """``riverbed console ARGS --listen 127.0.0.1:<free port>``, its output in
    ``log_path``; yields its base URL once it printed it (``scheme`` https with TLS)."""
    port = free_port()
    cmd = [sys.executable, "-m", "riverbed.cli.main", "console", *args]
    cmd += ["--listen", f"127.0.0.1:{port}"]
    url = f"{scheme}://127.0.0.1:{port}"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + scaled_s(CONSOLE_START_TIMEOUT_S)
        while f" at {url}/" not in log_path.read_text():
            assert proc.poll() is None, f"console exited: {log_path.read_text()}"
            assert time.monotonic() < deadline, f"console not up: {log_path.read_text()}"
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=CONSOLE_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
