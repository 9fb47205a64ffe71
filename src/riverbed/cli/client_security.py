"""Client security for every CLI verb that connects (``--command-config FILE``): Kafka's
client properties, as kafka-acls / kafka-configs take them, or librdkafka's names.

Accepted (Kafka's names first, librdkafka's after the slash):
- ``security.protocol`` PLAINTEXT / SSL / SASL_PLAINTEXT / SASL_SSL;
- ``sasl.mechanism`` / ``sasl.mechanisms``: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512;
- ``sasl.jaas.config`` (the login module's ``username`` and ``password``) /
  ``sasl.username`` and ``sasl.password``;
- the trust store: ``ssl.truststore.location`` with ``ssl.truststore.type`` PEM or PKCS12
  (and ``ssl.truststore.password``), ``ssl.truststore.certificates`` (inline PEM) /
  ``ssl.ca.location``, ``ssl.ca.pem``;
- a client certificate (mutual TLS): ``ssl.keystore.location`` with ``ssl.keystore.type``
  PEM or PKCS12, ``ssl.keystore.key`` + ``ssl.keystore.certificate.chain``,
  ``ssl.key.password`` / ``ssl.certificate.location`` + ``ssl.key.location``,
  ``ssl.certificate.pem`` + ``ssl.key.pem``;
- ``ssl.endpoint.identification.algorithm`` (``https``, the default, checks the broker's
  host name; empty turns the check off, as in Kafka).

Both renderings come from one normalized form (Kafka's names): `librdkafka_config` for the
confluent-kafka clients and `wire_security` for riverbed's own wire client (the admin
APIs librdkafka lacks). Any other key goes to librdkafka as it is.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from riverbed.security.jaas import JaasConfigError, parse_jaas_config
from riverbed.server.client_login import CLIENT_MECHANISMS, ClientSecurity
from riverbed.server.tls import Lookup, TlsConfigError, client_context, truststore_pem


class ClientSecurityError(ValueError):
    """A client property that cannot be used (named in the message)."""


#: librdkafka name -> Kafka's
_ALIASES = {
    "sasl.mechanisms": "sasl.mechanism",
    "ssl.ca.pem": "ssl.truststore.certificates",
    "ssl.certificate.pem": "ssl.keystore.certificate.chain",
    "ssl.key.pem": "ssl.keystore.key",
}
#: Kafka names librdkafka does not take (rendered into its own names instead)
_JAVA_ONLY = frozenset(
    {
        "sasl.jaas.config",
        "ssl.truststore.location",
        "ssl.truststore.type",
        "ssl.truststore.password",
        "ssl.truststore.certificates",
        "ssl.keystore.location",
        "ssl.keystore.type",
        "ssl.keystore.password",
        "ssl.keystore.key",
        "ssl.keystore.certificate.chain",
        "ssl.enabled.protocols",
        "ssl.protocol",
        "sasl.username",
        "sasl.password",
        "ssl.key.password",
    }
)
_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z ]+)-----.*?-----END \1-----\s*", re.S)


def normalize(props: Mapping[str, str]) -> dict[str, str]:
    """Kafka's names for everything security-related (librdkafka's translated)."""
    out = {_ALIASES.get(k, k): v for k, v in props.items()}
    if "ssl.ca.location" in out:
        out.setdefault("ssl.truststore.location", out.pop("ssl.ca.location"))
        out.setdefault("ssl.truststore.type", "PEM")
    if "ssl.keystore.key" in out:
        out.setdefault("ssl.keystore.type", "PEM")
    cert, key = out.pop("ssl.certificate.location", None), out.pop("ssl.key.location", None)
    if cert is not None or key is not None:
        if cert is None or key is None:
            raise ClientSecurityError(
                "ssl.certificate.location and ssl.key.location must both be set"
            )
        out["ssl.keystore.certificate.chain"] = _read(cert)
        out["ssl.keystore.key"] = _read(key)
        out["ssl.keystore.type"] = "PEM"
    jaas = out.get("sasl.jaas.config")
    if jaas:
        try:
            modules = parse_jaas_config(jaas)
        except JaasConfigError as exc:
            raise ClientSecurityError(f"sasl.jaas.config: {exc}") from None
        options = modules[0].options if modules else {}
        for option in ("username", "password"):
            if option in options:
                out.setdefault(f"sasl.{option}", options[option])
    return out


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise ClientSecurityError(f"cannot read {path}: {exc.strerror or exc}") from None


def _lookup(props: Mapping[str, str]) -> Lookup:
    def get(key: str) -> object:
        value = props.get(key)
        if key in ("ssl.enabled.protocols", "ssl.cipher.suites") and value is not None:
            return [p.strip() for p in value.split(",") if p.strip()]
        if key == "ssl.endpoint.identification.algorithm" and value is None:
            return "https"  # Kafka's and librdkafka's default
        return value

    return get


def _protocol(props: Mapping[str, str]) -> str:
    protocol = props.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
        raise ClientSecurityError(f"security.protocol={protocol} is not a Kafka protocol")
    return protocol


def librdkafka_config(props: Mapping[str, str]) -> dict[str, str]:
    """confluent-kafka's settings for ``props`` (any of the names above)."""
    norm = normalize(props)
    out = {k: v for k, v in norm.items() if k not in _JAVA_ONLY}
    for key in ("sasl.username", "sasl.password", "ssl.key.password"):
        if key in norm:
            out[key] = norm[key]
    try:
        pem = truststore_pem(_lookup(norm))
    except TlsConfigError as exc:
        raise ClientSecurityError(str(exc)) from None
    if pem is not None:
        out["ssl.ca.pem"] = pem
    out.update(_keystore(norm))
    if out.get("ssl.endpoint.identification.algorithm", "x") == "":
        out["ssl.endpoint.identification.algorithm"] = "none"
    return out


