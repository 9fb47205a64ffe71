"""SASL/OAUTHBEARER (RFC 7628) with Kafka's default, unsecured-JWT validation: sans-I/O.

Client's message (Kafka's OAuthBearerClientInitialResponse)::

    n,[a=<authzid>],\\x01auth=Bearer <token>\\x01[<key>=<value>\\x01]*\\x01

The token is an unsecured JWS (``header.payload.`` with ``{"alg":"none"}``), checked as
Kafka's OAuthBearerUnsecuredValidatorCallbackHandler does, with its JAAS options
(``listener.name.<l>.oauthbearer.sasl.jaas.config``):
``unsecuredValidatorPrincipalClaimName`` (default ``sub``: the principal),
``unsecuredValidatorScopeClaimName`` (``scope``), ``unsecuredValidatorRequiredScope``
(space-separated scopes the token must hold), ``unsecuredValidatorAllowableClockSkewMs``
(0). ``exp`` (seconds) is required and must not be past; ``iat``, when present, must not be
in the future; a non-empty authzid must equal the principal. A refused token is answered
with Kafka's JSON error challenge (``{"status":"invalid_token"}``); the client then sends
``\\x01`` and the exchange fails with "Authentication failed: <reason>" (Kafka's flow).
Signed JWTs: a listener with Kafka's OAuthBearerValidatorCallbackHandler passes
`riverbed.security.jwks.JwksValidator.validate` as ``signed``, used instead.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Mapping

from riverbed.security.errors import SaslAuthenticationError

MECHANISM = "OAUTHBEARER"
#: Largest token accepted (the frame is already bounded by sasl.server.max.receive.size).
TOKEN_BYTES_MAX = 65_536
_MESSAGE = re.compile(
    r"^n,(?:a=(?P<authzid>[^,\x01]*))?,\x01(?P<kvpairs>(?:[a-zA-Z]+=[\x21-\x7e \t]*\x01)*)\x01$"
)
_TOKEN = re.compile(r"^[-_.a-zA-Z0-9]+$")


def _b64url_json(part: str) -> dict[str, object]:
    try:
        raw = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
        value = json.loads(raw)
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise ValueError("not base64url JSON") from None
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    return value


class OAuthBearerUnsecuredServer:
    """One OAUTHBEARER exchange at ``now_ms`` (the shell's clock)."""

    mechanism = MECHANISM

    def __init__(
        self,
        options: Mapping[str, str],
        now_ms: int,
        signed: Callable[[str, int], str] | None = None,
    ) -> None:
        """``signed``: a signed-JWT validator (`riverbed.security.jwks.JwksValidator.
        validate`) that replaces the unsecured one when the listener configures it."""
        self.signed = signed
        self.principal_claim = options.get("unsecuredValidatorPrincipalClaimName", "sub")
        self.scope_claim = options.get("unsecuredValidatorScopeClaimName", "scope")
        self.required_scope = options.get("unsecuredValidatorRequiredScope", "").split()
        self.skew_ms = int(options.get("unsecuredValidatorAllowableClockSkewMs", "0") or 0)
        self.now_ms = now_ms
        self.complete = False
        self.authorization_id = ""
        #: the token's ``exp`` (epoch ms): the session ends with it (Kafka's
        #: CREDENTIAL_LIFETIME_MS negotiated property)
        self.credential_expires_ms: int | None = None
        self._error: str | None = None

    def evaluate(self, response: bytes) -> bytes:
        if self._error is not None:
            # the client's %x01 after our error challenge ends the exchange
            raise SaslAuthenticationError(f"Authentication failed: {self._error}")
        try:
            text = response.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslAuthenticationError("Invalid OAUTHBEARER client first message") from None
        m = _MESSAGE.match(text)
        if m is None:
            raise SaslAuthenticationError("Invalid OAUTHBEARER client first message")
        pairs = dict(p.split("=", 1) for p in m["kvpairs"].split("\x01") if p)
        auth = pairs.get("auth", "")
        if not auth.startswith("Bearer "):
            raise SaslAuthenticationError(
                "Invalid OAUTHBEARER client first message: no Bearer token"
            )
        try:
            token = auth[len("Bearer ") :].strip()
            if self.signed is not None:
                principal = self.signed(token, self.now_ms)
            else:
                principal = self._validate(token)
        except ValueError as exc:
            self._error = str(exc)
            return json.dumps({"status": "invalid_token"}).encode()
        authzid = m["authzid"] or ""
        if authzid and authzid != principal:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is "
                "different from the token's principal name"
            )
        self.complete = True
        self.authorization_id = principal
        self.credential_expires_ms = _expiry_ms(token)
        return b""

    def _validate(self, token: str) -> str:
        """The token's principal (ValueError naming what is wrong)."""
        if len(token) > TOKEN_BYTES_MAX or not _TOKEN.match(token):
            raise ValueError("malformed token")
        parts = token.split(".")
        if len(parts) != 3 or parts[2]:
            raise ValueError("not an unsecured JWS (header.payload. with no signature)")
        header, claims = _b64url_json(parts[0]), _b64url_json(parts[1])
        if header.get("alg") != "none":
            raise ValueError(f"unsecured JWS must have alg none, not {header.get('alg')!r}")
        principal = claims.get(self.principal_claim)
        if not isinstance(principal, str) or not principal:
            raise ValueError(f"no principal claim {self.principal_claim!r}")
        exp = claims.get("exp")
        if not isinstance(exp, int | float) or isinstance(exp, bool):
            raise ValueError("no expiration time (exp) claim")
        if exp * 1000 + self.skew_ms <= self.now_ms:
            raise ValueError("the token has expired")
        iat = claims.get("iat")
        if isinstance(iat, int | float) and iat * 1000 - self.skew_ms > self.now_ms:
            raise ValueError("the token was issued in the future (iat)")
        scope = claims.get(self.scope_claim, [])
        scopes = scope.split() if isinstance(scope, str) else scope
        if not isinstance(scopes, list):
            raise ValueError(f"scope claim {self.scope_claim!r} is neither a string nor a list")
        missing = [s for s in self.required_scope if s not in scopes]
        if missing:
            raise ValueError(f"the token lacks the required scope {missing}")
        return principal


def _expiry_ms(token: str) -> int:
    """The ``exp`` of a token both validators accepted (so it has a numeric one)."""
    exp = _b64url_json(token.split(".")[1])["exp"]
    assert isinstance(exp, int | float)
    return int(exp * 1000)


def unsecured_token(
    principal: str, exp_s: float, iat_s: float | None = None, **claims: object
) -> str:
    """An unsecured JWS (tests, and riverbed's own clients if they ever need one)."""

    def enc(obj: object) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    body: dict[str, object] = {"sub": principal, "exp": exp_s, **claims}
    if iat_s is not None:
        body["iat"] = iat_s
    return f"{enc({'alg': 'none'})}.{enc(body)}."


def client_message(token: str, authzid: str = "") -> bytes:
    authz = f"a={authzid}" if authzid else ""
    return f"n,{authz},\x01auth=Bearer {token}\x01\x01".encode()
