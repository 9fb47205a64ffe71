"""Roles of a KRaft replica and every transition between them — the one place they are
documented. ``RaftNode`` (``riverbed.raft.node``) implements exactly this table, its transitions
in ``riverbed.raft.role_transitions``.

Roles (epoch = the replica's current epoch, persisted in the quorum-state file):

========== ================================================================================
Unattached epoch known, leader unknown; maybe voted (``voted_id``) in this epoch.
Prospective pre-vote (KIP-996): asks voters "would you vote for me in epoch+1?" without
           bumping the epoch, so a partitioned replica cannot disrupt a healthy leader.
Candidate  epoch bumped, voted for itself, asking for votes.
Leader     won a majority; appends LeaderChange, replicates by answering Fetch.
Follower   knows the leader of its epoch; fetches from it.
Resigned   former leader of this epoch (shutdown or failed check-quorum); sent
           EndQuorumEpoch and waits for the next election.
========== ================================================================================

Observers (replicas not in ``controller.quorum.voters``, or a voter whose directory id no
longer matches — it lost its disk) are only ever Unattached or Follower: they never start
elections, never vote, and their fetches do not count toward the high watermark... except
that a re-formatted voter's durable log still counts (its data is on disk), it just never
votes again under that id (KIP-853).

Transitions (``*`` = any role; "higher epoch" = a message carrying a larger epoch):

=================  ==============================================  =====================
from               event                                           to
=================  ==============================================  =====================
*                  higher epoch, leader known                      Follower(epoch, L)
*                  higher epoch, leader unknown / Vote / PreVote   Unattached(epoch)
Unattached         BeginQuorumEpoch / fetch reply naming leader    Follower
Unattached         election timeout (voter)                        Prospective
Unattached         election timeout (observer)                     Unattached, fetch a
                                                                   random voter to find L
Unattached         grants a Vote                                   Unattached(voted)
Prospective        majority of pre-votes granted                   Candidate(epoch + 1)
Prospective        pre-vote lost or election timeout               Follower(L) if it came
                                                                   from one, else
                                                                   Unattached
Prospective        reply naming the leader of its epoch            Follower
Candidate          majority of votes granted                       Leader
Candidate          election timeout                                backoff (random up to
                                                                   election.backoff.max),
                                                                   then Prospective
Candidate          BeginQuorumEpoch of its epoch                   Follower
Follower           fetch timeout (voter)                           Prospective
Follower           the leader's endpoint refused a request sent    Prospective at once
                   since the last contact, and answered before
                   (voter; ``riverbed.raft.refusals``)
Follower           the same (observer)                             Unattached, fetch
                                                                   another voter at once
Follower           fetch timeout (observer)                        Unattached
Follower           EndQuorumEpoch from its leader                  Unattached; election
                                                                   soon (earlier for
                                                                   preferred successors)
Leader             shutdown (``resign``)                           Resigned + EndQuorumEpoch
Leader             check-quorum: no fetch from a majority of       Resigned + EndQuorumEpoch
                   voters within 1.5 x fetch timeout
Resigned           election timeout                                Prospective
(restart)          quorum-state says leader = self                 Resigned(epoch)
(restart)          quorum-state names another leader               Follower(epoch, L)
(restart)          otherwise                                       Unattached(epoch, vote)
=================  ==============================================  =====================

Vote rules: a real vote for epoch E is granted iff E >= own epoch (after moving to E), no
other vote was cast in E, no leader is known in E, and the candidate's log
(last epoch, end offset) is at least as up to date as ours. A pre-vote changes nothing; it
carries the asker's current epoch E; a voter behind E first moves to Unattached(E) (as in
Kafka: the asker saw an epoch whose leader can no longer be followed), and it is granted iff
the log is as up to date and we are not a leader or candidate and have not heard from a
live leader within the fetch timeout (KIP-996) -- or that leader refused a connection since
(its process is gone, ``riverbed.raft.refusals``). The vote is persisted before the reply is
sent.
"""

from __future__ import annotations

from enum import Enum


class Role(Enum):
    UNATTACHED = "Unattached"
    PROSPECTIVE = "Prospective"
    CANDIDATE = "Candidate"
    LEADER = "Leader"
    FOLLOWER = "Follower"
    RESIGNED = "Resigned"
