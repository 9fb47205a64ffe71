"""Launch real riverbed broker processes on loopback for tests and benchmarks.

Each `BrokerProcess` runs ``riverbed server start`` (as ``python -m riverbed.cli.main``
with the current interpreter) as a child process with its own temp data directory and
free 127.0.0.1 ports, waits for the node's ready line on stdout
(``riverbed node <id> ready: PLAINTEXT://host:port ...``, see riverbed.server.node),
and stops it by PID: SIGTERM for a clean shutdown, SIGKILL for a crash. A restart reuses
the same ports and data directory, so clients reconnect to the same address.

The child's stdout and stderr go to ``<workdir>/broker.log``; a broker that fails to
start raises `BrokerStartError` carrying the tail of that log.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

# re-exported: tests import the port pickers from here
from riverbed.testing.ports import free_base_port as free_base_port
from riverbed.testing.ports import free_port as free_port

#: Seconds `start` waits for the ready line before giving up.
START_TIMEOUT_S = 30.0
#: Seconds `stop` waits after SIGTERM before sending SIGKILL.
STOP_TIMEOUT_S = 15.0
#: Bytes of the broker log quoted in a start error.
LOG_TAIL_BYTES = 4000

#: The most a deadline of the test harness stretches on a loaded machine (see scaled_s).
LOAD_SCALE_MAX = 4.0


def scaled_s(timeout_s: float) -> float:
    """``timeout_s`` stretched by the machine's load (the 1-minute load average per CPU,
    between 1 and LOAD_SCALE_MAX): a deadline for what takes CPU time, such as a node's
    start (imports, recovery, the quorum), that a fully loaded machine must not break.
    Only deadlines of waits on a condition stretch; nothing is asserted about time."""
    try:
        per_cpu = os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:  # no load average on this platform
        per_cpu = 1.0
    return timeout_s * min(max(per_cpu, 1.0), LOAD_SCALE_MAX)


class BrokerStartError(RuntimeError):
    """The broker process exited or did not become ready in time."""


def _server_command() -> list[str]:
    import importlib.util

    if importlib.util.find_spec("riverbed.cli.server") is not None:
        return [sys.executable, "-m", "riverbed.cli.main", "server", "start"]
    # Before the CLI verb exists: the node's own entry point (same options).
    return [sys.executable, "-m", "riverbed.server.node"]


class BrokerProcess:
    """One riverbed node (combined broker+controller) as a child process."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        overrides: Mapping[str, str] | None = None,
        port: int = 0,
        node_id: int = 1,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self._own_workdir = data_dir is None
        self.workdir = Path(tempfile.mkdtemp(prefix="riverbed-test-")) if data_dir is None else None
        self.data_dir = (
            Path(data_dir) if data_dir is not None else (self.workdir or Path(".")) / "data"
        )
        self.log_path = (self.workdir or self.data_dir.parent) / f"broker-{node_id}.log"
        self.node_id = node_id
        self.port = port or free_port()
        self.controller_port = free_port()
        #: the node's HTTP listener (/metrics, /health/*; riverbed.http.listeners)
        self.http_port = free_port()
        self.extra_overrides = dict(overrides or {})
        self.env = dict(env or {})
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_offset = 0

    # -- addresses -----------------------------------------------------------------
    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def http_url(self) -> str:
        """Base URL of the node's /metrics and /health endpoints."""
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def overrides(self) -> dict[str, str]:
        base = {
            "node.id": str(self.node_id),
            "process.roles": "broker,controller",
            "listeners": (
                f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}"
            ),
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "controller.quorum.voters": f"{self.node_id}@127.0.0.1:{self.controller_port}",
            "log.dirs": str(self.data_dir),
            "riverbed.http.listeners": self.http_url,
        }
        base.update(self.extra_overrides)
        return base

    # -- lifecycle -----------------------------------------------------------------
    def start(self, timeout_s: float = START_TIMEOUT_S) -> BrokerProcess:
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cmd = _server_command()
        for key, value in self.overrides().items():
            cmd += ["--override", f"{key}={value}"]
        env = dict(os.environ)
        env.update(self.env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        # The broker stops by itself if this process dies (no leaked brokers).
        env.setdefault("RIVERBED_EXIT_WITH_PARENT", str(os.getpid()))
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        logf = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        self._log_offset = logf.tell()
        try:
            self.proc = subprocess.Popen(
                cmd, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
            )
        finally:
            logf.close()
        self._wait_ready(timeout_s)
        return self

    def _log_text(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._log_offset)
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def log_text(self) -> str:
        """Everything the broker wrote (stdout and stderr) since its last start."""
        return self._log_text()

    def log_tail(self) -> str:
        return self._log_text()[-LOG_TAIL_BYTES:]

    def _wait_ready(self, timeout_s: float) -> None:
        assert self.proc is not None
        timeout_s = scaled_s(timeout_s)  # a start under load is CPU-bound: not a hang
        deadline = time.monotonic() + timeout_s
        marker = f"riverbed node {self.node_id} ready:"
        while time.monotonic() < deadline:
            if marker in self._log_text():
                return
            if self.proc.poll() is not None:
                raise BrokerStartError(
                    f"broker exited with code {self.proc.returncode} before it was ready;"
                    f" log tail:\n{self.log_tail()}"
                )
            time.sleep(0.05)
        self.kill()
        raise BrokerStartError(f"broker not ready after {timeout_s}s; log tail:\n{self.log_tail()}")

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM and wait (clean shutdown); SIGKILL after ``timeout_s``. Returns the exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc is not None else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def kill(self) -> None:
        """SIGKILL: a crash, nothing flushed on the way out."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def restart(self, *, kill: bool = False, timeout_s: float = START_TIMEOUT_S) -> BrokerProcess:
        """Stop (clean, or SIGKILL with ``kill=True``) and start again on the same port and data."""
        if kill:
            self.kill()
        else:
            self.stop()
        return self.start(timeout_s)

    def close(self) -> None:
        """Stop the broker and remove the temp directory this object created."""
        self.stop()
        if self._own_workdir and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> BrokerProcess:
        if self.proc is None:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with contextlib.suppress(Exception):
            self.close()


def start_broker(**kwargs: object) -> BrokerProcess:
    """Start a broker (see `BrokerProcess` for the keyword arguments) and return it."""
    return BrokerProcess(**kwargs).start()  # type: ignore[arg-type]
