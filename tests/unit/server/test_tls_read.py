"""The C read path of TLS listeners (`_tlsread`, issue 20) against `_ssl`'s own read, on
in-memory TLS pairs: same bytes, same errors, every complete record in one call."""

from __future__ import annotations

import contextlib
import random
import ssl
import types

import pytest

from riverbed.server import (
    _tlsread,  # type: ignore[attr-defined]
    tls,
)
from riverbed.testing.certs import make_pki

READ_MAX = 256 * 1024  # what uvloop's SSLProtocol asks for


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory):
    return make_pki(tmp_path_factory.mktemp("pki"))


class Pair:
    """A client and a server SSLObject over memory BIOs, handshake done."""

    def __init__(self, pki, direct: bool, version: ssl.TLSVersion) -> None:
        server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server_ctx.load_cert_chain(pki.server_crt, pki.server_key)
        server_ctx.maximum_version = version
        if direct:
            server_ctx.sslobject_class = tls.DirectSSLObject
        client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        client_ctx.load_verify_locations(pki.ca)
        self.s_in, s_out, c_in, self.c_out = (ssl.MemoryBIO() for _ in range(4))
        self.server = server_ctx.wrap_bio(self.s_in, s_out, server_side=True)
        self.client = client_ctx.wrap_bio(c_in, self.c_out, server_hostname="localhost")
        for _ in range(4):
            for side in (self.client, self.server):
                with contextlib.suppress(ssl.SSLWantReadError):
                    side.do_handshake()
            self.s_in.write(self.c_out.read())
            c_in.write(s_out.read())

    def send(self, *records: bytes) -> bytes:
        """The ciphertext of ``records``, each written as its own TLS record."""
        for record in records:
            self.client.write(record)
        return self.c_out.read()

    def drain(self) -> tuple[list[bytes], BaseException | None]:
        """uvloop's copied read loop: read until WantRead, b'' or an error."""
        chunks: list[bytes] = []
        try:
            while self.s_in.pending or self.server.pending():
                chunk = self.server.read(READ_MAX)
                chunks.append(chunk)
                if not chunk:
                    break
        except ssl.SSLWantReadError:
            pass
        except ssl.SSLError as exc:
            return chunks, exc
        return chunks, None


def _records(seed: int) -> list[bytes]:
    rng = random.Random(seed)
    return [
        bytes([i % 251]) * rng.choice((31, 32, 1046, 1360, 16384, rng.randrange(1, 20000)))
        for i in range(60)
    ]


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
@pytest.mark.parametrize("feed", [700, 4096, 65536, 1 << 20])
def test_same_bytes_as_the_ssl_module_in_fewer_reads(pki, version, feed) -> None:
    """Fed the same plaintext in the same slices of ciphertext (records split across
    feeds), the C path returns the bytes `_ssl` returns, in at most as many reads and in
    one read per feed once a feed holds several records."""
    records = _records(feed)
    direct, plain = Pair(pki, True, version), Pair(pki, False, version)
    assert isinstance(direct.server.read.__self__, _tlsread.Reader)
    got: dict[bool, list[bytes]] = {True: [], False: []}
    reads: dict[bool, int] = {True: 0, False: 0}
    for pair in (direct, plain):
        wire = pair.send(*records)
        for at in range(0, len(wire), feed):
            pair.s_in.write(wire[at : at + feed])
            chunks, error = pair.drain()
            assert error is None
            got[pair is direct] += chunks
            reads[pair is direct] += len(chunks)
    assert b"".join(got[True]) == b"".join(got[False]) == b"".join(records)
    feeds = len(range(0, len(wire), feed)) + len(b"".join(records)) // READ_MAX
    assert reads[True] <= min(feeds, reads[False])
    if feed >= 65536:
        assert reads[True] * 4 < reads[False]


def test_a_record_split_across_feeds_waits_for_its_end(pki) -> None:
    pair = Pair(pki, True, ssl.TLSVersion.TLSv1_3)
    wire = pair.send(b"a" * 1046, b"b" * 31)
    pair.s_in.write(wire[:600])
    with pytest.raises(ssl.SSLWantReadError):
        pair.server.read(READ_MAX)
    pair.s_in.write(wire[600:])
    assert pair.server.read(READ_MAX) == b"a" * 1046 + b"b" * 31
    with pytest.raises(ssl.SSLWantReadError):
        pair.server.read(READ_MAX)


