"""TLS at its seams, against a real broker:

- the handshake bound (64 at once, 10 s each) under a flood: clients that open TCP and
  send no ClientHello, or only part of one, must not hold the handshake slots a real
  client needs (before, the 65th connection waited for a stalled one's 10 s to pass, and
  under a bigger flood gave up);
- a client certificate refused (``ssl.client.auth=required``: none, another CA's, an
  expired one) gets the TLS alert naming why, as from Kafka's JSSE, so the client can
  tell (before, asyncio dropped the alert: "EOF occurred in violation of protocol",
  librdkafka "SSL connection closed by peer"); the broker serves on;
- a renegotiation is refused with one log line, no traceback.
"""

from __future__ import annotations

import datetime
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.messages import ApiVersionsRequest, ApiVersionsResponse
from riverbed.testing.certs import make_pki
from riverbed.testing.secure import SecureBroker, running_secure_broker
from riverbed.testing.secure_clients import Wire

FLOOD = 100
#: far below the 10 s a stalled handshake may hold a slot
CONNECT_S_MAX = 2.0


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    with running_secure_broker(
        tmp_path_factory.mktemp("pki"),
        {"admin": "admin-secret"},
        {},
        {"listener.name.ssl.ssl.client.auth": "required"},
    ) as broker:
        yield broker


def _context(secure: SecureBroker) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(secure.pki.ca))
    ctx.check_hostname = False
    return ctx


def _real_client_seconds(secure: SecureBroker) -> float:
    """How long a real client takes to handshake and be answered ApiVersions."""
    started = time.monotonic()
    raw = socket.create_connection(("127.0.0.1", secure.ports["SASL_SSL"]), timeout=30)
    wire = Wire.__new__(Wire)
    wire.sock, wire.corr = _context(secure).wrap_socket(raw), 0
    try:
        reply = wire.call(ApiKey.API_VERSIONS, 3, ApiVersionsRequest())
        assert isinstance(reply, ApiVersionsResponse) and reply.error_code == 0
    finally:
        wire.sock.close()
    return time.monotonic() - started


