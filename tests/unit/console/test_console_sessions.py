"""The console's sign-in sessions: random tokens, bounded in number (the least recently
used goes first) and in idle time; and where a sign-in may send the browser next."""

from __future__ import annotations

from typing import Any

from riverbed.console.login import SESSION_IDLE_S, SESSIONS_MAX, Sessions
from riverbed.console.views_login import _next


def test_tokens_are_random_and_map_to_their_user() -> None:
    s = Sessions()
    a_admin, b_admin = object(), object()
    a, _ = s.add("alice", a_admin, now_s=0.0)  # type: ignore[arg-type]
    b, _ = s.add("bob", b_admin, now_s=0.0)  # type: ignore[arg-type]
    assert a != b and len(a) >= 40
    session = s.get(a, now_s=1.0)
    assert session is not None and (session.user, session.admin) == ("alice", a_admin)
    assert s.get("forged", now_s=1.0) is None
    assert s.get(None, now_s=1.0) is None


def test_the_least_recently_used_session_is_pushed_out() -> None:
    s = Sessions()
    admins: list[Any] = [object() for _ in range(SESSIONS_MAX + 1)]
    tokens = [s.add(f"u{i}", admins[i], now_s=float(i))[0] for i in range(SESSIONS_MAX)]
    assert s.get(tokens[0], now_s=100.0) is not None  # u0 used: u1 is now the oldest
    _token, evicted = s.add("late", admins[-1], now_s=101.0)
    assert evicted == [admins[1]]
    assert s.get(tokens[1], now_s=102.0) is None
    assert s.get(tokens[0], now_s=102.0) is not None


def test_an_idle_session_is_signed_out() -> None:
    s = Sessions()
    admin: Any = object()
    token, _ = s.add("alice", admin, now_s=0.0)
    assert s.get(token, now_s=SESSION_IDLE_S - 1) is not None  # use renews it
    assert s.get(token, now_s=2 * SESSION_IDLE_S) is None
    assert s.expired(now_s=2 * SESSION_IDLE_S) == [admin]
    assert s.all_admins() == []


def test_logout_removes_the_session() -> None:
    s = Sessions()
    admin: Any = object()
    token, _ = s.add("alice", admin, now_s=0.0)
    assert s.remove(token) is admin
    assert s.remove(token) is None and s.get(token, now_s=1.0) is None


def test_next_stays_on_the_console() -> None:
    assert _next("/topics?x=1") == "/topics?x=1"
    for outside in ("//evil.example/", "https://evil.example/", "/\\evil.example", "", "topics"):
        assert _next(outside) == "/"
