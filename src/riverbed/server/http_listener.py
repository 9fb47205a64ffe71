"""The node's HTTP listener: ``/metrics``, ``/health/live``, ``/health/ready``.

Served by aiohttp in the node's own event loop, beside the Kafka listeners, on every
address of ``riverbed.http.listeners`` (``http://host:port``, comma-separated; empty =
no HTTP listener; port 0 binds a free port). The embedded default serves
``http://127.0.0.1:9644`` (loopback only: exposing it elsewhere is a configuration
choice). Usable by Prometheus, a supervisor or Kubernetes probes:

- ``GET /metrics``: Prometheus text format from the node's own registry
  (`riverbed.server.metrics.registry.NodeMetrics`), never the process-global one;
- ``GET /health/live``: 200 while the event loop answers (a wedged node does not);
- ``GET /health/ready``: 200 once every readiness check passes, else 503; the JSON body
  names each check and which fail (``metadata``: this node caught up with the committed
  metadata and knows a quorum leader; ``log_dirs``: no log dir offline; ``listeners``:
  the Kafka listeners are bound and serving).

Bad input gets a clear HTTP error and changes nothing: an unknown path 404, another
method 405 (with ``Allow``), a request body (none of these endpoints takes one) above
``HTTP_REQUEST_BODY_BYTES_MAX`` 413, oversized request lines or headers 400 (aiohttp's
bounds). HEAD is answered like GET without a body.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from aiohttp import web
from prometheus_client.exposition import CONTENT_TYPE_LATEST

log = logging.getLogger(__name__)

#: The config key naming the HTTP listeners.
HTTP_LISTENERS_KEY = "riverbed.http.listeners"
#: Bytes of request body accepted (no endpoint reads one; a small body is tolerated).
HTTP_REQUEST_BODY_BYTES_MAX = 64 * 1024
#: Seconds a stop waits for in-flight HTTP requests.
HTTP_SHUTDOWN_GRACE_S = 2.0
_URL_RE = re.compile(r"^(?P<scheme>[a-zA-Z]+)://(?P<host>\[[^\]]*\]|[^:/\[\]]*):(?P<port>\d+)/?$")

ReadinessCheck = Callable[[], bool]
#: Adds routes to the listener's application before it serves (given by a layer above
#: server/, e.g. `riverbed.cli.server` mounting the web console).
HttpExtension = Callable[[web.Application], None]


class HttpListenerError(ValueError):
    """A bad ``riverbed.http.listeners`` entry; the message names it."""


@dataclass(frozen=True, slots=True)
class HttpEndpoint:
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


def parse_http_listeners(entries: list[str]) -> list[HttpEndpoint]:
    """``http://host:port`` entries -> endpoints (https is not served yet)."""
    out: list[HttpEndpoint] = []
    for entry in entries:
        match = _URL_RE.match(entry.strip())
        if match is None:
            raise HttpListenerError(
                f"{HTTP_LISTENERS_KEY} entry {entry!r} must look like http://host:port"
            )
        if match["scheme"].lower() != "http":
            raise HttpListenerError(f"{HTTP_LISTENERS_KEY} entry {entry!r}: only http:// is served")
        port = int(match["port"])
        if port > 65535:
            raise HttpListenerError(f"{HTTP_LISTENERS_KEY} entry {entry!r}: port above 65535")
        out.append(HttpEndpoint(match["host"].strip("[]"), port))
    return out


@web.middleware
async def _bounded_body(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    length = request.content_length
    if length is not None and length > HTTP_REQUEST_BODY_BYTES_MAX:
        return _error(
            413,
            f"request body of {length} bytes is above {HTTP_REQUEST_BODY_BYTES_MAX} bytes "
            "(these endpoints take no body)",
        )
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _error(exc.status, exc.reason, allow=exc.headers.get("Allow"))


def _error(status: int, message: str, *, allow: str | None = None) -> web.Response:
    headers = {"Allow": allow} if allow else None
    body = json.dumps({"error": message, "status": status})
    return web.Response(status=status, text=body, content_type="application/json", headers=headers)


class HttpListener:
    """aiohttp serving the node's metrics and health (see the module docstring)."""

    def __init__(
        self,
        render_metrics: Callable[[], bytes],
        readiness: Mapping[str, ReadinessCheck],
        extend: HttpExtension | None = None,
    ) -> None:
        self.render_metrics = render_metrics
        self.readiness = dict(readiness)
        self.bound: list[HttpEndpoint] = []
        app = web.Application(
            client_max_size=HTTP_REQUEST_BODY_BYTES_MAX, middlewares=[_bounded_body]
        )
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/health/live", self._live)
        app.router.add_get("/health/ready", self._ready)
        if extend is not None:
            extend(app)  # e.g. the web console's pages (riverbed.http.console.enable)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        self._started = False

    async def start(self, endpoints: list[HttpEndpoint]) -> list[HttpEndpoint]:
        """Bind every endpoint (OSError when one cannot be bound); the actual ports."""
        if not self._started:
            await self._runner.setup()
            self._started = True
        for ep in endpoints:
            site = web.TCPSite(self._runner, ep.host, ep.port, reuse_address=True)
            await site.start()
        self.bound = [_endpoint(addr) for addr in self._runner.addresses]
        return self.bound

    async def stop(self) -> None:
        if self._started:
            self._started = False
            await self._runner.cleanup()

    async def _metrics(self, request: web.Request) -> web.Response:
        body = self.render_metrics()
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _live(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "live"})

    async def _ready(self, request: web.Request) -> web.Response:
        checks = {name: bool(check()) for name, check in self.readiness.items()}
        failing = sorted(name for name, ok in checks.items() if not ok)
        body = {"ready": not failing, "checks": checks, "failing": failing}
        return web.json_response(body, status=503 if failing else 200)


def _endpoint(addr: object) -> HttpEndpoint:
    assert isinstance(addr, tuple), addr
    return HttpEndpoint(str(addr[0]), int(addr[1]))
