"""The SCRAM core (riverbed.security.scram) against RFC 7677's test vector and against
kafka-python's SCRAM client (an independent reference implementation)."""

from __future__ import annotations

import base64
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.net.sasl.scram import ScramClient as ReferenceClient

from riverbed.security.errors import SaslAuthenticationError, SaslFailure
from riverbed.security.scram import (
    ScramClient,
    ScramCredential,
    ScramMechanism,
    ScramServer,
    make_credential,
    saslname_from_username,
    username_from_saslname,
)

SHA256 = ScramMechanism.SCRAM_SHA_256
SHA512 = ScramMechanism.SCRAM_SHA_512


def _server(creds: dict[str, ScramCredential], mech: ScramMechanism = SHA256) -> ScramServer:
    return ScramServer(mech, creds.get, "srvNonce123")


def test_rfc7677_vector() -> None:
    """RFC 7677 section 3: user 'user', password 'pencil'."""
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    cred = make_credential(SHA256, "pencil", salt, 4096)
    server = ScramServer(SHA256, {"user": cred}.get, "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    first = server.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first == (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    final = server.evaluate(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.complete and server.authorization_id == "user"


names = st.text(
    alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=20
)
passwords = st.text(min_size=1, max_size=30).filter(lambda p: "\x00" not in p)


@settings(max_examples=40)
@given(
    user=names,
    password=passwords,
    mech=st.sampled_from([SHA256, SHA512]),
    salt=st.binary(min_size=1, max_size=40),
    iterations=st.integers(4096, 4200),
)
def test_reference_client_authenticates(
    user: str, password: str, mech: ScramMechanism, salt: bytes, iterations: int
) -> None:
    """kafka-python's client with the right password authenticates; the server's final
    signature is the one the client expects (it raises otherwise)."""
    cred = make_credential(mech, password, salt, iterations)
    # kafka-python sends the raw name (no =2C escaping): names with ',' or '=' are not
    # sent by it; riverbed's own client escapes them
    if "," not in user and "=" not in user:
        ref = ReferenceClient(user, password, mech.mechanism_name)
        server = _server({user: cred}, mech)
        ref.process_server_first_message(server.evaluate(ref.first_message()))
        ref.process_server_final_message(server.evaluate(ref.final_message()))
        assert server.complete and server.authorization_id == user
    own = ScramClient(mech, user, password, "cnonce42")
    server = _server({user: cred}, mech)
    final = own.final_message(server.evaluate(own.first_message()))
    own.verify_server_final(server.evaluate(final))
    assert server.authorization_id == user


@settings(max_examples=25)
@given(user=names, password=passwords, wrong=passwords)
def test_wrong_password_fails(user: str, password: str, wrong: str) -> None:
    if "," in user or "=" in user or wrong == password:
        return
    cred = make_credential(SHA256, password, b"salt", 4096)
    ref = ReferenceClient(user, wrong, "SCRAM-SHA-256")
    server = _server({user: cred})
    ref.process_server_first_message(server.evaluate(ref.first_message()))
    with pytest.raises(SaslFailure, match="Invalid client credentials"):
        server.evaluate(ref.final_message())
    assert not server.complete


def _first_round(server: ScramServer) -> tuple[ReferenceClient, bytes]:
    ref = ReferenceClient("alice", "secret", "SCRAM-SHA-256")
    first = server.evaluate(ref.first_message())
    ref.process_server_first_message(first)
    return ref, first


def test_final_nonce_must_extend_client_nonce_with_server_nonce() -> None:
    """A final message whose nonce is not the server-first nonce (the client's own nonce,
    i.e. not extended by the server's) is refused even with a correct proof."""
    server = _server({"alice": make_credential(SHA256, "secret", b"s", 4096)})
    ref, _ = _first_round(server)
    final = ref.final_message().decode()
    client_nonce = final.split("r=", 1)[1].split(",", 1)[0].removesuffix("srvNonce123")
    forged = final.replace("srvNonce123", "", 1)
    assert f"r={client_nonce}," in forged
    with pytest.raises(SaslFailure, match="nonce"):
        server.evaluate(forged.encode())


def test_replayed_final_message_is_refused() -> None:
    """A final message captured from one exchange fails in another (new server nonce)."""
    cred = make_credential(SHA256, "secret", b"s", 4096)
    server = ScramServer(SHA256, {"alice": cred}.get, "nonceA")
    ref = ReferenceClient("alice", "secret", "SCRAM-SHA-256")
    ref.process_server_first_message(server.evaluate(ref.first_message()))
    captured = ref.final_message()
    server.evaluate(captured)
    again = ScramServer(SHA256, {"alice": cred}.get, "nonceB")
    again.evaluate(ref.first_message())
    with pytest.raises(SaslFailure, match="nonce"):
        again.evaluate(captured)


def test_unknown_user_and_low_iterations_fail() -> None:
    server = _server({})
    with pytest.raises(SaslFailure, match="Invalid user credentials"):
        server.evaluate(b"n,,n=nobody,r=abc")
    low = ScramCredential(b"s", b"k", b"k", 1000)
    with pytest.raises(SaslFailure, match="less than the minimum 4096"):
        _server({"alice": low}).evaluate(b"n,,n=alice,r=abc")


def test_authorization_id_must_equal_user() -> None:
    server = _server({"alice": make_credential(SHA256, "secret", b"s", 4096)})
    with pytest.raises(SaslAuthenticationError, match="authorization id"):
        server.evaluate(b"n,a=bob,n=alice,r=abc")


@pytest.mark.parametrize(
    "message",
    [
        b"",
        b"garbage",
        b"y,,n=alice,r=abc",
        b"p=tls,,n=alice,r=abc",
        b"n,,n=al=ice,r=abc",
        b"n,,n=alice",
        b"\xff\xfe",
        b"n,,n=alice,r=a,b",
    ],
)
def test_malformed_client_first(message: bytes) -> None:
    server = _server({"alice": make_credential(SHA256, "secret", b"s", 4096)})
    with pytest.raises(SaslFailure):
        server.evaluate(message)
    assert not server.complete


def test_malformed_final_and_no_third_message() -> None:
    server = _server({"alice": make_credential(SHA256, "secret", b"s", 4096)})
    ref, _ = _first_round(server)
    with pytest.raises(SaslFailure):
        server.evaluate(b"c=biws,r=x,p=!!!")
    ok = _server({"alice": make_credential(SHA256, "secret", b"s", 4096)})
    ref, _ = _first_round(ok)
    ok.evaluate(ref.final_message())
    with pytest.raises(SaslFailure):
        ok.evaluate(ref.final_message())


def test_name_escaping() -> None:
    assert saslname_from_username("a,b=c") == "a=2Cb=3Dc"
    assert username_from_saslname("a=2Cb=3Dc") == "a,b=c"
    with pytest.raises(ValueError):
        username_from_saslname("a=2Db")


def test_librdkafka_duplicated_client_nonce_is_accepted_other_nonces_not() -> None:
    """librdkafka < 2.6.1 sends r=<client nonce><client nonce><server nonce> (librdkafka
    #4895); it ends with this exchange's nonce, so it authenticates (Kafka 3.9's rule).
    A nonce with anything after the server's part does not."""
    cred = make_credential(SHA256, "secret", b"s", 4096)

    def final_with(nonce_of: Callable[[str], str]) -> bytes:
        server = ScramServer(SHA256, {"alice": cred}.get, "SRV")
        first = server.evaluate(b"n,,n=alice,r=CLI").decode()
        nonce = nonce_of(first.split(",")[0][2:])
        salted = SHA256.salted_password("secret", b"s", 4096)
        without_proof = f"c=biws,r={nonce}"
        auth = f"n=alice,r=CLI,{first},{without_proof}".encode()
        client_key = SHA256.hmac(salted, b"Client Key")
        proof = bytes(
            a ^ b
            for a, b in zip(client_key, SHA256.hmac(SHA256.hash(client_key), auth), strict=True)
        )
        return server.evaluate(f"{without_proof},p={base64.b64encode(proof).decode()}".encode())

    assert final_with(lambda n: "CLI" + n).startswith(b"v=")
    assert final_with(lambda n: n).startswith(b"v=")
    with pytest.raises(SaslFailure, match="nonce"):
        final_with(lambda n: n + "x")
    with pytest.raises(SaslFailure, match="nonce"):
        final_with(lambda n: "CLI")
