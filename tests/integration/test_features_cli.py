"""`riverbed features` against a real broker: UpdateFeatures forwarded to the controller
changes the transaction.version clients are told in ApiVersions (issue 19)."""

from __future__ import annotations

import json

import pytest

from riverbed.cli.main import main
from riverbed.testing.cluster import BrokerProcess

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def _finalized(b: str, capsys: pytest.CaptureFixture[str]) -> dict[str, int]:
    assert main(["features", "describe", "-b", b, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["features"]
    return {r["feature"]: r["finalized"] for r in rows}


def test_transaction_version_down_and_up(
    broker: BrokerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    b = broker.bootstrap
    assert _finalized(b, capsys)["transaction.version"] == 2
    assert main(["features", "downgrade", "-b", b, "--feature", "transaction.version=1"]) == 0
    assert "transaction.version was downgraded to 1." in capsys.readouterr().out
    assert _finalized(b, capsys)["transaction.version"] == 1
    # a dry run changes nothing; an upgrade asked as such past the range is refused
    args = ["features", "upgrade", "-b", b, "--feature", "transaction.version=2", "--dry-run"]
    assert main(args) == 0
    assert "transaction.version would be upgraded to 2." in capsys.readouterr().out
    assert _finalized(b, capsys)["transaction.version"] == 1
    assert main(["features", "upgrade", "-b", b, "--feature", "transaction.version=3"]) == 1
    err = capsys.readouterr().err
    assert "INVALID_UPDATE_VERSION" in err and "only supports versions 0-2" in err
    assert main(["features", "upgrade", "-b", b, "--feature", "transaction.version=2"]) == 0
    capsys.readouterr()
    assert _finalized(b, capsys)["transaction.version"] == 2
