"""How a client connects to a listener: TLS context and SASL login (`ClientSecurity`).

Built by the broker for its own connections (riverbed.server.listener_security) and by
clients from Kafka's client properties (riverbed.cli.client_security). Standard library
only, so that a client (the CLI, a Spark task's Python worker) imports it without the
broker's modules."""

from __future__ import annotations

import ssl
from dataclasses import dataclass

#: SASL mechanisms riverbed's clients log in with.
CLIENT_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


@dataclass(frozen=True)
class ClientSecurity:
    """How this node connects to a listener of another node."""

    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    mechanism: str = ""
    username: str = ""
    password: str = ""


PLAINTEXT_CLIENT = ClientSecurity()
