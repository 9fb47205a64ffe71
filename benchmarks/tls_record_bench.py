"""What a TLS listener's records cost the broker, in this process (issue 20): no sockets,
no client, so a loaded machine blurs it less than security_bench's MB/s.

    python -m benchmarks.tls_record_bench [--mb 16] [--rounds 5]

A client and a server `ssl.SSLObject` over memory BIOs (the broker's TLS runs on memory
BIOs too: uvloop's SSLProtocol) with the test PKI's certificates. Prints CPU ms per MB
(thread CPU time, median of ``--rounds`` rounds taken in turn):

- read: the server decrypting records of 1,360 bytes (what librdkafka writes a Produce
  request as: one TLS record per message segment) and of 16 KiB (the largest, what the
  broker writes a fetch response as), fed 256 KiB at a time, read the way uvloop's
  SSLProtocol does it (``copied``: ``read(256 KiB)`` per record, then one join) and the
  way its BufferedProtocol path does (``into``: ``read(n, buffer)``), each through
  `ssl.SSLObject`'s Python ``read`` and through the listeners' `DirectSSLObject` (``C``:
  the OpenSSL object's C ``read`` / ``pending``, riverbed's listeners since issue 20);
- write: the server encrypting 256 KiB writes (a fetch response's chunks);
- each for TLS 1.3 (what librdkafka and riverbed negotiate by default:
  TLS_AES_256_GCM_SHA384) and TLS 1.2 (ECDHE-RSA-AES256-GCM-SHA384);
- offload: 1,360-byte records decrypted in a second thread while the main thread runs
  Python (an event loop's work): ``SSLObject.read`` releases the GIL inside OpenSSL, so
  the two overlap, but the GIL is taken back per record; printed as the decrypting
  thread's MB/s and the main thread's share of its solo speed.

Nothing passes or fails on time.
"""

from __future__ import annotations

import argparse
import contextlib
import ssl
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from riverbed.server.tls import DirectSSLObject
from riverbed.testing.certs import Pki, make_pki

#: Bytes handed to the incoming BIO at once (uvloop's SSL_READ_MAX_SIZE, a socket read).
FEED_BYTES = 256 * 1024
#: librdkafka's typical TLS record payload for a Produce of 1 KiB messages.
SMALL_RECORD_BYTES = 1360
#: TLS's largest record payload.
FULL_RECORD_BYTES = 16 * 1024
VERSIONS = {"TLSv1.3": ssl.TLSVersion.TLSv1_3, "TLSv1.2": ssl.TLSVersion.TLSv1_2}


