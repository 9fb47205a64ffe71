"""A small blocking Kafka client on riverbed's own protocol engine, for the few admin
requests librdkafka cannot express (e.g. configs of the cluster-default broker resource "").

Frames are Kafka's: int32 size, request header (v1/v2 by the API's flexible versions),
body (`riverbed.protocol.headers.encode_request` / `decode_response`).  The version of each
API is negotiated with ApiVersions (v0, which every broker answers) as the highest both
sides support.  Responses larger than `RESPONSE_BYTES_MAX` are refused.

Secured listeners: TLS, then Kafka's SASL login (`riverbed.security.sasl_client`), from a
`ClientSecurity`; the CLI sets its command's security (``--command-config``) once for every
client it opens (`use_security`), so each verb that connects honours it. The security is
a context variable: the console's worker threads each connect as their request's user
(`secured`), and one command's credentials never reach the next. A PLAINTEXT client that
a listener drops without a Kafka answer is told to give ``--command-config``
(`dropped_hint`): every verb on this client says so, as ``riverbed quorum describe`` does.
"""

from __future__ import annotations

import contextlib
import secrets
import socket
import ssl
import struct
from collections.abc import Callable, Iterator
from contextvars import ContextVar

from riverbed.protocol.api_versions import SUPPORTED_VERSIONS, ApiKey
from riverbed.protocol.exceptions import ProtocolError
from riverbed.protocol.headers import RequestHeader, decode_response, encode_request
from riverbed.protocol.messages import ApiVersionsRequest, ApiVersionsResponse, Message
from riverbed.security import sasl_client
from riverbed.server.client_login import PLAINTEXT_CLIENT, ClientSecurity

#: Largest response frame accepted (bytes).
RESPONSE_BYTES_MAX = 64 * 1024 * 1024
CONNECT_TIMEOUT_S = 10.0
CLIENT_ID = "riverbed-cli"
#: The newest versions this client speaks where they stop short of the broker's: its
#: requests name topics (Produce and Fetch v13+ name them by id, KIP-516), and a
#: transactional producer on it adds its partitions with AddPartitionsToTxn itself (a
#: Produce v12+ in a transaction is KIP-890 part 2's implicit add: Kafka's producer sends
#: it only under transaction.version 2).
CLIENT_VERSION_MAX: dict[ApiKey, int] = {ApiKey.PRODUCE: 11, ApiKey.FETCH: 12}


#: Why a listener drops a PLAINTEXT client's request unanswered, and what to do: a TLS
#: listener fails the handshake on the request's bytes (or answers with a TLS alert, no
#: Kafka frame); a SASL listener closes a connection whose request is not its login.
COMMAND_CONFIG_HINT = " (a TLS or SASL listener? give its client properties with --command-config)"


def dropped_hint(security: ClientSecurity) -> str:
    """`COMMAND_CONFIG_HINT` for a PLAINTEXT client that lost its connection, else ""."""
    return COMMAND_CONFIG_HINT if security.protocol == "PLAINTEXT" else ""


class WireError(RuntimeError):
    """The broker could not be reached or answered something unusable."""


class WireAuthError(WireError):
    """The broker refused this client's credentials (SASL) or the TLS handshake failed
    (e.g. a certificate the trust store does not vouch for): not worth a retry, as
    Kafka's clients treat SaslAuthenticationException and SslAuthenticationException."""


def _plaintext() -> ClientSecurity:
    return PLAINTEXT_CLIENT


#: the security of the command being run (`use_security`); PLAINTEXT outside the CLI
_session_security: ContextVar[Callable[[], ClientSecurity]] = ContextVar(
    "riverbed_wire_security", default=_plaintext
)


def use_security(security: Callable[[], ClientSecurity]) -> Callable[[], None]:
    """Every WireClient opened from now on in this context (thread, task) connects with
    ``security()`` (the CLI command's; a WireError from it fails only the verbs that open
    a wire client). Returns what puts the previous security back, for the caller to run
    when its command ends: a command run in-process must not leave its credentials to
    the next one."""
    token = _session_security.set(security)
    return lambda: _session_security.reset(token)


def current_security() -> ClientSecurity:
    """How a WireClient opened now connects."""
    return _session_security.get()()


@contextlib.contextmanager
def secured(security: ClientSecurity) -> Iterator[None]:
    """Wire clients opened inside connect with ``security``."""
    restore = use_security(lambda: security)
    try:
        yield
    finally:
        restore()


