"""What each listener demands, and how this node authenticates when it connects out.

Server side (`ListenerSecurity`, one per listener of ``listeners``): the security
protocol from ``listener.security.protocol.map``; for SSL / SASL_SSL the TLS context
(`riverbed.server.tls`) and the principal mapper; for SASL_* the enabled mechanisms and
the PLAIN users. Every key is read as Kafka does: ``listener.name.<listener lower
case>.<key>`` first, then ``<key>``; the JAAS config only per listener and mechanism,
``listener.name.<l>.<mechanism lower case>.sasl.jaas.config`` (a broker has no global
JAAS config). Mechanisms riverbed serves: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512.

Client side (`ClientSecurity`): the broker's own connections use the inter-broker
listener's protocol (replica fetchers and any broker-to-broker request) or the first
controller listener's (Raft, forwarding, registration and heartbeats), with
``sasl.mechanism.inter.broker.protocol`` / ``sasl.mechanism.controller.protocol`` and,
for PLAIN and SCRAM, the ``username`` / ``password`` options of that listener's JAAS
config for the mechanism, as Kafka's broker logs in.
"""

from __future__ import annotations

import os
import secrets
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from riverbed.metadata.broker_configs import CONFIG_DEFS
from riverbed.metadata.config_defs import ConfigValueError
from riverbed.security.jaas import (
    JaasConfigError,
    LoginModule,
    login_module_problem,
    parse_jaas_config,
)
from riverbed.security.jwks import JWKS_BYTES_MAX, JwksValidator, PublicKey, load_jwks
from riverbed.security.oauthbearer import OAuthBearerUnsecuredServer
from riverbed.security.oauthbearer_urls import allowed_urls, url_refusal
from riverbed.security.plain import PlainServer
from riverbed.security.principal import ANONYMOUS, KafkaPrincipal
from riverbed.security.sasl_server import MechanismServer
from riverbed.security.scram import ScramCredential, ScramMechanism, ScramServer
from riverbed.security.ssl_principal import SslPrincipalMapper, certificate_dn
from riverbed.server.client_login import CLIENT_MECHANISMS as CLIENT_MECHANISMS
from riverbed.server.client_login import PLAINTEXT_CLIENT as PLAINTEXT_CLIENT
from riverbed.server.client_login import ClientSecurity as ClientSecurity
from riverbed.server.config import ConfigError, ServerConfig
from riverbed.server.jwks_https import HttpsJwks, JwksFetchError, trust_context
from riverbed.server.tls import Lookup, TlsConfigError, client_context, server_tls

T = TypeVar("T")
SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
INTER_BROKER_MECHANISM = "sasl.mechanism.inter.broker.protocol"
#: What this node can log in with to other nodes (OAUTHBEARER needs a token provider).
#: (mechanism, user) -> the user's SCRAM credential, from the metadata image.
ScramLookup = Callable[[ScramMechanism, str], "ScramCredential | None"]


def _no_scram(mechanism: ScramMechanism, user: str) -> ScramCredential | None:
    return None


class ListenerConfig:
    """Typed values of one listener: ``listener.name.<l>.<key>`` over ``<key>``, each
    dynamic value (AlterConfigs) over the file's, as Kafka's valuesWithPrefixOverride on
    the dynamic config: a listener's own value in the file beats a plain dynamic one."""

    def __init__(
        self, config: ServerConfig, listener: str, dynamic: Mapping[str, str] | None = None
    ) -> None:
        self.config = config
        self.listener = listener
        self.prefix = f"listener.name.{listener.lower()}."
        #: this broker's dynamic TLS configs (AlterConfigs): listener.name.<l>.ssl.* and
        #: the plain per-broker ones
        self.dynamic: Mapping[str, str] = dynamic or {}

    def _layered(self, name: str) -> str | None:
        value = self.dynamic.get(name)
        return value if value is not None else self.config.originals.get(name)

    def _set(self, key: str) -> tuple[str, str] | None:
        """(the name it is set under, raw value) of ``key``: per listener first."""
        for name in (self.prefix + key, key):
            value = self._layered(name)
            if value is not None:
                return name, value
        return None

    def raw(self, key: str) -> str | None:
        found = self._set(key)
        return None if found is None else found[1]

    def get(self, key: str) -> object:
        found = self._set(key)
        if found is None or (found[0] == key and key not in self.dynamic):
            return self.config.get(key)  # unset, or the file's plain value: parsed already
        try:
            return CONFIG_DEFS[key].parse(found[1])
        except ConfigValueError as exc:
            raise ConfigError(found[0], str(exc)) from None

    def jaas(self, mechanism: str) -> LoginModule | None:
        key = f"{self.prefix}{mechanism.lower()}.sasl.jaas.config"
        text = self.config.originals.get(key)
        if text is None:
            return None
        try:
            modules = parse_jaas_config(text)
        except JaasConfigError as exc:
            raise ConfigError(key, f"{key}: {exc}") from None
        problem = login_module_problem(mechanism, modules)
        if problem is not None:
            raise ConfigError(key, f"{key}: {problem}")
        return modules[0]


