"""The message browser: a bounded scan of a topic with filters that run on the server.

A search reads at most ``scan`` records (default `SCAN_RECORDS_DEFAULT`, at most
`SCAN_RECORDS_MAX`; a larger request is refused with a message naming the limit) from a
starting point per partition (the newest records, the oldest, an offset or a time, as a
consumer would ``seek``) up to each partition's high watermark as it was when the scan
began, for at most `SCAN_TIME_MAX_S`, and keeps the first `RESULTS_MAX` matches. Filters
are RE2 regular expressions (linear time: a filter cannot hang the console) searched in
the key, the value, and a header (``name`` or ``name=regex``), each over the bytes decoded
as UTF-8 with replacement. Values are shown as text, JSON (pretty-printed when they
parse) or hex, cut at `SHOWN_BYTES_MAX`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import re2
from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, KafkaError, KafkaException, TopicPartition

from riverbed.console.admin import ConsoleAdmin, ConsoleError, cluster_error

#: Records one search reads unless asked otherwise.
SCAN_RECORDS_DEFAULT = 1000
#: Most records one search may read (a bigger request gets a 400 naming this limit).
SCAN_RECORDS_MAX = 100_000
#: Longest a search reads before it stops and says so, seconds.
SCAN_TIME_MAX_S = 10.0
#: Matches kept and shown per search.
RESULTS_MAX = 200
#: Longest filter expression accepted, characters.
FILTER_CHARS_MAX = 1000
#: Bytes of a key or value shown (the rest is cut, and the page says so).
SHOWN_BYTES_MAX = 8192
#: Records one consume() call asks for.
_CONSUME_BATCH = 500
_POLL_S = 0.2

SEEK_MODES = ("newest", "oldest", "offset", "timestamp")
DECODINGS = ("auto", "text", "json", "hex")


@dataclass(frozen=True, slots=True)
class Filters:
    key: Any = None
    value: Any = None
    header_name: str | None = None
    header_value: Any = None

    def matches(self, key: bytes | None, value: bytes | None, headers: list[Any]) -> bool:
        if self.key is not None and not self.key.search(_text(key)):
            return False
        if self.value is not None and not self.value.search(_text(value)):
            return False
        if self.header_name is None:
            return True
        for name, hv in headers:
            if name == self.header_name and (
                self.header_value is None or self.header_value.search(_text(hv))
            ):
                return True
        return False


@dataclass(frozen=True, slots=True)
class Search:
    topic: str
    partition: int | None = None
    seek: str = "newest"
    offset: int = 0
    timestamp_ms: int = 0
    scan: int = SCAN_RECORDS_DEFAULT
    decode: str = "auto"
    filters: Filters = field(default_factory=Filters)


@dataclass(frozen=True, slots=True)
class Shown:
    """A key, value or header value as the page shows it."""

    text: str
    decoding: str
    cut: bool


@dataclass(frozen=True, slots=True)
class Found:
    partition: int
    offset: int
    timestamp_ms: int | None
    key: Shown
    value: Shown
    headers: tuple[tuple[str, Shown], ...]


@dataclass(frozen=True, slots=True)
class SearchResult:
    records: tuple[Found, ...]
    scanned: int
    stopped: str  # why the scan ended: "end", "scan limit", "time limit", "result limit"


def _compile(text: str, what: str) -> Any:
    if len(text) > FILTER_CHARS_MAX:
        raise ConsoleError(
            400, f"{what} filter of {len(text)} characters is above FILTER_CHARS_MAX = "
            f"{FILTER_CHARS_MAX}",
        )  # fmt: skip
    try:
        return re2.compile(text)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise ConsoleError(400, f"malformed {what} filter {text!r}: {reason}") from None


def parse_filters(key: str, value: str, header: str) -> Filters:
    """Form fields -> `Filters` (400 for a malformed expression). ``header`` is ``name``
    (the header is present) or ``name=regex``."""
    name: str | None = None
    header_value = None
    if header:
        name, sep, pattern = header.partition("=")
        if not name.strip():
            raise ConsoleError(400, f"malformed header filter {header!r}: expected NAME[=REGEX]")
        name = name.strip()
        header_value = _compile(pattern, "header") if sep else None
    return Filters(
        _compile(key, "key") if key else None,
        _compile(value, "value") if value else None,
        name,
        header_value,
    )


def parse_search(topic: str, query: Mapping[str, str]) -> Search:
    """The message browser's query string -> `Search`, or a 400 naming what is wrong."""
    seek = query.get("seek", "newest") or "newest"
    if seek not in SEEK_MODES:
        raise ConsoleError(400, f"seek must be one of {', '.join(SEEK_MODES)}, not {seek!r}")
    decode = query.get("decode", "auto") or "auto"
    if decode not in DECODINGS:
        raise ConsoleError(400, f"decode must be one of {', '.join(DECODINGS)}, not {decode!r}")
    scan = whole_number(query, "scan", SCAN_RECORDS_DEFAULT)
    if scan < 1:
        raise ConsoleError(400, f"scan must be at least 1, not {scan}")
    if scan > SCAN_RECORDS_MAX:
        raise ConsoleError(
            400,
            f"a scan of {scan} records is above the console's limit SCAN_RECORDS_MAX = "
            f"{SCAN_RECORDS_MAX}: narrow it with a partition, an offset or a time",
        )
    partition = query.get("partition", "")
    return Search(
        topic=topic,
        partition=whole_number(query, "partition", 0) if partition not in ("", "all") else None,
        seek=seek,
        offset=whole_number(query, "offset", 0),
        timestamp_ms=parse_time_ms(query.get("time", "")) if seek == "timestamp" else 0,
        scan=scan,
        decode=decode,
        filters=parse_filters(
            query.get("key", ""), query.get("value", ""), query.get("header", "")
        ),
    )