class WireClient:
    """One connection to the first address of ``bootstrap``; requests one at a time."""

    def __init__(
        self,
        bootstrap: str,
        timeout_s: float = 30.0,
        client_id: str = CLIENT_ID,
        security: ClientSecurity | None = None,
    ) -> None:
        self.client_id = client_id
        security = security if security is not None else current_security()
        self._security = security
        host, port = _first_address(bootstrap)
        try:
            self.sock = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S)
            if security.ssl_context is not None:
                self.sock = security.ssl_context.wrap_socket(self.sock, server_hostname=host)
        except ssl.SSLCertVerificationError as exc:
            raise WireAuthError(f"TLS handshake with {host}:{port} failed: {exc}") from None
        except (OSError, ssl.SSLError) as exc:
            raise WireError(f"cannot connect to {host}:{port}: {exc}") from None
        self.sock.settimeout(timeout_s)
        self._correlation = 0
        self._versions: dict[int, tuple[int, int]] = {}
        if security.mechanism:
            self._login(security)
        response = self._send(ApiKey.API_VERSIONS, 0, ApiVersionsRequest())
        assert isinstance(response, ApiVersionsResponse)
        if response.error_code:
            raise WireError(f"ApiVersions failed with error code {response.error_code}")
        self._versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}

    def _login(self, security: ClientSecurity) -> None:
        steps = sasl_client.login(
            security.mechanism, security.username, security.password, secrets.token_urlsafe(18)
        )
        try:
            api_key, version, body = next(steps)
            while True:
                api_key, version, body = steps.send(self._send(api_key, version, body))
        except StopIteration:
            return
        except sasl_client.SaslLoginError as exc:
            self.close()
            raise WireAuthError(str(exc)) from None

    def version(self, api_key: ApiKey) -> int:
        lo, hi = SUPPORTED_VERSIONS[api_key]
        ours = (lo, min(hi, CLIENT_VERSION_MAX.get(api_key, hi)))
        theirs = self._versions.get(int(api_key))
        if theirs is None or theirs[1] < ours[0] or ours[1] < theirs[0]:
            raise WireError(f"the broker does not support {api_key.name}")
        return min(ours[1], theirs[1])

    def request(self, api_key: ApiKey, body: Message) -> Message:
        return self._send(api_key, self.version(api_key), body)

    def request_at(self, api_key: ApiKey, version: int, body: Message) -> Message:
        """``body`` at exactly ``version`` (e.g. a client-side AddPartitionsToTxn v3, whose
        v4+ is the brokers' batched form); WireError when either side lacks it."""
        if not self.version(api_key) >= version >= SUPPORTED_VERSIONS[api_key][0]:
            raise WireError(f"the broker does not support {api_key.name} v{version}")
        low = self._versions[int(api_key)][0]
        if version < low:
            raise WireError(f"the broker does not support {api_key.name} v{version}")
        return self._send(api_key, version, body)

    def _send(self, api_key: int, version: int, body: Message) -> Message:
        try:
            return self._exchange(api_key, version, body)
        except WireError as exc:  # dropped, or answered with what is no Kafka frame
            raise WireError(f"{exc}{dropped_hint(self._security)}") from None

    def _exchange(self, api_key: int, version: int, body: Message) -> Message:
        self._correlation += 1
        header = RequestHeader(int(api_key), version, self._correlation, self.client_id)
        try:
            self.sock.sendall(encode_request(header, body))
            (size,) = struct.unpack(">i", self._read(4))
            if not 0 < size <= RESPONSE_BYTES_MAX:
                raise WireError(f"response frame of {size} bytes")
            frame = self._read(size)
            return decode_response(header, frame)
        except OSError as exc:
            raise WireError(f"connection failed: {exc}") from None
        except ProtocolError as exc:
            raise WireError(f"bad response: {exc}") from None

    def _read(self, n: int) -> bytes:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = self.sock.recv_into(view[got:])
            if not k:
                raise WireError("the broker closed the connection")
            got += k
        view.release()
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _first_address(bootstrap: str) -> tuple[str, int]:
    first = bootstrap.split(",")[0].strip()
    host, sep, port = first.rpartition(":")
    if not sep or not port.isdigit():
        raise WireError(f"bootstrap server {first!r} must be host:port")
    return host.strip("[]") or "localhost", int(port)
