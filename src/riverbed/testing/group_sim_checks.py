"""The group simulation's invariants, checked after every step, and the settling check
after the calm phase (see `riverbed.testing.group_sim` for the guarantees)."""

from __future__ import annotations

from typing import Any

from riverbed.testing.group_harness import group_state, pending_state
from riverbed.testing.group_sim_world import (
    ADMIN,
    GROUPS,
    NAMES,
    TOPICS,
    E,
    InvariantError,
    SimWorld,
    Tp,
)


class Checks(SimWorld):
    """The invariants (see the module docstring of `riverbed.testing.group_sim`)."""

    def check_settled(self, gid: str, group: Any) -> None:
        """After the calm phase a group of live consumers is Stable, and they consume
        every partition they subscribe to, each exactly what it was told."""
        live = {c.member: c for c in self.clients.values() if c.group == gid}
        if set(group.members) != set(live):
            self.stats["settled with members gone"] += 1
            return
        self.stats[f"settled {group.state.value}"] += 1
        if group.state.value not in ("Stable", "Empty"):
            raise InvariantError(f"group {gid} did not settle: {group.state.value}")
        wanted = {
            (name, p)
            for c in live.values()
            for name in c.topics
            for p in range(self.topics.topics[name][1])
        }
        used: set[Tp] = set()
        for c in live.values():
            if c.owned != c.told:
                raise InvariantError(f"{c.name} settled owning {c.owned}, told {c.told}")
            used |= c.owned
        if used != wanted:
            raise InvariantError(f"group {gid} settled consuming {used}, not {wanted}")

    # ------------------------------------------------------------------ invariants
    def check(self) -> None:
        for group in self.shard.consumer_groups.values():
            group.check_invariants()
            self.stats.update(f"seen {m.state.name}" for m in group.members.values())
        self.check_memory_is_the_records()
        self.check_consumers()
        self.check_offsets()
        self.check_transactions()

    def check_memory_is_the_records(self) -> None:
        memory, records = group_state(self.shard), group_state(self.mirror)
        for gid in set(memory) | set(records):
            if self.shard.busy(gid):
                continue  # its write is in flight: memory is ahead of the log for now
            if memory.get(gid) != records.get(gid):
                raise InvariantError(
                    f"group {gid}: memory differs from its committed records\n"
                    f"  memory:  {memory.get(gid)}\n  records: {records.get(gid)}"
                )

    def check_consumers(self) -> None:
        users: dict[tuple[str, Tp], str] = {}
        for c in self.clients.values():
            group = self.mirror.consumer_groups.get(c.group)
            member = group.members.get(c.member) if group is not None else None
            if c.owned and member is None:
                c.zombie = True  # fenced by a timer; it learns it on its next heartbeat
                self.stats["consumer fenced by a timer"] += 1
            if c.zombie:
                continue
            if member is not None and c.owned:
                held = {
                    (NAMES[t], p)
                    for a in (member.assigned, member.pending_revocation)
                    for t, ps in a.items()
                    for p in ps
                }
                if not c.owned <= held:
                    raise InvariantError(
                        f"{c.name} consumes {sorted(c.owned - held)} that no committed "
                        f"record gives member {c.member[:8]} (it holds {sorted(held)})"
                    )
            for tp in c.owned:
                other = users.get((c.group, tp))
                if other is not None:
                    raise InvariantError(f"{tp} of {c.group} consumed by {other} and {c.name}")
                users[(c.group, tp)] = c.name

    def check_offsets(self) -> None:
        seen = set()
        for gid in GROUPS:
            holder: Any = self.mirror.consumer_groups.get(gid) or self.mirror.groups.get(gid)
            offsets = holder.offsets if holder is not None else {}
            for tp, om in offsets.items():
                key = (gid, tp)
                seen.add(key)
                floor = self.floors.get(key, -1)
                # an operator's reset of an empty group may go back (marked by its metadata)
                if om.offset < floor and om.metadata != ADMIN:
                    raise InvariantError(
                        f"committed offset of {tp} in {gid} went back from {floor} to {om.offset}"
                    )
                self.floors[key] = om.offset
        for key in list(self.floors):
            if key not in seen:
                del self.floors[key]  # deleted or expired: a new commit may start lower

    def check_transactions(self) -> None:
        """No committed offset of an aborted transaction; pending offsets are what the
        log says, and exactly they are unstable to OffsetFetch(require_stable)."""
        for view in (self.shard, self.mirror):
            for gid in GROUPS:
                holder: Any = view.consumer_groups.get(gid) or view.groups.get(gid)
                for tp, om in (holder.offsets if holder is not None else {}).items():
                    if om.metadata in self.aborted:
                        raise InvariantError(
                            f"{gid} {tp} committed {om.offset} of an aborted transaction "
                            f"({om.metadata})"
                        )

        def settled(state: dict[int, dict[tuple[str, str, int], Any]]) -> dict[Any, Any]:
            return {
                (pid, key): om
                for pid, offsets in state.items()
                for key, om in offsets.items()
                if not self.shard.busy(key[0])
            }

        memory, records = settled(pending_state(self.shard)), settled(pending_state(self.mirror))
        if memory != records:
            raise InvariantError(
                f"pending offsets differ from the log\n  memory:  {memory}\n  records: {records}"
            )
        self.stats["pending offsets seen"] += len(records)
        for gid in GROUPS:
            if self.shard.busy(gid):
                continue
            parts = list(range(TOPICS["t"][1]))
            got = self.shard.offset_fetch(gid, [("t", parts)], require_stable=True)
            unstable = {
                ("t", p.partition_index)
                for t in got.topics
                for p in t.partitions
                if p.error_code == E.UNSTABLE_OFFSET_COMMIT
            }
            wanted = {(k[1], k[2]) for _pid, k in records if k[0] == gid and k[1] == "t"}
            if unstable != wanted:
                raise InvariantError(f"{gid}: unstable {sorted(unstable)}, pending {wanted}")

    def describe(self) -> str:
        lines = []
        for gid, g in self.shard.consumer_groups.items():
            lines.append(f"{gid}: epoch {g.group_epoch}/{g.assignment_epoch} {g.state.value}")
            for m in g.members.values():
                lines.append(
                    f"  {m.member_id[:8]} e{m.member_epoch} {m.state.name} "
                    f"assigned={dict(m.assigned)} revoking={dict(m.pending_revocation)}"
                )
        for c in self.clients.values():
            lines.append(
                f"{c.name} {c.group} {c.member[:8]} e{c.epoch} owned={sorted(c.owned)} "
                f"told={sorted(c.told)} zombie={c.zombie}"
            )
        return "\n".join(lines)
