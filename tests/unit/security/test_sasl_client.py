"""riverbed's client side of a SASL login (shared by its own connections and the CLI)
against its server side: PLAIN and SCRAM succeed with the right password and fail with a
clear error otherwise."""

from __future__ import annotations

import pytest

from riverbed.protocol.headers import RequestHeader, decode_response, encode_request
from riverbed.security.plain import PlainServer
from riverbed.security.sasl_client import SaslLoginError, login
from riverbed.security.sasl_server import MechanismServer, SaslServerAuthenticator
from riverbed.security.scram import ScramMechanism, ScramServer, make_credential

SHA512 = ScramMechanism.SCRAM_SHA_512
CREDS = {"alice": make_credential(SHA512, "alice-pw", b"salt-of-alice", 4096)}


def _factory(name: str) -> MechanismServer:
    if name == "PLAIN":
        return PlainServer({"alice": "alice-pw"})
    return ScramServer(SHA512, CREDS.get, "serverNonce42")


def run_login(mechanism: str, password: str) -> SaslServerAuthenticator:
    server = SaslServerAuthenticator(["PLAIN", "SCRAM-SHA-512"], _factory, now_ms=lambda: 0)
    steps = login(mechanism, "alice", password, "clientNonce7")
    api_key, version, body = next(steps)
    for correlation in range(1, 10):
        header = RequestHeader(api_key, version, correlation, "test")
        step = server.on_frame(encode_request(header, body)[4:])
        assert step.send is not None
        try:
            api_key, version, body = steps.send(decode_response(header, step.send[4:]))
        except StopIteration:
            return server
    raise AssertionError("the login did not end")


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_login_succeeds_with_the_password(mechanism: str) -> None:
    assert run_login(mechanism, "alice-pw").state != "failed"


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_a_wrong_password_is_a_login_error(mechanism: str) -> None:
    with pytest.raises(SaslLoginError, match="SASL authentication failed"):
        run_login(mechanism, "wrong")


def test_a_mechanism_the_server_does_not_enable_is_refused() -> None:
    with pytest.raises(SaslLoginError, match="SCRAM-SHA-256 refused"):
        run_login("SCRAM-SHA-256", "alice-pw")