@dataclass(frozen=True)
class ListenerSecurity:
    name: str
    protocol: str
    ssl_context: ssl.SSLContext | None = None
    #: TLS: the key store's certificate (DER) and whether a trust store is loaded, what a
    #: key store replaced on the running broker is checked against
    certificate: bytes | None = None
    has_truststore: bool = False
    principal_mapper: SslPrincipalMapper = field(default_factory=SslPrincipalMapper)
    mechanisms: tuple[str, ...] = ()
    plain_users: Mapping[str, str] = field(default_factory=dict)
    #: OAUTHBEARER's JAAS options (the unsecured validator's settings)
    oauthbearer_options: Mapping[str, str] = field(default_factory=dict)
    #: OAUTHBEARER with signed JWTs: the JWKS validator (None: unsecured JWTs)
    oauthbearer_signed: JwksValidator | None = None
    scram: ScramLookup = _no_scram
    sasl_receive_bytes_max: int = 524288
    failed_authentication_delay_ms: int = 100
    #: connections.max.reauth.ms (KIP-368): a session's lifetime, 0 = no expiry
    reauth_ms: int = 0
    #: its per-mechanism overrides, ``listener.name.<l>.<mechanism>.connections.max.reauth.ms``
    reauth_ms_by_mechanism: Mapping[str, int] = field(default_factory=dict)

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    def mechanism_server(self, name: str) -> MechanismServer:
        """A fresh server for one exchange of ``name`` (an enabled mechanism)."""
        if name == "PLAIN":
            return PlainServer(self.plain_users)
        if name == "OAUTHBEARER":
            signed = self.oauthbearer_signed.validate if self.oauthbearer_signed else None
            return OAuthBearerUnsecuredServer(
                self.oauthbearer_options, int(time.time() * 1000), signed
            )
        mechanism = ScramMechanism.from_name(name)
        assert mechanism is not None, name
        return ScramServer(
            mechanism, lambda user: self.scram(mechanism, user), secrets.token_urlsafe(24)
        )

    def tls_principal(self, peer_der: bytes | None) -> KafkaPrincipal:
        """SSL: User:ANONYMOUS without a client certificate, else its mapped DN
        (NoMatchingRule when no ssl.principal.mapping.rules rule applies)."""
        if peer_der is None:
            return ANONYMOUS
        return KafkaPrincipal.user(self.principal_mapper.map(certificate_dn(peer_der)))


PLAINTEXT = ListenerSecurity("PLAINTEXT", "PLAINTEXT")


def listener_security(
    config: ServerConfig,
    name: str,
    protocol: str,
    scram: ScramLookup = _no_scram,
    dynamic: Mapping[str, str] | None = None,
    signed: Callable[[ListenerConfig], JwksValidator | None] | None = None,
) -> ListenerSecurity:
    """Build (and validate: ConfigError naming the key) one listener's security;
    ``dynamic``: the broker's dynamic configs (listener.name.<l>.ssl.* replacements);
    ``signed``: where the OAUTHBEARER JWKS validator comes from (a rebuilt listener keeps
    the one it has instead of fetching its JWKS again)."""
    lc = ListenerConfig(config, name, dynamic)
    tls = _tls_context(lc, protocol, server_tls)
    try:
        mapper = SslPrincipalMapper(str(lc.get("ssl.principal.mapping.rules")))
    except ValueError as exc:
        raise ConfigError("ssl.principal.mapping.rules", str(exc)) from None
    mechanisms: tuple[str, ...] = ()
    users: dict[str, str] = {}
    oauth: LoginModule | None = None
    if protocol.startswith("SASL_"):
        enabled = lc.get("sasl.enabled.mechanisms")
        assert isinstance(enabled, list)
        mechanisms = tuple(enabled)
        unsupported = [m for m in mechanisms if m not in SUPPORTED_MECHANISMS]
        if unsupported or not mechanisms:
            raise ConfigError(
                "sasl.enabled.mechanisms",
                f"listener {name}: sasl.enabled.mechanisms {list(mechanisms)}: riverbed serves "
                f"{', '.join(SUPPORTED_MECHANISMS)} (GSSAPI is not supported)",
            )
        for mechanism in mechanisms:  # each mechanism's JAAS config and handler checked
            lc.jaas(mechanism)
            _check_callback_handler(lc, mechanism)
        if "PLAIN" in mechanisms:
            module = lc.jaas("PLAIN")
            if module is None:
                raise ConfigError(
                    f"{lc.prefix}plain.sasl.jaas.config",
                    f"listener {name} enables PLAIN but {lc.prefix}plain.sasl.jaas.config "
                    'is not set (its user_<name>="<password>" options are the users)',
                )
            users = module.users()
        oauth = lc.jaas("OAUTHBEARER") if "OAUTHBEARER" in mechanisms else None
    return ListenerSecurity(
        name=name,
        protocol=protocol,
        ssl_context=tls.context if tls is not None else None,
        certificate=tls.certificate if tls is not None else None,
        has_truststore=tls is not None and tls.has_truststore,
        principal_mapper=mapper,
        mechanisms=mechanisms,
        plain_users=users,
        oauthbearer_options=dict(oauth.options) if oauth is not None else {},
        oauthbearer_signed=(signed or _jwks_validator)(lc) if "OAUTHBEARER" in mechanisms else None,
        scram=scram,
        sasl_receive_bytes_max=int(str(lc.get("sasl.server.max.receive.size"))),
        failed_authentication_delay_ms=int(
            str(lc.get("connection.failed.authentication.delay.ms"))
        ),
        reauth_ms=int(str(lc.get("connections.max.reauth.ms"))),
        reauth_ms_by_mechanism=_reauth_overrides(lc, mechanisms),
    )


