"""Sign-in with the cluster's own SASL credentials (``riverbed console --login``).

The console keeps no password file: a user signs in with a SASL user name and password,
the console opens an admin client with them (the ``--command-config`` settings, e.g.
``security.protocol=SASL_SSL`` and ``sasl.mechanism``, plus ``sasl.username`` /
``sasl.password``) and asks the cluster to describe itself; the cluster's answer decides.
Every page the user then sees is asked for with that user's client, so it shows what that
principal is authorised to see (Metadata hides topics it may not describe, ACL checks
refuse the rest). A session is a random token in an HttpOnly, SameSite=Strict cookie
(Secure when the console serves TLS); at most `SESSIONS_MAX` are kept (the least
recently used is signed out first, its client closed), and one idle for
`SESSION_IDLE_S` is signed out.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from riverbed.console.admin import ConsoleAdmin, ConsoleError

#: Sessions kept at once (each holds the user's admin client).
SESSIONS_MAX = 64
#: A session unused this long is signed out, seconds.
SESSION_IDLE_S = 3600.0
#: How long a sign-in waits for the cluster's verdict, seconds.
SIGN_IN_TIMEOUT_S = 15.0
_SIGN_IN_POLL_S = 0.5
#: Longest user name or password accepted, characters.
CREDENTIAL_CHARS_MAX = 1024
COOKIE = "riverbed_console_session"


@dataclass
class Session:
    user: str
    admin: ConsoleAdmin
    used_s: float


def sign_in(base_conf: Mapping[str, Any], user: str, password: str) -> ConsoleAdmin:
    """An admin client for ``user`` once the cluster accepted the credentials (blocking);
    401 when it refused them, 504 when it did not answer."""
    from confluent_kafka import KafkaError, KafkaException

    if not user or not password:
        raise ConsoleError(400, "give a user name and a password")
    if len(user) > CREDENTIAL_CHARS_MAX or len(password) > CREDENTIAL_CHARS_MAX:
        raise ConsoleError(400, f"user name and password are limited to {CREDENTIAL_CHARS_MAX} characters")  # fmt: skip
    failures: list[Any] = []  # librdkafka's error callback: the last error, kept alone

    def remember(err: Any) -> None:
        failures[:] = [err]

    conf = dict(base_conf)
    conf.update({"sasl.username": user, "sasl.password": password, "error_cb": remember})
    admin = ConsoleAdmin(conf)
    deadline = time.monotonic() + SIGN_IN_TIMEOUT_S
    while True:
        # A refused login is no request error: librdkafka retries it and reports
        # _AUTHENTICATION through the error callback, which poll() serves.
        try:
            admin.client.list_topics(timeout=_SIGN_IN_POLL_S)
            return admin
        except KafkaException:
            admin.client.poll(0)
        refused = [e for e in failures if isinstance(e, KafkaError) and e.code() == KafkaError._AUTHENTICATION]  # fmt: skip
        if refused or time.monotonic() > deadline:
            admin.close()
            if refused:
                raise ConsoleError(401, f"sign-in failed: {refused[0].str()}")
            raise ConsoleError(504, f"sign-in failed: the cluster did not answer in {SIGN_IN_TIMEOUT_S} s")  # fmt: skip


class Sessions:
    """Signed-in users by token (see the module docstring for the bounds)."""

    def __init__(self) -> None:
        self._by_token: OrderedDict[str, Session] = OrderedDict()

    def add(self, user: str, admin: ConsoleAdmin, now_s: float | None = None) -> tuple[str, list[ConsoleAdmin]]:  # fmt: skip
        """A new session's token, and the clients of sessions it pushed out (to close)."""
        now = time.monotonic() if now_s is None else now_s
        token = secrets.token_urlsafe(32)
        self._by_token[token] = Session(user, admin, now)
        evicted = []
        while len(self._by_token) > SESSIONS_MAX:
            _token, old = self._by_token.popitem(last=False)
            evicted.append(old.admin)
        return token, evicted

    def get(self, token: str | None, now_s: float | None = None) -> Session | None:
        now = time.monotonic() if now_s is None else now_s
        session = self._by_token.get(token) if token else None
        if session is None:
            return None
        if now - session.used_s > SESSION_IDLE_S:
            return None  # `expired` closes it
        session.used_s = now
        self._by_token.move_to_end(token)  # type: ignore[arg-type]
        return session

    def expired(self, now_s: float | None = None) -> list[ConsoleAdmin]:
        """Drop idle sessions; their clients, to close."""
        now = time.monotonic() if now_s is None else now_s
        gone = [t for t, s in self._by_token.items() if now - s.used_s > SESSION_IDLE_S]
        return [self._by_token.pop(t).admin for t in gone]

    def remove(self, token: str | None) -> ConsoleAdmin | None:
        session = self._by_token.pop(token, None) if token else None
        return session.admin if session is not None else None

    def all_admins(self) -> list[ConsoleAdmin]:
        return [s.admin for s in self._by_token.values()]
