"""Records a new cluster's metadata log starts with besides metadata.version: SCRAM users
from ``riverbed storage format --add-scram`` (Kafka's KIP-900), so that a secured cluster
has its first users before any listener serves and never an insecure window.

``--add-scram 'SCRAM-SHA-256=[name=admin,password=admin-secret]'`` (Kafka's form; also
``iterations=<4096..16384>`` (default 4096) and ``salt=<base64>`` (default 32 random
bytes); values may be double-quoted). The credential (salt, StoredKey, ServerKey,
iterations, never the password) is written as a UserScramCredentialRecord into
``<metadata.log.dir>/bootstrap.records`` (riverbed's file: one line per record, the record
framed as in the metadata log, in base64); the first active controller commits them with the
bootstrap records, once.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
from collections.abc import Sequence
from pathlib import Path

from riverbed.metadata.records import decode_record, encode_record
from riverbed.protocol.messages import Message, UserScramCredentialRecord
from riverbed.security.scram_keys import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    SCRAM_HASHES,
    SCRAM_NAMES,
    derive_keys,
)
from riverbed.storage.checkpoints import write_atomic

BOOTSTRAP_RECORDS = "bootstrap.records"
BOOTSTRAP_FILE_BYTES_MAX = 1_048_576
_ADD_SCRAM = re.compile(r"^\s*(SCRAM-SHA-(?:256|512))\s*=\s*\[(.*)\]\s*$", re.S)
_ITEM = re.compile(r'\s*([a-z]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^,]*)\s*(?:,|$)')


class BootstrapError(ValueError):
    """A bad --add-scram argument or an unreadable bootstrap.records file."""


def parse_add_scram(text: str, salt_bytes: bytes | None = None) -> UserScramCredentialRecord:
    """One --add-scram argument as a record (``salt_bytes``: the default salt)."""
    m = _ADD_SCRAM.match(text)
    if m is None:
        raise BootstrapError(
            f"--add-scram {text!r} must look like 'SCRAM-SHA-256=[name=alice,password=secret]'"
        )
    mechanism = next(k for k, v in SCRAM_NAMES.items() if v == m[1])
    fields: dict[str, str] = {}
    for key, raw in _ITEM.findall(m[2]):
        value = raw[1:-1].replace('\\"', '"') if raw.startswith('"') else raw.strip()
        fields[key] = value
    name, password = fields.get("name"), fields.get("password")
    if not name or password is None:
        raise BootstrapError(f"--add-scram {text!r} needs name= and password=")
    try:
        iterations = int(fields.get("iterations", str(MIN_ITERATIONS)))
        salt = base64.b64decode(fields["salt"], validate=True) if "salt" in fields else None
    except (ValueError, binascii.Error) as exc:
        raise BootstrapError(f"--add-scram {text!r}: {exc}") from None
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise BootstrapError(
            f"--add-scram iterations must be {MIN_ITERATIONS}..{MAX_ITERATIONS}, not {iterations}"
        )
    salt = salt or salt_bytes or os.urandom(32)
    salted = hashlib.pbkdf2_hmac(SCRAM_HASHES[mechanism], password.encode(), salt, iterations)
    stored, server = derive_keys(mechanism, salted)
    return UserScramCredentialRecord(
        name=name,
        mechanism=mechanism,
        salt=salt,
        stored_key=stored,
        server_key=server,
        iterations=iterations,
    )


def write_bootstrap_records(metadata_log_dir: str, records: Sequence[Message]) -> Path:
    path = Path(metadata_log_dir) / BOOTSTRAP_RECORDS
    lines = (base64.b64encode(encode_record(r)).decode() + "\n" for r in records)
    write_atomic(path, "".join(lines))
    return path


def read_bootstrap_records(metadata_log_dir: str) -> list[Message]:
    """The records of ``bootstrap.records`` ([] when there is none)."""
    path = Path(metadata_log_dir) / BOOTSTRAP_RECORDS
    try:
        if path.stat().st_size > BOOTSTRAP_FILE_BYTES_MAX:
            raise BootstrapError(f"{path} is larger than {BOOTSTRAP_FILE_BYTES_MAX} bytes")
        text = path.read_text(encoding="ascii", errors="replace")
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise BootstrapError(f"cannot read {path}: {exc}") from None
    out: list[Message] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(decode_record(base64.b64decode(line, validate=True)))
        except Exception as exc:
            raise BootstrapError(f"{path} line {number} is corrupt: {exc}") from None
    return out