def _reauth_overrides(lc: ListenerConfig, mechanisms: tuple[str, ...]) -> dict[str, int]:
    """``listener.name.<l>.<mechanism lower case>.connections.max.reauth.ms`` (Kafka's
    SaslChannelBuilder reads it per mechanism, over the listener's value)."""
    out: dict[str, int] = {}
    for mechanism in mechanisms:
        key = f"{mechanism.lower()}.connections.max.reauth.ms"
        raw = lc.config.originals.get(lc.prefix + key)
        if raw is None:
            continue
        try:
            out[mechanism] = int(str(CONFIG_DEFS["connections.max.reauth.ms"].parse(raw)))
        except ConfigValueError as exc:
            raise ConfigError(lc.prefix + key, str(exc)) from None
    return out


def client_security(config: ServerConfig, listener: str, mechanism_key: str) -> ClientSecurity:
    """The security to reach ``listener`` of other nodes with (ConfigError when its
    credentials are missing)."""
    protocol = _protocol_of(config, listener)
    lc = ListenerConfig(config, listener)
    context = _tls_context(lc, protocol, client_context)
    if not protocol.startswith("SASL_"):
        return ClientSecurity(protocol, context)
    mechanism = str(config.get(mechanism_key))
    if mechanism not in CLIENT_MECHANISMS:
        raise ConfigError(
            mechanism_key,
            f"{mechanism_key}={mechanism}: riverbed connects with {', '.join(CLIENT_MECHANISMS)}",
        )
    enabled = lc.get("sasl.enabled.mechanisms")
    assert isinstance(enabled, list)
    # Kafka's check: the other brokers would refuse this login
    inter_broker = mechanism_key == INTER_BROKER_MECHANISM and "broker" in config.process_roles
    if inter_broker and mechanism not in enabled:
        raise ConfigError(
            mechanism_key,
            f"{mechanism_key}={mechanism} must be included in sasl.enabled.mechanisms "
            f"(listener {listener}: {', '.join(enabled)}) when SASL is used for "
            "inter-broker communication",
        )
    module = lc.jaas(mechanism)
    username = module.options.get("username") if module is not None else None
    password = module.options.get("password") if module is not None else None
    if not username or password is None:
        key = f"{lc.prefix}{mechanism.lower()}.sasl.jaas.config"
        raise ConfigError(key, f"{key} must set username and password (this node's login)")
    return ClientSecurity(protocol, context, mechanism, username, password)


JWKS_URL = "sasl.oauthbearer.jwks.endpoint.url"
#: Kafka's validator of signed JWTs (KIP-768); naming it turns JWKS validation on.
SIGNED_JWT_HANDLER = (
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
)
UNSECURED_JWT_HANDLER = (
    "org.apache.kafka.common.security.oauthbearer.internals.unsecured."
    "OAuthBearerUnsecuredValidatorCallbackHandler"
)
SCRAM_HANDLER = "org.apache.kafka.common.security.scram.internals.ScramServerCallbackHandler"


#: The server callback handlers riverbed runs per mechanism (Kafka's own classes).
SERVER_CALLBACK_HANDLERS: Mapping[str, frozenset[str]] = {
    "PLAIN": frozenset(
        {"org.apache.kafka.common.security.plain.internals.PlainServerCallbackHandler"}
    ),
    "SCRAM-SHA-256": frozenset({SCRAM_HANDLER}),
    "SCRAM-SHA-512": frozenset({SCRAM_HANDLER}),
    "OAUTHBEARER": frozenset({SIGNED_JWT_HANDLER, UNSECURED_JWT_HANDLER}),
}


