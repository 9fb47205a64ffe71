"""When a request passed each stage of its life: Kafka's RequestMetrics times.

Kafka's ``RequestChannel.Request`` stamps a request as it moves between threads, and
``updateRequestMetrics`` derives (all in ms):

- ``RequestQueueTime`` = dequeued by a handler - received (fully read);
- ``LocalTime`` = the handler's own work: until the request was parked in a purgatory
  (a delayed produce with acks=all, a long-poll fetch, a group join, a remote fetch), or
  until its answer when it never parked;
- ``RemoteTime`` = parked -> answered (the wait for other replicas, for data, for the
  coordinator; it includes the completion's work, as Kafka's ``onComplete`` does);
- ``ResponseQueueTime`` = answered -> taken by the connection's writer (in riverbed: the
  wait behind earlier responses of the connection, which go out in request order);
- ``ResponseSendTime`` = taken by the writer -> its bytes handed to the socket;
- ``TotalTime`` = received -> sent.

riverbed's handlers are tasks of one event loop, so the stages are stamped in place, on
the request's `TimedPermit` (the ``queued.max.requests`` permit every request already
has): the network layer stamps receive, taken and sent, its handler task
(`TrafficStats.run_timed` in `riverbed.server.metrics.traffic`) dequeue and answer, and
every park point stamps the first park through
`riverbed.server.request_permits.park_current_request`. The stamps are written
into a small array of doubles of the permit, in the order above, as they are taken: a
stamp is no float object kept alive until the send, and the observer copies a request's
six stamps into its pending array with one memory copy (reading five float objects
allocated at five moments, cold in the CPU's caches by the send, cost a broker about as
much as the rest of the request metrics together). A `TimedPermit` exists only when the
node records metrics; the times are `time.perf_counter` seconds.
"""

from __future__ import annotations

import time
from array import array

from riverbed.server.request_permits import Permits, RequestPermit

#: The stamps' places in `TimedPermit.stamps` (`riverbed.server.metrics.traffic` folds
#: them in this order).
RECEIVED, DEQUEUED, PARKED, ANSWERED, TAKEN, SENT = range(6)
STAMPS = 6
_UNSTAMPED = array("d", bytes(8 * STAMPS))


class TimedPermit(RequestPermit):
    """The permit of a request a metrics observer times: its stage stamps (0.0: not
    reached; a request that never parked keeps 0.0 at `PARKED`) and, once answered, its
    Kafka request name (empty until then)."""

    __slots__ = ("name", "stamps")

    def __init__(self, semaphore: Permits, received: float) -> None:
        self._semaphore = semaphore
        self._held = False
        self.stamps = stamps = _UNSTAMPED[:]
        stamps[RECEIVED] = received
        self.name = ""

    def park(self) -> None:
        """The first park starts the request's RemoteTime; the permit goes back."""
        stamps = self.stamps
        if not stamps[PARKED]:
            stamps[PARKED] = time.perf_counter()
        self.release()
