"""Connection limits of a socket server, with the semantics of Kafka's ConnectionQuotas.

- ``max.connections.per.ip`` (and ``max.connections.per.ip.overrides``, ``host:count``
  pairs): counted per client address over all listeners of the server; a connection
  beyond the limit is accepted and closed at once (Kafka's TooManyConnectionsException).
- ``max.connections`` (broker-wide) and ``listener.name.<listener>.max.connections``: when
  reached, the acceptor of that listener stops accepting until a connection closes;
  new connections wait in the listen backlog (``socket.listen.backlog.size``), as Kafka's
  acceptor blocks in ``waitForConnectionSlot``.
- The inter-broker listener is protected from the broker-wide limit when the server has
  more than one listener (only its own listener limit applies), as in Kafka.

- ``connection_creation_rate`` (KIP-612, client quotas of ``ip`` entities): ``rate_throttle``
  (set by the broker) says how long a new connection from an address over its rate is
  throttled; such a connection is not counted and is closed after that time (Kafka's
  delayed close of a throttled socket), so a reconnect storm slows only its own address.

In KRaft Kafka the controller listeners are served by a socket server of their own with
its own quotas; riverbed's node does the same by giving controller listeners a separate
`ConnectionQuotas`.
"""

from __future__ import annotations

import asyncio
import logging
import resource
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from riverbed.security.client_quotas import canonical_ip

log = logging.getLogger(__name__)

#: Kafka's default for the connection limits: no limit (Int.MaxValue).
CONNECTIONS_UNLIMITED = 2**31 - 1


#: One spelling per address (an IPv4-mapped IPv6 peer counts as its IPv4 address); the
#: client quotas' ip entities are matched with the same rule.
normalize_ip = canonical_ip


@dataclass(frozen=True)
class ConnectionLimits:
    """The configured limits (validated by `riverbed.server.config`)."""

    max_connections: int = CONNECTIONS_UNLIMITED
    max_connections_per_ip: int = CONNECTIONS_UNLIMITED
    #: address (as `normalize_ip` spells it) -> its limit instead of the per-ip default
    per_ip_overrides: Mapping[str, int] = field(default_factory=dict)
    #: listener name -> listener.name.<listener>.max.connections
    listener_max_connections: Mapping[str, int] = field(default_factory=dict)
    #: the listener exempt from ``max_connections`` when there are several listeners
    inter_broker_listener: str | None = None


class ConnectionQuotas:
    """Counts open connections per listener and per client address, against the limits."""

    def __init__(self, limits: ConnectionLimits | None = None) -> None:
        self.limits = limits if limits is not None else ConnectionLimits()
        self.total = 0
        self._per_ip: dict[str, int] = {}
        self._per_listener: dict[str, int] = {}
        # set whenever a connection closes: blocked acceptors re-check their slot
        self._closed = asyncio.Event()
        #: address -> throttle (ms) of a new connection from it (connection_creation_rate);
        #: None: no connection rate quotas (controller listeners, as Kafka's)
        self.rate_throttle: Callable[[str], int] | None = None

    def add_listener(self, listener: str) -> None:
        self._per_listener.setdefault(listener, 0)

    def listener_count(self, listener: str) -> int:
        return self._per_listener.get(listener, 0)

    def ip_count(self, address: str) -> int:
        return self._per_ip.get(normalize_ip(address), 0)

    def _protected(self, listener: str) -> bool:
        return listener == self.limits.inter_broker_listener and len(self._per_listener) > 1

    def slot_available(self, listener: str) -> bool:
        """Kafka's connectionSlotAvailable: below the listener's and the broker's limit."""
        listener_max = self.limits.listener_max_connections.get(listener, CONNECTIONS_UNLIMITED)
        if self._per_listener.get(listener, 0) >= listener_max:
            return False
        return self._protected(listener) or self.total < self.limits.max_connections

    async def wait_for_slot(self, listener: str) -> None:
        """Block (the acceptor) until ``listener`` may take one more connection."""
        while not self.slot_available(listener):
            self._closed.clear()
            await self._closed.wait()

    def ip_limit(self, address: str) -> int:
        return self.limits.per_ip_overrides.get(
            normalize_ip(address), self.limits.max_connections_per_ip
        )

    def try_add(self, listener: str, address: str) -> bool:
        """Count a new connection; False (nothing counted) when its address is at its limit."""
        ip = normalize_ip(address)
        count = self._per_ip.get(ip, 0)
        if count >= self.ip_limit(ip):
            return False
        self._per_ip[ip] = count + 1
        self._per_listener[listener] = self._per_listener.get(listener, 0) + 1
        self.total += 1
        return True

    def remove(self, listener: str, address: str) -> None:
        ip = normalize_ip(address)
        count = self._per_ip.get(ip, 0)
        if count <= 1:
            self._per_ip.pop(ip, None)
        else:
            self._per_ip[ip] = count - 1
        self._per_listener[listener] = max(0, self._per_listener.get(listener, 0) - 1)
        self.total = max(0, self.total - 1)
        self._closed.set()

    def listeners(self) -> Iterable[str]:
        return self._per_listener.keys()


def raise_open_files_limit() -> int:
    """Raise this process's RLIMIT_NOFILE soft limit to its hard limit; returns the limit.

    Every connection is a file descriptor (and every fetch response pins a segment file
    while it is sent), so a default soft limit of 1024 would cap the connections far below
    ``max.connections``. Logged, so an operator sees what the node runs with.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            log.info(
                "open files limit (RLIMIT_NOFILE): soft %d -> %d (hard %s)", soft, target, hard
            )
            return target
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the open files limit from %d to %d: %s", soft, target, exc)
            return soft
    log.info("open files limit (RLIMIT_NOFILE): %d", soft)
    return soft
