"""Issue 20, "Command line": every kafka-acls flag of `riverbed acls add|list|remove`, run as a
real CLI process (``python -m riverbed.cli.main acls ...``) against one real broker with
Kafka's StandardAuthorizer. Each test names its own resources, so the tests do not see
each other's ACLs.

- --deny-principal, --group, --transactional-id, --deny-host: the bindings listed exactly,
  and remove removes only the host it names;
- --cluster with --allow-host and two operations: remove with --operation removes that one;
- remove with a principal removes what kafka-acls --remove removes (AclCommand.getAcl):
  the ACLs `add` would write with the same flags, --operation defaulting to All, the
  hosts to *, the pattern type to literal; list names literal patterns unless told,
  every ACL without a resource (kafka-acls' defaults);
- --resource-pattern-type prefixed, and literal / any / match for list and remove;
- an ACL the CLI adds has effect: a --deny-principal on a topic fails that principal's
  produce with TOPIC_AUTHORIZATION_FAILED while another, allowed, produces; a deny on
  another host does not;
- bad input (an unknown --operation or pattern type, an operation a --group does not take,
  as kafka-acls refuses) is a one-line error with exit code 1 or 2, and writes nothing.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer

from riverbed.testing.secure import AUTHORIZER_OVERRIDES, SecureBroker, running_secure_broker

USERS = {"admin": "admin-secret", "alice": "alice-pw", "bob": "bob-pw"}
TIMEOUT_S = 30
_ids = itertools.count()


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    with running_secure_broker(
        tmp_path_factory.mktemp("acls-cli"), USERS, {}, AUTHORIZER_OVERRIDES
    ) as broker:
        yield broker


@pytest.fixture(scope="module")
def admin_properties(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The super user's login as a Kafka client properties file (--command-config)."""
    path = tmp_path_factory.mktemp("props") / "admin.properties"
    path.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="admin" password="admin-secret";\n'
    )
    return path


