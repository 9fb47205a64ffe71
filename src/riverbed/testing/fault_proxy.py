"""A TCP proxy between real processes that cuts or slows connections on command.

``FaultProxy(target_host, target_port)`` listens on 127.0.0.1 (a free port, ``.port``) and
forwards every connection to the target, byte for byte, in both directions, until told:

- ``cut()``: every open connection is closed at once and new ones are closed on accept
  (a network partition, as the peer sees it: resets and refused exchanges) until ``heal()``;
- ``set_delay(ms)``: every chunk is held that long before it is forwarded (a slow link).

Used by integration tests to partition nodes from each other: point one node's view of a
peer (e.g. its ``controller.quorum.voters`` entry) at a proxy and cut it. Threads, not
asyncio, so that it runs beside synchronous test code; bounded by ``CONNECTIONS_MAX``.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time

CONNECTIONS_MAX = 256
CHUNK_BYTES = 65536
POLL_S = 0.1


class FaultProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self._listener.settimeout(POLL_S)
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._pairs: set[tuple[socket.socket, socket.socket]] = set()
        self._cut = False
        self._delay_s = 0.0
        self._closed = threading.Event()
        self.connections = 0  # accepted and forwarded, for tests
        threading.Thread(target=self._accept_loop, daemon=True).start()

    # ------------------------------------------------------------------ commands
    def cut(self) -> None:
        with self._lock:
            self._cut = True
            pairs, self._pairs = self._pairs, set()
        for a, b in pairs:
            _close(a)
            _close(b)

    def heal(self) -> None:
        with self._lock:
            self._cut = False

    def set_delay(self, ms: float) -> None:
        self._delay_s = max(0.0, ms / 1000)

    def close(self) -> None:
        self._closed.set()
        self.cut()
        _close(self._listener)

    # ------------------------------------------------------------------ forwarding
    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                refuse = self._cut or len(self._pairs) >= CONNECTIONS_MAX
            if refuse:
                _close(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=2)
            except OSError:
                _close(client)
                continue
            pair = (client, upstream)
            with self._lock:
                if self._cut:
                    _close(client)
                    _close(upstream)
                    continue
                self._pairs.add(pair)
                self.connections += 1
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst, pair), daemon=True).start()

    def _pump(
        self, src: socket.socket, dst: socket.socket, pair: tuple[socket.socket, socket.socket]
    ) -> None:
        src.settimeout(POLL_S)
        try:
            while not self._closed.is_set():
                try:
                    data = src.recv(CHUNK_BYTES)
                except TimeoutError:
                    continue
                if not data:
                    break
                if self._delay_s:
                    time.sleep(self._delay_s)
                with self._lock:
                    alive = pair in self._pairs
                if not alive:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                self._pairs.discard(pair)
            _close(src)
            _close(dst)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
