"""`riverbed consume`: console consumer (like kafka-console-consumer).

Without `--group` the consumer assigns partitions itself (no group coordinator needed) and
starts at: `--offset N|earliest|latest`, `--from-beginning`, or the first record at or after
`--timestamp MS`; the default is the end (only new records), as Kafka's tool does.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from riverbed.cli.common import (
    ADMIN_TIMEOUT_S,
    CliError,
    add_bootstrap,
    client_config,
    kafka_error_text,
    run_guarded,
    verb_parser,
)

#: Records fetched per poll call.
POLL_RECORDS_MAX = 500


def register(subparsers: Any) -> None:
    p = verb_parser(subparsers, "consume", "print records of a topic (console consumer)")
    add_bootstrap(p)
    p.add_argument("--topic", "-t", required=True, help="the topic to read")
    p.add_argument("--partition", type=int, action="append", help="repeatable; default: all")
    start = p.add_mutually_exclusive_group()
    start.add_argument(
        "--from-beginning",
        action="store_true",
        help="start at the earliest offset (default: the latest)",
    )
    start.add_argument("--offset", help="earliest, latest or an offset (needs --partition)")
    start.add_argument("--timestamp", type=int, help="start at the first record at/after MS")
    p.add_argument("--group", help="join this consumer group instead of assigning partitions")
    p.add_argument("--max-messages", type=int, help="exit after this many records")
    p.add_argument("--timeout-ms", type=int, help="exit when no record arrives for this long")
    p.add_argument(
        "--print-key", action="store_true", help="print each record's key before its value"
    )
    p.add_argument("--print-headers", action="store_true", help="print each record's headers")
    p.add_argument(
        "--print-timestamp", action="store_true", help="print each record's timestamp (type:ms)"
    )
    p.add_argument("--print-offset", action="store_true", help="print each record's offset")
    p.add_argument("--print-partition", action="store_true", help="print each record's partition")
    p.add_argument(
        "--key-separator",
        default="\t",
        help="between the printed fields and the value (default: a tab)",
    )
    p.add_argument("--json", action="store_true", help="one JSON object per record")
    p.add_argument(
        "--isolation-level",
        default="read_uncommitted",
        choices=["read_uncommitted", "read_committed"],
        help="read_committed skips aborted transactions' records",
    )
    p.set_defaults(func=run_guarded(consume_cmd))


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="backslashreplace")


def format_record(msg: Any, args: argparse.Namespace) -> str:
    ts_type, ts = msg.timestamp()
    headers = [(k, _text(v)) for k, v in (msg.headers() or [])]
    if args.json:
        return json.dumps(
            {
                "topic": msg.topic(),
                "partition": msg.partition(),
                "offset": msg.offset(),
                "timestamp": ts,
                "timestamp_type": {1: "CreateTime", 2: "LogAppendTime"}.get(ts_type, "None"),
                "key": _text(msg.key()),
                "value": _text(msg.value()),
                "headers": headers,
            }
        )
    parts: list[str] = []
    if args.print_partition:
        parts.append(f"Partition:{msg.partition()}")
    if args.print_offset:
        parts.append(f"Offset:{msg.offset()}")
    if args.print_timestamp:
        name = {1: "CreateTime", 2: "LogAppendTime"}.get(ts_type, "NO_TIMESTAMP")
        parts.append(f"{name}:{ts}")
    if args.print_headers:
        parts.append(",".join(f"{k}:{v}" for k, v in headers) or "NO_HEADERS")
    if args.print_key:
        parts.append(_text(msg.key()) or "null")
    value = _text(msg.value())
    parts.append("null" if value is None else value)
    separator: str = args.key_separator
    return separator.join(parts)


def _start_partitions(consumer: Any, args: argparse.Namespace) -> list[Any]:
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, TopicPartition

    try:
        md = consumer.list_topics(args.topic, timeout=ADMIN_TIMEOUT_S)
    except Exception as exc:
        raise CliError(f"cannot reach {args.bootstrap_server}: {kafka_error_text(exc)}") from None
    tmd = md.topics.get(args.topic)
    if tmd is None or not tmd.partitions:
        raise CliError(f"topic {args.topic} does not exist")
    partitions = args.partition or sorted(tmd.partitions)
    for p in partitions:
        if p not in tmd.partitions:
            raise CliError(f"topic {args.topic} has no partition {p}")
    if args.timestamp is not None:
        wanted = [TopicPartition(args.topic, p, args.timestamp) for p in partitions]
        found = consumer.offsets_for_times(wanted, timeout=ADMIN_TIMEOUT_S)
        # No record at/after the timestamp: start at the end.
        return [
            TopicPartition(args.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_END)
            for tp in found
        ]
    if args.from_beginning or args.offset == "earliest":
        start = OFFSET_BEGINNING
    elif args.offset in (None, "latest"):
        start = OFFSET_END
    else:
        try:
            start = int(args.offset)
        except ValueError:
            raise CliError(
                f"--offset must be earliest, latest or a number, not {args.offset!r}"
            ) from None
        if start < 0:
            raise CliError("--offset must not be negative")
        if not args.partition:
            raise CliError("--offset N needs --partition")
    return [TopicPartition(args.topic, p, start) for p in partitions]


def consume_cmd(args: argparse.Namespace) -> int:
    from confluent_kafka import Consumer

    conf = client_config(args)
    conf.setdefault("group.id", args.group or "riverbed-console-consumer")
    conf.setdefault("enable.auto.commit", bool(args.group))
    conf.setdefault("isolation.level", args.isolation_level)
    conf.setdefault("auto.offset.reset", "earliest" if args.from_beginning else "latest")
    consumer = Consumer(conf)
    count = 0
    restore = _stop_on_sigterm()
    try:
        if args.group:
            consumer.subscribe([args.topic])
        else:
            consumer.assign(_start_partitions(consumer, args))
        last_record = time.monotonic()
        while args.max_messages is None or count < args.max_messages:
            want = POLL_RECORDS_MAX
            if args.max_messages is not None:
                want = min(want, args.max_messages - count)
            batch = consumer.consume(num_messages=want, timeout=0.2)
            printed = count
            for msg in batch:
                if msg.error() is not None:
                    print(f"error: {kafka_error_text(Exception(msg.error()))}", file=sys.stderr)
                    continue
                print(format_record(msg, args), flush=False)
                count += 1
            if count > printed:  # an error is not a record: it does not hold --timeout-ms off
                sys.stdout.flush()
                last_record = time.monotonic()
            elif (
                args.timeout_ms is not None
                and (time.monotonic() - last_record) * 1000 >= args.timeout_ms
            ):
                break
    except KeyboardInterrupt:
        pass
    finally:
        restore()
        consumer.close()
        print(f"Processed a total of {count} messages", file=sys.stderr)
    return 0


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _stop_on_sigterm() -> Callable[[], object]:
    """SIGTERM ends the loop as Ctrl-C does (the group is left, the count printed), as
    Kafka's console consumer's shutdown hook does; the function puts the old handler back.
    Only the main thread may set one (nothing changes elsewhere)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = signal.signal(signal.SIGTERM, _interrupt)
    return lambda: signal.signal(signal.SIGTERM, previous)
