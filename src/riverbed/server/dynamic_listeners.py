"""Key and trust stores replaced on a running broker (Kafka's dynamic listener SSL configs).

``listener.name.<l>.ssl.keystore.*`` / ``ssl.truststore.*`` (and ``ssl.key.password``),
and ``ssl.client.auth`` per listener or plain (for the listeners without their own value)
set with AlterConfigs or IncrementalAlterConfigs on this broker's own resource
(``BROKER "<id>"``; the cluster default is refused by the controller, as Kafka's "broker
id must be specified") are:

1. validated here before the request is forwarded, as Kafka's ConfigAdminManager and
   SslFactory.validateReconfiguration do: the listener's TLS context is built from the
   new values (a store that cannot be read or loaded is refused with INVALID_CONFIG
   naming the problem, and the old certificate stays), and the new certificate must keep
   the old one's subject DN and SANs unless ``ssl.allow.dn.changes`` /
   ``ssl.allow.san.changes`` say otherwise (CertificateEntries.ensureCompatible); a trust
   store cannot be added to a listener that had none. Such a change must be sent to the
   broker it alters ("Unexpected broker id");
2. applied when the ConfigRecords reach this broker's metadata image: the listener's
   security is rebuilt and new connections handshake with the new context (a new
   ``ssl.client.auth`` mode included); connections already open keep theirs (an
   ``SSLContext`` lives as long as its connections).

``ssl.client.auth`` is "per-broker" dynamic in Kafka's documentation, but Kafka 4.x's
SslFactory copies only SslConfigs.RECONFIGURABLE_CONFIGS (the stores) into the rebuilt
engine factory and lists ssl.client.auth in NON_RECONFIGURABLE_CONFIGS, so the stored
value does not reach a running listener there (as KAFKA-20437 reports for
ssl.enabled.protocols); riverbed applies it to new connections, as documented.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from riverbed.metadata.image import MetadataImage
from riverbed.metadata.security_configs import (
    PER_BROKER_SSL_KEYS,
    dynamic_listener_key,
    is_dynamic_tls_key,
)
from riverbed.protocol.errors import ErrorCode
from riverbed.server.config import ConfigError, ServerConfig
from riverbed.server.listener_security import (
    ListenerConfig,
    ListenerSecurity,
    ScramLookup,
    listener_security,
)
from riverbed.server.network import SocketServer

log = logging.getLogger(__name__)

#: ConfigResource.Type.BROKER
BROKER_RESOURCE = 4
#: IncrementalAlterConfigs SET / DELETE (AlterConfigOp.OpType)
OP_SET, OP_DELETE = 0, 1


def listener_keys(configs: Mapping[str, str]) -> dict[str, str]:
    """The dynamic TLS keys (per listener or plain) of a broker's dynamic configs."""
    return {k: v for k, v in configs.items() if is_dynamic_tls_key(k)}


def certificate_change_problem(
    old_der: bytes | None, new_der: bytes | None, allow_dn: bool, allow_san: bool
) -> str | None:
    """Kafka's CertificateEntries.ensureCompatible for a key store's own certificate."""
    from cryptography import x509

    if old_der is None or new_der is None:
        return None
    old, new = x509.load_der_x509_certificate(old_der), x509.load_der_x509_certificate(new_der)
    old_dn, new_dn = old.subject.rfc4514_string(), new.subject.rfc4514_string()
    if not allow_dn and old.subject != new.subject and old_dn.lower() != new_dn.lower():
        return f"Keystore DistinguishedName does not match: existing={old_dn}, new={new_dn}"
    if not allow_san and not _sans(new) >= _sans(old):
        return (
            f"Keystore SubjectAltNames do not match: existing={sorted(_sans(old))}, "
            f"new={sorted(_sans(new))}"
        )
    return None


def _sans(cert: object) -> set[str]:
    from cryptography import x509

    assert isinstance(cert, x509.Certificate)
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return set()
    return {f"{type(n).__name__}:{n.value}" for n in ext.value}


