"""The test harness's port picking: a node's ports never collide with ones handed out
before (a node's HTTP port once came back as its own controller port, and the node could
not bind its listener)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from riverbed.testing import ports as ports_module
from riverbed.testing.cluster import free_base_port, free_port


def test_free_port_never_hands_out_a_port_twice() -> None:
    # 1,000 picks among the kernel's ~28,000 ephemeral ports collide by chance almost
    # surely (birthday bound); the picker walks its own slice instead
    ports = [free_port() for _ in range(2000)]
    assert len(set(ports)) == len(ports)


def test_a_base_port_run_is_not_handed_out_again() -> None:
    base = free_base_port(6)
    run = set(range(base, base + 6))
    assert not run & {free_port() for _ in range(1000)}


def test_ports_come_from_below_the_kernels_ephemeral_range() -> None:
    # the kernel hands ephemeral ports to outgoing connections: a client's connection could
    # take a port a node is about to bind
    text = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text()
    low = int(text.split()[0])
    ports = [free_port() for _ in range(200)]
    assert all(ports_module.PORT_RANGE_START <= p < low for p in ports)


def test_xdist_workers_pick_from_disjoint_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    picked: dict[str, set[int]] = {}
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "3")
    for worker in ("gw0", "gw1", "gw2"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        monkeypatch.setattr(ports_module, "_picker", None)
        picked[worker] = {free_port() for _ in range(300)}
    assert not picked["gw0"] & picked["gw1"]
    assert not picked["gw1"] & picked["gw2"]
    assert not picked["gw0"] & picked["gw2"]


def test_a_port_in_use_is_skipped() -> None:
    picker = ports_module._SlicePicker(index=5, start_offset=0, slices=8)
    with socket.socket() as held:
        held.bind(("127.0.0.1", picker.first))
        held.listen()
        assert picker.take_run(1, "127.0.0.1") == picker.first + 1


def test_a_single_process_walks_the_whole_range_before_reusing_a_port(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a stopped node of a long-lived cluster keeps its ports for its restart: a serial run
    # hands out thousands of ports, and a slice of ~2,800 came round again within one run
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    monkeypatch.setattr(ports_module, "_picker", None)
    ports = [free_port() for _ in range(6000)]
    assert len(set(ports)) == len(ports)
