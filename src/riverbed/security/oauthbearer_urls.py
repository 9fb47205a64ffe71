"""The allow-list of OAUTHBEARER endpoint URLs (Kafka 4.0's fix of CVE-2025-27817).

Kafka reads ``sasl.oauthbearer.jwks.endpoint.url`` and ``sasl.oauthbearer.token.endpoint.url``
only when listed in the JVM system property ``org.apache.kafka.sasl.oauthbearer.allowed.urls``
(BrokerSecurityConfigs.ALLOWED_SASL_OAUTHBEARER_URLS_CONFIG, default ``""``: since 4.0 no
URL is allowed until the operator lists it). ConfigurationUtils.throwIfURLIsNotAllowed:
the property is split at commas, each entry trimmed, and the configured (trimmed) URL
must equal one of them exactly; ``file://`` URLs included (validateFileUrl goes through
validateUrl). A refused URL stops the start: "The URL cannot be accessed due to
restrictions. Update the system property '...' to allow the URL to be accessed."

It is a process property, not a broker config, on purpose: whoever can write configs
(AlterConfigs, a config file assembled by others) must not be able to point the broker at
any file or host. riverbed has no JVM; its process properties are the environment
(`ALLOWED_URLS_ENV`, the property's name in upper case with ``_`` for ``.``, inherited by
the nodes ``riverbed dev`` starts) and ``riverbed server start -D <property>=<value>``,
which sets that environment variable before the node starts.
"""

from __future__ import annotations

from collections.abc import Mapping

#: Kafka's system property (BrokerSecurityConfigs.ALLOWED_SASL_OAUTHBEARER_URLS_CONFIG)
ALLOWED_URLS_PROPERTY = "org.apache.kafka.sasl.oauthbearer.allowed.urls"
#: ... and its default (Kafka 4.0+: nothing allowed)
ALLOWED_URLS_DEFAULT = ""


def property_env_name(prop: str) -> str:
    """The environment variable carrying a process property (``a.b-c`` -> ``A_B_C``)."""
    return prop.upper().replace(".", "_").replace("-", "_")


ALLOWED_URLS_ENV = property_env_name(ALLOWED_URLS_PROPERTY)
#: The process properties ``riverbed server start -D`` accepts.
PROCESS_PROPERTIES = frozenset({ALLOWED_URLS_PROPERTY})


def allowed_urls(environ: Mapping[str, str]) -> frozenset[str]:
    """The allow-list in ``environ`` (Kafka's split at commas, entries trimmed)."""
    value = environ.get(ALLOWED_URLS_ENV, ALLOWED_URLS_DEFAULT)
    return frozenset(entry.strip() for entry in value.split(","))


def url_refusal(config_name: str, url: str, allowed: frozenset[str]) -> str | None:
    """None when ``url`` may be read, else the start error (Kafka's ConfigException text,
    naming the config, the URL and how riverbed sets the property)."""
    if url.strip() in allowed:
        return None
    return (
        f"Invalid value {url} for configuration {config_name}: The URL cannot be accessed "
        f"due to restrictions. Update the system property '{ALLOWED_URLS_PROPERTY}' to allow "
        f"the URL to be accessed (riverbed: `riverbed server start -D "
        f"{ALLOWED_URLS_PROPERTY}=<url>[,<url>...]` or the environment variable "
        f"{ALLOWED_URLS_ENV})"
    )