class Pair:
    """A handshaken client/server pair of SSLObjects over memory BIOs."""

    def __init__(self, pki: Pki, version: ssl.TLSVersion, direct: bool = False) -> None:
        server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        if direct:
            server_ctx.sslobject_class = DirectSSLObject
        server_ctx.load_cert_chain(pki.server_pem)
        client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        client_ctx.load_verify_locations(pki.ca)
        for ctx in (server_ctx, client_ctx):
            ctx.minimum_version = ctx.maximum_version = version
        self.s_in, self.s_out, self.c_in, self.c_out = (ssl.MemoryBIO() for _ in range(4))
        self.server = server_ctx.wrap_bio(self.s_in, self.s_out, server_side=True)
        self.client = client_ctx.wrap_bio(self.c_in, self.c_out, server_hostname="localhost")
        for _ in range(4):  # a few flights each way
            for obj in (self.client, self.server):
                with contextlib.suppress(ssl.SSLWantReadError):
                    obj.do_handshake()
            self.s_in.write(self.c_out.read())
            self.c_in.write(self.s_out.read())
        with contextlib.suppress(ssl.SSLWantReadError):  # TLS 1.3 session tickets
            self.client.read(1)

    def client_records(self, record: int, total: int) -> bytes:
        """Ciphertext of ``total`` bytes written ``record`` bytes per TLS record."""
        payload = b"x" * record
        for _ in range(total // record):
            self.client.write(payload)
        return self.c_out.read()


def read_copied(server: ssl.SSLObject, incoming: ssl.MemoryBIO, ciphertext: bytes) -> int:
    """uvloop's SSLProtocol._do_read__copied: read(256 KiB) per record, one join."""
    got = 0
    for off in range(0, len(ciphertext), FEED_BYTES):
        incoming.write(ciphertext[off : off + FEED_BYTES])
        parts = []
        try:
            while incoming.pending or server.pending():
                parts.append(server.read(FEED_BYTES))
        except ssl.SSLWantReadError:
            pass
        got += len(b"".join(parts))
    return got


def read_into(server: ssl.SSLObject, incoming: ssl.MemoryBIO, ciphertext: bytes) -> int:
    """uvloop's BufferedProtocol path: read(n, buffer) into the application's buffer."""
    buf = memoryview(bytearray(2 * FEED_BYTES))
    got = 0
    for off in range(0, len(ciphertext), FEED_BYTES):
        incoming.write(ciphertext[off : off + FEED_BYTES])
        pos = 0
        try:
            while incoming.pending or server.pending():
                pos += server.read(len(buf) - pos, buf[pos:])
        except ssl.SSLWantReadError:
            pass
        got += pos
    return got


def _cpu_ms_per_mb(work: Callable[[], int]) -> float:
    started = time.thread_time()
    done = work()
    return 1000 * (time.thread_time() - started) / (done / 1e6)


def read_ms_per_mb(pair: Pair, record: int, total: int, into: bool) -> float:
    """Server CPU per MB decrypting ``record``-byte records."""
    ciphertext = pair.client_records(record, total)
    reader = read_into if into else read_copied
    return _cpu_ms_per_mb(lambda: reader(pair.server, pair.s_in, ciphertext))


def write_ms_per_mb(pair: Pair, total: int) -> float:
    chunk = b"x" * FEED_BYTES

    def work() -> int:
        for _ in range(total // FEED_BYTES):
            pair.server.write(chunk)
            pair.s_out.read()
        return total // FEED_BYTES * FEED_BYTES

    return _cpu_ms_per_mb(work)


def offload(pki: Pki, total: int) -> tuple[float, float, float]:
    """(MB/s decrypting alone, MB/s in a thread while the main thread runs Python, the
    main thread's Python speed meanwhile as a share of its speed alone)."""

    def decrypt_rate() -> float:
        pair = Pair(pki, ssl.TLSVersion.TLSv1_3)
        ciphertext = pair.client_records(SMALL_RECORD_BYTES, total)
        started = time.perf_counter()
        done = read_copied(pair.server, pair.s_in, ciphertext)
        return done / 1e6 / (time.perf_counter() - started)

    def spin(stop: threading.Event) -> float:
        count, started = 0, time.perf_counter()
        while not stop.is_set():
            count += 1
        return count / (time.perf_counter() - started)

    alone = decrypt_rate()
    solo = threading.Event()
    timer = threading.Timer(0.5, solo.set)  # sleeps: the GIL stays with the spinner
    timer.start()
    solo_spin = spin(solo)
    rate: list[float] = []
    stop = threading.Event()
    worker = threading.Thread(target=lambda: (rate.append(decrypt_rate()), stop.set()))
    worker.start()
    shared_spin = spin(stop)
    worker.join()
    return alone, rate[0], shared_spin / solo_spin


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    total = args.mb * 1_000_000
    with tempfile.TemporaryDirectory() as tmp:
        pki = make_pki(Path(tmp))
        cases: dict[str, Callable[[], float]] = {}
        for name, version in VERSIONS.items():
            for record in (SMALL_RECORD_BYTES, FULL_RECORD_BYTES):
                for into in (False, True):
                    for direct in (False, True):
                        how = f"{'into' if into else 'copied'}{' C' if direct else ''}"
                        label = f"read  {name} {record:6d} B records {how}"
                        cases[label] = lambda v=version, r=record, i=into, d=direct: read_ms_per_mb(
                            Pair(pki, v, d), r, total, i
                        )
            cases[f"write {name} 256 KiB writes"] = lambda v=version: write_ms_per_mb(
                Pair(pki, v), total
            )
        runs: dict[str, list[float]] = {label: [] for label in cases}
        for _ in range(args.rounds):
            for label, case in cases.items():
                runs[label].append(case())
        for label, values in runs.items():
            spread = f"{min(values):.2f}-{max(values):.2f}"
            print(f"{label:45s} {statistics.median(values):6.2f} ms CPU/MB ({spread})")
        alone, threaded, main_share = offload(pki, total)
        print(
            f"offload TLSv1.3 {SMALL_RECORD_BYTES} B records: decrypting alone {alone:.0f} MB/s, "
            f"in a thread beside a busy main thread {threaded:.0f} MB/s, the main thread "
            f"at {main_share:.2f} of its solo speed meanwhile"
        )


if __name__ == "__main__":
    main()