def _check_callback_handler(lc: ListenerConfig, mechanism: str) -> None:
    """``listener.name.<l>.<mechanism>.sasl.server.callback.handler.class`` names a class
    riverbed runs: another one (a custom validator) would be silently not run, and the
    default one (OAUTHBEARER: unsecured JWTs) would log clients in instead."""
    key = f"{lc.prefix}{mechanism.lower()}.sasl.server.callback.handler.class"
    name = lc.config.originals.get(key)
    known = SERVER_CALLBACK_HANDLERS.get(mechanism, frozenset())
    if name is not None and name.strip() not in known:
        raise ConfigError(
            key, f"{key}={name}: riverbed runs {' or '.join(sorted(known))} for {mechanism}"
        )


def _jwks_validator(lc: ListenerConfig) -> JwksValidator | None:
    """The listener's JWKS validator when its OAUTHBEARER callback handler is Kafka's
    OAuthBearerValidatorCallbackHandler: the JWKS read from a file:// URL, or fetched from
    an https:// one (`riverbed.server.jwks_https`, trusting the CAs of the OAUTHBEARER
    JAAS options); either only when the process allows the URL (Kafka 4's
    ``org.apache.kafka.sasl.oauthbearer.allowed.urls``, `riverbed.security.oauthbearer_urls`)."""
    key = f"{lc.prefix}oauthbearer.sasl.server.callback.handler.class"
    if (lc.config.originals.get(key) or "").strip() != SIGNED_JWT_HANDLER:
        return None
    url = lc.get(JWKS_URL)
    if not (isinstance(url, str) and url.startswith(("https://", "file://"))):
        raise ConfigError(JWKS_URL, f"{JWKS_URL} must be a file:// or https:// URL")
    url = url.strip()
    refusal = url_refusal(JWKS_URL, url, allowed_urls(os.environ))
    if refusal is not None:
        raise ConfigError(JWKS_URL, refusal)
    if url.startswith("https://"):
        keys: Mapping[str, PublicKey] = _https_jwks(lc, url)
    else:
        keys = _file_jwks(url[len("file://") :])
    audience = lc.get("sasl.oauthbearer.expected.audience")
    issuer = lc.get("sasl.oauthbearer.expected.issuer")
    return JwksValidator(
        keys,
        missing_key=keys.missing_key if isinstance(keys, HttpsJwks) else None,
        audience=tuple(audience) if isinstance(audience, list) else (),
        issuer=str(issuer) if issuer is not None else None,
        sub_claim=str(lc.get("sasl.oauthbearer.sub.claim.name")),
        clock_skew_ms=int(str(lc.get("sasl.oauthbearer.clock.skew.seconds"))) * 1000,
    )


def _file_jwks(path: str) -> dict[str, PublicKey]:
    try:
        with open(path, encoding="utf-8") as f:
            return load_jwks(f.read(JWKS_BYTES_MAX))
    except (OSError, ValueError) as exc:
        raise ConfigError(JWKS_URL, f"cannot load {path}: {exc}") from None


def _https_jwks(lc: ListenerConfig, url: str) -> HttpsJwks:
    module = lc.jaas("OAUTHBEARER")
    options = module.options if module is not None else {}
    try:
        context = trust_context(options)
    except TlsConfigError as exc:
        key = f"{lc.prefix}oauthbearer.sasl.jaas.config"
        raise ConfigError(key, f"{key}: the JWKS endpoint's trust store: {exc}") from None
    jwks = HttpsJwks(
        url,
        context,
        refresh_ms=int(str(lc.get("sasl.oauthbearer.jwks.endpoint.refresh.ms"))),
        backoff_ms=int(str(lc.get("sasl.oauthbearer.jwks.endpoint.retry.backoff.ms"))),
        backoff_max_ms=int(str(lc.get("sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms"))),
    )
    try:
        jwks.start()
    except JwksFetchError as exc:
        raise ConfigError(JWKS_URL, str(exc)) from None
    return jwks


def _tls_context(lc: ListenerConfig, protocol: str, make: Callable[[Lookup], T]) -> T | None:
    if protocol not in ("SSL", "SASL_SSL"):
        return None
    try:
        return make(lc.get)
    except TlsConfigError as exc:
        raise ConfigError(lc.prefix + exc.key, f"listener {lc.listener}: {exc}") from None


def _protocol_of(config: ServerConfig, listener: str) -> str:
    for lst in (*config.listeners, *config.advertised_listeners):
        if lst.name == listener:
            return lst.security_protocol
    for item in config.get("listener.security.protocol.map") or []:  # type: ignore[attr-defined]
        name, _, proto = str(item).partition(":")
        if name == listener:
            return proto
    return "PLAINTEXT"
