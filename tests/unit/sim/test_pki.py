import base64
import datetime
import ipaddress

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from compute_domains.sim import pki


@pytest.fixture(scope="module")
def ca() -> pki.KeyPair:
    return pki.new_ca()


def _cert(pair: pki.KeyPair) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pair.cert_pem)


def test_ca_is_self_signed_ca(ca: pki.KeyPair) -> None:
    cert = _cert(ca)
    assert cert.issuer == cert.subject
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    cert.verify_directly_issued_by(cert)


def test_server_cert_chains_to_ca_with_sans(ca: pki.KeyPair) -> None:
    leaf = pki.issue(
        ca,
        "kube-apiserver",
        server=True,
        dns_names=("localhost", "kubernetes"),
        ip_addresses=("127.0.0.1",),
    )
    cert = _cert(leaf)
    cert.verify_directly_issued_by(_cert(ca))
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["localhost", "kubernetes"]
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


def test_client_cert_carries_user_and_groups(ca: pki.KeyPair) -> None:
    cert = _cert(pki.issue(ca, "system:node:n1", organizations=("system:nodes",), client=True))
    cn = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
    orgs = [a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    assert (cn, orgs) == ("system:node:n1", ["system:nodes"])
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    now = datetime.datetime.now(datetime.UTC)
    assert cert.not_valid_before_utc <= now < cert.not_valid_after_utc


def test_certificate_needs_a_purpose(ca: pki.KeyPair) -> None:
    with pytest.raises(ValueError, match="server, a client"):
        pki.issue(ca, "nobody")


def test_key_matches_certificate(ca: pki.KeyPair) -> None:
    from cryptography.hazmat.primitives import serialization

    leaf = pki.issue(ca, "x", client=True)
    key = serialization.load_pem_private_key(leaf.key_pem, password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    assert key.public_key().public_numbers() == _cert(leaf).public_key().public_numbers()


def test_key_file_is_private(tmp_path, ca: pki.KeyPair) -> None:
    crt, key = pki.issue(ca, "x", client=True).write(tmp_path, "x")
    assert key.stat().st_mode & 0o077 == 0
    assert crt.read_bytes().startswith(b"-----BEGIN CERTIFICATE-----")


def test_kubeconfig_is_self_contained(ca: pki.KeyPair) -> None:
    client = pki.issue(ca, "admin", organizations=("system:masters",), client=True)
    doc = yaml.safe_load(
        pki.kubeconfig(
            server="https://127.0.0.1:1234", ca_pem=ca.cert_pem, client=client, user="admin"
        )
    )
    assert doc["current-context"] == doc["contexts"][0]["name"]
    cluster = doc["clusters"][0]["cluster"]
    assert cluster["server"] == "https://127.0.0.1:1234"
    assert base64.b64decode(cluster["certificate-authority-data"]) == ca.cert_pem
    user = doc["users"][0]["user"]
    assert base64.b64decode(user["client-certificate-data"]) == client.cert_pem
    assert base64.b64decode(user["client-key-data"]) == client.key_pem


def test_kubeconfig_loads_in_lightkube(tmp_path, ca: pki.KeyPair) -> None:
    from lightkube.config.kubeconfig import KubeConfig

    client = pki.issue(ca, "admin", client=True)
    path = tmp_path / "kc.yaml"
    path.write_text(
        pki.kubeconfig(
            server="https://127.0.0.1:1", ca_pem=ca.cert_pem, client=client, user="admin"
        )
    )
    conf = KubeConfig.from_file(path).get()
    assert conf.cluster.server == "https://127.0.0.1:1"
    assert conf.user is not None


def test_service_account_keys_are_rsa() -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    pair = pki.new_service_account_keys()
    pub = serialization.load_pem_public_key(pair.cert_pem)
    key = serialization.load_pem_private_key(pair.key_pem, password=None)
    assert isinstance(pub, rsa.RSAPublicKey) and isinstance(key, rsa.RSAPrivateKey)
    assert key.public_key().public_numbers() == pub.public_numbers()
