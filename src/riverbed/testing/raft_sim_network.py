"""The raft simulation's network (a mixin of `riverbed.testing.raft_sim.Simulation`).

Messages between simulated nodes: each one is scheduled with a random delay (1-12 ms, up to
900 ms in a slow-network period, so reordering follows and late replies outlive request
timeouts), may be dropped (``drop_rate``) or duplicated (``dup_rate``), and never crosses a
partition (two sides, or a one-way cut). A request that cannot go out fails at the sender's
shell as the real one would see it (``raft_sim_links``: refused fast, or timed out); a
response only reaches the incarnation that asked. ``--wire`` passes every message through
``raft.wire`` and the message engine's bytes (`through_wire`).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from riverbed.protocol.messages import decode, encode, request_class, response_class
from riverbed.raft import wire
from riverbed.raft.messages import (
    BeginQuorumEpochResponse,
    DescribeQuorumResponse,
    EndQuorumEpochResponse,
    FetchResponse,
    FetchSnapshotResponse,
    VoteResponse,
)
from riverbed.testing.raft_sim_links import Links, Outcome, failure

if TYPE_CHECKING:
    from riverbed.raft.actions import Action
    from riverbed.raft.config import RaftConfig
    from riverbed.raft.node import RaftNode
    from riverbed.testing.raft_sim import SimNode, SimParams


_RESPONSE_API = {
    VoteResponse: wire.API_VOTE,
    BeginQuorumEpochResponse: wire.API_BEGIN_QUORUM_EPOCH,
    EndQuorumEpochResponse: wire.API_END_QUORUM_EPOCH,
    FetchResponse: wire.API_FETCH,
    FetchSnapshotResponse: wire.API_FETCH_SNAPSHOT,
    DescribeQuorumResponse: wire.API_DESCRIBE_QUORUM,
}


def through_wire(msg: Any) -> Any:
    """The message as the peer would decode it from Kafka wire bytes."""
    api = _RESPONSE_API.get(type(msg))
    if api is None:
        api, version, wire_msg = wire.encode_request(msg)
        data = encode(wire_msg, version)
        return wire.decode_request(api, decode(request_class(api), data, version))
    version = wire.WIRE_VERSIONS[api]
    data = encode(wire.encode_response(msg), version)
    return wire.decode_response(api, decode(response_class(api), data, version))


class NetworkMixin:
    if TYPE_CHECKING:  # provided by Simulation
        p: SimParams
        rng: random.Random
        now: int
        config: RaftConfig
        nodes: dict[int, SimNode]
        links: Links
        stats: Counter[str]
        partition: dict[int, int]
        drop_rate: float
        dup_rate: float
        slow_until: int

        def schedule(self, at: int, kind: str, *payload: Any) -> None: ...
        def trace(self, text: str) -> None: ...
        def feed(self, sn: SimNode, fn: Callable[[RaftNode], list[Action]]) -> None: ...

    def connected(self, a: int, b: int) -> bool:
        return self.partition.get(a, 0) == self.partition.get(b, 0) and (a, b) not in self.links.cut

    def request_outcome(self, src: int, dst: int, corr: int) -> bool:
        """Whether a request goes out (``raft_sim_links``); if not, the shell's failure."""
        peer = self.nodes[dst]
        ways = (self.connected(src, dst), self.connected(dst, src))
        outcome = self.links.request(src, dst, peer.incarnation if peer.alive else None, ways)
        if outcome is Outcome.DELIVER and self.rng.random() >= self.drop_rate:
            return True
        after = (
            self.rng.randint(1, 5) if outcome is Outcome.REFUSED else self.config.request_timeout_ms
        )
        self.fail_request(src, self.nodes[src].incarnation, dst, corr, failure(outcome), after)
        return False

    def fail_request(
        self, src: int, src_inc: int, dst: int, corr: int, exc: BaseException, after: int
    ) -> None:
        self.schedule(self.now + after, "failed", src, src_inc, dst, corr, exc)

    def send(self, src: int, dst: int, kind: str, corr: int, msg: Any, dst_inc: int) -> None:
        if kind == "req" and not self.request_outcome(src, dst, corr):
            return
        if kind == "resp" and (not self.connected(src, dst) or self.rng.random() < self.drop_rate):
            # the requester's shell times out waiting for it
            timeout = self.rng.randint(1, self.config.request_timeout_ms // 2)
            self.fail_request(dst, dst_inc, src, corr, TimeoutError(), timeout)
            return
        copies = 2 if self.rng.random() < self.dup_rate else 1
        src_inc = self.nodes[src].incarnation
        if self.p.wire:
            msg = through_wire(msg)
        for _ in range(copies):
            # a slow network period: some messages outlive the request timeout, so late
            # replies to requests already retried are common
            slow = self.slow_until > self.now and self.rng.random() < 0.3
            delay = self.rng.randint(1, 900) if slow else self.rng.randint(1, 12)
            self.schedule(self.now + delay, "msg", src, src_inc, dst, dst_inc, kind, corr, msg)

    def reset(self, dead: int, src: int, src_inc: int, corr: int) -> None:
        """``dead``'s process died with ``src``'s request on its connection: its host's
        kernel resets the connection (if the host lives and its packets reach ``src``)."""
        if dead not in self.links.host_down and self.connected(dead, src):
            exc = ConnectionResetError("connection closed")
            self.fail_request(src, src_inc, dead, corr, exc, self.rng.randint(1, 5))

    def deliver(
        self, src: int, src_inc: int, dst: int, dst_inc: int, mkind: str, corr: int, msg: Any
    ) -> None:
        """A request or response arrives (a response only at the incarnation that asked)."""
        sn = self.nodes[dst]
        if not sn.alive and mkind == "req":
            self.reset(dst, src, src_inc, corr)  # sent on the connection to a dead process
        if not sn.alive or not self.connected(src, dst):
            return
        if mkind == "req":
            if self.p.verbose:
                self.trace(f"{src}->{dst} #{corr} {msg}")
            sn.request_incarnation[(src, corr)] = src_inc
            self.feed(sn, lambda n: n.handle_request(src, corr, msg, self.now))
        elif dst_inc == sn.incarnation:
            if isinstance(msg, FetchResponse):
                if msg.diverging_epoch is not None:
                    self.stats["diverging"] += 1
                if msg.snapshot_id is not None:
                    self.stats["fetch->snapshot id"] += 1
            elif isinstance(msg, FetchSnapshotResponse):
                self.stats[f"fetch_snapshot error {msg.error_code}"] += 1
            if self.p.verbose:
                self.trace(f"{src}->{dst} #{corr} {msg}")
            self.feed(sn, lambda n: n.handle_response(src, corr, msg, self.now))
