"""The console's aiohttp application: routes, limits, error pages, the thread pool.

Pages are rendered on the server with Jinja2 (autoescaped); the vendored htmx and uPlot
and the console's own script and stylesheet are served from ``/static``. The admin
client's blocking calls run on a pool of `ADMIN_THREADS` threads (`Console.call`).

Bad input gets a clear 4xx page and changes nothing: an unknown path 404, another method
405 (with ``Allow``), a request body above `REQUEST_BODY_BYTES_MAX` 413, a form from
another origin 403 (a page elsewhere cannot post a delete to a console on localhost),
malformed filters or numbers 400, unknown topics and groups 404. Errors from the cluster
show its error name (502, or 504 on a time-out). Pages carry a Content-Security-Policy
that allows only the console's own scripts.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol, TypeVar
from urllib.parse import quote, urlencode, urlsplit

import jinja2
from aiohttp import web

from riverbed import __version__
from riverbed.console.admin import ConsoleAdmin, ConsoleError
from riverbed.console.groups import LagHistory
from riverbed.console.login import COOKIE, Sessions
from riverbed.console.metrics_view import MetricsHistory

log = logging.getLogger(__name__)

#: Largest request body accepted (a produced record's key, value and headers fit).
REQUEST_BODY_BYTES_MAX = 1024 * 1024
#: Threads running blocking admin calls.
ADMIN_THREADS = 4
_HERE = Path(__file__).parent
_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; form-action 'self'"
)
T = TypeVar("T")


class Console:
    """What every view needs: the admin client, templates, the pool, lag history."""

    def __init__(
        self,
        admin: ConsoleAdmin | None,
        bootstrap: str,
        metrics_urls: list[str],
        *,
        tls: bool = False,
        base_conf: dict[str, Any] | None = None,
    ) -> None:
        #: the client of every page, or None with --login (each session has its own,
        #: made from ``base_conf`` and the user's SASL credentials)
        self.admin = admin
        self.login = admin is None
        self.base_conf = base_conf
        self.tls = tls
        self.sessions = Sessions()
        self.bootstrap = bootstrap
        self.metrics_urls = metrics_urls
        self.metrics = MetricsHistory()
        self.executor = ThreadPoolExecutor(ADMIN_THREADS, thread_name_prefix="console-admin")
        self.lag = LagHistory()
        self.tails_running = 0
        self.templates = jinja2.Environment(
            loader=jinja2.FileSystemLoader(_HERE / "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )
        self.templates.filters["q"] = lambda s: quote(str(s), safe="")
        self.templates.filters["bytes"] = human_bytes

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the admin pool (it blocks), awaited."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, functools.partial(fn, *args))

    def render(
        self, request: web.Request, name: str, status: int = 200, **context: Any
    ) -> web.Response:
        user = request.get(_USER)
        html = self.templates.get_template(name).render(
            bootstrap=self.bootstrap, version=__version__, user=user, login=self.login, **context
        )
        return web.Response(text=html, status=status, content_type="text/html")

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
        for admin in [self.admin, *self.sessions.all_admins()]:
            if admin is not None:
                admin.close()


def human_bytes(n: int | None) -> str:
    """1536 -> "1.5 KiB" (binary units, as Kafka's tools and df -h)."""
    if n is None or n < 0:
        return "?"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


CONSOLE = web.AppKey("console", Console)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


_ADMIN = "riverbed.console.admin"
_USER = "riverbed.console.user"


def console_of(request: web.Request) -> Console:
    return request.app[CONSOLE]


def admin_of(request: web.Request) -> ConsoleAdmin:
    """The admin client of this request: the signed-in user's, else the console's."""
    admin = request.get(_ADMIN, console_of(request).admin)
    if not isinstance(admin, ConsoleAdmin):
        raise ConsoleError(401, "sign in first")
    return admin


def _signed_in(request: web.Request, console: Console) -> web.Response | None:
    """With --login: attach the session's client to the request, or answer for it (a
    page: to the sign-in form; anything else: 401)."""
    if not console.login or request.path == "/login" or request.path.startswith("/static/"):
        return None
    for admin in console.sessions.expired():
        admin.close()
    session = console.sessions.get(request.cookies.get(COOKIE))
    if session is not None:
        request[_ADMIN] = session.admin
        request[_USER] = session.user
        return None
    if request.method in ("GET", "HEAD") and "text/html" in request.headers.get("Accept", ""):
        raise web.HTTPSeeOther("/login?" + urlencode({"next": request.path_qs}))
    return _error_page(request, console, 401, "sign in first: /login")


@web.middleware
async def _guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    console = console_of(request)
    length = request.content_length
    if length is not None and length > REQUEST_BODY_BYTES_MAX:
        return _error_page(
            request, console, 413, f"request body of {length} bytes is above REQUEST_BODY_BYTES_MAX = "
            f"{REQUEST_BODY_BYTES_MAX} bytes",
        )  # fmt: skip
    if request.method == "POST" and not _same_origin(request):
        return _error_page(
            request, console, 403, "a form from another origin may not change the cluster"
        )
    try:
        response = _signed_in(request, console) or await handler(request)
    except ConsoleError as exc:
        return _error_page(request, console, exc.status, exc.message)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        allow = exc.headers.get("Allow")
        return _error_page(request, console, exc.status, exc.text or exc.reason, allow=allow)
    response.headers.setdefault("Content-Security-Policy", _CSP)
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    return response


def _same_origin(request: web.Request) -> bool:
    """Browsers send Origin with every POST; a tool without one (curl) is let through."""
    origin = request.headers.get("Origin")
    return origin is None or urlsplit(origin).netloc == request.host


def _error_page(
    request: web.Request,
    console: Console,
    status: int,
    message: str,
    *,
    allow: str | None = None,
) -> web.Response:
    response = console.render(
        request, "error.html", status=status, status_code=status, message=message
    )
    if allow:
        response.headers["Allow"] = allow
    response.headers["Content-Security-Policy"] = _CSP
    return response


class Routes(Protocol):
    """Where views add their routes: an app's router, or `_Guarded` around one."""

    def add_get(self, path: str, handler: Handler) -> object: ...

    def add_post(self, path: str, handler: Handler) -> object: ...


class _Guarded:
    """A router whose handlers run inside the console's guard: for an application that
    is not the console's own (the node's HTTP listener), where `_guard` is no middleware."""

    def __init__(self, router: web.UrlDispatcher) -> None:
        self.router = router

    def add_get(self, path: str, handler: Handler) -> object:
        return self.router.add_get(path, _guarded(handler))

    def add_post(self, path: str, handler: Handler) -> object:
        return self.router.add_post(path, _guarded(handler))


def _guarded(handler: Handler) -> Handler:
    async def run(request: web.Request) -> web.StreamResponse:
        return await _guard(request, handler)

    return run


def _add_console(app: web.Application, routes: Routes, console: Console) -> None:
    from riverbed.console import (
        views_cluster,
        views_groups,
        views_login,
        views_messages,
        views_metrics,
        views_topics,
        views_transactions,
    )

    app[CONSOLE] = console
    for module in (
        views_cluster, views_topics, views_messages, views_groups, views_metrics, views_login,
        views_transactions,
    ):  # fmt: skip
        module.add_routes(routes)
    app.router.add_static("/static", _HERE / "static")

    async def close(_app: web.Application) -> None:
        console.close()

    app.on_cleanup.append(close)


def build_app(
    admin: ConsoleAdmin | None,
    bootstrap: str,
    metrics_urls: list[str] | None = None,
    *,
    tls: bool = False,
    base_conf: dict[str, Any] | None = None,
) -> web.Application:
    """The console; ``admin`` None means --login: each user signs in (`console.login`)."""
    app = web.Application(client_max_size=REQUEST_BODY_BYTES_MAX, middlewares=[_guard])
    console = Console(admin, bootstrap, list(metrics_urls or []), tls=tls, base_conf=base_conf)
    _add_console(app, app.router, console)
    return app


def mount_console(app: web.Application, admin: ConsoleAdmin, bootstrap: str) -> None:
    """The console's pages on another application (the node's HTTP listener,
    ``riverbed.http.console.enable``): its paths do not meet /metrics or /health/*; that
    application's own limits (body size, 404 and 405 answers) stay in force."""
    _add_console(app, _Guarded(app.router), Console(admin, bootstrap, []))


async def form_of(request: web.Request) -> dict[str, str]:
    """A posted form as text fields (413 when it is too big, as aiohttp reads it)."""
    try:
        data = await request.post()
    except web.HTTPRequestEntityTooLarge:
        raise ConsoleError(
            413, f"request body is above REQUEST_BODY_BYTES_MAX = {REQUEST_BODY_BYTES_MAX} bytes"
        ) from None
    return {k: v for k, v in data.items() if isinstance(v, str)}
