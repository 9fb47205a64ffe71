"""Start-up time of a single node: ``riverbed server start`` until its ready line.

Runs the node from two source trees in the same run, interleaved, so both see the same
load: the checkout under test (``--src``, default this one) and a baseline (``--baseline``,
e.g. ``/work/main/src`` before a change). Each round starts a node on a fresh data dir
(first start: format + bootstrap records) and once more on that dir (restart: replay),
then stops it with SIGTERM. Prints min / median per case and the median ratio.

    .venv/bin/python -m benchmarks.startup_bench --baseline /path/to/old/src --rounds 7
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: Seconds one node may take to print its ready line before the round fails.
READY_TIMEOUT_S = 60.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_until_ready(src: str, data: Path) -> float:
    env = dict(os.environ, PYTHONPATH=src)
    cmd = [
        sys.executable,
        "-c",
        "import sys; from riverbed.cli.main import main; sys.exit(main())",
        "server",
        "start",
        "--override",
        f"listeners=PLAINTEXT://127.0.0.1:{_free_port()}",
        "--override",
        f"log.dirs={data}",
    ]
    started = time.perf_counter()
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        assert proc.stdout is not None
        deadline = started + READY_TIMEOUT_S
        while time.perf_counter() < deadline:
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError(f"node from {src} exited with {proc.wait()} before ready")
            if " ready: " in line:
                return time.perf_counter() - started
        raise RuntimeError(f"node from {src} not ready after {READY_TIMEOUT_S} s")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.startup_bench")
    here = str(Path(__file__).resolve().parents[1] / "src")
    parser.add_argument("--src", default=here, help="source tree under test")
    parser.add_argument("--baseline", required=True, help="baseline source tree")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    cases = {(name, kind): [] for name in ("baseline", "change") for kind in ("first", "restart")}
    trees = {"baseline": args.baseline, "change": args.src}
    for _ in range(args.rounds):
        for name, src in trees.items():
            with tempfile.TemporaryDirectory(prefix="rb-startup-") as tmp:
                cases[(name, "first")].append(_start_until_ready(src, Path(tmp)))
                cases[(name, "restart")].append(_start_until_ready(src, Path(tmp)))
    for kind in ("first", "restart"):
        base = statistics.median(cases[("baseline", kind)])
        new = statistics.median(cases[("change", kind)])
        for name, med in (("baseline", base), ("change", new)):
            times = cases[(name, kind)]
            print(f"{kind:8} {name:9} min {min(times) * 1000:7.0f} ms  median {med * 1000:7.0f} ms")
        print(f"{kind:8} ratio change/baseline (median): {new / base:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
