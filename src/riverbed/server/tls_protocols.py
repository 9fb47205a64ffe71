"""``ssl.protocol``, ``ssl.enabled.protocols`` and ``ssl.cipher.suites`` on an `ssl.SSLContext`,
refused as Kafka 4.x's DefaultSslEngineFactory refuses them when a listener starts.

- ``ssl.protocol`` names the JSSE SSLContext (``SSLContext.getInstance``): an unknown name
  ("TLSv9") fails with "TLSv9 SSLContext not available" and the broker does not start.
  It does not bound the versions: the engine's enabled protocols are set afterwards from
  ``ssl.enabled.protocols``, so only the TLS-family names JSSE knows are taken.
- ``ssl.enabled.protocols`` (TLSv1.2, TLSv1.3) sets the context's minimum and maximum
  version; an empty list is unset for Kafka (the engine keeps its defaults, TLSv1.2 and
  TLSv1.3), not refused.
- ``ssl.cipher.suites``: ``SSLEngine.setEnabledCipherSuites`` refuses the whole list when
  one name is unknown ("Unsupported CipherSuite"); OpenSSL's ``set_ciphers`` takes a list
  as long as one entry matches, and reads keywords (``HIGH``, ``ALL``) as sets, so each
  name is checked on its own. Kafka's names are IANA's (TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256),
  mapped to OpenSSL's (ECDHE-RSA-AES128-GCM-SHA256); an OpenSSL suite name is taken too.
  The TLS 1.3 suites (same name in both) are checked, but the ssl module cannot restrict
  them one by one (all are strong): the list restricts the TLS 1.2 suites, and the
  versions. A JSSE engine given only TLS 1.3 suites has none for TLS 1.2, so a TLS 1.2
  handshake fails; given only TLS 1.2 suites, TLS 1.3 cannot be negotiated. The same
  follows here from the versions: only TLS 1.3 suites named -> TLS 1.3 only; only TLS 1.2
  suites -> TLS 1.2 only; and a list that leaves no enabled version a suite (only TLS 1.3
  suites with ``ssl.enabled.protocols=TLSv1.2``), where every JSSE handshake would fail, is
  refused when the listener starts.
"""

from __future__ import annotations

import functools
import re
import ssl
from collections.abc import Callable

_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
#: SSLContext algorithms of the JSSE provider that make TLS engines (case-insensitive, as
#: JCA looks names up); DTLS* and "Default" fail in Kafka at the engine or ``init``.
_SSL_CONTEXTS = frozenset({"TLS", "TLSV1", "TLSV1.1", "TLSV1.2", "TLSV1.3", "SSL", "SSLV3"})
#: RFC 5746's signalling value, a "cipher suite" to JSSE; OpenSSL always sends it.
_RENEGOTIATION_SCSV = "TLS_EMPTY_RENEGOTIATION_INFO_SCSV"

#: A resolved config value by key (listener override first), None when unset.
Lookup = Callable[[str], object]
#: Builds the error naming the config key (`riverbed.server.tls.TlsConfigError`).
Refusal = Callable[[str, str], Exception]


def iana_to_openssl(name: str) -> str:
    """TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 -> ECDHE-RSA-AES256-GCM-SHA384 (TLS 1.2)."""
    kx, sep, cipher = name.removeprefix("TLS_").partition("_WITH_")
    if not sep:
        return name
    cipher = re.sub(r"AES_(\d+)", r"AES\1", cipher).replace("_CBC", "")
    cipher = cipher.replace("3DES_EDE", "DES_CBC3")
    cipher = cipher.replace("CHACHA20_POLY1305_SHA256", "CHACHA20_POLY1305")
    parts = ([] if kx == "RSA" else [kx.replace("_", "-")]) + [cipher.replace("_", "-")]
    return "-".join(parts)


@functools.cache
def _openssl_suites() -> frozenset[str]:
    """Every suite name this OpenSSL knows (TLS 1.3's under their IANA names)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.set_ciphers("ALL:COMPLEMENTOFALL")
    return frozenset(str(c["name"]) for c in ctx.get_ciphers())


def _check_protocol(get: Lookup, refuse: Refusal) -> None:
    value = get("ssl.protocol")
    # unset (a client's own lookup has no defaults): Kafka's default, TLSv1.3
    protocol = "TLSv1.3" if value is None else str(value)
    if protocol.upper() not in _SSL_CONTEXTS:
        raise refuse(
            "ssl.protocol",
            f"{protocol} SSLContext not available (use TLSv1.3, TLSv1.2 or TLS; "
            "ssl.enabled.protocols chooses the versions)",
        )


def _split_suites(suites: list[str], refuse: Refusal) -> tuple[list[str], list[str]]:
    """The OpenSSL names of the TLS 1.2 suites of ``suites``, and its TLS 1.3 suites (a
    refusal naming every unknown one)."""
    known = _openssl_suites()
    unknown, tls12, tls13 = [], [], []
    for name in suites:
        if name == _RENEGOTIATION_SCSV:
            continue
        openssl_name = iana_to_openssl(name)
        if openssl_name not in known:
            unknown.append(name)
        elif openssl_name.startswith("TLS_"):  # TLS 1.3's, the same name in both
            tls13.append(openssl_name)
        else:
            tls12.append(openssl_name)
    if unknown:
        raise refuse(
            "ssl.cipher.suites",
            f"Unsupported cipher suite(s) {', '.join(unknown)}: not a TLS cipher suite this "
            "broker knows (IANA names, e.g. TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256)",
        )
    return tls12, tls13


def _versions_with_suites(
    versions: list[ssl.TLSVersion], tls12: list[str], tls13: list[str]
) -> list[ssl.TLSVersion]:
    """The enabled versions a named suite can serve (all when no suite is named)."""
    if not tls12 and not tls13:
        return versions
    usable = {ssl.TLSVersion.TLSv1_2: bool(tls12), ssl.TLSVersion.TLSv1_3: bool(tls13)}
    return [v for v in versions if usable[v]]


def apply_protocols(ctx: ssl.SSLContext, get: Lookup, refuse: Refusal) -> None:
    """Set ``ctx``'s versions and TLS 1.2 suites from the config (``refuse`` builds the
    error naming a key Kafka would refuse)."""
    _check_protocol(get, refuse)
    enabled = get("ssl.enabled.protocols") or list(_VERSIONS)  # empty: the defaults
    assert isinstance(enabled, list)
    versions = sorted(_VERSIONS[p] for p in enabled if p in _VERSIONS)
    if not versions:
        raise refuse("ssl.enabled.protocols", "no supported protocol (TLSv1.2, TLSv1.3)")
    suites = get("ssl.cipher.suites") or []
    assert isinstance(suites, list)
    tls12, tls13 = _split_suites([str(s) for s in suites], refuse)
    if suites and not tls12 and not tls13:  # JSSE: no suite enabled, no handshake
        raise refuse("ssl.cipher.suites", f"{suites} names no cipher suite")
    served = _versions_with_suites(versions, tls12, tls13)
    if not served:
        raise refuse(
            "ssl.cipher.suites",
            f"no cipher suite of {suites} serves an enabled protocol "
            f"({', '.join(p for p in enabled if p in _VERSIONS)}): every handshake would fail",
        )
    ctx.minimum_version, ctx.maximum_version = served[0], served[-1]
    if tls12:
        try:
            ctx.set_ciphers(":".join(tls12))
        except ssl.SSLError:
            raise refuse(
                "ssl.cipher.suites", f"none of the cipher suites {suites} is available"
            ) from None
