"""PLAIN server, the JAAS parser and ssl.principal.mapping.rules (Kafka's behaviour)."""

from __future__ import annotations

import pytest

from riverbed.security.errors import SaslAuthenticationError
from riverbed.security.jaas import JaasConfigError, parse_jaas_config
from riverbed.security.plain import PlainServer, client_message
from riverbed.security.principal import KafkaPrincipal
from riverbed.security.ssl_principal import NoMatchingRule, SslPrincipalMapper

JAAS = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
    'password="admin-secret" user_admin="admin-secret" user_alice="al\\"ice";'
)


def test_jaas_users_and_own_credentials() -> None:
    (module,) = parse_jaas_config(JAAS)
    assert module.class_name.endswith("PlainLoginModule") and module.flag == "required"
    assert module.options["username"] == "admin"
    assert module.users() == {"admin": "admin-secret", "alice": 'al"ice'}


@pytest.mark.parametrize(
    "text",
    ["", "Module", "Module required username=", "Module bogus a=b;", "Module required a=b"],
)
def test_jaas_malformed(text: str) -> None:
    with pytest.raises(JaasConfigError):
        parse_jaas_config(text)


def test_plain_accepts_and_refuses() -> None:
    users = {"alice": "pw"}
    server = PlainServer(users)
    assert server.evaluate(client_message("alice", "pw")) == b""
    assert server.complete and server.authorization_id == "alice"
    cases = {
        client_message("alice", "wrong"): "Invalid username or password",
        client_message("bob", "pw"): "Invalid username or password",
        client_message("", "pw"): "username not specified",
        client_message("alice", ""): "password not specified",
        client_message("alice", "pw", authzid="bob"): "authorization id",
        b"alice\x00pw": "expected 3 tokens, got 2",
        b"\xff\x00a\x00b": "not UTF-8",
    }
    for message, error in cases.items():
        with pytest.raises(SaslAuthenticationError, match=error):
            PlainServer(users).evaluate(message)


def test_principal_mapping_rules() -> None:
    rules = (
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?)$/$1@$2/L,"
        "RULE:^cn=(.*?),ou=(.*?)$/$1/U, DEFAULT"
    )
    mapper = SslPrincipalMapper(rules)
    assert mapper.map("CN=kafka1,OU=ServiceUsers,O=Org") == "kafka1"
    assert mapper.map("CN=Duke,OU=JavaSoft,O=Sun") == "duke@javasoft"
    assert mapper.map("cn=duke,ou=sun") == "DUKE"
    assert mapper.map("O=Other") == "O=Other"  # DEFAULT
    strict = SslPrincipalMapper("RULE:^CN=(.*)$/$1/")
    with pytest.raises(NoMatchingRule):
        strict.map("O=Other")
    with pytest.raises(ValueError):
        SslPrincipalMapper("RULE:^CN=(.*)$/$1/X junk")


def test_principal() -> None:
    assert str(KafkaPrincipal.user("alice")) == "User:alice"
    assert KafkaPrincipal.parse("User:CN=a,O=b") == KafkaPrincipal("User", "CN=a,O=b")
    with pytest.raises(ValueError):
        KafkaPrincipal.parse("alice")
