"""Test certificates: a CA, server and client certificates, as PEM and PKCS12 files.

`make_pki(directory)` writes (all RSA 2048, valid one day, made with the cryptography
package):

- ``ca.pem`` (CA certificate), ``ca.p12`` (trust store: the CA, password ``PKI_PASSWORD``);
- ``server.pem`` (key + certificate chain, for ``ssl.keystore.type=PEM`` with
  ``ssl.keystore.location``), ``server.key`` / ``server.crt`` (apart, for the inline
  ``ssl.keystore.key`` / ``ssl.keystore.certificate.chain``), ``server.p12`` (PKCS12 key
  store); SANs localhost and 127.0.0.1, so host name verification passes;
- one client key pair per name of ``clients``: ``<name>.key``, ``<name>.crt`` with subject
  ``CN=<name>,OU=<ou>,O=riverbed`` (mutual TLS and principal mapping).
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import NameOID

PKI_PASSWORD = "test-store-password"
_PEM = serialization.Encoding.PEM


@dataclass(frozen=True)
class Pki:
    directory: Path
    ca: Path
    ca_p12: Path
    server_pem: Path
    server_key: Path
    server_crt: Path
    server_p12: Path

    def client(self, name: str) -> tuple[Path, Path]:
        """(key file, certificate file) of a client made by `make_pki`."""
        return self.directory / f"{name}.key", self.directory / f"{name}.crt"


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _name(cn: str, ou: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "riverbed")]
    if ou is not None:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, ou))
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attrs)


def _cert(
    subject: x509.Name,
    key: rsa.RSAPrivateKey,
    issuer: x509.Name,
    issuer_key: rsa.RSAPrivateKey,
    *,
    ca: bool = False,
    sans: list[x509.GeneralName] | None = None,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _key_pem(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(_PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


_SERVER_SANS: list[x509.GeneralName] = [
    x509.DNSName("localhost"),
    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
]


def server_keystore(pki: Pki, path: Path, cn: str = "localhost", ou: str = "brokers") -> Path:
    """A new PEM key store (key + certificate: a new key and serial number, the same SANs)
    signed by ``pki``'s CA, as a certificate replaced on a running broker."""
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    ca_key = load_pem_private_key((pki.directory / "ca.key").read_bytes(), None)
    assert isinstance(ca_key, rsa.RSAPrivateKey)
    ca_name = x509.load_pem_x509_certificate(pki.ca.read_bytes()).subject
    key = _key()
    cert = _cert(_name(cn, ou), key, ca_name, ca_key, sans=_SERVER_SANS)
    path.write_bytes(_key_pem(key) + cert.public_bytes(_PEM))
    return path


def encrypted_keystore(pki: Pki, path: Path, password: str) -> Path:
    """The server's PEM key store with its key encrypted by ``password`` (PKCS8), for
    ``ssl.key.password``."""
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    key = load_pem_private_key(pki.server_key.read_bytes(), None)
    encryption = serialization.BestAvailableEncryption(password.encode())
    pem = key.private_bytes(_PEM, serialization.PrivateFormat.PKCS8, encryption)
    path.write_bytes(pem + pki.server_crt.read_bytes())
    return path


def make_pki(
    directory: str | Path, clients: dict[str, str] | None = None, ca_cn: str = "riverbed test CA"
) -> Pki:
    """Write the CA, the server's stores and the clients' certificates (name -> OU);
    ``ca_cn`` names the CA (two CAs trusted together need different names)."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    ca_key = _key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ca_cn)])
    ca = _cert(ca_name, ca_key, ca_name, ca_key, ca=True)
    server_key = _key()
    server = _cert(_name("localhost", "brokers"), server_key, ca_name, ca_key, sans=_SERVER_SANS)
    paths = Pki(
        d, d / "ca.pem", d / "ca.p12", d / "server.pem", d / "server.key", d / "server.crt",
        d / "server.p12",
    )  # fmt: skip
    paths.ca.write_bytes(ca.public_bytes(_PEM))
    (d / "ca.key").write_bytes(_key_pem(ca_key))  # new certificates later (`server_keystore`)
    paths.server_key.write_bytes(_key_pem(server_key))
    paths.server_crt.write_bytes(server.public_bytes(_PEM) + ca.public_bytes(_PEM))
    paths.server_pem.write_bytes(_key_pem(server_key) + server.public_bytes(_PEM))
    enc = serialization.BestAvailableEncryption(PKI_PASSWORD.encode())
    paths.server_p12.write_bytes(
        pkcs12.serialize_key_and_certificates(b"server", server_key, server, [ca], enc)
    )
    paths.ca_p12.write_bytes(pkcs12.serialize_key_and_certificates(b"ca", None, None, [ca], enc))
    for name, ou in (clients or {}).items():
        key = _key()
        cert = _cert(_name(name, ou), key, ca_name, ca_key)
        key_path, crt_path = paths.client(name)
        key_path.write_bytes(_key_pem(key))
        crt_path.write_bytes(cert.public_bytes(_PEM))
    return paths
