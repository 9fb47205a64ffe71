"""JAAS configuration text as Kafka reads ``sasl.jaas.config``.

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret"
        user_admin="admin-secret" user_alice="alice-secret";

One or more ``<LoginModule class> <flag> [key=value ...];`` entries; values are quoted
("..." with backslash escapes) or bare tokens. Kafka's ``JaasConfig`` parser: the flag is
one of required / requisite / sufficient / optional, a missing ``;`` or a bad token is an
error naming the config key. The broker's PLAIN users are the ``user_<name>`` options of
the listener's PLAIN login module (``listener.name.<l>.plain.sasl.jaas.config``); its own
``username``/``password`` are what it sends when it connects to other brokers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

_TOKEN = re.compile(r'\s*(?:"((?:\\.|[^"\\])*)"|([^\s=;"]+)|(=)|(;))')
_FLAGS = frozenset({"required", "requisite", "sufficient", "optional"})


class JaasConfigError(ValueError):
    """Malformed JAAS configuration text."""


@dataclass(frozen=True, slots=True)
class LoginModule:
    class_name: str
    flag: str
    options: Mapping[str, str]

    def users(self) -> dict[str, str]:
        """``user_<name>="<password>"`` options (PLAIN's static user list)."""
        return {k[5:]: v for k, v in self.options.items() if k.startswith("user_") and k[5:]}


def _tokens(text: str) -> list[tuple[str, str]]:
    """(kind, value) with kind 'word' (quoted or bare), '=' or ';'."""
    out: list[tuple[str, str]] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise JaasConfigError(f"unexpected character at {pos} in JAAS config")
        pos = m.end()
        if m.group(1) is not None:
            out.append(("word", re.sub(r"\\(.)", r"\1", m.group(1))))
        elif m.group(2) is not None:
            out.append(("word", m.group(2)))
        elif m.group(3) is not None:
            out.append(("=", "="))
        else:
            out.append((";", ";"))
    return out


def parse_jaas_config(text: str) -> list[LoginModule]:
    """The login modules of a ``sasl.jaas.config`` value (JaasConfigError when malformed)."""
    tokens = _tokens(text)
    modules: list[LoginModule] = []
    i = 0
    while i < len(tokens):
        if i + 1 >= len(tokens) or tokens[i][0] != "word" or tokens[i + 1][0] != "word":
            raise JaasConfigError("JAAS config entries must start with <LoginModule> <flag>")
        class_name, flag = tokens[i][1], tokens[i + 1][1].lower()
        if flag not in _FLAGS:
            raise JaasConfigError(f"invalid JAAS login module control flag {tokens[i + 1][1]!r}")
        i += 2
        options: dict[str, str] = {}
        while i < len(tokens) and tokens[i][0] != ";":
            if i + 2 >= len(tokens) or tokens[i + 1][0] != "=" or tokens[i + 2][0] != "word":
                raise JaasConfigError(f"JAAS option near {tokens[i][1]!r} must be key=value")
            options[tokens[i][1]] = tokens[i + 2][1]
            i += 3
        if i >= len(tokens):
            raise JaasConfigError("JAAS config entry must end with ';'")
        i += 1
        modules.append(LoginModule(class_name, flag, options))
    if not modules:
        raise JaasConfigError("JAAS config has no login module")
    return modules


_SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
#: The login module each SASL mechanism's JAAS config names (Kafka's modules).
LOGIN_MODULES: Mapping[str, str] = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": _SCRAM_MODULE,
    "SCRAM-SHA-512": _SCRAM_MODULE,
    "OAUTHBEARER": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule",
}


def login_module_problem(mechanism: str, modules: list[LoginModule]) -> str | None:
    """Why ``modules`` (a parsed ``<mechanism>.sasl.jaas.config``) cannot log in with
    ``mechanism``: Kafka's JaasContext takes exactly one module, and riverbed runs only
    Kafka's own module of each mechanism (another class would be silently not run)."""
    if len(modules) != 1:
        return f"JAAS config property contains {len(modules)} login modules, should be 1 module"
    expected = LOGIN_MODULES.get(mechanism)
    if expected is not None and modules[0].class_name != expected:
        return f"{mechanism} logs in with {expected}, not {modules[0].class_name}"
    return None
