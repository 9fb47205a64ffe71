"""`riverbed transactions` asks a loading coordinator again, as Kafka's admin client does:
a broker answers ListTransactions and DescribeTransactions with COORDINATOR_LOAD_IN_PROGRESS
while its transaction state partitions load (seen in `make test`: find-hanging failed with
"broker 1: COORDINATOR_LOAD_IN_PROGRESS" right after a broker's start)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from riverbed.cli import group_admin, transactions, wire
from riverbed.cli.common import CliError
from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode

LOADING = int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)


class _FakeBroker:
    """Answers each API key from a script: the first answers LOADING, then the last."""

    def __init__(self, answers: dict[ApiKey, list[Any]]) -> None:
        self.answers = answers
        self.asked: list[ApiKey] = []

    def client(self, _address: str, *_args: Any, **_kwargs: Any) -> _FakeBroker:
        return self

    def __enter__(self) -> _FakeBroker:
        return self

    def __exit__(self, *_exc: object) -> None:
        return None

    def version(self, _key: ApiKey) -> int:
        return 4

    def request(self, key: ApiKey, _request: object) -> Any:
        self.asked.append(key)
        script = self.answers[key]
        return script.pop(0) if len(script) > 1 else script[0]


def _state(code: int) -> Any:
    return SimpleNamespace(
        error_code=code,
        transactional_id="t1",
        producer_id=7,
        producer_epoch=0,
        transaction_state="Ongoing",
        transaction_timeout_ms=60_000,
        transaction_start_time_ms=-1,
        topics=[SimpleNamespace(topic="hang", partitions=[0])],
    )


@pytest.fixture()
def broker(monkeypatch: pytest.MonkeyPatch) -> _FakeBroker:
    fake = _FakeBroker(
        {
            ApiKey.LIST_TRANSACTIONS: [
                SimpleNamespace(error_code=LOADING, transaction_states=[]),
                SimpleNamespace(error_code=LOADING, transaction_states=[]),
                SimpleNamespace(error_code=0, transaction_states=[_state(0)]),
            ],
            ApiKey.FIND_COORDINATOR: [
                SimpleNamespace(
                    coordinators=[SimpleNamespace(error_code=LOADING, node_id=1, host="h", port=1)]
                ),
                SimpleNamespace(
                    coordinators=[SimpleNamespace(error_code=0, node_id=1, host="h", port=1)]
                ),
            ],
            ApiKey.DESCRIBE_TRANSACTIONS: [
                SimpleNamespace(transaction_states=[_state(LOADING)]),
                SimpleNamespace(transaction_states=[_state(0)]),
            ],
        }
    )
    monkeypatch.setattr(wire, "WireClient", fake.client)
    monkeypatch.setattr(transactions, "_brokers", lambda _b: {1: "h:1"})
    monkeypatch.setattr(group_admin, "COORDINATOR_RETRY_S", 0.001)
    return fake


def test_list_asks_a_loading_broker_again(broker: _FakeBroker) -> None:
    rows = transactions.list_transactions("h:1", [], [], -1)
    assert [r["transactional_id"] for r in rows] == ["t1"]
    assert broker.asked.count(ApiKey.LIST_TRANSACTIONS) == 3


def test_describe_asks_a_loading_coordinator_again(broker: _FakeBroker) -> None:
    described = transactions.describe("h:1", "t1")
    assert described["state"] == "Ongoing" and described["partitions"] == ["hang-0"]
    assert broker.asked.count(ApiKey.FIND_COORDINATOR) == 2
    assert broker.asked.count(ApiKey.DESCRIBE_TRANSACTIONS) == 2


def test_a_coordinator_loading_past_the_deadline_is_an_error(
    broker: _FakeBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(group_admin, "COORDINATOR_WAIT_S", 0.0)
    with pytest.raises(CliError, match="COORDINATOR_LOAD_IN_PROGRESS"):
        transactions.list_transactions("h:1", [], [], -1)


_PRODUCER = {"producer_id": 7, "producer_epoch": 0}


def test_find_hanging_fails_while_the_coordinator_still_loads(
    broker: _FakeBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A live transaction whose coordinator has not loaded by the deadline is not "gone":
    calling it hanging would invite the user to abort it."""
    broker.answers[ApiKey.LIST_TRANSACTIONS] = [
        SimpleNamespace(error_code=0, transaction_states=[_state(0)])
    ]
    broker.answers[ApiKey.DESCRIBE_TRANSACTIONS] = [
        SimpleNamespace(transaction_states=[_state(LOADING)])
    ]
    monkeypatch.setattr(group_admin, "COORDINATOR_WAIT_S", 0.0)
    with pytest.raises(CliError, match="COORDINATOR_LOAD_IN_PROGRESS"):
        transactions._is_hanging("h:1", ("hang", 0), _PRODUCER)


def test_an_expired_transactional_id_leaves_the_partition_hanging(broker: _FakeBroker) -> None:
    gone = int(ErrorCode.TRANSACTIONAL_ID_NOT_FOUND)
    broker.answers[ApiKey.DESCRIBE_TRANSACTIONS] = [
        SimpleNamespace(transaction_states=[_state(gone)])
    ]
    assert transactions._is_hanging("h:1", ("hang", 0), _PRODUCER) is True


def test_a_live_ongoing_transaction_is_not_hanging(broker: _FakeBroker) -> None:
    assert transactions._is_hanging("h:1", ("hang", 0), _PRODUCER) is False
