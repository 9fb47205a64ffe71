"""TLS for listeners and riverbed's own outgoing connections, from Kafka's ssl.* keys.

Key stores (Kafka's DefaultSslEngineFactory):

- ``ssl.keystore.type=PEM``: the private key and certificate chain inline
  (``ssl.keystore.key``, ``ssl.keystore.certificate.chain``; a properties file writes
  them on continued lines, whitespace inside the base64 is ignored) or one PEM file at
  ``ssl.keystore.location`` holding both; an encrypted key's password is
  ``ssl.key.password``;
- ``ssl.keystore.type=PKCS12``: ``ssl.keystore.location`` + ``ssl.keystore.password``
  (loaded with the cryptography package: the ssl module reads only PEM);
- trust stores alike: ``ssl.truststore.certificates`` (PEM inline), or
  ``ssl.truststore.location`` with ``ssl.truststore.type`` PEM or PKCS12;
- JKS (Kafka's default type) is Java-only: a JKS store is a configuration error.

``ssl.client.auth`` none / requested / required maps to CERT_NONE / CERT_OPTIONAL /
CERT_REQUIRED; ``ssl.protocol``, ``ssl.enabled.protocols`` and ``ssl.cipher.suites`` are
checked and applied by `riverbed.server.tls_protocols`. A client context verifies the
server's certificate and, with ``ssl.endpoint.identification.algorithm=https`` (the
default), its host name.

Handshakes are bounded (`HandshakeLimiter`): at most ``TLS_HANDSHAKES_CONCURRENT_MAX``
run at once and each must finish within ``TLS_HANDSHAKE_TIMEOUT_MS``, so a flood of
half-open TLS connections holds file descriptors (bounded by max.connections), never
the event loop.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import contextvars
import os
import re
import ssl
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from riverbed.server.tls_protocols import apply_protocols


class RecordsReader(Protocol):
    """What a listener's TLS object reads with: an ``_ssl._SSLSocket``'s C ``read`` and
    ``pending``, or `_tlsread.Reader`'s (the same contract)."""

    def read(self, size: int, buffer: bytearray | memoryview | None = None, /) -> bytes | int: ...

    def pending(self) -> int: ...


class _TlsreadModule(Protocol):
    """The `_tlsread` extension: ``Reader(openssl)`` raises ValueError when it does not
    recognise the OpenSSL object's layout."""

    def Reader(self, openssl: RecordsReader, /) -> RecordsReader: ...


#: The `_tlsread` extension once a listener's first TLS connection has asked for it (None:
#: not built, no C compiler: the `_ssl` methods, one record per call). Imported then, not
#: with this module: a Spark worker or a client builds client contexts here and must not
#: load the broker's pieces (tests/unit/test_spark_import_weight.py).
_tlsread: _TlsreadModule | None = None
_tlsread_tried = False


def _tlsread_module() -> _TlsreadModule | None:
    global _tlsread, _tlsread_tried
    if not _tlsread_tried:
        _tlsread_tried = True
        try:
            from riverbed.server import _tlsread as module  # type: ignore[attr-defined]
        except ImportError:
            module = None
        _tlsread = module
    return _tlsread


#: TLS handshakes in progress at once, over all listeners of a node.
TLS_HANDSHAKES_CONCURRENT_MAX = 64
#: Time a client has to complete its TLS handshake (waiting for a slot included).
TLS_HANDSHAKE_TIMEOUT_MS = 10_000
#: Largest key/trust store file read (a store is a few KiB).
STORE_FILE_BYTES_MAX = 1_048_576

_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", re.S)

#: A resolved config value by key (listener override first), None when unset.
Lookup = Callable[[str], object]


class TlsConfigError(ValueError):
    """A TLS configuration that cannot be loaded; ``key`` names the config key."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key


def normalize_pem(text: str) -> str:
    """PEM blocks with their base64 re-wrapped (a properties value loses its newlines)."""
    blocks = []
    for label, body in _PEM_BLOCK.findall(text):
        b64 = "".join(body.split())
        lines = [b64[i : i + 64] for i in range(0, len(b64), 64)]
        blocks.append(
            f"-----BEGIN {label}-----\n" + "\n".join(lines) + f"\n-----END {label}-----\n"
        )
    return "".join(blocks)


def _read(key: str, path: str) -> bytes:
    try:
        if os.path.getsize(path) > STORE_FILE_BYTES_MAX:
            raise TlsConfigError(key, f"{path} is larger than {STORE_FILE_BYTES_MAX} bytes")
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise TlsConfigError(key, f"cannot read {path}: {exc.strerror or exc}") from None


def _read_pem(key: str, path: str) -> str:
    """A PEM store file's text, normalized (a binary file: the store type is wrong)."""
    try:
        return normalize_pem(_read(key, path).decode("ascii"))
    except UnicodeDecodeError:
        type_key = key.replace(".location", ".type")
        raise TlsConfigError(
            key,
            f"{path} is not a PEM file ({type_key}=PEM): is it a PKCS12 store? "
            f"Then set {type_key}=PKCS12",
        ) from None