def test_read_into_a_buffer_and_a_short_read(pki) -> None:
    """``read(len, buffer)`` fills the buffer from as many records as fit (len bounded by
    the buffer, as `_ssl`); what does not fit is read next time."""
    pair = Pair(pki, True, ssl.TLSVersion.TLSv1_3)
    pair.s_in.write(pair.send(b"v" * 1046, b"h" * 32, b"w" * 1046))
    buf = bytearray(1100)
    assert pair.server.read(5000, memoryview(buf)) == 1100
    assert bytes(buf) == b"v" * 1046 + b"h" * 32 + b"w" * 22
    assert pair.server.read(10) == b"w" * 10
    assert pair.server.read(READ_MAX) == b"w" * 1014
    with pytest.raises(ssl.SSLWantReadError):
        pair.server.read(READ_MAX, bytearray(10))


@pytest.mark.parametrize("direct", [True, False])
def test_close_notify_ends_the_data(pki, direct) -> None:
    """Records then the client's close_notify: the data, then b'' (and 0 into a buffer) on
    every later read, as `_ssl`."""
    pair = Pair(pki, direct, ssl.TLSVersion.TLSv1_3)
    wire = pair.send(b"x" * 1046, b"y" * 31)
    with contextlib.suppress(ssl.SSLWantReadError):
        pair.client.unwrap()
    pair.s_in.write(wire + pair.c_out.read())
    chunks, error = pair.drain()
    assert error is None
    assert b"".join(chunks) == b"x" * 1046 + b"y" * 31 and chunks[-1] == b""
    assert pair.server.read(READ_MAX) == b""
    assert pair.server.read(10, bytearray(10)) == 0


def test_a_corrupt_record_raises_what_the_ssl_module_raises(pki) -> None:
    """A record whose ciphertext is damaged after a good one: the same exception (type and
    reason) from both paths, on this read and the next (the C path raises at once: the
    event loop drops what it read before a failure)."""
    outcomes = []
    for direct in (True, False):
        pair = Pair(pki, direct, ssl.TLSVersion.TLSv1_3)
        wire = bytearray(pair.send(b"g" * 1046, b"b" * 1046))
        wire[-20] ^= 0xFF  # inside the second record's ciphertext
        pair.s_in.write(bytes(wire))
        _, error = pair.drain()
        assert error is not None
        with pytest.raises(ssl.SSLError) as again:
            pair.server.read(READ_MAX)
        outcomes.append((type(error), error.reason, type(again.value), again.value.reason))
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][0] is ssl.SSLError and outcomes[0][1]


def test_eof_without_close_notify_raises_what_the_ssl_module_raises(pki) -> None:
    outcomes = []
    for direct in (True, False):
        pair = Pair(pki, direct, ssl.TLSVersion.TLSv1_3)
        wire = pair.send(b"g" * 1046)
        pair.s_in.write(wire[:500])
        pair.s_in.write_eof()
        with pytest.raises(ssl.SSLError) as raised:
            pair.server.read(READ_MAX)
        outcomes.append((type(raised.value), raised.value.reason))
    assert outcomes[0] == outcomes[1] == (ssl.SSLEOFError, "UNEXPECTED_EOF_WHILE_READING")


def test_the_ssl_module_read_when_the_object_is_not_recognised(pki, monkeypatch) -> None:
    """The reader refuses what is not an ``_ssl._SSLSocket`` it can check; the listener
    then reads through the object's own C method, one record per call, as without the
    extension."""
    with pytest.raises(ValueError, match=r"not an _ssl\._SSLSocket"):
        _tlsread.Reader(object())
    fake = types.SimpleNamespace(read=len, pending=int)
    assert tls.records_reader(fake) == (len, int)
    monkeypatch.setattr(tls, "_tlsread", None)
    pair = Pair(pki, True, ssl.TLSVersion.TLSv1_3)
    assert pair.server.read.__self__ is pair.server._sslobj
    pair.s_in.write(pair.send(b"v" * 1046, b"h" * 32))
    assert pair.server.read(READ_MAX) == b"v" * 1046
    assert pair.server.read(READ_MAX) == b"h" * 32
