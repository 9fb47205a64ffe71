"""What a SASL mechanism raises when authentication fails."""

from __future__ import annotations


class SaslAuthenticationError(Exception):
    """Authentication failed; the message is sent to the client as is (Kafka's
    SaslAuthenticationException: it must not leak what an unauthenticated client may not
    learn)."""


class SaslFailure(Exception):
    """Authentication failed; the client gets only Kafka's generic message ("Authentication
    failed during authentication due to invalid credentials with SASL mechanism M"), the
    reason goes to the broker's log (Kafka's SaslException)."""
