"""The JWKS of an https endpoint (Kafka's RefreshingHttpsJwks): trusted through the CA of
the OAUTHBEARER JAAS options, refused otherwise, refreshed in place."""

from __future__ import annotations

import asyncio
import ssl
import time
from pathlib import Path

import pytest

from riverbed.server.jwks_https import KID_CHARS_MAX, HttpsJwks, JwksFetchError, trust_context
from riverbed.testing.certs import make_pki
from riverbed.testing.https_server import Document, serve_https
from riverbed.testing.jwt import JwtIssuer


def _jwks(url: str, context: ssl.SSLContext) -> HttpsJwks:
    return HttpsJwks(url, context, refresh_ms=60_000, backoff_ms=10, backoff_max_ms=20)


def test_fetched_with_the_configured_ca_and_refreshed(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    first, second = JwtIssuer(), JwtIssuer()
    document = Document(first.jwks())
    options = {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca)}
    with serve_https(pki, document) as url:
        jwks = _jwks(url, trust_context(options))
        jwks.start()
        assert set(jwks) == {"rsa-1", "ec-1"}
        assert jwks["rsa-1"].public_numbers() == first.rsa.public_key().public_numbers()
        document.body = second.jwks()
        jwks.refresh()
        assert jwks["rsa-1"].public_numbers() == second.rsa.public_key().public_numbers()


def test_an_endpoint_signed_by_another_ca_is_refused(tmp_path: Path) -> None:
    pki, other = make_pki(tmp_path / "idp"), make_pki(tmp_path / "other")
    options = {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(other.ca)}
    with (
        serve_https(pki, Document(JwtIssuer().jwks())) as url,
        pytest.raises(JwksFetchError, match="CERTIFICATE_VERIFY_FAILED"),
    ):
        _jwks(url, trust_context(options)).start()


def test_a_document_that_is_not_a_jwks_is_refused(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    options = {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca)}
    with (
        serve_https(pki, Document('{"keys": []}')) as url,
        pytest.raises(JwksFetchError, match="not a usable JWKS"),
    ):
        _jwks(url, trust_context(options)).start()


def test_refreshed_periodically_and_at_once_for_a_missing_kid(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    first, second = JwtIssuer(), JwtIssuer(rsa_kid="rsa-2")
    document = Document(first.jwks())
    context = trust_context({"ssl.truststore.certificates": pki.ca.read_text()})

    async def rotated(jwks: HttpsJwks, expedite: bool) -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(jwks.run(stop))
        document.body = second.jwks()
        if expedite:
            assert jwks.missing_key("rsa-2")
        deadline = time.monotonic() + 20
        while "rsa-2" not in jwks:
            assert time.monotonic() < deadline, "not refreshed"
            await asyncio.sleep(0.05)
        stop.set()
        await task

    with serve_https(pki, document) as url:
        periodic = HttpsJwks(url, context, refresh_ms=100, backoff_ms=10, backoff_max_ms=20)
        periodic.start()
        asyncio.run(rotated(periodic, expedite=False))
        document.body = first.jwks()
        hourly = HttpsJwks(url, context, refresh_ms=3_600_000, backoff_ms=10, backoff_max_ms=20)
        hourly.start()
        assert "rsa-2" not in hourly
        asyncio.run(rotated(hourly, expedite=True))
        # one expedited refresh per kid per MISSING_KID_RETRY_MS, none for a huge kid
        assert not hourly.missing_key("rsa-2")
        assert not hourly.missing_key("k" * (KID_CHARS_MAX + 1))
