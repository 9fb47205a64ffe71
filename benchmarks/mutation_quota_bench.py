"""The controller mutation quota (KIP-599) holding a client to its rate (issue 20).

    python -m benchmarks.mutation_quota_bench [--rate 5] [--seconds 12] [--window-num 2]

One broker with ``controller.quota.window.num=--window-num`` (the token bucket's burst is
``window-num`` seconds of the rate); a ``controller_mutation_rate`` quota of ``--rate``
partitions/s on the client id ``mutator``. kafka-python (CreateTopics v7: the strict quota)
creates 1-partition topics one after the other for ``--seconds``, honouring the throttle
each answer carries, as its client does; the same loop runs as ``free`` (no quota) for
the same time. Prints the topics created and refused, and the rate of creations after the
burst against the quota. Nothing passes or fails on time.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import time

from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import NodeNotReadyError

from riverbed.cli.main import main as cli
from riverbed.testing.cluster import BrokerProcess

THROTTLED = 89
#: how soon a throttled (paused) kafka-python client is asked again
PAUSED_RETRY_S = 0.05


def _run(bootstrap: str, client_id: str, seconds: float) -> tuple[list[float], int]:
    """(monotonic times of the accepted creations since the start, refusals)."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id=client_id)
    accepted: list[float] = []
    refused = 0
    start = time.monotonic()
    n = 0
    try:
        while time.monotonic() - start < seconds:
            n += 1
            try:
                topic = NewTopic(f"{client_id}-{n}", 1, 1)
                result = admin.create_topics([topic], raise_errors=False)
            except NodeNotReadyError:  # the client waits out its throttle ("Node paused")
                time.sleep(PAUSED_RETRY_S)
                continue
            code = result["topics"][0]["error_code"]
            if code == 0:
                accepted.append(time.monotonic() - start)
            elif code == THROTTLED:
                refused += 1
            else:
                raise RuntimeError(f"create failed: {result}")
    finally:
        admin.close()
    return accepted, refused


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=5.0)
    parser.add_argument("--seconds", type=float, default=12.0)
    parser.add_argument("--window-num", type=int, default=2)
    args = parser.parse_args()
    proc = BrokerProcess(
        overrides={"num.partitions": "1", "controller.quota.window.num": str(args.window_num)}
    )
    proc.start()
    try:
        change = ["--add-config", f"controller_mutation_rate={args.rate}"]
        with contextlib.redirect_stdout(io.StringIO()):
            alter = ["quotas", "alter", "-b", proc.bootstrap, "--client", "mutator", *change]
            assert cli(alter) == 0
        burst = args.window_num * args.rate
        for client_id in ("mutator", "free"):
            accepted, refused = _run(proc.bootstrap, client_id, args.seconds)
            after = [t for t in accepted if t >= args.window_num]
            span = args.seconds - args.window_num
            print(
                f"{client_id}: {len(accepted)} topics created, {refused} refused in "
                f"{args.seconds:.0f} s; after the first {args.window_num} s: "
                f"{len(after) / span:.2f} topics/s"
                + (f" (quota {args.rate}/s, burst {burst:.0f})" if client_id == "mutator" else "")
            )
    finally:
        proc.close()


if __name__ == "__main__":
    main()
