"""The console's input parsing and decoding, without a cluster: filters (RE2, header
``name[=regex]``), the search's bounds, topic names, reset plans posted back, and how a
value is shown."""

from __future__ import annotations

import json

import pytest

from riverbed.console import browse
from riverbed.console.admin import ConsoleError
from riverbed.console.groups import LAG_GROUPS_MAX, LAG_SAMPLES_MAX, LagHistory
from riverbed.console.views_groups import parse_plan
from riverbed.console.views_topics import check_topic_name, parse_configs


def _status(exc: pytest.ExceptionInfo[ConsoleError]) -> int:
    return exc.value.status


def test_filters_match_key_value_and_header() -> None:
    f = browse.parse_filters("^user-", 'amount":\\s*4[0-9]', "trace=abc")
    headers = [("trace", b"xxabcxx")]
    assert f.matches(b"user-7", b'{"amount": 42}', headers)
    assert not f.matches(b"admin-7", b'{"amount": 42}', headers)
    assert not f.matches(b"user-7", b'{"amount": 52}', headers)
    assert not f.matches(b"user-7", b'{"amount": 42}', [("trace", b"zzz")])
    assert not f.matches(b"user-7", b'{"amount": 42}', [])


def test_header_filter_by_name_alone_and_null_values() -> None:
    f = browse.parse_filters("", "", "source")
    assert f.matches(None, None, [("source", None)])
    assert not f.matches(None, None, [("other", b"x")])
    assert browse.parse_filters("", "", "").matches(None, None, [])


@pytest.mark.parametrize(
    ("key", "value", "header", "says"),
    [
        ("", "(", "", "malformed value filter"),
        ("[a-", "", "", "malformed key filter"),
        ("", "", "=x", "malformed header filter"),
        ("", "", "h=(", "malformed header filter"),
        ("", "x" * (browse.FILTER_CHARS_MAX + 1), "", "FILTER_CHARS_MAX"),
    ],
)
def test_malformed_filters_are_400_with_the_reason(
    key: str, value: str, header: str, says: str
) -> None:
    with pytest.raises(ConsoleError) as exc:
        browse.parse_filters(key, value, header)
    assert _status(exc) == 400
    assert says in exc.value.message
    assert "b'" not in exc.value.message  # RE2's reason decoded, not bytes


def test_a_huge_scan_is_refused_naming_the_limit() -> None:
    with pytest.raises(ConsoleError) as exc:
        browse.parse_search("t", {"scan": str(browse.SCAN_RECORDS_MAX + 1)})
    assert _status(exc) == 400
    assert f"SCAN_RECORDS_MAX = {browse.SCAN_RECORDS_MAX}" in exc.value.message
    assert browse.parse_search("t", {"scan": str(browse.SCAN_RECORDS_MAX)}).scan == (
        browse.SCAN_RECORDS_MAX
    )


@pytest.mark.parametrize(
    "query",
    [
        {"scan": "0"},
        {"scan": "many"},
        {"seek": "sideways"},
        {"decode": "base64"},
        {"partition": "x"},
        {"seek": "timestamp", "time": "yesterday"},
    ],
)
def test_bad_search_parameters_are_400(query: dict[str, str]) -> None:
    with pytest.raises(ConsoleError) as exc:
        browse.parse_search("t", query)
    assert _status(exc) == 400


def test_search_defaults_and_times() -> None:
    s = browse.parse_search("t", {})
    assert (s.seek, s.scan, s.partition, s.decode) == (
        "newest",
        browse.SCAN_RECORDS_DEFAULT,
        None,
        "auto",
    )
    at = browse.parse_search("t", {"seek": "timestamp", "time": "2026-01-31T12:00Z"})
    assert at.timestamp_ms == 1_769_860_800_000
    assert browse.parse_search("t", {"seek": "timestamp", "time": "123"}).timestamp_ms == 123
    assert browse.parse_search("t", {"partition": "2"}).partition == 2


def test_values_are_shown_as_json_text_or_hex() -> None:
    assert browse.show(b'{"a":1}', "auto") == browse.Shown('{\n  "a": 1\n}', "json", False)
    assert browse.show(b"plain", "auto").decoding == "text"
    assert browse.show(b"\xff\x00", "auto") == browse.Shown("ff 00", "hex", False)
    assert browse.show(b"plain", "hex").text == "70 6c 61 69 6e"
    assert browse.show(b"plain", "json").decoding == "text (not JSON)"
    assert browse.show(None, "auto").decoding == "null"
    big = browse.show(b"x" * (browse.SHOWN_BYTES_MAX + 5), "text")
    assert big.cut and len(big.text) == browse.SHOWN_BYTES_MAX


@pytest.mark.parametrize("name", ["", ".", "..", "has space", "x" * 250, "slash/no"])
def test_illegal_topic_names_are_400(name: str) -> None:
    with pytest.raises(ConsoleError) as exc:
        check_topic_name(name)
    assert _status(exc) == 400


def test_configs_are_key_value_lines() -> None:
    assert parse_configs("a=1\n\n b = 2 \n") == {"a": "1", "b": "2"}
    with pytest.raises(ConsoleError):
        parse_configs("novalue")


def test_a_posted_reset_plan_is_checked() -> None:
    plan = parse_plan(json.dumps([["t", 0, 5], ["t", 1, 7]]))
    assert [(r.topic, r.partition, r.new) for r in plan] == [("t", 0, 5), ("t", 1, 7)]
    for bad in ("", "[]", "[[1]]", '[["t", "x", 1]]', "{", "null"):
        with pytest.raises(ConsoleError) as exc:
            parse_plan(bad)
        assert _status(exc) == 400


def test_lag_history_is_bounded_per_group_and_in_groups() -> None:
    history = LagHistory()
    for i in range(LAG_SAMPLES_MAX + 10):
        samples = history.add("g", i, now_s=float(i))
    assert len(samples) == LAG_SAMPLES_MAX
    assert samples[-1] == (float(LAG_SAMPLES_MAX + 9), LAG_SAMPLES_MAX + 9)
    for g in range(LAG_GROUPS_MAX + 1):
        history.add(f"other-{g}", 1, now_s=0.0)
    # "g" was the least recently viewed: forgotten, it starts again with one sample
    assert len(history.add("g", 0, now_s=1.0)) == 1


def test_bytes_are_shown_in_binary_units() -> None:
    from riverbed.console.app import human_bytes

    assert [human_bytes(n) for n in (0, 1023, 1536, 5 * 1024**3, None, -1)] == [
        "0 B", "1023 B", "1.5 KiB", "5.0 GiB", "?", "?",
    ]  # fmt: skip