def _keystore(norm: Mapping[str, str]) -> dict[str, str]:
    store_type = norm.get("ssl.keystore.type", "PKCS12").upper()
    if "ssl.keystore.key" in norm:
        return {
            "ssl.key.pem": norm["ssl.keystore.key"],
            "ssl.certificate.pem": norm.get("ssl.keystore.certificate.chain", ""),
        }
    location = norm.get("ssl.keystore.location")
    if location is None:
        return {}
    if store_type == "PEM":
        text = _read(location)
        keys = [m.group(0) for m in _PEM_BLOCK.finditer(text) if "PRIVATE KEY" in m.group(1)]
        certs = [m.group(0) for m in _PEM_BLOCK.finditer(text) if m.group(1) == "CERTIFICATE"]
        if not keys or not certs:
            raise ClientSecurityError(f"ssl.keystore.location {location}: no key and certificate")
        return {"ssl.key.pem": "".join(keys), "ssl.certificate.pem": "".join(certs)}
    out = {"ssl.keystore.location": location}
    if "ssl.keystore.password" in norm:
        out["ssl.keystore.password"] = norm["ssl.keystore.password"]
    return out


def wire_security(props: Mapping[str, str]) -> ClientSecurity:
    """How riverbed's wire client connects with ``props``."""
    norm = normalize(props)
    protocol = _protocol(norm)
    context = None
    if protocol in ("SSL", "SASL_SSL"):
        try:
            context = client_context(_lookup(norm))
        except TlsConfigError as exc:
            raise ClientSecurityError(str(exc)) from None
    if not protocol.startswith("SASL_"):
        return ClientSecurity(protocol, context)
    mechanism = norm.get("sasl.mechanism", "GSSAPI").upper()
    if mechanism not in CLIENT_MECHANISMS:
        raise ClientSecurityError(
            f"sasl.mechanism={mechanism}: riverbed's client logs in with "
            f"{', '.join(CLIENT_MECHANISMS)}"
        )
    username, password = norm.get("sasl.username"), norm.get("sasl.password")
    if not username or password is None:
        raise ClientSecurityError(
            "SASL needs a login: sasl.jaas.config with username and password, or "
            "sasl.username and sasl.password"
        )
    return ClientSecurity(protocol, context, mechanism, username, password)
