"""Replica placement of new partitions, as Kafka's AdminUtils.assignReplicasToBrokers.

A partition's replica list is ``[leader, follower, ...]``; its first replica is the
preferred leader. Placement over the usable (unfenced) brokers, sorted by id:

- rack-unaware: partition ``p`` (counted from ``start_partition``) leads on broker
  ``(p + start_index) % n``; follower ``j`` sits ``1 + (shift + j) % (n - 1)`` places after
  the leader, where ``shift`` starts at ``replica_shift`` and grows by one each time ``p``
  wraps around the broker list, so followers of successive rounds land on different
  brokers (Kafka's nextReplicaShift);
- rack-aware (every broker has ``broker.rack``): the same walk over the rack-alternated
  broker list (``a1, b1, c1, a2, b2, ...``) with the shift scaled by the number of racks,
  skipping a broker whose rack already holds a replica until every rack does, and a broker
  already chosen until every broker is.

``start_index`` and ``replica_shift`` are random for a new topic (so the first partitions
of many topics do not all lead on the lowest broker id); the controller draws them from an
injected ``random.Random`` (seeded in tests and the simulation). CreatePartitions uses
partition 0's leader as the start index for both, as Kafka does.
"""

from __future__ import annotations

from collections.abc import Mapping


def rack_alternated(racks: Mapping[int, str | None], brokers: list[int]) -> list[int]:
    """``brokers`` reordered so that consecutive ones are on different racks when every
    broker declares ``broker.rack`` (Kafka's rack-alternated broker list). Unchanged when
    one has no rack (Kafka refuses the mix; riverbed places rack-unaware then)."""
    by_rack: dict[str, list[int]] = {}
    for b in brokers:
        rack = racks.get(b)
        if rack is None:
            return brokers
        by_rack.setdefault(rack, []).append(b)
    columns = [by_rack[r] for r in sorted(by_rack)]
    out: list[int] = []
    for i in range(max((len(c) for c in columns), default=0)):
        out += [c[i] for c in columns if i < len(c)]
    return out


def _follower_index(first: int, shift: int, j: int, n: int) -> int:
    return (first + 1 + (shift + j) % (n - 1)) % n


def assign_replicas(
    brokers: list[int],
    racks: Mapping[int, str | None],
    count: int,
    rf: int,
    *,
    start_partition: int,
    start_index: int,
    replica_shift: int,
) -> list[list[int]]:
    """Replica lists of ``count`` partitions numbered from ``start_partition`` (``rf`` must
    not exceed ``len(brokers)``; ``brokers`` sorted)."""
    n = len(brokers)
    arranged = rack_alternated(racks, brokers)
    rack_aware = all(racks.get(b) is not None for b in brokers)
    rack_count = len({racks.get(b) for b in brokers}) if rack_aware else 1
    shift = replica_shift
    out: list[list[int]] = []
    for p in range(start_partition, start_partition + count):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start_index) % n
        replicas = [arranged[first]]
        if not rack_aware:
            replicas += [arranged[_follower_index(first, shift, j, n)] for j in range(rf - 1)]
            out.append(replicas)
            continue
        used_racks = {racks.get(arranged[first])}
        k = 0
        while len(replicas) < rf:
            b = arranged[_follower_index(first, shift * rack_count, k, n)]
            k += 1
            if (racks.get(b) not in used_racks or len(used_racks) == rack_count) and (
                b not in replicas or len(replicas) == n
            ):
                replicas.append(b)
                used_racks.add(racks.get(b))
        out.append(replicas)
    return out