def _str(value: object) -> str | None:
    return None if value is None else str(value)


@contextlib.contextmanager
def _private_file(data: str) -> Iterator[str]:
    """A file only this process can read, removed at once (load_cert_chain takes paths)."""
    fd, path = tempfile.mkstemp(prefix="riverbed-key-", suffix=".pem")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(data)
        yield path
    finally:
        os.unlink(path)


def _pkcs12(
    key: str, path: str, password: str | None, key_password: str | None = None
) -> tuple[str, str, str]:
    """(private key PEM, certificate chain PEM, CA certificates PEM) of a PKCS12 file;
    ``key_password``: ``ssl.key.password`` of a key store."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    data = _read(key, path)
    _check_pkcs12_key_password(path, data, password, key_password)
    try:
        pk, cert, extra = pkcs12.load_key_and_certificates(
            data, password.encode() if password else None
        )
    except ValueError as exc:
        if "password" in str(exc):  # cryptography: "Invalid password or PKCS12 data"
            password_key = key.replace(".location", ".password")
            raise TlsConfigError(
                password_key,
                f"cannot load PKCS12 store {path}: wrong or missing {password_key} "
                "(or damaged data)",
            ) from None
        raise TlsConfigError(key, f"cannot load PKCS12 store {path}: {exc}") from None
    enc = serialization.Encoding.PEM
    key_pem = (
        pk.private_bytes(enc, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        if pk is not None
        else b""
    )
    chain = (cert.public_bytes(enc) if cert is not None else b"") + b"".join(
        c.public_bytes(enc) for c in extra
    )
    cas = b"".join(c.public_bytes(enc) for c in extra) + (
        cert.public_bytes(enc) if cert is not None and pk is None else b""
    )
    return key_pem.decode(), chain.decode(), cas.decode()


def _check_pkcs12_key_password(
    path: str, data: bytes, password: str | None, key_password: str | None
) -> None:
    """Kafka's KeyManagerFactory recovers a PKCS12 store's key with ``ssl.key.password``
    (the store password when unset); a store protects its key with one password (keytool
    and openssl write one), so another one fails and the broker does not start. The
    cryptography package opens a store with a single password: one the key password
    cannot open is refused."""
    from cryptography.hazmat.primitives.serialization import pkcs12

    if key_password is None or key_password == (password or ""):
        return
    try:
        pkcs12.load_key_and_certificates(data, key_password.encode())
    except ValueError:
        raise TlsConfigError(
            "ssl.key.password",
            f"cannot recover the private key of PKCS12 store {path} with ssl.key.password: "
            "it is not the key's password (a PKCS12 key has the store's password: leave "
            "ssl.key.password unset or set it to ssl.keystore.password)",
        ) from None


def _load_keystore(ctx: ssl.SSLContext, get: Lookup, required: bool) -> str | None:
    """Load the key store; the PEM text loaded (certificate chain first), None without."""
    store_type = str(get("ssl.keystore.type") or "JKS").upper()
    location = _str(get("ssl.keystore.location"))
    inline_key = _str(get("ssl.keystore.key"))
    key_password = _str(get("ssl.key.password"))
    if inline_key is not None and location is not None:
        # Kafka's DefaultSslEngineFactory: two key stores, neither silently preferred (a
        # location altered on a listener with an inline key would otherwise do nothing)
        raise TlsConfigError(
            "ssl.keystore.location",
            "Both SSL key store location and separate private key are specified.",
        )
    if inline_key is not None or get("ssl.keystore.certificate.chain") is not None:
        if store_type != "PEM":
            raise TlsConfigError("ssl.keystore.type", "inline keys need ssl.keystore.type=PEM")
        chain = _str(get("ssl.keystore.certificate.chain"))
        if inline_key is None or chain is None:
            raise TlsConfigError(
                "ssl.keystore.key",
                "ssl.keystore.key and ssl.keystore.certificate.chain must both be set",
            )
        pem = normalize_pem(chain) + normalize_pem(inline_key)
        _load_chain(ctx, "ssl.keystore.key", pem, key_password)
        return pem
    if location is None:
        if required:
            raise TlsConfigError(
                "ssl.keystore.location", "a TLS listener needs a key store (PEM or PKCS12)"
            )
        return None
    if store_type == "PEM":
        pem = _read_pem("ssl.keystore.location", location)
        _load_chain(ctx, "ssl.keystore.location", pem, key_password)
        return pem
    if store_type == "PKCS12":
        store_password = _str(get("ssl.keystore.password"))
        if store_password is None:  # Kafka's DefaultSslEngineFactory.createKeystore
            raise TlsConfigError(
                "ssl.keystore.password",
                "SSL key store is specified, but key store password is not specified.",
            )
        key_pem, chain, _ = _pkcs12("ssl.keystore.location", location, store_password, key_password)
        _load_chain(ctx, "ssl.keystore.location", chain + key_pem, None)
        return chain + key_pem
    raise TlsConfigError(
        "ssl.keystore.type", f"{store_type} key stores are not supported: use PEM or PKCS12"
    )


def first_certificate(pem: str | None) -> bytes | None:
    """DER of the first certificate of a PEM text (a key store's own certificate)."""
    for label, body in _PEM_BLOCK.findall(pem or ""):
        if label == "CERTIFICATE":
            return base64.b64decode("".join(body.split()))
    return None


def _load_chain(ctx: ssl.SSLContext, store_key: str, pem: str, password: str | None) -> None:
    """Load a PEM key store (``store_key``: the config key it came from); its problems are
    named first (`riverbed.server.pem_keystore`): OpenSSL says only "PEM lib"."""
    from riverbed.server.pem_keystore import pem_keystore_problem  # cryptography: lazily

    problem = pem_keystore_problem(store_key, _PEM_BLOCK.findall(pem), password)
    if problem is not None:
        raise TlsConfigError(*problem)
    with _private_file(pem) as path:
        try:
            # a callable: with no password OpenSSL would ask for one on the terminal
            ctx.load_cert_chain(path, password=lambda: password or "")
        except (ssl.SSLError, ValueError) as exc:
            raise TlsConfigError(store_key, f"cannot load the key store: {exc}") from None


def truststore_pem(get: Lookup) -> str | None:
    """The trusted CAs as PEM text (None when none is configured): inline
    ``ssl.truststore.certificates``, or ``ssl.truststore.location`` of type PEM or PKCS12."""
    inline = _str(get("ssl.truststore.certificates"))
    location = _str(get("ssl.truststore.location"))
    store_type = str(get("ssl.truststore.type") or "JKS").upper()
    if inline is not None and location is not None:
        raise TlsConfigError(
            "ssl.truststore.location",
            "Both SSL trust store location and separate trust certificates are specified.",
        )
    if inline is not None:
        pem = normalize_pem(inline)
    elif location is None:
        return None
    elif store_type == "PEM":
        pem = _read_pem("ssl.truststore.location", location)
    elif store_type == "PKCS12":
        _, chain, cas = _pkcs12(
            "ssl.truststore.location", location, _str(get("ssl.truststore.password"))
        )
        pem = cas or chain
    else:
        raise TlsConfigError(
            "ssl.truststore.type", f"{store_type} trust stores are not supported: use PEM or PKCS12"
        )
    if not pem:
        raise TlsConfigError("ssl.truststore.certificates", "no certificate in the trust store")
    return pem


def _load_truststore(ctx: ssl.SSLContext, get: Lookup) -> bool:
    """Load the trusted CAs; False when none is configured."""
    pem = truststore_pem(get)
    if pem is None:
        return False
    try:
        ctx.load_verify_locations(cadata=pem)
    except ssl.SSLError as exc:
        raise TlsConfigError("ssl.truststore.certificates", f"cannot load: {exc}") from None
    return True


class DirectSSLObject(ssl.SSLObject):
    """An `ssl.SSLObject` whose ``read`` and ``pending`` are the C methods of the OpenSSL
    connection underneath (instance attributes set at creation) instead of the Python
    wrappers that only forward to them with the same arguments (``read(len[, buffer])``,
    ``pending()``) and errors.

    Why (issue 20): the event loop's TLS layer (uvloop's SSLProtocol, asyncio's alike)
    calls ``read`` and ``pending`` once per TLS record, and librdkafka writes a Produce
    request over TLS as one record per message value (~1 KiB), ~1,000 records per MB. A
    perf profile of a broker taking 61 MB of SSL produce, beside one without this class
    in the same run: the interpreter's CPU (libpython) 249.5 -> 167.2 ms, its frame
    evaluation 95.0 -> 51.5 ms, OpenSSL's unchanged (100.5 -> 95.6 ms).

    With the ``_tlsread`` extension (``_tlsread.c``), ``read`` decrypts every complete
    record buffered in one C call instead of one record per call (no 256 KiB allocation,
    GIL hand-off and loop pass per record); without it, or when it does not recognise the
    OpenSSL object (its layout check fails), ``read`` is the C method as above.

    A server handshake OpenSSL refuses (a client certificate of an unknown CA, expired,
    or missing under ``ssl.client.auth=required``; no common protocol) leaves a fatal
    alert naming why in the outgoing buffer, which the event loop's TLS layer drops when
    it closes at the error: the client saw a bare close ("EOF occurred in violation of
    protocol"; librdkafka "SSL connection closed by peer", guessing a PLAINTEXT port) where
    Kafka's JSSE sends the alert ("alert unknown ca"). ``do_handshake`` then reports
    "want read" once, so the loop writes the alert out, and raises the error at its next
    call (the client's close or next bytes; else the handshake time limit ends it); the
    error is also left in `HANDSHAKE_REFUSAL`'s box for the log line.
    """

    _refusal: ssl.SSLError | None = None
    _outgoing: ssl.MemoryBIO | None = None

    @classmethod
    def _create(cls, *args: Any, **kwargs: Any) -> DirectSSLObject:
        obj: DirectSSLObject = super()._create(*args, **kwargs)  # type: ignore[misc]
        openssl = obj._sslobj  # type: ignore[attr-defined]
        read, pending = records_reader(openssl)
        outgoing = args[1] if len(args) > 1 else kwargs.get("outgoing")
        obj.__dict__.update(read=read, pending=pending, _outgoing=outgoing)
        box = HANDSHAKE_REFUSAL.get(None)
        if box is not None:
            box.append(obj)
        return obj

    def do_handshake(self) -> None:
        if self._refusal is not None:
            raise self._refusal
        try:
            super().do_handshake()
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            raise
        except ssl.SSLError as exc:
            if not self.server_side or self._outgoing is None or not self._outgoing.pending:
                raise
            self._refusal = exc  # the alert goes out first
            raise ssl.SSLWantReadError("sending the alert") from exc

    @property
    def refusal(self) -> ssl.SSLError | None:
        """Why the handshake was refused (None: it was not)."""
        return self._refusal


#: Set by whoever runs a server handshake: the `DirectSSLObject` made for it is appended,
#: so the reason of a refusal can be logged after the loop reports only the close.
HANDSHAKE_REFUSAL: contextvars.ContextVar[list[DirectSSLObject]] = contextvars.ContextVar(
    "HANDSHAKE_REFUSAL"
)


def records_reader(
    openssl: RecordsReader,
) -> tuple[Callable[..., bytes | int], Callable[[], int]]:
    """``read`` and ``pending`` of an ``_ssl._SSLSocket``: `_tlsread`'s when the extension
    is built and recognises the object, else the object's own C methods (same contract)."""
    extension = _tlsread_module()
    if extension is not None:
        with contextlib.suppress(ValueError):
            reader = extension.Reader(openssl)
            return reader.read, reader.pending
    return openssl.read, openssl.pending


@dataclass(frozen=True)
class ServerTls:
    """A listener's server-side context and what a replacement is checked against."""

    context: ssl.SSLContext
    #: DER of the key store's certificate
    certificate: bytes | None
    has_truststore: bool


def server_tls(get: Lookup) -> ServerTls:
    """The listener's server-side context (TlsConfigError naming the bad key)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.sslobject_class = DirectSSLObject
    apply_protocols(ctx, get, TlsConfigError)
    pem = _load_keystore(ctx, get, required=True)
    has_trust = _load_truststore(ctx, get)
    client_auth = str(get("ssl.client.auth") or "none")
    if client_auth != "none":
        if not has_trust:
            raise TlsConfigError(
                "ssl.truststore.location", f"ssl.client.auth={client_auth} needs a trust store"
            )
        ctx.verify_mode = ssl.CERT_REQUIRED if client_auth == "required" else ssl.CERT_OPTIONAL
    return ServerTls(ctx, first_certificate(pem), has_trust)


def client_context(get: Lookup) -> ssl.SSLContext:
    """A context for riverbed's own connections to a TLS listener of another node."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    apply_protocols(ctx, get, TlsConfigError)
    if not _load_truststore(ctx, get):
        ctx.load_default_certs()
    _load_keystore(ctx, get, required=False)  # presented when the server asks
    ctx.check_hostname = str(get("ssl.endpoint.identification.algorithm") or "").lower() == "https"
    return ctx


def tls_record_hint(frame_size: int) -> str:
    """A note for the log when a Kafka frame's size is a TLS handshake record's first four
    bytes (content type 22, version 3.x): a client speaking TLS to a listener without."""
    head = frame_size.to_bytes(4, "big", signed=True)
    if head[0] == 0x16 and head[1] == 0x03:
        return " (a TLS ClientHello: the client uses SSL on this listener, which has none)"
    return ""


class HandshakeLimiter:
    """Bounds concurrent TLS handshakes (slots) and each one's duration."""

    def __init__(
        self,
        concurrent_max: int = TLS_HANDSHAKES_CONCURRENT_MAX,
        timeout_ms: int = TLS_HANDSHAKE_TIMEOUT_MS,
    ) -> None:
        self.slots = asyncio.Semaphore(concurrent_max)
        self.timeout_ms = timeout_ms
