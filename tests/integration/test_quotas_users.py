"""Issue 20, client quotas "per user, client id, or both, with defaults": producer byte-rate
quotas of *user* entities on a SASL_PLAINTEXT listener (PLAIN users), set with
``riverbed quotas alter``, enforced on the logged-in principal's produces:

- a ``users/alice`` quota throttles alice and not bob;
- a ``users/carol/clients/vip`` quota takes precedence over ``users/carol`` for client id
  vip, while carol's other client ids share the user quota (Kafka's precedence order);
- the default user quota (``--user-defaults``) applies to a user without one of its own,
  not to a user with its own.

Measured by ``throttle_time_ms`` on raw produce requests (one big record each), which
Kafka computes deterministically: the produce's size is recorded, the rate taken over at
least ``quota.window.num - 1`` windows (1 s here), and the throttle is
``(rate - quota) / quota * 1000`` ms. A 300 kB produce against a 100 kB/s quota is
throttled ~2000 ms; unquoted it is not throttled at all. Each user starts with a fresh
sensor (a user per test), so the expected throttles do not depend on timing, except the
muted-channel check which needs only a lower bound.
"""

from __future__ import annotations

import contextlib
import io
import time
from collections.abc import Iterator

import pytest

from riverbed.cli.main import main
from riverbed.testing.secure import SecureBroker, running_secure_broker
from riverbed.testing.secure_clients import Wire

USERS = {
    "admin": "admin-secret",
    "alice": "alice-pw",
    "bob": "bob-pw",
    "carol": "carol-pw",
    "dave": "dave-pw",
    "erin": "erin-pw",
}
TOPIC = "user-quotas"
QUOTA = 100_000
#: one produce of this many bytes against QUOTA: throttled (3 - 1) / 1 s = ~2000 ms
BIG = 300_000
EXPECTED_MS = (BIG - QUOTA) * 1000 // QUOTA


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    # 2 samples of 1 s (as test_quotas.py): the rate is taken over at least 1 s
    with running_secure_broker(
        tmp_path_factory.mktemp("user-quotas"), USERS, {}, {"quota.window.num": "2"}
    ) as broker:
        broker.create_topics([TOPIC])
        yield broker


def _quotas(secure: SecureBroker, *args: str) -> None:
    """``riverbed quotas alter`` through the PLAINTEXT listener, in this process."""
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["quotas", "alter", "-b", secure.bootstrap("PLAINTEXT"), *args]) == 0


def _session(secure: SecureBroker, user: str, client_id: str = "producer") -> Wire:
    wire = Wire(secure.ports["SASL_PLAINTEXT"], client_id=client_id)
    wire.plain_login(user, USERS[user])
    return wire


def _throttle_ms(wire: Wire, value_bytes: int) -> int:
    reply = wire.produce(TOPIC, value_bytes)
    assert reply.responses[0].partition_responses[0].error_code == 0  # appended all the same
    return reply.throttle_time_ms


def _near_expected(throttle_ms: int) -> bool:
    # the request's own framing adds ~0.1 %; a broken quota gives 0 or a very different time
    return 0.8 * EXPECTED_MS <= throttle_ms <= 1.3 * EXPECTED_MS


def test_a_user_quota_throttles_that_user_only(secure: SecureBroker) -> None:
    _quotas(secure, "--user", "alice", "--add-config", f"producer_byte_rate={QUOTA}")
    alice = _session(secure, "alice")
    throttle_ms = _throttle_ms(alice, BIG)
    assert _near_expected(throttle_ms), throttle_ms
    # Kafka mutes a throttled channel: alice's next request waits out the throttle
    started = time.monotonic()
    alice.produce(TOPIC, 10)
    assert time.monotonic() - started >= 0.8 * throttle_ms / 1000
    # bob (no quota, no default) produces as much and more, unthrottled
    bob = _session(secure, "bob")
    assert [_throttle_ms(bob, BIG) for _ in range(3)] == [0, 0, 0]


def test_a_user_and_client_id_quota_comes_before_the_user_quota(secure: SecureBroker) -> None:
    _quotas(secure, "--user", "carol", "--add-config", f"producer_byte_rate={QUOTA}")
    _quotas(
        secure, "--user", "carol", "--client", "vip",
        "--add-config", f"producer_byte_rate={5 * QUOTA}",
    )  # fmt: skip
    # carol as vip: 300 kB is under vip's 500 kB/s (the user quota would throttle ~2000 ms)
    vip = _session(secure, "carol", "vip")
    assert _throttle_ms(vip, BIG) == 0
    # ...and vip's own quota is enforced: 1.2 MB within ~1 s is over 500 kB/s (~1400 ms),
    # far less than the user quota (100 kB/s) would give (~11000 ms)
    second_ms = _throttle_ms(vip, 900_000)
    assert 0 < second_ms < 4000, second_ms
    # carol's other client ids share the user quota
    other = _session(secure, "carol", "batch-job")
    assert _near_expected(_throttle_ms(other, BIG))


def test_the_default_user_quota_applies_to_users_without_their_own(
    secure: SecureBroker,
) -> None:
    _quotas(secure, "--user", "erin", "--add-config", f"producer_byte_rate={100 * QUOTA}")
    _quotas(secure, "--user-defaults", "--add-config", f"producer_byte_rate={QUOTA}")
    try:
        dave = _session(secure, "dave")  # no quota of its own: the default's
        assert _near_expected(_throttle_ms(dave, BIG))
        erin = _session(secure, "erin")  # its own quota (10 MB/s) comes before the default
        assert _throttle_ms(erin, BIG) == 0
    finally:  # bob, in the first test, has no quota
        _quotas(secure, "--user-defaults", "--delete-config", "producer_byte_rate")