def _run(secure: SecureBroker, props: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "riverbed.cli.main", "acls", *args]
    cmd += ["-b", secure.bootstrap("SASL_PLAINTEXT"), "--command-config", str(props)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def _acls(secure: SecureBroker, props: Path, *args: str) -> set[tuple[str, ...]]:
    """The rows `acls <verb> ... --json` prints, as (resource type, name, pattern type,
    principal, host, operation, permission) tuples."""
    done = _run(secure, props, *args, "--json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    keys = ("resource_type", "name", "pattern_type", "principal", "host", "operation")
    out = {(*(r[k] for k in keys), r["permission"]) for r in rows}
    assert len(out) == len(rows), f"a binding printed twice: {rows}"
    return out


def _name(prefix: str) -> str:
    return f"{prefix}{next(_ids)}"


def test_deny_principal_group_transactional_id_and_deny_host(
    secure: SecureBroker, admin_properties: Path
) -> None:
    group, txn = _name("cli-group-"), _name("cli-txn-")
    where = ("--group", group, "--transactional-id", txn)
    added = _acls(secure, admin_properties, "add", "--deny-principal", "User:bob",
                  "--deny-host", "10.0.0.1", "--deny-host", "10.0.0.2",
                  "--operation", "Describe", *where)  # fmt: skip
    expected = {
        (rtype, name, "LITERAL", "User:bob", host, "DESCRIBE", "DENY")
        for rtype, name in (("GROUP", group), ("TRANSACTIONAL_ID", txn))
        for host in ("10.0.0.1", "10.0.0.2")
    }
    assert added == expected
    assert _acls(secure, admin_properties, "list", *where) == expected
    # remove names one host: the other host's ACLs stay
    removed = _acls(secure, admin_properties, "remove", "--deny-principal", "User:bob",
                    "--deny-host", "10.0.0.1", "--operation", "Describe", *where)  # fmt: skip
    assert removed == {acl for acl in expected if acl[4] == "10.0.0.1"}
    assert _acls(secure, admin_properties, "list", *where) == expected - removed
    # an ALLOW remove does not touch a DENY
    allow = ("--allow-principal", "User:bob", "--allow-host", "10.0.0.2")
    assert _acls(secure, admin_properties, "remove", *allow, "--operation", "Describe",
                 *where) == set()  # fmt: skip
    assert _acls(secure, admin_properties, "remove", *where) == expected - removed
    assert _acls(secure, admin_properties, "list", *where) == set()


def test_topic_and_group_together_with_an_operation_both_take(
    secure: SecureBroker, admin_properties: Path
) -> None:
    name = _name("cli-both-")
    added = _acls(secure, admin_properties, "add", "--allow-principal", "User:alice",
                  "--operation", "Read", "--topic", name, "--group", name)  # fmt: skip
    assert added == {
        ("TOPIC", name, "LITERAL", "User:alice", "*", "READ", "ALLOW"),
        ("GROUP", name, "LITERAL", "User:alice", "*", "READ", "ALLOW"),
    }
    assert _acls(secure, admin_properties, "list", "--group", name) == {
        ("GROUP", name, "LITERAL", "User:alice", "*", "READ", "ALLOW")
    }


def test_cluster_with_allow_host_and_remove_by_operation(
    secure: SecureBroker, admin_properties: Path
) -> None:
    added = _acls(secure, admin_properties, "add", "--allow-principal", "User:alice",
                  "--allow-host", "127.0.0.1", "--operation", "IdempotentWrite",
                  "--operation", "Describe", "--cluster")  # fmt: skip
    expected = {
        ("CLUSTER", "kafka-cluster", "LITERAL", "User:alice", "127.0.0.1", op, "ALLOW")
        for op in ("IDEMPOTENT_WRITE", "DESCRIBE")
    }
    assert added == expected
    listed = _acls(secure, admin_properties, "list", "--cluster", "--principal", "User:alice")
    assert listed == expected
    removed = _acls(secure, admin_properties, "remove", "--allow-principal", "User:alice",
                    "--allow-host", "127.0.0.1", "--operation", "Describe", "--cluster")  # fmt: skip
    assert {acl[5] for acl in removed} == {"DESCRIBE"} and removed < expected
    assert _acls(secure, admin_properties, "list", "--cluster") == expected - removed


def test_remove_with_a_principal_takes_kafka_acls_defaults(
    secure: SecureBroker, admin_properties: Path
) -> None:
    """kafka-acls --remove --allow-principal P --topic T (no --operation, no --allow-host)
    removes P's ALLOW ``All`` ACL from host ``*`` on the literal T, and nothing else: the
    flags name ACL entries as --add does (AclCommand.getAcl: --operation defaults to All,
    getHosts to *, --resource-pattern-type to literal), each matched exactly."""
    topic = _name("cli-rm-defaults-")
    alice = ("--allow-principal", "User:alice")
    _acls(secure, admin_properties, "add", *alice, "--topic", topic)  # All, *
    _acls(secure, admin_properties, "add", *alice, "--operation", "Read", "--topic", topic)
    _acls(secure, admin_properties, "add", *alice, "--allow-host", "10.0.0.1",
          "--operation", "Read", "--topic", topic)  # fmt: skip
    _acls(secure, admin_properties, "add", *alice, "--topic", topic,
          "--resource-pattern-type", "prefixed")  # fmt: skip
    everything = ("--topic", topic, "--resource-pattern-type", "any")
    before = _acls(secure, admin_properties, "list", *everything)
    all_here = ("TOPIC", topic, "LITERAL", "User:alice", "*", "ALL", "ALLOW")
    read_here = ("TOPIC", topic, "LITERAL", "User:alice", "*", "READ", "ALLOW")
    assert len(before) == 4 and {all_here, read_here} < before
    removed = _acls(secure, admin_properties, "remove", *alice, "--topic", topic)
    assert removed == {all_here}
    assert _acls(secure, admin_properties, "list", *everything) == before - {all_here}
    # --operation Read: the Read from *, not the one from 10.0.0.1
    removed = _acls(secure, admin_properties, "remove", *alice, "--operation", "Read",
                    "--topic", topic)  # fmt: skip
    assert removed == {read_here}
    assert _acls(secure, admin_properties, "list", *everything) == before - {all_here, read_here}


def test_list_names_literal_patterns_unless_told(
    secure: SecureBroker, admin_properties: Path
) -> None:
    """kafka-acls --list --topic T lists the literal ACLs of T (--resource-pattern-type
    defaults to literal), not a prefixed pattern spelled T; --list without a resource
    lists every ACL (AclBindingFilter.ANY), prefixed ones too."""
    name = _name("cli-list-")
    grant = ("add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", name)
    (literal,) = _acls(secure, admin_properties, *grant)
    (prefixed,) = _acls(secure, admin_properties, *grant, "--resource-pattern-type", "prefixed")
    assert literal[2] == "LITERAL" and prefixed[2] == "PREFIXED"
    assert _acls(secure, admin_properties, "list", "--topic", name) == {literal}
    assert {literal, prefixed} <= _acls(secure, admin_properties, "list")
    listed = _acls(secure, admin_properties, "list", "--topic", name,
                   "--resource-pattern-type", "any")  # fmt: skip
    assert listed == {literal, prefixed}


def test_prefixed_pattern_and_literal_any_match_filters(
    secure: SecureBroker, admin_properties: Path
) -> None:
    prefix = _name("cli-pfx-") + "-"
    topic = prefix + "one"
    prefixed = ("TOPIC", prefix, "PREFIXED", "User:alice", "*", "READ", "ALLOW")
    literal = ("TOPIC", topic, "LITERAL", "User:alice", "*", "READ", "ALLOW")
    grant = ("add", "--allow-principal", "User:alice", "--operation", "Read")
    added = _acls(secure, admin_properties, *grant, "--topic", prefix,
                  "--resource-pattern-type", "prefixed")  # fmt: skip
    assert added == {prefixed}
    assert _acls(secure, admin_properties, *grant, "--topic", topic) == {literal}

    def listed(name: str, pattern: str) -> set[tuple[str, ...]]:
        return _acls(secure, admin_properties, "list", "--topic", name,
                     "--resource-pattern-type", pattern)  # fmt: skip

    assert listed(topic, "literal") == {literal}
    assert listed(prefix, "prefixed") == {prefixed}
    assert listed(topic, "prefixed") == set()
    assert listed(prefix, "any") == {prefixed}  # any: every pattern type, this exact name
    assert listed(topic, "match") == {literal, prefixed}  # match: all that apply to the name
    # remove with a specific pattern type removes that one; `any` the exact name's
    removed = _acls(secure, admin_properties, "remove", "--topic", prefix,
                    "--resource-pattern-type", "prefixed")  # fmt: skip
    assert removed == {prefixed}
    assert listed(topic, "match") == {literal}
    assert _acls(secure, admin_properties, "remove", "--topic", prefix) == set()  # literal
    removed = _acls(secure, admin_properties, "remove", "--topic", topic,
                    "--resource-pattern-type", "any")  # fmt: skip
    assert removed == {literal}
    assert listed(topic, "match") == set()


def _produce(secure: SecureBroker, user: str, topic: str) -> KafkaError | None:
    """One record produced as ``user`` over SASL_PLAINTEXT; its delivery error or None."""
    outcome: list[KafkaError | None] = []
    conf = secure.client_config((user, USERS[user])) | {"message.timeout.ms": "10000"}
    producer = Producer(conf)
    producer.produce(topic, b"v", on_delivery=lambda err, msg: outcome.append(err))
    producer.flush(TIMEOUT_S)
    assert len(outcome) == 1
    return outcome[0]


def test_acls_the_cli_adds_decide_who_may_produce(
    secure: SecureBroker, admin_properties: Path
) -> None:
    (topic,) = secure.create_topics([_name("cli-effect-")])
    allow = ("add", "--allow-principal", "User:alice", "--allow-principal", "User:bob")
    _acls(secure, admin_properties, *allow, "--operation", "Write", "--topic", topic)
    _acls(secure, admin_properties, "add", "--deny-principal", "User:bob",
          "--operation", "Write", "--topic", topic)  # fmt: skip
    # a DENY from another host only: alice still produces from 127.0.0.1
    _acls(secure, admin_properties, "add", "--deny-principal", "User:alice",
          "--deny-host", "10.9.9.9", "--operation", "Write", "--topic", topic)  # fmt: skip
    assert _produce(secure, "alice", topic) is None
    err = _produce(secure, "bob", topic)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    removed = _acls(secure, admin_properties, "remove", "--deny-principal", "User:bob",
                    "--operation", "Write", "--topic", topic)  # fmt: skip
    assert removed == {("TOPIC", topic, "LITERAL", "User:bob", "*", "WRITE", "DENY")}
    assert _produce(secure, "bob", topic) is None


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--operation", "Frobnicate"], 2, "argument --operation: unknown operation 'Frobnicate'"),
        (["--resource-pattern-type", "weird"], 2, "argument --resource-pattern-type: invalid"),
        (
            ["--operation", "Write", "--group", "{name}"],
            1,
            "--operation Write: ResourceType GROUP only supports operations All, Read, Delete, "
            "Describe, DescribeConfigs, AlterConfigs",
        ),
        (
            ["--operation", "Read", "--transactional-id", "{name}"],
            1,
            "--operation Read: ResourceType TRANSACTIONAL_ID only supports operations All, "
            "Write, Describe",
        ),
        (["--resource-pattern-type", "match"], 1, "add takes --resource-pattern-type literal"),
        (["--allow-principal", "alice"], 1, "principal 'alice' must look like User:name"),
    ],
)
def test_bad_input_is_a_clear_error_and_writes_nothing(
    secure: SecureBroker, admin_properties: Path, args: list[str], code: int, message: str
) -> None:
    name = _name("cli-bad-")
    args = [a.format(name=name) for a in args]
    principal = [] if "--allow-principal" in args else ["--allow-principal", "User:alice"]
    done = _run(secure, admin_properties, "add", *principal, "--topic", name, *args)
    assert done.returncode == code, done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    everything = ("--topic", name, "--group", name, "--transactional-id", name)
    assert _acls(secure, admin_properties, "list", *everything) == set()
