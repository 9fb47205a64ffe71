"""SCRAM credentials in the metadata: AlterUserScramCredentials' rules (Kafka's
ScramControlManager), Describe, the image's replay/snapshot, and --add-scram bootstrap."""

from __future__ import annotations

import hashlib

import pytest
from kafka.net.sasl.scram import ScramClient as ReferenceClient

from riverbed.metadata.bootstrap_file import (
    BootstrapError,
    parse_add_scram,
    read_bootstrap_records,
    write_bootstrap_records,
)
from riverbed.metadata.image import MetadataImage, image_to_records, replay_all
from riverbed.metadata.scram_control import ScramControl, describe_user_scram_credentials
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    AlterUserScramCredentialsRequest,
    DescribeUserScramCredentialsRequest,
)
from riverbed.security.scram import ScramCredential, ScramMechanism, ScramServer

Req = AlterUserScramCredentialsRequest


def _upsert(
    name: str, password: str, mech: int = 1, iterations: int = 4096
) -> Req.ScramCredentialUpsertion:
    hash_name = "sha256" if mech == 1 else "sha512"
    salted = hashlib.pbkdf2_hmac(hash_name, password.encode(), b"salty", iterations)
    return Req.ScramCredentialUpsertion(
        name=name, mechanism=mech, iterations=iterations, salt=b"salty", salted_password=salted
    )


def _authenticates(image: MetadataImage, user: str, password: str, mech: ScramMechanism) -> bool:
    cred = image.scram_credentials.get((user, mech.type_id))
    if cred is None:
        return False
    creds = ScramCredential(cred.salt, cred.stored_key, cred.server_key, cred.iterations)
    server = ScramServer(mech, {user: creds}.get, "srv")
    ref = ReferenceClient(user, password, mech.mechanism_name)
    ref.process_server_first_message(server.evaluate(ref.first_message()))
    ref.process_server_final_message(server.evaluate(ref.final_message()))
    return server.complete


def test_alter_rules_and_describe() -> None:
    control = ScramControl()
    request = Req(
        deletions=[Req.ScramCredentialDeletion(name="ghost", mechanism=1)],
        upsertions=[
            _upsert("alice", "pw"),
            _upsert("bob", "pw", mech=2, iterations=8192),
            _upsert("low", "pw", iterations=1000),
            _upsert("high", "pw", iterations=20000),
            _upsert("", "pw"),
            _upsert("weird", "pw", mech=7),
            _upsert("twice", "a"),
            _upsert("twice", "b"),
        ],
    )
    result = control.alter_user_scram_credentials(MetadataImage.EMPTY, request, 0)
    errors = {r.user: (r.error_code, r.error_message) for r in result.response.results}
    assert errors["alice"][0] == 0 and errors["bob"][0] == 0
    assert errors["ghost"] == (
        ErrorCode.RESOURCE_NOT_FOUND,
        "Attempt to delete a user credential that does not exist",
    )
    assert errors["low"] == (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
    assert errors["high"] == (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
    assert errors[""][0] == ErrorCode.UNACCEPTABLE_CREDENTIAL
    assert errors["weird"][0] == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert errors["twice"][0] == ErrorCode.DUPLICATE_RESOURCE
    assert len(result.records) == 2
    image = replay_all(MetadataImage.EMPTY, result.records)
    assert _authenticates(image, "alice", "pw", ScramMechanism.SCRAM_SHA_256)
    assert _authenticates(image, "bob", "pw", ScramMechanism.SCRAM_SHA_512)
    assert not _authenticates(image, "bob", "pw", ScramMechanism.SCRAM_SHA_256)
    # the snapshot keeps them
    assert replay_all(MetadataImage.EMPTY, image_to_records(image)) == image
    described = describe_user_scram_credentials(
        image, DescribeUserScramCredentialsRequest(users=None)
    )
    assert [
        (r.user, [(c.mechanism, c.iterations) for c in r.credential_infos])
        for r in described.results
    ] == [
        ("alice", [(1, 4096)]),
        ("bob", [(2, 8192)]),
    ]
    one = DescribeUserScramCredentialsRequest.UserName
    missing = describe_user_scram_credentials(
        image,
        DescribeUserScramCredentialsRequest(
            users=[one(name="carol"), one(name="alice"), one(name="alice")]
        ),
    )
    codes = {r.user: r.error_code for r in missing.results}
    assert codes == {"carol": ErrorCode.RESOURCE_NOT_FOUND, "alice": ErrorCode.DUPLICATE_RESOURCE}
    # deletion
    delete = Req(deletions=[Req.ScramCredentialDeletion(name="alice", mechanism=1)], upsertions=[])
    result = control.alter_user_scram_credentials(image, delete, 0)
    assert result.response.results[0].error_code == 0
    assert ("alice", 1) not in replay_all(image, result.records).scram_credentials


def test_add_scram_bootstrap(tmp_path) -> None:
    records = [
        parse_add_scram("SCRAM-SHA-256=[name=admin,password=admin-secret]"),
        parse_add_scram('SCRAM-SHA-512=[name="al,ice",password="p\\"w",iterations=8192]'),
    ]
    write_bootstrap_records(str(tmp_path), records)
    back = read_bootstrap_records(str(tmp_path))
    assert back == records
    image = replay_all(MetadataImage.EMPTY, back)
    assert _authenticates(image, "admin", "admin-secret", ScramMechanism.SCRAM_SHA_256)
    assert image.scram_credentials[("al,ice", 2)].iterations == 8192
    assert read_bootstrap_records(str(tmp_path / "none")) == []
    for bad in [
        "SCRAM-SHA-1=[name=a,password=b]",
        "SCRAM-SHA-256=[name=a]",
        "SCRAM-SHA-256=[name=a,password=b,iterations=100]",
        "admin:secret",
    ]:
        with pytest.raises(BootstrapError):
            parse_add_scram(bad)
    (tmp_path / "bootstrap.records").write_text("not base64!\n")
    with pytest.raises(BootstrapError, match="corrupt"):
        read_bootstrap_records(str(tmp_path))
