"""`riverbed produce`: console producer (like kafka-console-producer).

Reads one record per line from stdin (or `--value` arguments).  With `--parse-key` a line
is `KEY<key-separator>VALUE`; with `--parse-headers` it starts with
`h1:v1,h2:v2<headers-delimiter>`.  `--null-marker` turns a matching key/value into null.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from typing import Any

from riverbed.cli.common import (
    CliError,
    add_acks,
    add_batching,
    add_bootstrap,
    add_json,
    client_config,
    kafka_error_text,
    parse_kv,
    print_json,
    run_guarded,
    verb_parser,
)

#: Records librdkafka may hold before produce() blocks on the queue (bounded buffering).
QUEUE_MESSAGES_MAX = 100_000


def register(subparsers: Any) -> None:
    p = verb_parser(subparsers, "produce", "send records from stdin (console producer)")
    add_bootstrap(p)
    p.add_argument("--topic", "-t", required=True, help="the topic to write to")
    p.add_argument("--partition", type=int, default=None, help="default: by key / sticky")
    p.add_argument("--value", action="append", help="send these values instead of stdin")
    p.add_argument("--input", metavar="FILE", help="read lines from FILE instead of stdin")
    p.add_argument("--key", help="key for every record")
    p.add_argument("--parse-key", action="store_true", help="lines are KEY<sep>VALUE")
    p.add_argument("--key-separator", default="\t", help="default: TAB")
    p.add_argument("--parse-headers", action="store_true", help="lines start with h:v,h:v<delim>")
    p.add_argument("--headers-delimiter", default="\t", help="default: TAB")
    p.add_argument("--header", action="append", default=[], metavar="K=V", help="every record")
    p.add_argument("--timestamp", type=int, help="CreateTime (ms) for every record")
    p.add_argument("--null-marker", help="a key or value equal to this is sent as null")
    add_acks(p)
    add_batching(p)
    add_json(p)
    p.set_defaults(func=run_guarded(produce_cmd))


def parse_line(
    line: str, args: argparse.Namespace
) -> tuple[str | None, str | None, list[tuple[str, str | None]]]:
    headers: list[tuple[str, str | None]] = []
    if args.parse_headers:
        head, sep, line = line.partition(args.headers_delimiter)
        if not sep:
            raise CliError(f"line has no headers delimiter {args.headers_delimiter!r}: {head!r}")
        for item in head.split(","):
            if item:
                k, _, v = item.partition(":")
                headers.append((k, None if v == args.null_marker else v))
    key: str | None = args.key
    value: str | None = line
    if args.parse_key:
        key, sep, value = line.partition(args.key_separator)
        if not sep:
            raise CliError(f"line has no key separator {args.key_separator!r}: {line!r}")
    if args.null_marker is not None:
        key = None if key == args.null_marker else key
        value = None if value == args.null_marker else value
    return key, value, headers


def _lines(args: argparse.Namespace) -> Iterator[str]:
    if args.value is not None:
        yield from args.value
        return
    if args.input:
        try:
            with open(args.input, encoding="utf-8") as fh:
                for line in fh:
                    yield line.rstrip("\n").rstrip("\r")
        except OSError as exc:
            raise CliError(f"cannot read {args.input}: {exc}") from None
        return
    for line in sys.stdin:
        yield line.rstrip("\n").rstrip("\r")


def produce_cmd(args: argparse.Namespace) -> int:
    from confluent_kafka import Producer

    conf = client_config(args)
    conf.setdefault("acks", args.acks)
    conf.setdefault("compression.type", args.compression)
    conf.setdefault("linger.ms", args.linger_ms)
    conf.setdefault("queue.buffering.max.messages", QUEUE_MESSAGES_MAX)
    static_headers = list(parse_kv(args.header, "--header").items())
    producer = Producer(conf)
    stats = {"sent": 0, "delivered": 0, "failed": 0}
    errors: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            stats["failed"] += 1
            if len(errors) < 10:
                errors.append(f"{err.name()}: {err.str()}")
        else:
            stats["delivered"] += 1

    for line in _lines(args):
        key, value, headers = parse_line(line, args)
        kwargs: dict[str, Any] = {
            "key": key.encode() if key is not None else None,
            "value": value.encode() if value is not None else None,
            "headers": [
                (k, v.encode() if v is not None else None) for k, v in static_headers + headers
            ]
            or None,
            "on_delivery": on_delivery,
        }
        if args.partition is not None:
            kwargs["partition"] = args.partition
        if args.timestamp is not None:
            kwargs["timestamp"] = args.timestamp
        while True:
            try:
                producer.produce(args.topic, **kwargs)
                break
            except BufferError:
                producer.poll(0.1)  # queue full: wait for deliveries (back-pressure)
            except Exception as exc:
                raise CliError(f"cannot produce to {args.topic}: {kafka_error_text(exc)}") from None
        stats["sent"] += 1
        producer.poll(0)
    remaining = producer.flush(30)
    stats["failed"] += remaining
    if args.json:
        print_json({**stats, "errors": errors})
    else:
        for e in errors:
            print(f"error: delivery failed: {e}", file=sys.stderr)
        if remaining:
            print(f"error: {remaining} record(s) not delivered within 30 s", file=sys.stderr)
    return 1 if stats["failed"] else 0
