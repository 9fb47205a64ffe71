"""The broker's replication quotas (``riverbed.replication.throttle``) over its metadata.

Which partitions are throttled here and the two rates are read from the current metadata
image (topic configs ``leader/follower.replication.throttled.replicas``; broker configs
``leader/follower.replication.throttled.rate``, dynamic per broker or cluster default,
else static), re-read whenever a new image is published, so ``riverbed configs alter``
takes effect without a restart. Rates are per broker, shared by all throttled partitions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from riverbed.metadata.effective_config import broker_config
from riverbed.metadata.image import MetadataImage
from riverbed.replication.throttle import RATE_UNLIMITED, ReplicationQuota, is_throttled

Key = tuple[str, int]

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"


class ReplicationThrottles:
    def __init__(
        self,
        node_id: int,
        static_config: Mapping[str, str],
        image: Callable[[], MetadataImage],
        now_ms: Callable[[], int],
    ) -> None:
        self.node_id = node_id
        self.static_config = static_config
        self._image = image
        self.now_ms = now_ms
        self.leader = ReplicationQuota()
        self.follower = ReplicationQuota()
        self._seen: MetadataImage | None = None
        self._flags: dict[Key, tuple[bool, bool]] = {}  # (leader side, follower side)

    def _refresh(self) -> MetadataImage:
        image = self._image()
        if image is not self._seen:
            self._seen = image
            self._flags.clear()
            values = broker_config(image, self.node_id, self.static_config)
            self.leader.set_rate(_rate(values.get(LEADER_RATE)))
            self.follower.set_rate(_rate(values.get(FOLLOWER_RATE)))
        return image

    def _throttled(self, key: Key) -> tuple[bool, bool]:
        image = self._refresh()
        flags = self._flags.get(key)
        if flags is None:
            cfg = image.topic_config(key[0])
            flags = (
                is_throttled(cfg.get(LEADER_REPLICAS, ""), self.node_id, key[1]),
                is_throttled(cfg.get(FOLLOWER_REPLICAS, ""), self.node_id, key[1]),
            )
            self._flags[key] = flags
        return flags

    def leader_throttled(self, key: Key) -> bool:
        """Is ``key`` in ``leader.replication.throttled.replicas`` here? (Otherwise the
        leader side neither limits nor counts it: callers skip the ISR look-up.)"""
        return self._throttled(key)[0]

    def follower_throttled(self, key: Key) -> bool:
        """Is ``key`` in ``follower.replication.throttled.replicas`` here?"""
        return self._throttled(key)[1]

    def leader_allowance(self, key: Key, follower_in_isr: bool) -> int | None:
        """Bytes the leader may send a follower for ``key`` now (None: not throttled; 0:
        nothing now)."""
        self._refresh()
        if follower_in_isr or self.leader.unlimited or not self._throttled(key)[0]:
            return None
        return self.leader.available(self.now_ms())

    def leader_sent(self, key: Key, follower_in_isr: bool, size_bytes: int) -> None:
        if not follower_in_isr and size_bytes > 0 and self._throttled(key)[0]:
            self.leader.record(size_bytes, self.now_ms())

    def follower_holds_back(self, key: Key, in_isr: bool) -> bool:
        """Should this follower leave ``key`` out of its next fetch?"""
        self._refresh()
        if in_isr or self.follower.unlimited:
            return False
        return self._throttled(key)[1] and self.follower.exceeded(self.now_ms())

    def follower_received(self, key: Key, in_isr: bool, size_bytes: int) -> None:
        if not in_isr and size_bytes > 0 and self._throttled(key)[1]:
            self.follower.record(size_bytes, self.now_ms())


def _rate(value: str | None) -> int:
    try:
        rate = int(value) if value not in (None, "") else RATE_UNLIMITED
    except ValueError:
        return RATE_UNLIMITED
    return rate if rate >= 0 else RATE_UNLIMITED
