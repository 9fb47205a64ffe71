"""`riverbed groups` argument parsing: ISO-8601 durations for --by-duration."""

from __future__ import annotations

import pytest

from riverbed.cli.common import CliError
from riverbed.cli.groups import parse_duration_ms


def test_iso_durations() -> None:
    assert parse_duration_ms("PT1H30M") == 5_400_000
    assert parse_duration_ms("P1DT2S") == 86_402_000
    assert parse_duration_ms("pt0.5s") == 500
    for bad in ("P", "PT", "1h", "PT1X", ""):
        with pytest.raises(CliError):
            parse_duration_ms(bad)
