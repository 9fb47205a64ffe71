"""Ports for the nodes that tests and benchmarks start on loopback.

A port handed out here is checked free and then released, and the node given it binds it
later. Two things could take it in that window: another test process picking the same
port (pytest-xdist runs several workers at once), and the kernel, which hands out
ephemeral ports (``net.ipv4.ip_local_port_range``, 32768-60999 by default) to outgoing
connections and to ``bind(port 0)``. Picking with ``bind(port 0)`` therefore collides by
chance: 1,000 picks among ~28,000 ports almost surely repeat one (birthday bound), and a
client's outgoing connection can take a port a node is about to bind.

So ports come from below the ephemeral range (PORT_RANGE_START..PORT_RANGE_END, which
the kernel never hands out by itself), split into one disjoint slice per pytest-xdist
worker (``PYTEST_XDIST_WORKER`` = ``gwN`` of ``PYTEST_XDIST_WORKER_COUNT``); a process
outside xdist walks the whole range. A process walks its slice in order from a
pid-dependent start, so a port comes back only after the whole slice has been handed out
(22,768 ports in one process, ~7,600 each for three workers): a stopped node of a
long-lived cluster keeps its ports for its restart. Every port is still checked bindable
(a port held or in TIME_WAIT elsewhere is skipped).
"""

from __future__ import annotations

import os
import socket

#: first port of the picker's range (above the well-known and most registered ports)
PORT_RANGE_START = 10000
#: one past the last port; the kernel's ephemeral range starts here by default
PORT_RANGE_END = 32768
#: the most slices the range is split into (xdist workers beyond share slices)
PORT_SLICES_MAX = 8


def _slices() -> tuple[int, int]:
    """(this process's slice index, number of slices)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if worker.startswith("gw") and worker[2:].isdigit() and count.isdigit() and int(count) > 0:
        slices = min(int(count), PORT_SLICES_MAX)
        return int(worker[2:]) % slices, slices
    return 0, 1


class _SlicePicker:
    """Hands out the ports of one slice in order, wrapping around."""

    def __init__(self, index: int, start_offset: int, slices: int = 1) -> None:
        self.size = (PORT_RANGE_END - PORT_RANGE_START) // slices
        self.first = PORT_RANGE_START + index * self.size
        self.next_offset = start_offset % self.size

    def take_run(self, count: int, host: str) -> int:
        """The first of ``count`` consecutive bindable ports of the slice, handed out."""
        assert 1 <= count < self.size
        for _ in range(self.size):
            if self.next_offset + count > self.size:
                self.next_offset = 0
            base = self.first + self.next_offset
            self.next_offset += count
            if all(_bindable(host, p) for p in range(base, base + count)):
                return base
        raise AssertionError(
            f"no {count} consecutive free ports in {self.first}..{self.first + self.size - 1}"
        )


def _bindable(host: str, port: int) -> bool:
    # no SO_REUSEADDR: a port with a connection in TIME_WAIT is skipped too
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


_picker: _SlicePicker | None = None
_picker_pid = -1


def _current_picker() -> _SlicePicker:
    global _picker, _picker_pid
    pid = os.getpid()
    if _picker is None or _picker_pid != pid:  # a forked child picks from its own slice
        index, slices = _slices()
        _picker = _SlicePicker(index, start_offset=pid * 97, slices=slices)
        _picker_pid = pid
    return _picker


def free_port(host: str = "127.0.0.1") -> int:
    """A port on ``host`` that is free now and that no test process handed out recently."""
    return _current_picker().take_run(1, host)


def free_base_port(count: int = 6) -> int:
    """A port P such that P..P+count-1 are free now and were not handed out recently."""
    return _current_picker().take_run(count, "127.0.0.1")
