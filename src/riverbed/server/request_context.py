"""What the network layer hands a request handler and takes back: the request's context
(`RequestContext`, with the connection's quota throttle `ChannelThrottle`), the handler's
signature and answer (`RequestHandler`, `Response`, `CloseConnection`) and the request
metrics' hooks (`RequestObserver`). The layer itself is `riverbed.server.network`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, NamedTuple, Protocol, TypeAlias

from riverbed.security.authorizer import ConnectionDecisions
from riverbed.security.principal import ANONYMOUS, KafkaPrincipal
from riverbed.server.request_timing import TimedPermit

if TYPE_CHECKING:  # the protocol engine is imported lazily (it is large)
    from riverbed.protocol.headers import RequestHeader
    from riverbed.protocol.messages import Message
    from riverbed.server.splice import SplicedResponse


Response: TypeAlias = "Message | SplicedResponse"
RequestHandler = Callable[["RequestContext", "Message"], Awaitable["Response | None"]]


class RequestObserver(Protocol):
    """The request metrics' two hooks (`riverbed.server.metrics.traffic.TrafficStats`)."""

    def run_timed(
        self, handler: RequestHandler, permit: TimedPermit, ctx: RequestContext, body: Message
    ) -> Coroutine[object, object, Response | None]:
        """The request's handler task for a node that records request metrics:
        `run_with_permit` that also stamps the request's dequeue and answer on its permit
        (`riverbed.server.request_timing`) and counts the answer, setting the permit's
        request name. The observer owns it so that it counts without a call per request
        (a call on this path costs a small Produce ~1% of its CPU)."""
        ...

    def sent(self, permits: list[TimedPermit], sent: float) -> None:
        """These answered requests' responses were handed to the socket at ``sent``
        (`time.perf_counter`), or (acks=0) dropped: keep their stamps (one call per
        write, not per request); the list is the observer's to keep."""
        ...


class ChannelThrottle:
    """Kafka's channel muting for client quotas (ClientQuotaManager.throttle): a
    connection reads and handles nothing more until ``until`` (monotonic seconds)."""

    __slots__ = ("engaged", "gate", "lifted", "until")

    def __init__(self) -> None:
        self.until = 0.0
        #: throttled at least once: from then on its requests are handled one at a time
        self.engaged = False
        #: held while a request of an engaged connection is handled
        self.gate = asyncio.Lock()
        #: set at shutdown (`lift`): nobody waits for the throttle's end any more
        self.lifted = asyncio.Event()

    def throttle(self, throttle_ms: int) -> None:
        if throttle_ms > 0:
            self.engaged = True
            self.until = max(self.until, time.monotonic() + throttle_ms / 1000.0)

    def muted(self) -> bool:
        """A request of this connection would wait now (its throttle, or another of its
        requests being handled)."""
        return self.until > time.monotonic() or self.gate.locked()

    async def wait(self) -> None:
        """Until the throttle ends, or `lift`."""
        while not self.lifted.is_set() and (delay := self.until - time.monotonic()) > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.lifted.wait(), delay)

    def lift(self) -> None:
        """Shutdown: a muted connection stops waiting out its throttle (which can last as
        long as the quota's window) and closes, as Kafka closes a muted channel: its
        requests not yet handled never are, and the client retries elsewhere."""
        self.lifted.set()


class RequestContext(NamedTuple):
    """What a handler knows about a request besides its body (read-only).

    A named tuple, not a frozen dataclass: one is made per request, and a frozen
    dataclass's ``__init__`` (an ``object.__setattr__`` per field) cost ~1.2 us of it
    against ~0.5 us (issue 23)."""

    header: RequestHeader
    peer: str
    listener_name: str
    connection_id: int
    received_ms: int
    #: who sent it: User:ANONYMOUS, the TLS client's mapped DN, or the SASL user
    principal: KafkaPrincipal = ANONYMOUS
    #: the request's size on the wire (the produce byte-rate quota counts it)
    size_bytes: int = 0
    #: the connection's throttle: a quota violation mutes the connection through it
    throttle: ChannelThrottle | None = None
    #: the connection's remembered authorization answers (None: not from a connection)
    decisions: ConnectionDecisions | None = None


class CloseConnection(Exception):
    """Raised by a handler to close the connection (logged as a warning, no traceback)."""
