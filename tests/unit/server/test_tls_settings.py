"""TLS settings Kafka 4.x refuses when a listener's SSL engine factory is configured
(DefaultSslEngineFactory / SslFactory): an unknown cipher suite name, an unknown
``ssl.protocol``, a PKCS12 key password other than the store's. Each is refused naming the
key, never started with a weaker or silently different setting."""

from __future__ import annotations

import ssl

import pytest

from riverbed.server.tls import TlsConfigError, client_context, server_tls
from riverbed.testing.certs import PKI_PASSWORD, Pki, make_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _settings(pki: Pki, **extra: object) -> dict[str, object]:
    return {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki.server_pem),
        "ssl.enabled.protocols": ["TLSv1.2", "TLSv1.3"],
        "ssl.protocol": "TLSv1.3",
        **extra,
    }


def _server(pki: Pki, **extra: object) -> ssl.SSLContext:
    settings = _settings(pki, **extra)
    return server_tls(settings.get).context


@pytest.mark.parametrize(
    "suites",
    [
        # an IANA name with no OpenSSL counterpart next to one that has one
        ["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "TLS_NO_SUCH_SUITE"],
        # looks like a TLS 1.3 suite but is none
        ["TLS_AES_512_GCM_SHA999"],
        # an OpenSSL cipher-string keyword is not a suite name
        ["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "HIGH"],
    ],
)
def test_an_unknown_cipher_suite_is_refused_naming_it(pki: Pki, suites: list[str]) -> None:
    with pytest.raises(TlsConfigError) as info:
        _server(pki, **{"ssl.cipher.suites": suites})
    assert info.value.key == "ssl.cipher.suites"
    # only the unknown name is named
    assert f"Unsupported cipher suite(s) {suites[-1]}:" in str(info.value)


def test_known_cipher_suites_restrict_tls12(pki: Pki) -> None:
    suites = [
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
        "TLS_AES_256_GCM_SHA384",
        "TLS_EMPTY_RENEGOTIATION_INFO_SCSV",  # a signalling value JSSE lists as a suite
    ]
    ctx = _server(pki, **{"ssl.cipher.suites": suites})
    tls12 = {c["name"] for c in ctx.get_ciphers() if c["protocol"] == "TLSv1.2"}
    assert tls12 == {"ECDHE-RSA-AES128-GCM-SHA256"}
    # the client side takes the same names
    client_context(_settings(pki, **{"ssl.cipher.suites": suites}).get)


@pytest.mark.parametrize("protocol", ["TLSv9", "SSLv2", "DTLSv1.2", "Default", ""])
def test_an_unknown_ssl_protocol_is_refused(pki: Pki, protocol: str) -> None:
    with pytest.raises(TlsConfigError) as info:
        _server(pki, **{"ssl.protocol": protocol})
    assert info.value.key == "ssl.protocol"
    assert f"{protocol} SSLContext not available" in str(info.value)
    with pytest.raises(TlsConfigError):
        client_context(_settings(pki, **{"ssl.protocol": protocol}).get)


@pytest.mark.parametrize("protocol", ["TLSv1.3", "TLSv1.2", "TLS", "tlsv1.3", "SSL"])
def test_a_jsse_ssl_protocol_is_taken(pki: Pki, protocol: str) -> None:
    ctx = _server(pki, **{"ssl.protocol": protocol})
    # ssl.enabled.protocols decides the versions, as in Kafka (the engine's enabled
    # protocols are set after the context is made)
    assert (ctx.minimum_version, ctx.maximum_version) == (
        ssl.TLSVersion.TLSv1_2,
        ssl.TLSVersion.TLSv1_3,
    )


def test_an_unset_ssl_protocol_is_kafkas_default(pki: Pki) -> None:
    """A client's own lookup (riverbed.cli.client_security) has no defaults: an unset
    ``ssl.protocol`` is Kafka's default TLSv1.3, not an unknown empty name."""
    settings = _settings(pki)
    del settings["ssl.protocol"]
    client_context(settings.get)
    assert server_tls(settings.get).context


def test_an_empty_enabled_protocols_list_keeps_the_engine_defaults(pki: Pki) -> None:
    """Kafka 4.x's DefaultSslEngineFactory takes an empty ``ssl.enabled.protocols`` as
    unset (the engine keeps its defaults: TLSv1.2 and TLSv1.3); it is not refused."""
    ctx = _server(pki, **{"ssl.enabled.protocols": []})
    assert (ctx.minimum_version, ctx.maximum_version) == (
        ssl.TLSVersion.TLSv1_2,
        ssl.TLSVersion.TLSv1_3,
    )


def _pkcs12(pki: Pki, **extra: object) -> dict[str, object]:
    return _settings(
        pki,
        **{
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(pki.server_p12),
            "ssl.keystore.password": PKI_PASSWORD,
            **extra,
        },
    )


def test_a_pkcs12_key_password_other_than_the_store_password_is_refused(pki: Pki) -> None:
    with pytest.raises(TlsConfigError) as info:
        server_tls(_pkcs12(pki, **{"ssl.key.password": "another-password"}).get)
    assert info.value.key == "ssl.key.password"
    assert str(pki.server_p12) in str(info.value)


@pytest.mark.parametrize("key_password", [None, PKI_PASSWORD])
def test_a_pkcs12_key_password_unset_or_the_store_password_loads(
    pki: Pki, key_password: str | None
) -> None:
    assert server_tls(_pkcs12(pki, **{"ssl.key.password": key_password}).get).certificate


def test_a_pkcs12_key_store_without_its_password_is_refused(pki: Pki) -> None:
    """Kafka's DefaultSslEngineFactory: "SSL key store is specified, but key store password
    is not specified." (a trust store may go without one)."""
    with pytest.raises(TlsConfigError) as info:
        server_tls(_pkcs12(pki, **{"ssl.keystore.password": None}).get)
    assert info.value.key == "ssl.keystore.password"
    assert "key store password is not specified" in str(info.value)


def _handshake(server: ssl.SSLContext, client: ssl.SSLContext) -> str:
    """A TLS handshake between the two contexts in memory: the version agreed (SSLError
    when none can be)."""
    s_in, s_out, c_in, c_out = (ssl.MemoryBIO() for _ in range(4))
    srv = server.wrap_bio(s_in, s_out, server_side=True)
    cli = client.wrap_bio(c_in, c_out, server_side=False)
    done = {"srv": False, "cli": False}
    for _ in range(20):
        for name, side in (("cli", cli), ("srv", srv)):
            if not done[name]:
                try:
                    side.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if all(done.values()):
            version = cli.version()
            assert version is not None
            return version
    raise AssertionError("the handshake did not finish")


def _client(pki: Pki, version: ssl.TLSVersion | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    ctx.check_hostname = False
    if version is not None:
        ctx.minimum_version = ctx.maximum_version = version
    return ctx


def test_only_tls13_suites_named_leave_tls12_no_suite(pki: Pki) -> None:
    """As a JSSE engine with only TLS 1.3 suites enabled: a TLS 1.2 client's handshake
    fails (before, OpenSSL's default TLS 1.2 suites were left on)."""
    ctx = _server(pki, **{"ssl.cipher.suites": ["TLS_AES_128_GCM_SHA256"]})
    assert _handshake(ctx, _client(pki)) == "TLSv1.3"
    with pytest.raises(ssl.SSLError):
        _handshake(ctx, _client(pki, ssl.TLSVersion.TLSv1_2))


def test_only_tls12_suites_named_negotiate_tls12(pki: Pki) -> None:
    suites = ["TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"]
    ctx = _server(pki, **{"ssl.cipher.suites": suites})
    assert _handshake(ctx, _client(pki)) == "TLSv1.2"
    assert _handshake(_server(pki), _client(pki)) == "TLSv1.3"  # unset: both versions


@pytest.mark.parametrize(
    ("suites", "protocols"),
    [
        (["TLS_AES_128_GCM_SHA256"], ["TLSv1.2"]),
        (["TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"], ["TLSv1.3"]),
        (["TLS_EMPTY_RENEGOTIATION_INFO_SCSV"], ["TLSv1.2", "TLSv1.3"]),
    ],
)
def test_suites_that_serve_no_enabled_protocol_are_refused(
    pki: Pki, suites: list[str], protocols: list[str]
) -> None:
    settings = {"ssl.cipher.suites": suites, "ssl.enabled.protocols": protocols}
    with pytest.raises(TlsConfigError) as info:
        _server(pki, **settings)
    assert info.value.key == "ssl.cipher.suites"
    with pytest.raises(TlsConfigError):
        client_context(_settings(pki, **settings).get)
