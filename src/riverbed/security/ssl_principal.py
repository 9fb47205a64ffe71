"""``ssl.principal.mapping.rules``: a client certificate's subject DN -> principal name.

Kafka's ``SslPrincipalMapper``, same rule syntax and order:

    ssl.principal.mapping.rules=RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,DEFAULT

- rules are tried in order; the first whose pattern matches the WHOLE DN gives the name:
  ``dn.replaceAll(pattern, replacement)`` (Java's ``$1`` group references), then lower-
  (``/L``) or upper-cased (``/U``);
- ``DEFAULT`` gives the DN unchanged (the default rule list is just ``DEFAULT``);
- when no rule matches, authentication fails ("No rules apply to <dn>").

The DN is the RFC 2253 form Java's ``X500Principal.getName()`` gives (most specific
attribute first, ``CN=client,OU=eng,O=riverbed``): `certificate_dn`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Kafka's rule grammar (SslPrincipalMapper.RULE_PATTERN), group numbers kept.
_RULE = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(,\s*|$)")
_PARSER = re.compile(_RULE)
_JAVA_GROUP = re.compile(r"\\(.)|\$(\d+)|\$\{(\w+)\}")


class NoMatchingRule(ValueError):
    """No ssl.principal.mapping.rules rule applies to a DN (authentication fails)."""


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    lower: bool = False
    upper: bool = False

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        result = self.pattern.sub(self.replacement, dn)
        if self.lower:
            return result.lower()
        return result.upper() if self.upper else result


def _python_replacement(java: str) -> str:
    """Java's replacement syntax ($1, ${name}, \\x escapes) as Python's re.sub template."""

    def convert(m: re.Match[str]) -> str:
        if m.group(1) is not None:
            return "\\\\" if m.group(1) == "\\" else m.group(1).replace("\\", "\\\\")
        return f"\\g<{m.group(2) or m.group(3)}>"

    out = []
    pos = 0
    for m in _JAVA_GROUP.finditer(java):
        out.append(java[pos : m.start()].replace("\\", "\\\\"))
        out.append(convert(m))
        pos = m.end()
    out.append(java[pos:].replace("\\", "\\\\"))
    return "".join(out)


def split_rules(text: str) -> list[str]:
    """The rules of the config value, as Kafka's splitRules finds them."""
    return [m.group(1) for m in _SPLITTER.finditer(text.strip()) if m.group(1)]


class SslPrincipalMapper:
    """Parsed rules; ``map(dn)`` -> principal name (NoMatchingRule when none applies)."""

    def __init__(self, rules: str = "DEFAULT") -> None:
        self.rules: tuple[_Rule, ...] = tuple(_parse(rule) for rule in split_rules(rules))

    def map(self, dn: str) -> str:
        for rule in self.rules:
            name = rule.apply(dn)
            if name is not None:
                return name
        raise NoMatchingRule(f"No rules apply to {dn}, rules {self.rules}")


def _parse(rule: str) -> _Rule:
    m = _PARSER.match(rule)
    if m is None:
        raise ValueError(f"Invalid rule: {rule}")
    if m.end() != len(rule):
        raise ValueError(f"Invalid rule: `{rule}`, unmatched substring: `{rule[m.end() :]}`")
    if m.group(1) is not None:
        return _Rule(None)
    if m.group(2) is None:
        raise ValueError(f"Invalid rule: {rule}")
    try:
        pattern = re.compile(m.group(2))
    except re.error as exc:
        raise ValueError(f"Invalid rule: {rule}: {exc}") from None
    flag = m.group(6)
    return _Rule(pattern, _python_replacement(m.group(4)), flag == "L", flag == "U")


def certificate_dn(der: bytes) -> str:
    """The subject DN of a DER certificate in RFC 2253 form (Java's X500Principal.getName)."""
    from cryptography import x509

    return x509.load_der_x509_certificate(der).subject.rfc4514_string()