def whole_number(query: Mapping[str, str], name: str, default: int) -> int:
    """``query[name]`` as an int (``default`` when empty; 400 when not a number)."""
    raw = query.get(name, "").strip()
    if raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConsoleError(400, f"{name} must be a whole number, not {raw!r}") from None


def parse_time_ms(raw: str) -> int:
    """Milliseconds since the epoch, or an ISO-8601 date-time (UTC unless it says)."""
    import datetime

    if raw.strip().lstrip("-").isdigit():
        return int(raw)
    try:
        when = datetime.datetime.fromisoformat(raw.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ConsoleError(
            400, f"time {raw!r}: expected milliseconds or YYYY-MM-DDTHH:MM[:SS][Z]"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return int(when.timestamp() * 1000)


# -- decoding --------------------------------------------------------------------------
def _text(data: bytes | None) -> str:
    return "" if data is None else data.decode("utf-8", "replace")


def show(data: bytes | None, decoding: str) -> Shown:
    """``data`` as text, JSON or hex (``auto``: JSON if it parses, text if UTF-8, else hex)."""
    if data is None:
        return Shown("null", "null", False)
    cut = len(data) > SHOWN_BYTES_MAX
    part = data[:SHOWN_BYTES_MAX]
    if decoding == "hex":
        return Shown(part.hex(" "), "hex", cut)
    try:
        text = part.decode("utf-8")
    except UnicodeDecodeError:
        if decoding == "auto":
            return Shown(part.hex(" "), "hex", cut)
        text = part.decode("utf-8", "replace")
    if decoding in ("auto", "json") and not cut:
        try:
            return Shown(json.dumps(json.loads(text), indent=2), "json", cut)
        except ValueError:
            if decoding == "json":
                return Shown(text, "text (not JSON)", cut)
    return Shown(text, "text", cut)


def found(msg: Any, decoding: str) -> Found:
    ts_type, ts = msg.timestamp()
    return Found(
        partition=msg.partition(),
        offset=msg.offset(),
        timestamp_ms=None if ts_type == TIMESTAMP_NOT_AVAILABLE else ts,
        key=show(msg.key(), decoding),
        value=show(msg.value(), decoding),
        headers=tuple((name, show(v, decoding)) for name, v in (msg.headers() or [])),
    )


# -- the scan --------------------------------------------------------------------------
def search(admin: ConsoleAdmin, s: Search) -> SearchResult:
    """Run ``s`` (blocking): see the module docstring for its bounds."""
    topic = admin.topic(s.topic)
    parts = [p for p in topic.partitions if s.partition is None or p.partition == s.partition]
    if not parts:
        raise ConsoleError(404, f"topic {s.topic!r} has no partition {s.partition}")
    ends = {p.partition: p.latest or 0 for p in parts}
    starts = _starts(admin, s, parts)
    todo = {p: off for p, off in starts.items() if off < ends[p]}
    consumer = admin.consumer()
    try:
        consumer.assign([TopicPartition(s.topic, p, off) for p, off in todo.items()])
        return _read(consumer, s, todo, ends)
    except ConsoleError:
        raise
    except Exception as exc:
        raise cluster_error(exc, f"cannot read {s.topic}") from None
    finally:
        consumer.close()


def _starts(admin: ConsoleAdmin, s: Search, parts: list[Any]) -> dict[int, int]:
    low = {p.partition: p.earliest or 0 for p in parts}
    high = {p.partition: p.latest or 0 for p in parts}
    if s.seek == "oldest":
        return low
    if s.seek == "offset":
        return {p: min(max(s.offset, low[p]), high[p]) for p in low}
    if s.seek == "timestamp":
        tps = [(s.topic, p) for p in low]
        at = admin.offsets(tps, s.timestamp_ms)
        # -1: no record at or after the time: nothing to read in that partition.
        return {p: high[p] if at.get((s.topic, p), -1) < 0 else at[(s.topic, p)] for p in low}
    share = max(1, s.scan // len(low))  # "newest": the last records of each partition
    return {p: max(low[p], high[p] - share) for p in low}


def _read(consumer: Any, s: Search, todo: dict[int, int], ends: dict[int, int]) -> SearchResult:
    out: list[Found] = []
    scanned = 0
    deadline = time.monotonic() + SCAN_TIME_MAX_S
    while todo:
        if scanned >= s.scan:
            return SearchResult(tuple(out), scanned, "scan limit")
        if time.monotonic() > deadline:
            return SearchResult(tuple(out), scanned, "time limit")
        for msg in consumer.consume(min(_CONSUME_BATCH, s.scan - scanned), _POLL_S):
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                raise cluster_error(KafkaException(err), f"cannot read {s.topic}")
            if msg.partition() not in todo or msg.offset() >= ends[msg.partition()]:
                continue
            scanned += 1
            if s.filters.matches(msg.key(), msg.value(), msg.headers() or []):
                out.append(found(msg, s.decode))
                if len(out) >= RESULTS_MAX:
                    return SearchResult(tuple(out), scanned, "result limit")
            if scanned >= s.scan:
                break
        _drop_finished(consumer, s.topic, todo, ends)
    return SearchResult(tuple(out), scanned, "end")


def _drop_finished(consumer: Any, topic: str, todo: dict[int, int], ends: dict[int, int]) -> None:
    """Forget partitions whose position reached the scan's end (a transaction marker or a
    compacted gap may hold the last offsets, so the last record seen is no signal)."""
    for tp in consumer.position([TopicPartition(topic, p) for p in todo]):
        if tp.offset >= ends[tp.partition]:
            del todo[tp.partition]
