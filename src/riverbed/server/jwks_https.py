"""A JWKS fetched from an https ``sasl.oauthbearer.jwks.endpoint.url`` (Kafka's
RefreshingHttpsJwks), the shell around `riverbed.security.jwks`.

- Trust: the CAs of the OAUTHBEARER login module's JAAS options (``ssl.truststore.type`` /
  ``ssl.truststore.location`` / ``ssl.truststore.certificates``, as Kafka's
  JaasOptionsUtils.createSSLSocketFactory reads them), else the system's; the host name
  is checked.
- Start: fetched before the listener serves, retried from
  ``sasl.oauthbearer.jwks.endpoint.retry.backoff.ms`` doubling up to
  ``...retry.backoff.max.ms``; a JWKS that still cannot be had stops the start with the
  reason (Kafka's broker does not start without its verification keys either).
- Then refreshed every ``sasl.oauthbearer.jwks.endpoint.refresh.ms`` off the event loop; a
  failed refresh is logged and the keys in use stay. A token whose ``kid`` the keys do not
  hold is refused, and the refresh comes at once (Kafka's maybeExpediteRefresh: the key
  may just have been rotated in; the client's next login finds it), at most once per
  `MISSING_KID_RETRY_MS` for one ``kid``, none for a ``kid`` longer than `KID_CHARS_MAX`.

Bounded: one document of at most `JWKS_BYTES_MAX`, each fetch within
`JWKS_FETCH_TIMEOUT_S`.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping

from riverbed.security.jwks import JWKS_BYTES_MAX, PublicKey, load_jwks
from riverbed.server.tls import truststore_pem

log = logging.getLogger(__name__)

#: Connect + read time allowed to one JWKS fetch.
JWKS_FETCH_TIMEOUT_S = 10.0
#: Kafka's RefreshingHttpsJwks MISSING_KEY_ID_CACHE_IN_FLIGHT_MS / _MAX_KEY_LENGTH
MISSING_KID_RETRY_MS = 60_000
KID_CHARS_MAX = 200
#: missing kids remembered (the oldest forgotten first)
MISSING_KIDS_MAX = 1000


class JwksFetchError(Exception):
    """The JWKS could not be fetched or is not one."""


def trust_context(options: Mapping[str, str]) -> ssl.SSLContext:
    """The context the endpoint is verified with (TlsConfigError for a bad trust store)."""
    pem = truststore_pem(options.get)
    return ssl.create_default_context(cadata=pem) if pem else ssl.create_default_context()


class HttpsJwks(Mapping[str, PublicKey]):
    """The keys of the JWKS at ``url``, kid -> public key (`JwksValidator.keys`)."""

    def __init__(
        self,
        url: str,
        context: ssl.SSLContext,
        *,
        refresh_ms: int,
        backoff_ms: int,
        backoff_max_ms: int,
    ) -> None:
        self.url = url
        self.context = context
        self.refresh_ms = refresh_ms
        self.backoff_ms = backoff_ms
        self.backoff_max_ms = backoff_max_ms
        self._keys: dict[str, PublicKey] = {}
        #: kid -> monotonic ms it last expedited a refresh
        self._missing: dict[str, float] = {}
        self._expedite = asyncio.Event()

    def __getitem__(self, kid: str) -> PublicKey:
        return self._keys[kid]

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def fetch(self) -> dict[str, PublicKey]:
        """One GET of the document (blocking; JwksFetchError)."""
        request = urllib.request.Request(self.url, headers={"Accept": "application/json"})
        try:
            with urllib.request.urlopen(
                request, timeout=JWKS_FETCH_TIMEOUT_S, context=self.context
            ) as response:
                body = response.read(JWKS_BYTES_MAX + 1)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            raise JwksFetchError(f"cannot fetch the JWKS from {self.url}: {reason}") from None
        if len(body) > JWKS_BYTES_MAX:
            raise JwksFetchError(f"the JWKS at {self.url} is larger than {JWKS_BYTES_MAX} bytes")
        try:
            return load_jwks(body.decode("utf-8", "replace"))
        except ValueError as exc:
            raise JwksFetchError(
                f"the document at {self.url} is not a usable JWKS: {exc}"
            ) from None

    def refresh(self) -> None:
        self._keys = self.fetch()

    def start(self) -> None:
        """The first fetch, retried with backoff (JwksFetchError when it never succeeds)."""
        delay_ms, waited_ms = self.backoff_ms, 0
        while True:
            try:
                self.refresh()
                return
            except JwksFetchError as exc:
                if waited_ms + delay_ms > self.backoff_max_ms:
                    raise
                log.warning("%s; retrying in %d ms", exc, delay_ms)
            time.sleep(delay_ms / 1000)
            waited_ms += delay_ms
            delay_ms = min(delay_ms * 2, self.backoff_max_ms)

    def missing_key(self, kid: str) -> bool:
        """A token named ``kid``, which the keys do not hold: refresh now (rate limited);
        whether a refresh was asked for."""
        now = time.monotonic() * 1000
        last = self._missing.get(kid)
        if len(kid) > KID_CHARS_MAX or (last is not None and now - last < MISSING_KID_RETRY_MS):
            return False
        if len(self._missing) >= MISSING_KIDS_MAX:
            del self._missing[next(iter(self._missing))]
        self._missing[kid] = now
        self._expedite.set()
        return True

    async def run(self, stop: asyncio.Event) -> None:
        """Refresh every ``refresh_ms``, or at once for a missing kid, until ``stop``
        (failures keep the old keys)."""
        while not stop.is_set():
            waits = [asyncio.ensure_future(e.wait()) for e in (stop, self._expedite)]
            try:
                await asyncio.wait(
                    waits, timeout=self.refresh_ms / 1000, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                for w in waits:
                    w.cancel()
            if stop.is_set():
                return
            self._expedite.clear()
            try:
                self._keys = await asyncio.to_thread(self.fetch)
            except JwksFetchError as exc:
                log.warning("%s; the keys fetched before stay in use", exc)
