"""Who a connection is: Kafka's ``KafkaPrincipal`` (type and name, e.g. ``User:alice``).

Every connection carries one, set once authentication is done (Kafka's
``DefaultKafkaPrincipalBuilder``):

- PLAINTEXT, and SSL without a client certificate: ``User:ANONYMOUS``;
- SSL with a client certificate: ``User:<the certificate's RFC 2253 subject DN after
  ssl.principal.mapping.rules>`` (`riverbed.security.ssl_principal`);
- SASL_PLAINTEXT / SASL_SSL: ``User:<the SASL authorization id>`` (for PLAIN and SCRAM the
  authenticated user name).

The authorizer and quotas read it from the request context; nothing else does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

USER_TYPE = "User"


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    """A principal: ``type`` (``User``) and ``name``; ``str()`` is Kafka's ``User:name``."""

    type: str
    name: str
    #: ``str()``, made once: the authorizer asks it of every request (~5% of an allowed
    #: Produce's check when formatted each time).
    text: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "text", f"{self.type}:{self.name}")

    def __str__(self) -> str:
        return self.text

    @classmethod
    def user(cls, name: str) -> KafkaPrincipal:
        return cls(USER_TYPE, name)

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """``Type:name`` (Kafka's SecurityUtils.parseKafkaPrincipal); ValueError otherwise."""
        type_, sep, name = text.partition(":")
        if not sep or not type_ or not name:
            raise ValueError(f"principal {text!r} must look like Type:name (e.g. User:alice)")
        return cls(type_, name)


#: The principal of an unauthenticated connection (Kafka's KafkaPrincipal.ANONYMOUS).
ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")
