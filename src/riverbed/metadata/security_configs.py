"""Kafka's broker security config keys (TLS and SASL), types and defaults.

Each may also be set per listener as ``listener.name.<listener, lower case>.<key>`` (and
the JAAS config per mechanism as ``listener.name.<l>.<mechanism, lower case>.
sasl.jaas.config``): `riverbed.server.listener_security` resolves them.
"""

from __future__ import annotations

from riverbed.metadata.config_defs import ConfigDef, ConfigType, Validator, at_least, one_of

_S, _I, _L, _LI, _P = (
    ConfigType.STRING,
    ConfigType.INT,
    ConfigType.LONG,
    ConfigType.LIST,
    ConfigType.PASSWORD,
)


def _d(name: str, type_: ConfigType, default: str | None, v: Validator | None = None) -> ConfigDef:
    return ConfigDef(name, type_, default, "", v, nullable=default is None)


SECURITY_CONFIGS: tuple[ConfigDef, ...] = (
    # --- TLS (Kafka's SslConfigs / BrokerSecurityConfigs)
    _d("ssl.protocol", _S, "TLSv1.3"),
    _d("ssl.enabled.protocols", _LI, "TLSv1.2,TLSv1.3", one_of("TLSv1.2", "TLSv1.3")),
    _d("ssl.cipher.suites", _LI, ""),
    _d("ssl.keystore.type", _S, "JKS"),
    _d("ssl.keystore.location", _S, None),
    _d("ssl.keystore.password", _P, None),
    _d("ssl.key.password", _P, None),
    _d("ssl.keystore.key", _P, None),
    _d("ssl.keystore.certificate.chain", _P, None),
    _d("ssl.truststore.type", _S, "JKS"),
    _d("ssl.truststore.location", _S, None),
    _d("ssl.truststore.password", _P, None),
    _d("ssl.truststore.certificates", _P, None),
    _d("ssl.client.auth", _S, "none", one_of("required", "requested", "none")),
    _d("ssl.endpoint.identification.algorithm", _S, "https"),
    _d("ssl.principal.mapping.rules", _S, "DEFAULT"),
    # a key store replaced on a running broker keeps its certificate's DN and SANs unless
    # these allow a change (Kafka's SslFactory.CertificateEntries.ensureCompatible)
    _d("ssl.allow.dn.changes", ConfigType.BOOLEAN, "false"),
    _d("ssl.allow.san.changes", ConfigType.BOOLEAN, "false"),
    # --- SASL
    _d("sasl.enabled.mechanisms", _LI, "GSSAPI"),
    _d("sasl.mechanism.inter.broker.protocol", _S, "GSSAPI"),
    _d("sasl.mechanism.controller.protocol", _S, "GSSAPI"),
    _d("sasl.jaas.config", _P, None),
    _d("sasl.server.max.receive.size", _I, "524288", at_least(1)),
    _d("connection.failed.authentication.delay.ms", _I, "100", at_least(0)),
    _d("connections.max.reauth.ms", _L, "0", at_least(0)),
    # OAUTHBEARER with signed JWTs (KIP-768's OAuthBearerValidatorCallbackHandler)
    _d("sasl.oauthbearer.jwks.endpoint.url", _S, None),
    _d("sasl.oauthbearer.jwks.endpoint.refresh.ms", _L, "3600000", at_least(1)),
    _d("sasl.oauthbearer.jwks.endpoint.retry.backoff.ms", _L, "100", at_least(0)),
    _d("sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms", _L, "10000", at_least(0)),
    _d("sasl.oauthbearer.expected.audience", _LI, ""),
    _d("sasl.oauthbearer.expected.issuer", _S, None),
    _d("sasl.oauthbearer.sub.claim.name", _S, "sub"),
    _d("sasl.oauthbearer.clock.skew.seconds", _I, "30", at_least(0)),
    # --- authorization (riverbed.security.authorizer)
    _d("authorizer.class.name", _S, ""),
    _d("super.users", _S, ""),
    _d("allow.everyone.if.no.acl.found", ConfigType.BOOLEAN, "false"),
)  # fmt: skip


#: Listener TLS keys a running broker takes through AlterConfigs on its own broker resource
#: as ``listener.name.<l>.<key>`` (Kafka's dynamic listener SSL configs: key and trust
#: stores replaced without a restart, and ``ssl.client.auth``, "per-broker" in Kafka's
#: documentation). Per broker only, never at the cluster default.
DYNAMIC_LISTENER_SSL_KEYS: frozenset[str] = frozenset(
    {
        "ssl.client.auth",
        "ssl.keystore.type",
        "ssl.keystore.location",
        "ssl.keystore.password",
        "ssl.key.password",
        "ssl.keystore.key",
        "ssl.keystore.certificate.chain",
        "ssl.truststore.type",
        "ssl.truststore.location",
        "ssl.truststore.password",
        "ssl.truststore.certificates",
    }
)
#: TLS keys a broker's own resource also takes without the listener prefix, for its
#: listeners that have no ``listener.name.<l>.`` value (Kafka's PerBrokerConfigs; the
#: key and trust stores are per listener only there).
PER_BROKER_SSL_KEYS: frozenset[str] = frozenset({"ssl.client.auth"})
LISTENER_PREFIX = "listener.name."


def dynamic_listener_key(name: str) -> tuple[str, str] | None:
    """(listener, key) of a dynamic listener TLS config name, else None."""
    if not name.startswith(LISTENER_PREFIX):
        return None
    listener, dot, key = name[len(LISTENER_PREFIX) :].partition(".")
    if not dot or not listener or key not in DYNAMIC_LISTENER_SSL_KEYS:
        return None
    return listener, key


def is_dynamic_tls_key(name: str) -> bool:
    """A TLS config a broker's own resource takes at run time (per listener or plain)."""
    return name in PER_BROKER_SSL_KEYS or dynamic_listener_key(name) is not None
