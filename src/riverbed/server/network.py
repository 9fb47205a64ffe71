"""The Kafka wire-protocol network layer: listeners, framing, ordered responses, sendfile.

Wire format (Kafka's): every request and response is a frame ``int32 size`` followed by
``size`` bytes. A request frame starts with the request header (api_key int16,
api_version int16, correlation_id int32, client_id, tagged fields when flexible); the
response frame starts with the response header (correlation_id, tagged fields when
flexible; ApiVersions always header v0).

Per connection (like Kafka's Processor):

- frames larger than ``socket.request.max.bytes`` (or with a negative size), and frames
  whose header or body cannot be decoded, close THAT connection with a log line naming
  the peer and the reason; every other connection keeps being served;
- a request's handler starts as soon as the request is read: its first step runs in the
  reader, and only a handler that waits (a parked fetch, an acks=all produce) gets a
  task of its own (`riverbed.server.eager_start`);
- requests are read ahead and handled concurrently, but at most
  ``inflight_requests_max`` of them are outstanding; when the bound is reached the reader
  stops reading the socket, so TCP back-pressure reaches the client instead of riverbed
  buffering without limit;
- responses are written strictly in request order (a pipelining client matches them by
  order as well as correlation id); a handler that returns ``None`` (produce with
  acks=0) writes nothing;
- a connection with no request in flight and nothing received for
  ``connections.max.idle.ms`` is closed;
- a request that broke a client quota throttles its connection (`ChannelThrottle`,
  Kafka's muted channel): the response goes out at once with ``throttle_time_ms``, and
  no further request of that connection is read or handled until the throttle time has
  passed, so a noisy client slows only itself.

Fetch responses carry record data as file ranges of segment files (`FileRecords`): the
response is encoded with a unique 16-byte token in place of each ``records`` field, then
written as the encoded bytes with each token (and its length prefix) replaced by the real
length and the file bytes, sent with ``os.sendfile`` straight to the socket once the
transport's buffer is empty (on both event loops: uvloop lacks ``loop.sendfile``, and
each chunk must be checked against truncation, see ``ResponseWriter._send_range``), copying
through user space only to wait for a full socket. A response with at most
``SPLICE_COPY_BYTES_MAX`` of file bytes (a follower's or a tailing consumer's fetch) is read
into memory instead and written as one frame, coalesced with the responses around it: one
segment for the peer to wake up to instead of three. The ranges are pinned by the read
(fds of their own, closed after the send), so retention or a segment roll between the
read and the send never changes the bytes sent. On a TLS listener the ranges are copied
through the TLS stream instead (sendfile would write plaintext into the TLS session).
The planning lives in `riverbed.server.splice` (its names are re-exported here).

Security (`riverbed.server.listener_security`): each listener's connections are set up
by `riverbed.server.connection_setup` (TLS handshake, bounded) and, on SASL listeners, go
through the SASL gate (`riverbed.server.sasl_gate`) before any request is read; every
request's context carries the connection's `KafkaPrincipal`.

Where it lives (this module re-exports the names its users import):

- `riverbed.server.request_context`: what a handler gets and returns (`RequestContext`,
  `ChannelThrottle`, `RequestHandler`, `Response`, `CloseConnection`, `RequestObserver`);
- `riverbed.server.connection`: one connection's reader (`Connection`);
- `riverbed.server.response_writer`: its writer (`ResponseWriter`: ordering, coalescing,
  sendfile);
- `riverbed.server.socket_server`: the listeners and acceptors (`SocketServer`).
"""

from __future__ import annotations

from riverbed.server.connection import Connection as Connection
from riverbed.server.connection import FrameTooLarge as FrameTooLarge
from riverbed.server.request_context import ChannelThrottle as ChannelThrottle
from riverbed.server.request_context import CloseConnection as CloseConnection
from riverbed.server.request_context import RequestContext as RequestContext
from riverbed.server.request_context import RequestHandler as RequestHandler
from riverbed.server.request_context import RequestObserver as RequestObserver
from riverbed.server.request_context import Response as Response
from riverbed.server.response_writer import COALESCE_BYTES_MAX as COALESCE_BYTES_MAX
from riverbed.server.response_writer import COPY_CHUNK_BYTES as COPY_CHUNK_BYTES
from riverbed.server.response_writer import SENDFILE_WAIT_COPY_BYTES as SENDFILE_WAIT_COPY_BYTES
from riverbed.server.response_writer import SPLICE_COPY_BYTES_MAX as SPLICE_COPY_BYTES_MAX
from riverbed.server.response_writer import WRITE_BUFFER_HIGH_BYTES as WRITE_BUFFER_HIGH_BYTES
from riverbed.server.socket_server import SHUTDOWN_GRACE_MS as SHUTDOWN_GRACE_MS
from riverbed.server.socket_server import SocketServer as SocketServer
from riverbed.server.splice import FileRange as FileRange
from riverbed.server.splice import FileRecords as FileRecords
from riverbed.server.splice import SplicedResponse as SplicedResponse
from riverbed.server.splice import plan_size as plan_size
from riverbed.server.splice import splice_plan as splice_plan
