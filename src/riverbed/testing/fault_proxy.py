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
from collections.abc import Iterator

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
    def _received(self, src: socket.socket) -> Iterator[bytes]:
        """What `src` sends, chunk by chunk, until it closes or the proxy does."""
        src.settimeout(POLL_S)
        while not self._closed.is_set():
            try:
                data = src.recv(CHUNK_BYTES)
            except TimeoutError:
                continue
            if not data:
                return
            yield data

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
        try:
            for data in self._received(src):
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


#: Largest Kafka frame the holding proxy buffers (a bigger size field is a protocol error).
FRAME_BYTES_MAX = 64 * 1024 * 1024
#: Frames one held connection buffers at most; past that the client's bytes wait in the kernel.
HELD_FRAMES_MAX = 1024


class HoldingProxy(FaultProxy):
    """A `FaultProxy` that reads the Kafka protocol's frames (a 4-byte size, then the
    request) and can hold a request back on its way to the broker, as a slow network
    delays one connection's bytes:

    - ``hold(api_key)``: the next connection that sends a request of ``api_key`` is held
      from that request on: its requests are buffered, not forwarded, and the client
      closing its side does not close the broker's (the bytes are still on their way);
    - ``release()``: the held requests go to the broker, in order, and the connection
      flows again; the broker's answers to a held connection are kept in ``responses``
      (correlation id -> frame) whether or not the client is still there to read them.

    Other connections (a client's coordinator connection, another client) are not held.
    """

    def __init__(self, target_host: str, target_port: int) -> None:
        self._armed: int | None = None
        self._held_pair: tuple[socket.socket, socket.socket] | None = None
        self._recorded: set[tuple[socket.socket, socket.socket]] = set()  # ever held
        self.held: list[bytes] = []  # the held requests' frames (without the size)
        self.responses: dict[int, bytes] = {}
        self._answered = threading.Condition()
        super().__init__(target_host, target_port)

    def hold(self, api_key: int) -> None:
        with self._lock:
            self._armed = api_key

    def release(self) -> None:
        with self._lock:
            pair, self._held_pair, self._armed = self._held_pair, None, None
            assert pair is not None, "no connection is held"
            for frame in self.held:
                pair[1].sendall(len(frame).to_bytes(4, "big") + frame)

    def wait_response(self, correlation_id: int, timeout_s: float) -> bytes:
        """The broker's answer to a held request (after `release`)."""
        deadline = time.monotonic() + timeout_s
        with self._answered:
            while correlation_id not in self.responses:
                left = deadline - time.monotonic()
                assert left > 0, f"no answer to request {correlation_id} in {timeout_s} s"
                self._answered.wait(left)
            return self.responses[correlation_id]

    def _pump(
        self, src: socket.socket, dst: socket.socket, pair: tuple[socket.socket, socket.socket]
    ) -> None:
        to_broker = src is pair[0]
        buf = bytearray()
        try:
            for data in self._received(src):
                buf += data
                for frame in _frames(buf):
                    self._forward(frame, dst, pair, to_broker)
        except OSError:
            pass
        finally:
            self._end(src, dst, pair, to_broker)

    def _forward(
        self, frame: bytes, dst: socket.socket, pair: tuple[socket.socket, socket.socket],
        to_broker: bool,
    ) -> None:  # fmt: skip
        with self._lock:
            if to_broker and self._held_pair is None and self._armed == _api_key(frame):
                self._held_pair, self._armed = pair, None
                self._recorded.add(pair)
            held = self._held_pair is pair
            recorded = pair in self._recorded
            if to_broker and held and len(self.held) < HELD_FRAMES_MAX:
                self.held.append(frame)
                return
        if not to_broker and recorded:
            with self._answered:
                self.responses[int.from_bytes(frame[:4], "big", signed=True)] = frame
                self._answered.notify_all()
        try:
            dst.sendall(len(frame).to_bytes(4, "big") + frame)
        except OSError:
            if to_broker:
                raise
            # the client is gone; its held requests' answers are still kept

    def _end(
        self, src: socket.socket, dst: socket.socket, pair: tuple[socket.socket, socket.socket],
        to_broker: bool,
    ) -> None:  # fmt: skip
        with self._lock:
            keep = to_broker and self._held_pair is pair and not self._closed.is_set()
        if keep:  # the client left; its held bytes are still to reach the broker
            _close(src)
            return
        with self._lock:
            self._pairs.discard(pair)
        _close(src)
        _close(dst)


def _frames(buf: bytearray) -> list[bytes]:
    """The complete frames at the head of `buf` (removed from it), without their sizes."""
    frames = []
    while len(buf) >= 4:
        size = int.from_bytes(buf[:4], "big", signed=True)
        if not 0 <= size <= FRAME_BYTES_MAX:
            raise OSError(f"frame size {size}")
        if len(buf) < 4 + size:
            break
        frames.append(bytes(buf[4 : 4 + size]))
        del buf[: 4 + size]
    return frames


def _api_key(frame: bytes) -> int:
    return int.from_bytes(frame[:2], "big", signed=True) if len(frame) >= 2 else -1
