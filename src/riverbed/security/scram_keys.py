"""SCRAM's key derivation and Kafka's bounds (RFC 5802; Kafka's ScramMechanism and
ScramControlManager): shared by the SASL client and server (riverbed.security.scram) and
the metadata log's credentials (riverbed.metadata.scram_control). Standard library only:
a client (the CLI, a Spark task) imports it without the broker's metadata modules."""

from __future__ import annotations

import hashlib
import hmac

#: SCRAM mechanism id (wire and record) -> hashlib name.
SCRAM_HASHES: dict[int, str] = {1: "sha256", 2: "sha512"}
SCRAM_NAMES: dict[int, str] = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384


def derive_keys(mechanism: int, salted_password: bytes) -> tuple[bytes, bytes]:
    """(StoredKey, ServerKey) from SaltedPassword (RFC 5802)."""
    name = SCRAM_HASHES[mechanism]
    client_key = hmac.new(salted_password, b"Client Key", name).digest()
    server_key = hmac.new(salted_password, b"Server Key", name).digest()
    return hashlib.new(name, client_key).digest(), server_key
