"""Preferred-leader balancing (the seed's checkLoadBalancing; Kafka's
``auto.leader.rebalance.enable``): which partitions a periodic PREFERRED election should
move back to their preferred replica (the first of the assignment).

Every ``leader.imbalance.check.interval.seconds`` the active controller computes, for each
broker B, the share of the partitions preferring B that another broker leads; when it is
above ``leader.imbalance.per.broker.percentage`` percent, every such partition whose
preferred replica is in the ISR, registered, unfenced and not shutting down is elected back
(ElectLeaders PREFERRED through the controller's own logic). A pure function of the image.
"""

from __future__ import annotations

from collections import defaultdict

from riverbed.metadata.image import MetadataImage

PERCENTAGE_DEFAULT = 10
CHECK_INTERVAL_S_DEFAULT = 300


def imbalanced_partitions(image: MetadataImage, percentage: int) -> list[tuple[str, int]]:
    """(topic, partition) pairs to elect back to their preferred replica, sorted."""
    preferring: dict[int, int] = defaultdict(int)
    misled: dict[int, list[tuple[str, int, tuple[int, ...]]]] = defaultdict(list)
    for topic in image.topics_by_id.values():
        for index, part in topic.partitions.items():
            if not part.replicas:
                continue
            preferred = part.replicas[0]
            preferring[preferred] += 1
            if part.leader != preferred:
                misled[preferred].append((topic.name, index, part.isr))
    out: list[tuple[str, int]] = []
    for broker_id, parts in misled.items():
        if len(parts) * 100 <= percentage * preferring[broker_id]:
            continue
        reg = image.brokers.get(broker_id)
        if reg is None or reg.fenced or reg.in_controlled_shutdown:
            continue
        out += [(name, index) for name, index, isr in parts if broker_id in isr]
    return sorted(out)


__all__ = ["imbalanced_partitions"]
