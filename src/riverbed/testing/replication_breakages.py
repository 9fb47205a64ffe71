"""Deliberately broken rules of the partition cores, for the replication simulations'
mutation tests (each must make ``replication_sim`` and ``replication_shell_sim`` fail).

``BROKEN_CORE_RULES`` maps a name to ``(owner, attribute, replacement)``: a test applies
it with ``monkeypatch.setattr(owner, attribute, replacement)``.
"""

from __future__ import annotations

from riverbed.replication import follower, isr, leader
from riverbed.replication.actions import Action, HighWatermarkChanged

__all__ = ["BROKEN_CORE_RULES"]


def _hw_is_leader_log_end(self: leader.PartitionLeader) -> list[Action]:
    # the high watermark follows the leader's log end, whatever the ISR holds
    end = self.log.log_end_offset
    if end <= self.high_watermark:
        return []
    self.high_watermark = end
    return [HighWatermarkChanged(end)]


_follower_init = follower.PartitionFollower.__init__


def _truncate_to_hw_on_become_follower(
    self: follower.PartitionFollower, *args: object, **kwargs: object
) -> None:
    # the seed's "truncate the log to r.hw" at become-follower (what KIP-101 replaced)
    _follower_init(self, *args, **kwargs)  # type: ignore[arg-type]
    self.log.truncate_to(self.high_watermark)


# the proposed ISR instead of the maximal one while an AlterPartition is in flight
_committed_isr_only = property(lambda self: self.pending.new_isr if self.pending else self.isr)

BROKEN_CORE_RULES: dict[str, tuple[object, str, object]] = {
    "hw-ignores-isr": (leader.PartitionLeader, "_maybe_advance_hw", _hw_is_leader_log_end),
    "truncate-to-hw": (follower.PartitionFollower, "__init__", _truncate_to_hw_on_become_follower),
    "no-maximal-isr": (isr.IsrState, "maximal", _committed_isr_only),
}
