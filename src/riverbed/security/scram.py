"""SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka runs them: sans-I/O.

Credentials (what the metadata log keeps, Kafka's ``UserScramCredentialRecord``): a salt,
``StoredKey = H(ClientKey)``, ``ServerKey = HMAC(SaltedPassword, "Server Key")`` and the
iteration count, where ``SaltedPassword = Hi(password, salt, i)`` (PBKDF2-HMAC) and
``ClientKey = HMAC(SaltedPassword, "Client Key")``. The password is never stored.

Messages (Kafka's ScramMessages; only the gs2 header ``n`` is accepted, no channel binding):

    client-first  n,[a=<authzid>],n=<saslname>,r=<client nonce>[,ext=value...]
    server-first  r=<client nonce><server nonce>,s=<base64 salt>,i=<iterations>
    client-final  c=<base64 gs2 header>,r=<nonce>[,ext...],p=<base64 ClientProof>
    server-final  v=<base64 ServerSignature>

Kafka's rules (ScramSaslServer): the sasl name unescapes ``=2C`` -> ``,`` and ``=3D`` ->
``=`` (any other ``=`` is invalid); an unknown user fails; a non-empty authorization id
must equal the user name; credentials below the mechanism's minimum iterations (4096) are
refused; the final message's nonce must end with the server-first nonce (the client's
nonce extended by this exchange's server nonce: a message of another exchange, or one that
leaves the server's part out, fails); the proof must give the stored key (constant-time
compare). Kafka 3.8.1-3.9 check "ends with", Kafka 4 "equals": riverbed keeps "ends with"
because librdkafka before 2.6.1 (Debian's kcat among them) sends its client nonce once
more in front (librdkafka#4895) and must still log in; the server nonce is in the message
either way, so a replay still fails.
Failures other than the authorization id are `SaslFailure` (the client gets Kafka's
generic "invalid credentials" message). Credentials can be created with 4096-16384
iterations (`MIN_ITERATIONS`, `MAX_ITERATIONS`: Kafka's ScramControlManager bounds).
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
import re
from collections.abc import Callable
from dataclasses import dataclass

from riverbed.security.errors import SaslAuthenticationError, SaslFailure
from riverbed.security.scram_keys import MAX_ITERATIONS, MIN_ITERATIONS, derive_keys

#: Salt bytes of credentials riverbed creates (Kafka's ScramFormatter: secureRandomBytes).
SALT_BYTES = 32

_VALUE = r"[\x01-\x2b\x2d-\x7f]+"  # any char but NUL and ','
_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"
_PRINTABLE = r"[\x21-\x2b\x2d-\x7e]+"
_B64 = r"(?:[a-zA-Z0-9/+]{4})*(?:[a-zA-Z0-9/+]{3}=|[a-zA-Z0-9/+]{2}==)?"
_EXTENSIONS = rf"(?:,[a-zA-Z]+={_VALUE})*"
_CLIENT_FIRST = re.compile(
    rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,(?:m={_VALUE},)?"
    rf"(?P<bare>n=(?P<saslname>{_SASLNAME}),r=(?P<nonce>{_PRINTABLE})(?P<ext>{_EXTENSIONS}))"
)
_SERVER_FIRST = re.compile(
    rf"(?:m={_VALUE},)?r=(?P<nonce>{_PRINTABLE}),s=(?P<salt>{_B64}),i=(?P<iterations>[0-9]+)"
    rf"(?:{_EXTENSIONS})"
)
_CLIENT_FINAL = re.compile(
    rf"(?P<without_proof>c=(?P<channel>{_B64}),r=(?P<nonce>{_PRINTABLE})(?:{_EXTENSIONS})),"
    rf"p=(?P<proof>{_B64})"
)
_SERVER_FINAL = re.compile(
    rf"(?:e=(?P<error>{_VALUE}))|(?:v=(?P<signature>{_B64})(?:{_EXTENSIONS}))"
)


class ScramMechanism(enum.Enum):
    """Kafka's ScramMechanism; ``type_id`` is the wire id of Describe/AlterUserScram-
    Credentials and UserScramCredentialRecord (0 is UNKNOWN)."""

    SCRAM_SHA_256 = ("SCRAM-SHA-256", "sha256", 1)
    SCRAM_SHA_512 = ("SCRAM-SHA-512", "sha512", 2)

    def __init__(self, mechanism_name: str, hash_name: str, type_id: int) -> None:
        self.mechanism_name = mechanism_name
        self.hash_name = hash_name
        self.type_id = type_id

    @classmethod
    def from_name(cls, name: str) -> ScramMechanism | None:
        return next((m for m in cls if m.mechanism_name == name), None)

    @classmethod
    def from_type(cls, type_id: int) -> ScramMechanism | None:
        return next((m for m in cls if m.type_id == type_id), None)

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self.hash_name).digest()

    def hash(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def salted_password(self, password: str, salt: bytes, iterations: int) -> bytes:
        """RFC 5802's Hi(): PBKDF2 with this mechanism's HMAC."""
        return hashlib.pbkdf2_hmac(self.hash_name, password.encode("utf-8"), salt, iterations)


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def make_credential(
    mechanism: ScramMechanism, password: str, salt: bytes, iterations: int
) -> ScramCredential:
    return credential_from_salted(
        mechanism, mechanism.salted_password(password, salt, iterations), salt, iterations
    )


def credential_from_salted(
    mechanism: ScramMechanism, salted: bytes, salt: bytes, iterations: int
) -> ScramCredential:
    stored_key, server_key = derive_keys(mechanism.type_id, salted)
    return ScramCredential(salt, stored_key, server_key, iterations)


def username_from_saslname(saslname: str) -> str:
    """RFC 5802 name unescaping, Kafka's ScramFormatter.username (ValueError if invalid)."""
    name = saslname.replace("=2C", ",")
    if "=" in name.replace("=3D", ""):
        raise ValueError(f"Invalid username: {saslname}")
    return name.replace("=3D", "=")