class DynamicListeners:
    """This node's listener security, rebuilt when its dynamic TLS configs change."""

    def __init__(
        self,
        config: ServerConfig,
        security: dict[str, ListenerSecurity],
        scram: ScramLookup,
        server: SocketServer,
    ) -> None:
        self.config = config
        self.node_id = config.node_id
        #: the node's listener name -> security (the same dict the node listens with)
        self.security = security
        self.scram = scram
        self.server = server
        self._applied: dict[str, str] = {}

    def _listeners_touched(self, old: Mapping[str, str], new: Mapping[str, str]) -> list[str]:
        changed = {k for k in set(old) | set(new) if old.get(k) != new.get(k)}
        lowered = {key[0] for k in changed if (key := dynamic_listener_key(k)) is not None}
        plain = not changed.isdisjoint(PER_BROKER_SSL_KEYS)  # every TLS listener
        return [
            lst.name
            for lst in self.config.listeners
            if lst.name.lower() in lowered
            or (plain and lst.security_protocol in ("SSL", "SASL_SSL"))
        ]

    def _build(self, name: str, dynamic: Mapping[str, str]) -> ListenerSecurity:
        protocol = next(lst.security_protocol for lst in self.config.listeners if lst.name == name)
        signed = self.security[name].oauthbearer_signed  # kept: no JWKS fetch on the loop
        return listener_security(
            self.config, name, protocol, self.scram, dynamic, lambda lc: signed
        )

    def validate(self, dynamic: Mapping[str, str]) -> str | None:
        """The problem with these dynamic listener configs (None: they may be applied)."""
        for name in self._listeners_touched(self._applied, dynamic):
            old = self.security[name]
            try:
                new = self._build(name, dynamic)
            except ConfigError as exc:
                return f"Validation of dynamic config update of SSLFactory failed: {exc}"
            if old.ssl_context is None:
                continue  # not a TLS listener: nothing to reload
            if new.has_truststore and not old.has_truststore:
                return (
                    "Cannot add SSL truststore to an existing listener for which no "
                    "truststore was configured."
                )
            lc = ListenerConfig(self.config, name, dynamic)
            problem = certificate_change_problem(
                old.certificate,
                new.certificate,
                bool(lc.get("ssl.allow.dn.changes")),
                bool(lc.get("ssl.allow.san.changes")),
            )
            if problem is not None:
                return f"Validation of dynamic config update of SSLFactory failed: {problem}"
        return None

    def apply(self, image: MetadataImage) -> None:
        """Rebuild the listeners whose dynamic TLS configs changed in ``image`` (an image
        listener; a store gone since it was validated is logged and the old one kept)."""
        wanted = listener_keys(image.broker_config(self.node_id))
        if wanted == self._applied:
            return
        for name in self._listeners_touched(self._applied, wanted):
            try:
                new = self._build(name, wanted)
            except ConfigError as exc:
                log.error("listener %s keeps its TLS configuration: %s", name, exc)
                continue
            self.security[name] = new
            self.server.reconfigure(name, new)
            log.info("listener %s: new connections use the new TLS configuration", name)
        self._applied = wanted

    def refusal(
        self,
        image: MetadataImage,
        resource_type: int,
        resource_name: str,
        changes: list[tuple[str, int, str | None]],
        incremental: bool,
    ) -> tuple[ErrorCode, str] | None:
        """Why a resource of an (Incremental)AlterConfigs request, its ``changes``
        (name, operation, value), is refused here (None: forward it)."""
        if resource_type != BROKER_RESOURCE or not resource_name:
            return None
        if not any(is_dynamic_tls_key(name) for name, _, _ in changes):
            return None
        if resource_name.strip() != str(self.node_id):
            return ErrorCode.INVALID_REQUEST, (
                f"Unexpected broker id, expected {self.node_id}, but received {resource_name}"
            )
        # AlterConfigs replaces the resource's dynamic configs; incremental edits them
        current = image.broker_config(self.node_id) if incremental else {}
        wanted = listener_keys(current)
        for name, op, value in changes:
            if not is_dynamic_tls_key(name):
                continue
            if op == OP_DELETE:
                wanted.pop(name, None)
            elif op == OP_SET and value is not None:
                wanted[name] = value
        problem = self.validate(wanted)
        return None if problem is None else (ErrorCode.INVALID_CONFIG, problem)
