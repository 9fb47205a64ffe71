"""The real wall clock, for the process shell (cores take a ``riverbed.storage.clock.Clock``)."""

from __future__ import annotations

import time


class SystemClock:
    """The real wall clock (``time.time_ns() // 1_000_000``): a ``Clock``."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def __repr__(self) -> str:
        return "SystemClock()"
