"""The test harness's port picking: a node's ports never collide with ones handed out
before (a node's HTTP port once came back as its own controller port, and the node could
not bind its listener)."""

from __future__ import annotations

from riverbed.testing.cluster import free_base_port, free_port


def test_free_port_never_hands_out_a_port_twice() -> None:
    # the kernel picks from ~28,000 ephemeral ports; 1,000 picks collide by chance almost
    # surely (birthday bound), unless the picker remembers what it handed out
    ports = [free_port() for _ in range(1000)]
    assert len(set(ports)) == len(ports)


def test_a_base_port_run_is_not_handed_out_again() -> None:
    base = free_base_port(6)
    run = set(range(base, base + 6))
    assert not run & {free_port() for _ in range(1000)}
