"""What is wrong with a PEM key store, said the way a user can act on it.

OpenSSL's own answer for every bad PEM key store is "[SSL] PEM lib": a store with no key
or no certificate, an encrypted key without ``ssl.key.password`` (worse: with no password
at all OpenSSL asks for one on the terminal) or with a wrong one. `pem_keystore_problem`
reads the blocks first, as Kafka's DefaultSslEngineFactory.PemStore does, and names the
key to fix: the store's own key (``ssl.keystore.location`` / ``ssl.keystore.key``) or
``ssl.key.password``.
"""

from __future__ import annotations

import base64
import binascii

from cryptography import x509
from cryptography.hazmat.primitives import serialization

_LOAD = "cannot load the key store"


def _der(body: str) -> bytes:
    return base64.b64decode("".join(body.split()))


def pem_keystore_problem(
    store_key: str, blocks: list[tuple[str, str]], password: str | None
) -> tuple[str, str] | None:
    """(config key, message) of the first problem of a key store's PEM ``blocks``
    ((label, base64 body)), None when its key can be read and is the certificate's."""
    keys = [(label, body) for label, body in blocks if label.endswith("PRIVATE KEY")]
    certs = [body for label, body in blocks if label == "CERTIFICATE"]
    if not keys:
        return store_key, f"{_LOAD}: no private key in it (-----BEGIN PRIVATE KEY-----)"
    if len(keys) > 1:
        return store_key, f"{_LOAD}: expected one private key, but found {len(keys)}"
    if not certs:
        return store_key, f"{_LOAD}: no certificate in it (-----BEGIN CERTIFICATE-----)"
    label, body = keys[0]
    encrypted = label == "ENCRYPTED PRIVATE KEY"
    if encrypted and password is None:
        return "ssl.key.password", f"{_LOAD}: its private key is encrypted: set ssl.key.password"
    try:
        secret = password.encode() if encrypted and password is not None else None
        key = serialization.load_der_private_key(_der(body), secret)
    except (ValueError, TypeError, binascii.Error):
        if encrypted:
            return "ssl.key.password", f"{_LOAD}: ssl.key.password cannot decrypt the private key"
        return store_key, f"{_LOAD}: its private key cannot be read"
    try:
        cert = x509.load_der_x509_certificate(_der(certs[0]))
    except (ValueError, binascii.Error):
        return store_key, f"{_LOAD}: its first certificate cannot be read"
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if cert.public_key().public_bytes(*spki) != key.public_key().public_bytes(*spki):
        subject = cert.subject.rfc4514_string()
        return store_key, (
            f"{_LOAD}: the private key does not match the certificate ({subject}, the "
            "first of the chain)"
        )
    return None
