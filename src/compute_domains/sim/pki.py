"""Certificates and kubeconfigs for a simulated cluster: its own CA, never the machine's.

One CA signs the API server's serving certificate and every client certificate (admin,
scheduler, controller-manager, the API server's kubelet client, simulated nodes). A separate
RSA key pair signs ServiceAccount tokens. Everything is PEM in the sim's own folder; keys are
written with mode 0600. ``ControlPlanePki`` is the set one control plane needs, in its folder.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import ipaddress
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = datetime.timedelta(days=365)


@dataclasses.dataclass(frozen=True, slots=True)
class KeyPair:
    """A PEM certificate and its PEM private key."""

    cert_pem: bytes
    key_pem: bytes

    def write(self, directory: Path, stem: str) -> tuple[Path, Path]:
        """Write ``<stem>.crt`` and ``<stem>.key`` (0600); return both paths."""
        directory.mkdir(parents=True, exist_ok=True)
        crt, key = directory / f"{stem}.crt", directory / f"{stem}.key"
        crt.write_bytes(self.cert_pem)
        key.touch(mode=0o600)
        key.write_bytes(self.key_pem)
        return crt, key


def _new_key() -> ec.EllipticCurvePrivateKey:
    # P-256 keeps generation fast (hundreds of simulated nodes each get a client cert).
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(common_name: str, organizations: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attrs)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def new_ca(common_name: str = "compute-domains-sim-ca") -> KeyPair:
    """A self-signed CA certificate allowed to sign leaf certificates only."""
    key = _new_key()
    subject = _name(common_name)
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def issue(
    ca: KeyPair,
    common_name: str,
    *,
    organizations: tuple[str, ...] = (),
    dns_names: tuple[str, ...] = (),
    ip_addresses: tuple[str, ...] = (),
    server: bool = False,
    client: bool = False,
) -> KeyPair:
    """Issue a leaf certificate signed by ``ca`` for a server, a client or both."""
    if not (server or client):
        raise ValueError("a certificate must be for a server, a client, or both")
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError("the CA key must be an EC key made by new_ca()")
    key = _new_key()
    now = _now()
    usages = []
    if server:
        usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
    if client:
        usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name, organizations))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def new_service_account_keys() -> KeyPair:
    """RSA key pair that signs ServiceAccount tokens (``cert_pem`` holds the public key)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return KeyPair(public, _key_pem(key))


def kubeconfig(
    *, server: str, ca_pem: bytes, client: KeyPair, user: str, cluster: str = "compute-domains-sim"
) -> str:
    """A self-contained kubeconfig (certificates inline) for one client identity."""

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": cluster,
                "cluster": {"server": server, "certificate-authority-data": b64(ca_pem)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": b64(client.cert_pem),
                    "client-key-data": b64(client.key_pem),
                },
            }
        ],
        "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": user}}],
        "current-context": cluster,
        "preferences": {},
    }
    return yaml.safe_dump(doc, sort_keys=False)


class ControlPlanePki:
    """The files one control plane needs, generated once per state folder."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory

    def generate(self) -> None:
        """The CA, the API server's serving and kubelet-client certificates, the SA keys."""
        ca = new_ca()
        ca.write(self.dir, "ca")
        issue(
            ca,
            "kube-apiserver",
            server=True,
            dns_names=(
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ),
            ip_addresses=("127.0.0.1", "10.0.0.1"),
        ).write(self.dir, "apiserver")
        issue(
            ca, "kube-apiserver-kubelet-client", organizations=("system:masters",), client=True
        ).write(self.dir, "apiserver-kubelet-client")
        new_service_account_keys().write(self.dir, "sa")

    def ca(self) -> KeyPair:
        """The CA written by ``generate``."""
        return KeyPair((self.dir / "ca.crt").read_bytes(), (self.dir / "ca.key").read_bytes())

    def client_kubeconfig(
        self, server: str, user: str, groups: tuple[str, ...], path: Path
    ) -> Path:
        """A kubeconfig at ``path`` for ``user`` in ``groups``, with a new client certificate."""
        ca = self.ca()
        client = issue(ca, user, organizations=groups, client=True)
        path.touch(mode=0o600)
        path.write_text(kubeconfig(server=server, ca_pem=ca.cert_pem, client=client, user=user))
        return path
