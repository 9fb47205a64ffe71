"""A broker keeps listing a broker it saw fenced for the grace period (and only then)."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from riverbed.metadata.recently_fenced import RecentlyFenced


@dataclass(frozen=True)
class Reg:
    fenced: bool


LIVE, FENCED = Reg(False), Reg(True)


def test_a_fence_seen_is_listed_for_the_grace_period_only() -> None:
    r = RecentlyFenced(3000)
    r.observe({1: LIVE, 2: LIVE}, {1: LIVE, 2: FENCED}, now_ms=10_000)
    assert r.listed(2, 10_000)
    assert r.listed(2, 12_999)
    assert not r.listed(2, 13_000)
    assert not r.listed(1, 10_000)  # never fenced: Metadata lists it anyway, not through here


def test_a_broker_fenced_before_this_one_started_is_not_listed() -> None:
    r = RecentlyFenced(3000)
    r.observe({}, {1: LIVE, 2: FENCED}, now_ms=0)
    assert not r.listed(2, 0)


def test_unfenced_again_or_unregistered_leaves_the_table() -> None:
    r = RecentlyFenced(3000)
    r.observe({1: LIVE, 2: LIVE}, {1: FENCED, 2: FENCED}, now_ms=0)
    r.observe({1: FENCED, 2: FENCED}, {1: LIVE}, now_ms=100)
    assert r.fenced_at_ms == {}
    # fenced again later: a new grace period from the new fence
    r.observe({1: LIVE}, {1: FENCED}, now_ms=5_000)
    assert r.listed(1, 7_999) and not r.listed(1, 8_000)


def test_staying_fenced_does_not_restart_the_grace_period() -> None:
    r = RecentlyFenced(3000)
    r.observe({2: LIVE}, {2: FENCED}, now_ms=0)
    r.observe({2: FENCED}, {2: FENCED}, now_ms=2_000)
    assert not r.listed(2, 3_000)
    r.observe({2: FENCED}, {2: FENCED}, now_ms=3_500)
    assert r.fenced_at_ms == {}  # expired entries are dropped, the table stays small


def test_grace_zero_is_kafkas_rule() -> None:
    r = RecentlyFenced(0)
    r.observe({2: LIVE}, {2: FENCED}, now_ms=0)
    assert not r.listed(2, 0)
    assert r.fenced_at_ms == {}


@given(
    st.lists(
        st.tuples(st.dictionaries(st.integers(0, 5), st.booleans()), st.integers(0, 2_000)),
        max_size=30,
    ),
    st.integers(0, 5_000),
)
def test_listed_only_while_fenced_and_within_grace_of_a_seen_fence(
    steps: list[tuple[dict[int, bool], int]], grace_ms: int
) -> None:
    """Against a direct model: listed(b) iff b is fenced in the current image and the
    latest unfenced -> fenced transition of b seen (while it stayed registered and fenced)
    was less than grace_ms ago."""
    r = RecentlyFenced(grace_ms)
    old: dict[int, Reg] = {}
    now = 0
    model: dict[int, int] = {}
    for image, dt in steps:
        now += dt
        new = {b: Reg(f) for b, f in image.items()}
        for b in list(model):
            if b not in new or not new[b].fenced:
                del model[b]
        for b, reg in new.items():
            if reg.fenced and b in old and not old[b].fenced:
                model[b] = now
        r.observe(old, new, now)
        for b in range(6):
            expect = grace_ms > 0 and b in model and now - model[b] < grace_ms
            assert r.listed(b, now) == expect, (b, now, model)
        old = new
