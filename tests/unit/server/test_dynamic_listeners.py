"""A key store replaced on a running broker keeps its certificate's DN and SANs unless
allowed (Kafka's SslFactory.CertificateEntries.ensureCompatible)."""

from __future__ import annotations

from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from riverbed.server.dynamic_listeners import certificate_change_problem
from riverbed.server.tls import first_certificate
from riverbed.testing.certs import make_pki, server_keystore


def _der(path: Path) -> bytes:
    der = first_certificate(path.read_text())
    assert der is not None
    return der


def test_same_subject_and_sans_may_replace_the_certificate(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    old, new = _der(pki.server_pem), _der(server_keystore(pki, tmp_path / "new.pem"))
    assert x509.load_der_x509_certificate(old).serial_number != (
        x509.load_der_x509_certificate(new).serial_number
    )
    assert certificate_change_problem(old, new, allow_dn=False, allow_san=False) is None


def test_a_new_subject_needs_ssl_allow_dn_changes(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    old = _der(pki.server_pem)
    new = _der(server_keystore(pki, tmp_path / "other.pem", cn="elsewhere"))
    problem = certificate_change_problem(old, new, allow_dn=False, allow_san=False)
    assert problem is not None and "DistinguishedName does not match" in problem
    assert "CN=elsewhere" in problem
    assert certificate_change_problem(old, new, allow_dn=True, allow_san=False) is None


def test_a_certificate_without_the_old_sans_needs_ssl_allow_san_changes(tmp_path: Path) -> None:
    pki = make_pki(tmp_path, clients={"client": "apps"})
    old = _der(pki.server_pem)
    new = x509.load_pem_x509_certificate(pki.client("client")[1].read_bytes())
    der = new.public_bytes(Encoding.DER)
    problem = certificate_change_problem(old, der, allow_dn=True, allow_san=False)
    assert problem is not None and "SubjectAltNames do not match" in problem
    assert certificate_change_problem(old, der, allow_dn=True, allow_san=True) is None
