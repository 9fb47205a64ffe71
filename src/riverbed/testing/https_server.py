"""A small https server on 127.0.0.1 for tests (an identity provider's JWKS endpoint):
aiohttp on its own thread and event loop, its certificate from a test PKI
(`riverbed.testing.certs`), one document whose body the test may replace."""

from __future__ import annotations

import asyncio
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from aiohttp import web

from riverbed.testing.certs import Pki
from riverbed.testing.ports import free_port

#: How long the server thread may take to start or stop.
SERVER_START_S = 30.0


class Document:
    """The body served at the server's one path (replace ``body`` to change it)."""

    def __init__(self, body: str) -> None:
        self.body = body
        self.requests = 0


@contextmanager
def serve_https(pki: Pki, document: Document, path: str = "/jwks.json") -> Iterator[str]:
    """Serve ``document`` at https://127.0.0.1:<port><path>; yields the URL."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(pki.server_pem))
    port = free_port()
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    stop: asyncio.Event | None = None

    async def handle(_request: web.Request) -> web.Response:
        document.requests += 1
        return web.Response(text=document.body, content_type="application/json")

    async def run() -> None:
        nonlocal stop
        stop = asyncio.Event()
        app = web.Application()
        app.router.add_get(path, handle)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port, ssl_context=context).start()
        ready.set()
        await stop.wait()
        await runner.cleanup()

    thread = threading.Thread(target=loop.run_until_complete, args=(run(),), daemon=True)
    thread.start()
    if not ready.wait(SERVER_START_S):
        raise RuntimeError("the https test server did not start")
    try:
        yield f"https://127.0.0.1:{port}{path}"
    finally:
        assert stop is not None
        loop.call_soon_threadsafe(stop.set)
        thread.join(SERVER_START_S)
        loop.close()
