"""Signed JWTs for OAUTHBEARER, checked as Kafka's OAuthBearerValidatorCallbackHandler
(KIP-768) does, against the keys of a JWKS document: sans-I/O (the shell reads the file).

Accepted: RS256/RS384/RS512 (RSA keys) and ES256 (P-256 keys), the key chosen by the
token's ``kid``. Claims (Kafka's jose4j consumer): ``exp`` required and not past, ``iat``
required and not in the future, ``nbf`` (when present) not in the future (each with the
clock skew, Kafka's default 30 s), the subject claim (``sasl.oauthbearer.sub.claim.name``,
``sub``) is the principal, ``aud`` must hold one of ``sasl.oauthbearer.expected.audience``
when set, ``iss`` must equal ``sasl.oauthbearer.expected.issuer`` when set.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

_RSA: dict[str, hashes.HashAlgorithm] = {
    "RS256": hashes.SHA256(),
    "RS384": hashes.SHA384(),
    "RS512": hashes.SHA512(),
}
#: Largest JWKS document read.
JWKS_BYTES_MAX = 1_048_576


def _b64(part: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
    except (binascii.Error, ValueError):
        raise ValueError("not base64url") from None


def _int(part: str) -> int:
    return int.from_bytes(_b64(part), "big")


PublicKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey


def load_jwks(text: str) -> dict[str, PublicKey]:
    """kid -> public key of a JWKS document (ValueError if it is not one)."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"JWKS is not JSON: {exc}") from None
    keys: dict[str, PublicKey] = {}
    for jwk in doc.get("keys", []) if isinstance(doc, dict) else []:
        kid = str(jwk.get("kid", ""))
        if jwk.get("kty") == "RSA":
            keys[kid] = rsa.RSAPublicNumbers(_int(jwk["e"]), _int(jwk["n"])).public_key()
        elif jwk.get("kty") == "EC" and jwk.get("crv") == "P-256":
            numbers = ec.EllipticCurvePublicNumbers(_int(jwk["x"]), _int(jwk["y"]), ec.SECP256R1())
            keys[kid] = numbers.public_key()
    if not keys:
        raise ValueError("the JWKS has no RSA or P-256 key")
    return keys


@dataclass(frozen=True)
class JwksValidator:
    keys: Mapping[str, PublicKey]
    audience: Sequence[str] = ()
    issuer: str | None = None
    sub_claim: str = "sub"
    clock_skew_ms: int = 30_000
    algorithms: frozenset[str] = field(default_factory=lambda: frozenset({*_RSA, "ES256"}))
    #: told of a ``kid`` the keys do not hold (an https JWKS refreshes early: the key may
    #: have been rotated in since the last refresh); the token is refused all the same
    missing_key: Callable[[str], object] | None = field(default=None, compare=False)

    def validate(self, token: str, now_ms: int) -> str:
        """The token's principal; ValueError naming what is wrong."""
        parts = token.split(".")
        if len(parts) != 3:
            raise ValueError("a signed JWT has three parts")
        try:
            header = json.loads(_b64(parts[0]))
            claims = json.loads(_b64(parts[1]))
        except ValueError:
            raise ValueError("malformed JWT") from None
        if not isinstance(header, dict) or not isinstance(claims, dict):
            raise ValueError("malformed JWT")
        self._verify(header, f"{parts[0]}.{parts[1]}".encode(), _b64(parts[2]))
        return self._check_claims(claims, now_ms)

    def _verify(self, header: dict[str, object], signed: bytes, signature: bytes) -> None:
        alg = str(header.get("alg"))
        if alg not in self.algorithms:
            raise ValueError(f"JWT algorithm {alg!r} is not accepted")
        key = self.keys.get(str(header.get("kid", "")))
        if key is None:
            if self.missing_key is not None:
                self.missing_key(str(header.get("kid", "")))
            raise ValueError(f"no key {header.get('kid')!r} in the JWKS")
        try:
            if alg in _RSA and isinstance(key, rsa.RSAPublicKey):
                key.verify(signature, signed, padding.PKCS1v15(), _RSA[alg])
            elif alg == "ES256" and isinstance(key, ec.EllipticCurvePublicKey):
                if len(signature) != 64:
                    raise InvalidSignature
                der = encode_dss_signature(
                    int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big")
                )
                key.verify(der, signed, ec.ECDSA(hashes.SHA256()))
            else:
                raise ValueError(f"key {header.get('kid')!r} does not fit algorithm {alg}")
        except InvalidSignature:
            raise ValueError("the JWT signature does not verify") from None

    def _check_claims(self, claims: dict[str, object], now_ms: int) -> str:
        exp = claims.get("exp")
        if not isinstance(exp, int | float) or isinstance(exp, bool):
            raise ValueError("no expiration time (exp) claim")
        if exp * 1000 + self.clock_skew_ms <= now_ms:
            raise ValueError("the token has expired")
        nbf = claims.get("nbf")
        if isinstance(nbf, int | float) and nbf * 1000 - self.clock_skew_ms > now_ms:
            raise ValueError("the token is not valid yet (nbf)")
        iat = claims.get("iat")
        if isinstance(iat, int | float) and iat * 1000 - self.clock_skew_ms > now_ms:
            raise ValueError("the token was issued in the future (iat)")
        if self.audience:
            aud = claims.get("aud")
            auds = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
            if not set(map(str, auds)) & set(self.audience):
                raise ValueError("the token's audience (aud) is not expected")
        if self.issuer is not None and claims.get("iss") != self.issuer:
            raise ValueError("the token's issuer (iss) is not expected")
        principal = claims.get(self.sub_claim)
        if not isinstance(principal, str) or not principal:
            raise ValueError(f"no principal claim {self.sub_claim!r}")
        if not isinstance(iat, int | float) or isinstance(iat, bool):
            # Kafka's ValidatorAccessTokenValidator: setRequireIssuedAt()
            raise ValueError("no issued-at time (iat) claim")
        return principal
