"""When a refused connection proves that the quorum leader's process is gone (issue 23).

A voter notices a dead leader in Kafka only when ``controller.quorum.fetch.timeout.ms``
runs out: "Maximum time without a successful fetch from the current leader before
becoming a candidate and triggering an election for voters" (2 s by default), and KIP-996
keeps the others from helping sooner: "We also want servers to reject Pre-Vote requests
received if they are still within their fetch timeout ... they have recently heard from a
leader so there is no need to consider electing a new leader."

Silence proves nothing (a pause or a partition looks the same), but one answer does: the
leader's own host refusing the connection (ECONNREFUSED: its kernel resets the SYN, so
nothing listens at the endpoint any more). A paused process's listening socket still
completes connections and a partition drops packets (no answer, never a refusal), so
neither is taken for death. A refusal is evidence only when all of these hold, the same
rule as the early fence of a dead broker (``riverbed.metadata.broker_liveness``):

1. it is of a request to the leader of the replica's current epoch, sent in that epoch;
2. the request was sent after the last contact with that leader (a reply, or its
   BeginQuorumEpoch): a later contact makes it stale;
3. the leader's endpoint answered this process before (a reply from that peer): an
   endpoint that refuses from here although the peer lives (a wrong address in this
   node's ``controller.quorum.voters``, a firewall that rejects) never counts.

With such evidence a follower becomes Prospective at once instead of waiting out the
fetch timeout, and a follower grants a pre-vote although it heard from the leader within
the fetch timeout. A pre-vote bumps no epoch, and the real vote's rules are unchanged, so
the shortcut can only start an election sooner, never make one unsafe; and under the
assumptions above it never starts one while the leader lives
(``riverbed.testing.raft_sim_links`` breaks them and must see that).

Assumptions: nothing between two voters answers for a live peer with a reset (a firewall
that REJECTs with tcp-reset would turn a partition into a refusal), and a live
controller's listener stays open until the process stops.
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass


@dataclass(frozen=True)
class Refusal:
    """A request to ``leader_id`` sent in ``epoch`` at ``sent_ms`` whose connection was
    refused."""

    epoch: int
    leader_id: int
    sent_ms: int


def refusal_proves_leader_gone(
    refusal: Refusal,
    *,
    epoch: int,
    leader_id: int,
    last_contact_ms: int,
    answered: Container[int],
) -> bool:
    """Rules 1-3 of the module docstring, for a replica in ``epoch`` following
    ``leader_id`` that last heard from it at ``last_contact_ms`` and got replies from the
    peers in ``answered``."""
    return (
        leader_id >= 0
        and refusal.leader_id == leader_id
        and refusal.epoch == epoch
        and refusal.sent_ms > last_contact_ms
        and leader_id in answered
    )
