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

riverbed's handlers are tasks of one event loop, so the stages are stamped in place: the
network layer stamps receive, writer and send, its handler task (`run_timed` in
`riverbed.server.network`) dequeue and answer, and every park point stamps the first park
through `riverbed.server.request_permits.park_current_request` (the stamps travel with the
request's permit). A `RequestTiming` exists only when the node records metrics; the times
are `time.perf_counter` seconds.
"""

from __future__ import annotations


class RequestTiming:
    """The stage stamps of one request (0.0: not reached)."""

    __slots__ = ("answered", "dequeued", "name", "parked", "received", "sent", "taken")

    def __init__(self, received: float) -> None:
        self.received = received
        self.dequeued = 0.0
        self.parked = 0.0
        self.answered = 0.0
        self.taken = 0.0
        self.sent = 0.0
        #: Kafka's request name (``Produce``, ``FetchConsumer``, ...), set once the
        #: request is answered; empty when it never was (its handler raised)
        self.name = ""