def saslname_from_username(username: str) -> str:
    return username.replace("=", "=3D").replace(",", "=2C")


def _b64decode(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise SaslFailure(f"invalid base64 {text!r}") from None


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b, strict=True))


CredentialLookup = Callable[[str], "ScramCredential | None"]


class ScramServer:
    """One SCRAM exchange (Kafka's ScramSaslServer). ``server_nonce`` comes from the
    shell (a secure random string without ','); ``credentials(user)`` looks a user up."""

    def __init__(
        self, mechanism: ScramMechanism, credentials: CredentialLookup, server_nonce: str
    ) -> None:
        if not re.fullmatch(_PRINTABLE, server_nonce):
            raise ValueError("server nonce must be printable ASCII without ','")
        self.mechanism = mechanism
        self.mechanism_name = mechanism.mechanism_name
        self._credentials = credentials
        self._server_nonce = server_nonce
        self._state = "first"
        self._credential: ScramCredential | None = None
        self._client_first_bare = ""
        self._gs2_header = ""
        self._server_first = ""
        self.complete = False
        self.authorization_id = ""
        self.credential_expires_ms: int | None = None  # a password does not expire

    def evaluate(self, response: bytes) -> bytes:
        try:
            text = response.decode("utf-8")
        except UnicodeDecodeError:
            self._state = "failed"
            raise SaslFailure("SCRAM message is not UTF-8") from None
        try:
            if self._state == "first":
                return self._client_first(text)
            if self._state == "final":
                return self._client_final(text)
            raise SaslFailure(f"unexpected SCRAM message in state {self._state}")
        except (SaslFailure, SaslAuthenticationError):
            self._state = "failed"
            self._credential = None
            raise

    def _client_first(self, text: str) -> bytes:
        m = _CLIENT_FIRST.fullmatch(text)
        if m is None:
            raise SaslFailure(f"Invalid SCRAM client first message format: {text!r}")
        try:
            username = username_from_saslname(m["saslname"])
        except ValueError as exc:
            raise SaslFailure(str(exc)) from None
        credential = self._credentials(username)
        if credential is None:
            raise SaslFailure("Authentication failed: Invalid user credentials")
        authzid = m["authzid"] or ""
        if authzid and authzid != username:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is "
                "different from username"
            )
        if credential.iterations < MIN_ITERATIONS:
            raise SaslFailure(
                f"Iterations {credential.iterations} is less than the minimum "
                f"{MIN_ITERATIONS} for {self.mechanism_name}"
            )
        self._credential = credential
        self.authorization_id = username
        self._gs2_header = text[: m.start("bare")]
        self._client_first_bare = m["bare"]
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = (
            f"r={m['nonce']}{self._server_nonce},s={salt},i={credential.iterations}"
        )
        self._state = "final"
        return self._server_first.encode()

    def _client_final(self, text: str) -> bytes:
        m = _CLIENT_FINAL.fullmatch(text)
        if m is None:
            raise SaslFailure(f"Invalid SCRAM client final message format: {text!r}")
        nonce = self._server_first.split(",", 1)[0][2:]
        if not m["nonce"].endswith(nonce):
            raise SaslFailure("Invalid client nonce in the final client message.")
        if _b64decode(m["channel"]) != self._gs2_header.encode():
            raise SaslFailure("channel binding does not match the gs2 header")
        credential = self._credential
        assert credential is not None
        mech = self.mechanism
        auth_message = f"{self._client_first_bare},{self._server_first},{m['without_proof']}"
        client_signature = mech.hmac(credential.stored_key, auth_message.encode())
        proof = _b64decode(m["proof"])
        if len(proof) != len(client_signature):
            raise SaslFailure("Invalid client credentials")
        if not hmac.compare_digest(mech.hash(_xor(client_signature, proof)), credential.stored_key):
            raise SaslFailure("Invalid client credentials")
        signature = mech.hmac(credential.server_key, auth_message.encode())
        self._credential = None
        self._state = "complete"
        self.complete = True
        return b"v=" + base64.b64encode(signature)


