"""Signed JWTs and a JWKS for OAUTHBEARER tests (RS256 and ES256, cryptography package)."""

from __future__ import annotations

import base64
import json

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _uint(n: int, size: int) -> str:
    return _b64(n.to_bytes(size, "big"))


class JwtIssuer:
    """An RSA and a P-256 key (kids ``rsa_kid``, default ``rsa-1``, and ``ec-1``), their
    JWKS, and tokens."""

    def __init__(self, rsa_kid: str = "rsa-1") -> None:
        self.rsa_kid = rsa_kid
        self.rsa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.ec = ec.generate_private_key(ec.SECP256R1())

    def jwks(self) -> str:
        rn = self.rsa.public_key().public_numbers()
        en = self.ec.public_key().public_numbers()
        return json.dumps(
            {
                "keys": [
                    {"kty": "RSA", "kid": self.rsa_kid, "alg": "RS256", "e": _uint(rn.e, 3),
                     "n": _uint(rn.n, 256)},
                    {"kty": "EC", "kid": "ec-1", "crv": "P-256", "x": _uint(en.x, 32),
                     "y": _uint(en.y, 32)},
                ]
            }
        )  # fmt: skip

    def token(self, claims: dict[str, object], alg: str = "RS256", kid: str | None = None) -> str:
        header = {
            "alg": alg,
            "typ": "JWT",
            "kid": kid or ("ec-1" if alg == "ES256" else self.rsa_kid),
        }
        signed = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
        if alg == "ES256":
            r, s = decode_dss_signature(self.ec.sign(signed.encode(), ec.ECDSA(hashes.SHA256())))
            signature = r.to_bytes(32, "big") + s.to_bytes(32, "big")
        else:
            signature = self.rsa.sign(signed.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signed}.{_b64(signature)}"
