"""Progress bars of long CLI operations (issue 21): on a terminal's stderr only, never
with --json (whose output is data)."""

from __future__ import annotations

import io
import sys

import pytest

from riverbed.cli.common import progress_bar


class TtyIO(io.StringIO):
    """A stderr that says it is a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("json_output", [False, True])
def test_progress_bar_is_drawn_on_a_terminal_and_never_with_json(
    monkeypatch: pytest.MonkeyPatch, json_output: bool
) -> None:
    err = TtyIO()
    monkeypatch.setattr(sys, "stderr", err)
    with progress_bar(json_output, "resetting g", 4) as advance:
        advance(2)
        advance(2)
    if json_output:
        assert err.getvalue() == ""
    else:
        assert "resetting g" in err.getvalue()


def test_no_progress_bar_when_stderr_is_not_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    with progress_bar(False, "reassigning partitions", 3) as advance:
        advance(3)
    assert err.getvalue() == ""