class ScramClient:
    """The client side (riverbed's own inter-broker connections)."""

    def __init__(
        self, mechanism: ScramMechanism, username: str, password: str, client_nonce: str
    ) -> None:
        self.mechanism = mechanism
        self.password = password
        self.bare = f"n={saslname_from_username(username)},r={client_nonce}"
        self.client_nonce = client_nonce
        self._server_signature = b""

    def first_message(self) -> bytes:
        return ("n,," + self.bare).encode()

    def final_message(self, server_first: bytes) -> bytes:
        text = server_first.decode("utf-8", "replace")
        m = _SERVER_FIRST.fullmatch(text)
        if m is None:
            raise SaslFailure(f"Invalid SCRAM server first message format: {text!r}")
        nonce = m["nonce"]
        if not nonce.startswith(self.client_nonce) or nonce == self.client_nonce:
            raise SaslFailure("Invalid server nonce: does not start with client nonce")
        iterations = int(m["iterations"])
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise SaslFailure(f"server asks for {iterations} iterations")
        mech = self.mechanism
        salted = mech.salted_password(self.password, _b64decode(m["salt"]), iterations)
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self.bare},{text},{without_proof}".encode()
        client_key = mech.hmac(salted, b"Client Key")
        signature = mech.hmac(mech.hash(client_key), auth_message)
        server_key = mech.hmac(salted, b"Server Key")
        self._server_signature = mech.hmac(server_key, auth_message)
        proof = base64.b64encode(_xor(client_key, signature)).decode()
        return f"{without_proof},p={proof}".encode()

    def verify_server_final(self, server_final: bytes) -> None:
        m = _SERVER_FINAL.fullmatch(server_final.decode("utf-8", "replace"))
        if m is None or m["error"] is not None:
            raise SaslFailure(f"SCRAM server final message: {server_final!r}")
        if not hmac.compare_digest(_b64decode(m["signature"]), self._server_signature):
            raise SaslFailure("Invalid server signature in the SCRAM server final message")
