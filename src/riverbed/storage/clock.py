"""The one Clock protocol: time is injected, never read directly below ``server/``.

Storage (and metadata) never call ``time.time()`` themselves. Every component that needs "now" takes a
:class:`Clock` (an object with ``now_ms() -> int``, milliseconds since the Unix epoch) so
that tests and the deterministic simulation drive time with a :class:`ManualClock`, and
a clock that goes backwards (a new leader with a slower clock) can be exercised. The real
clock, ``riverbed.server.clock.SystemClock``, lives in the process shell.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["Clock", "ManualClock"]


@runtime_checkable
class Clock(Protocol):
    """Anything with ``now_ms()``: wall-clock milliseconds since the epoch."""

    def now_ms(self) -> int: ...


class ManualClock:
    """A clock that only moves when told to; may be set backwards on purpose."""

    def __init__(self, now_ms: int = 0) -> None:
        self._now_ms = now_ms

    def now_ms(self) -> int:
        return self._now_ms

    def advance(self, delta_ms: int) -> int:
        """Move time by ``delta_ms`` (may be negative) and return the new time."""
        self._now_ms += delta_ms
        return self._now_ms

    def set(self, now_ms: int) -> None:
        self._now_ms = now_ms

    def __repr__(self) -> str:
        return f"ManualClock(now_ms={self._now_ms})"
