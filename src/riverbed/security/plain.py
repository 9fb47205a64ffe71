"""SASL/PLAIN (RFC 4616) server and client messages, as Kafka's PlainSaslServer.

The client's one message is ``authzid NUL username NUL password`` (UTF-8). Kafka's rules:
exactly three tokens; username and password must not be empty; the password is checked
against the listener's JAAS ``user_<name>`` options; a non-empty authorization id must
equal the username. Every failure is a `SaslAuthenticationError` whose text the client
sees (Kafka sends these messages back, none reveals whether the user exists).
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from riverbed.security.errors import SaslAuthenticationError

MECHANISM = "PLAIN"


class PlainServer:
    """One PLAIN exchange against ``users`` (name -> password)."""

    mechanism = MECHANISM

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = users
        self.complete = False
        self.authorization_id = ""
        self.credential_expires_ms: int | None = None  # a password does not expire

    def evaluate(self, response: bytes) -> bytes:
        if self.complete:
            raise SaslAuthenticationError("SASL/PLAIN exchange already complete")
        try:
            text = response.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslAuthenticationError("Invalid SASL/PLAIN response: not UTF-8") from None
        tokens = text.split("\x00")
        if len(tokens) != 3:
            raise SaslAuthenticationError(
                f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(tokens)}"
            )
        authzid, username, password = tokens
        if not username:
            raise SaslAuthenticationError("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationError("Authentication failed: password not specified")
        expected = self._users.get(username)
        # compare_digest either way: the time taken does not tell whether the user exists
        ok = hmac.compare_digest(password.encode(), (expected or "\x00" + password).encode())
        if expected is None or not ok:
            raise SaslAuthenticationError("Authentication failed: Invalid username or password")
        if authzid and authzid != username:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is "
                "different from username"
            )
        self.complete = True
        self.authorization_id = username
        return b""


def client_message(username: str, password: str, authzid: str = "") -> bytes:
    """The PLAIN client's message (riverbed's own inter-broker client)."""
    return f"{authzid}\x00{username}\x00{password}".encode()