def _client_hello(secure: SecureBroker) -> bytes:
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = _context(secure).wrap_bio(incoming, outgoing, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


@pytest.mark.parametrize("sent", ["nothing", "part of a ClientHello"])
def test_a_flood_of_stalled_handshakes_does_not_starve_a_real_client(
    secure: SecureBroker, sent: str
) -> None:
    hello = _client_hello(secure)
    stalled = [socket.create_connection(("127.0.0.1", secure.ports["SSL"])) for _ in range(FLOOD)]
    try:
        if sent != "nothing":
            for s in stalled:
                s.sendall(hello[: len(hello) // 2])
        time.sleep(0.5)  # the broker has accepted them all
        took = [_real_client_seconds(secure) for _ in range(3)]
        assert max(took) < CONNECT_S_MAX, took
    finally:
        for s in stalled:
            s.close()


def _client_of_the_ca(
    secure: SecureBroker, directory: Path, *, expired: bool = False
) -> tuple[Path, Path]:
    """(key file, certificate file) signed by the broker's CA: valid now, or expired
    yesterday."""
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    from riverbed.testing.certs import _key, _key_pem, _name

    ca_key = load_pem_private_key((secure.pki.directory / "ca.key").read_bytes(), None)
    assert isinstance(ca_key, rsa.RSAPrivateKey)
    key, now = _key(), datetime.datetime.now(datetime.UTC)
    start = now - datetime.timedelta(days=3 if expired else 1)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("old" if expired else "alice", "eng"))
        .issuer_name(x509.load_pem_x509_certificate(secure.pki.ca.read_bytes()).subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + datetime.timedelta(days=2))
        .sign(ca_key, hashes.SHA256())
    )
    name = "old" if expired else "alice"
    (directory / f"{name}.key").write_bytes(_key_pem(key))
    (directory / f"{name}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return directory / f"{name}.key", directory / f"{name}.crt"


def _refusal(
    secure: SecureBroker, version: ssl.TLSVersion, client: tuple[Path, Path] | None
) -> str:
    """The error a client presenting ``client`` (key, certificate) sees: at the handshake
    (TLS 1.2), or at its first read (TLS 1.3 checks the client after the client is done)."""
    ctx = _context(secure)
    ctx.minimum_version = ctx.maximum_version = version
    if client is not None:
        ctx.load_cert_chain(str(client[1]), str(client[0]))
    raw = socket.create_connection(("127.0.0.1", secure.ports["SSL"]), timeout=10)
    wire = Wire.__new__(Wire)
    try:
        wire.sock, wire.corr = ctx.wrap_socket(raw), 0
        reply = wire.call(ApiKey.API_VERSIONS, 3, ApiVersionsRequest())
    except (ssl.SSLError, ConnectionError) as exc:
        return str(exc)
    finally:
        raw.close()
    raise AssertionError(f"served: {reply}")


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
def test_a_refused_client_certificate_gets_the_alert_naming_why(
    secure: SecureBroker, tmp_path: Path, version: ssl.TLSVersion
) -> None:
    stranger = make_pki(tmp_path / "other", {"eve": "eng"}, ca_cn="another CA")
    missing = "CERTIFICATE_REQUIRED" if version == ssl.TLSVersion.TLSv1_3 else "HANDSHAKE_FAILURE"
    assert "ALERT_UNKNOWN_CA" in _refusal(secure, version, stranger.client("eve"))
    assert "ALERT_CERTIFICATE_EXPIRED" in _refusal(
        secure, version, _client_of_the_ca(secure, tmp_path, expired=True)
    )
    assert f"ALERT_{missing}" in _refusal(secure, version, None)
    assert _real_client_seconds(secure) < CONNECT_S_MAX  # and the broker serves on


def _wait_for_output(out: bytearray, marker: bytes, what: str, timeout_s: float = 10) -> None:
    """Until ``marker`` is in ``out`` (openssl s_client's output so far)."""
    deadline = time.monotonic() + timeout_s
    while marker not in out:
        assert time.monotonic() < deadline, f"openssl s_client never showed {what}: {bytes(out)!r}"
        time.sleep(0.05)


@pytest.mark.parametrize("listener", ["SASL_SSL", "SSL"])
def test_a_renegotiation_is_refused_and_logged_without_a_traceback(
    secure: SecureBroker, tmp_path: Path, listener: str
) -> None:
    """A TLS 1.2 client asking to renegotiate (openssl s_client's ``R``) is refused, as
    Kafka's SslTransportLayer refuses it; the broker closes that connection with one log
    line naming the TLS error (before: ERROR "connection ... failed" and a traceback, a
    line any client could make the broker write) and serves on. SASL_SSL: in the SASL
    gate; SSL (a client certificate): in the request loop."""
    openssl = shutil.which("openssl")
    assert openssl is not None, "the openssl command is missing: make sysdeps installs it"
    port = secure.ports[listener]
    key, cert = _client_of_the_ca(secure, tmp_path)
    args = [openssl, "s_client", "-connect", f"127.0.0.1:{port}", "-tls1_2"]
    args += ["-cert", str(cert), "-key", str(key)]
    proc = subprocess.Popen(
        [*args, "-CAfile", str(secure.pki.ca)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    out = bytearray()

    def read_all() -> None:
        assert proc.stdout is not None
        while chunk := proc.stdout.read1(4096):
            out.extend(chunk)

    reader = threading.Thread(target=read_all, daemon=True)
    reader.start()
    try:
        _wait_for_output(out, b"Verify return code", "the handshake")
        assert proc.stdin is not None
        proc.stdin.write(b"R\n")
        proc.stdin.flush()
        # refused before stdin's end closes the client
        _wait_for_output(out, b"no renegotiation", "the refused renegotiation")
        proc.stdin.close()
        proc.wait(10)
        reader.join(10)
    finally:
        proc.kill()
    assert b"no renegotiation" in out
    assert _real_client_seconds(secure) < CONNECT_S_MAX
    log = secure.proc.log_path.read_text()
    assert "Traceback" not in log and f"on {listener} failed" not in log
    assert "closing connection from 127.0.0.1" in log and "TLS error" in log


@pytest.mark.parametrize("listener", ["PLAINTEXT", "SASL_PLAINTEXT"])
def test_a_tls_client_on_a_plaintext_port_is_named_in_the_log(
    secure: SecureBroker, listener: str
) -> None:
    """A ClientHello read as a Kafka frame is a size of ~369 MB: the broker closes the
    connection (librdkafka then says "connecting to a PLAINTEXT broker listener?") and its
    log line says what the bytes were, not only that the frame is too large."""
    hello = _client_hello(secure)
    with socket.create_connection(("127.0.0.1", secure.ports[listener]), timeout=10) as raw:
        raw.sendall(hello)
        assert raw.recv(1) == b""
    assert _real_client_seconds(secure) < CONNECT_S_MAX
    log = secure.proc.log_path.read_text()
    assert "a TLS ClientHello: the client uses SSL on this listener, which has none" in log
