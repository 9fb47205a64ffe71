"""The console's sign-in and HTTPS (issue 21: "when the cluster is secured, the console
authenticates to it with the user's credentials (SASL) and shows only what that principal
is authorised to see; the console's own HTTP listener supports TLS and login").

A broker with Kafka's StandardAuthorizer and PLAIN users; `riverbed console --login`
over its SASL_PLAINTEXT listener, serving HTTPS with the test CA's certificate. alice
(no ACLs) and admin (a super user) sign in with their SASL passwords: the cluster decides,
and alice's topic list hides the topic admin sees.
"""

from __future__ import annotations

import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from riverbed.testing.cluster import scaled_s
from riverbed.testing.console import console_process
from riverbed.testing.secure import SecureBroker, start_secure_broker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

USERS = {"admin": "admin-secret", "alice": "alice-pw"}
SCRAM_USERS = {"dave": ("SCRAM-SHA-256", "dave-pw")}
SECRET_TOPIC = "console-secret-topic"


@dataclass(frozen=True)
class Console:
    url: str
    tls: ssl.SSLContext


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    overrides = {
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin;User:ANONYMOUS",
    }
    broker = start_secure_broker(tmp_path_factory.mktemp("console-login"), USERS, SCRAM_USERS, overrides)  # fmt: skip
    try:
        admin = AdminClient({"bootstrap.servers": secure_plain(broker)})
        for f in admin.create_topics([NewTopic(SECRET_TOPIC, 1, 1)]).values():
            f.result(timeout=scaled_s(30))
        yield broker
    finally:
        broker.proc.close()


def secure_plain(broker: SecureBroker) -> str:
    return broker.bootstrap("PLAINTEXT")


@pytest.fixture(scope="module")
def console(secure: SecureBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    workdir = tmp_path_factory.mktemp("console-login-run")
    props = workdir / "client.properties"
    props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n")
    args = ["--login", "-b", secure.bootstrap("SASL_PLAINTEXT"), "--command-config", str(props)]
    args += ["--tls-cert", str(secure.pki.server_crt), "--tls-key", str(secure.pki.server_key)]
    with console_process(args, workdir / "console.log", scheme="https") as url:
        yield Console(url, ssl.create_default_context(cafile=str(secure.pki.ca)))


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


def call(
    console: Console, method: str, path: str, form: dict[str, str] | None = None, **headers: str
) -> tuple[int, dict[str, str], str]:
    """(status, headers, body) without following redirects, over the console's TLS."""
    body = urllib.parse.urlencode(form).encode() if form is not None else None
    request = urllib.request.Request(console.url + path, data=body, method=method, headers=headers)
    opener = urllib.request.build_opener(
        _NoRedirect, urllib.request.HTTPSHandler(context=console.tls)
    )
    try:
        with opener.open(request, timeout=scaled_s(30)) as resp:
            return resp.status, dict(resp.headers), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read().decode()


def sign_in(console: Console, user: str, password: str, next_path: str = "/topics") -> str:
    status, headers, page = call(
        console, "POST", "/login", {"username": user, "password": password, "next": next_path}
    )
    assert status == 303, page[-500:]
    cookie = headers["Set-Cookie"]
    for attribute in ("HttpOnly", "SameSite=Strict", "Secure"):
        assert attribute in cookie
    return cookie.split(";", 1)[0]


def test_pages_ask_for_a_sign_in(console: Console) -> None:
    status, headers, _ = call(console, "GET", "/topics", Accept="text/html")
    assert status == 303
    where = urllib.parse.urlsplit(headers["Location"])
    assert (where.path, urllib.parse.parse_qs(where.query)) == ("/login", {"next": ["/topics"]})
    status, _, page = call(console, "GET", "/topics")  # not a browser: no redirect
    assert status == 401 and "sign in first" in page
    status, _, page = call(console, "GET", "/login")
    assert status == 200 and 'name="password"' in page
    assert call(console, "GET", "/static/console.js")[0] == 200


def test_the_cluster_decides_a_sign_in(console: Console) -> None:
    status, headers, page = call(
        console, "POST", "/login", {"username": "alice", "password": "wrong", "next": "/"}
    )
    assert status == 401 and "sign-in failed" in page
    assert "Set-Cookie" not in headers
    # a sign-in never redirects off the console
    status, headers, _ = call(
        console, "POST", "/login",
        {"username": "alice", "password": USERS["alice"], "next": "//elsewhere.example/x"},
    )  # fmt: skip
    assert (status, headers["Location"]) == (303, "/")


def test_each_user_sees_what_their_principal_may_describe(console: Console) -> None:
    admin = sign_in(console, "admin", USERS["admin"])
    status, _, page = call(console, "GET", "/topics", Cookie=admin)
    assert status == 200 and SECRET_TOPIC in page
    assert 'id="signed-in-user">admin<' in page
    assert call(console, "GET", f"/topics/{SECRET_TOPIC}", Cookie=admin)[0] == 200

    alice = sign_in(console, "alice", USERS["alice"])
    status, _, page = call(console, "GET", "/topics", Cookie=alice)
    assert status == 200 and 'id="signed-in-user">alice<' in page
    assert SECRET_TOPIC not in page  # Metadata hides what alice may not describe
    status, _, page = call(console, "GET", f"/topics/{SECRET_TOPIC}", Cookie=alice)
    assert status == 404 and "unknown topic" in page

    status, headers, _ = call(console, "POST", "/logout", {}, Cookie=alice)
    assert (status, headers["Location"]) == (303, "/login")
    assert call(console, "GET", "/topics", Cookie=alice)[0] == 401  # the session is gone
    assert call(console, "GET", "/topics", Cookie=admin)[0] == 200  # admin's is not


def test_wire_client_views_connect_as_the_signed_in_user(console: Console) -> None:
    """The views riverbed's own wire client fills (quorum, disks, replica epochs and
    producers) reach the SASL listener with the signed-in user's login; the cluster's
    authorizer, not the console, decides what they show."""
    admin = sign_in(console, "admin", USERS["admin"])
    status, _, page = call(console, "GET", "/", Cookie=admin)
    assert status == 200 and 'id="quorum"' in page and "leader <b>" in page
    assert 'class="muted">not shown' not in page
    status, _, page = call(console, "GET", f"/topics/{SECRET_TOPIC}", Cookie=admin)
    assert status == 200 and "Leader epochs, replica lag and producers:" not in page
    status, _, page = call(console, "GET", "/transactions", Cookie=admin)
    assert status == 200 and "not shown" not in page

    alice = sign_in(console, "alice", USERS["alice"])  # no DESCRIBE on the cluster
    status, _, page = call(console, "GET", "/", Cookie=alice)
    assert status == 200 and 'id="quorum"' not in page
