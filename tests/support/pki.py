"""A throwaway PKI for tests, made with `cryptography`: a CA, certificates it signs (any
subject, SANs and validity), and PEM files a node or a client reads (`keystore`: the key and
the chain in one file, as `ssl.keystore.location` takes it)."""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

if TYPE_CHECKING:
    from kraft.cli.local import LocalCluster

_NOW = datetime.datetime.now(datetime.UTC)


def _name(cn: str, org: str = "kraft-test") -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, org),
                      x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


@dataclass
class Issued:
    """A certificate and its key, written as PEM under `dir`."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey
    keystore: Path
    """The key then the certificate chain (`ssl.keystore.location`)."""

    @property
    def cert_pem(self) -> str:
        return self.cert.public_bytes(serialization.Encoding.PEM).decode()

    @property
    def key_pem(self) -> str:
        return _pem_key(self.key).decode()


class TestCA:
    """A self-signed CA that issues leaf certificates into `dir`."""

    __test__ = False

    def __init__(self, dir: Path, name: str = "kraft-test-ca") -> None:
        self.dir = dir
        dir.mkdir(parents=True, exist_ok=True)
        self.key = ec.generate_private_key(ec.SECP256R1())
        subject = _name(name)
        self.cert = (
            x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(_NOW - datetime.timedelta(days=1))
            .not_valid_after(_NOW + datetime.timedelta(days=365))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True,
                                         crl_sign=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False,
                                         decipher_only=False), critical=True)
            .sign(self.key, hashes.SHA256()))
        self.truststore = dir / f"{name}.pem"
        self.truststore.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, file: str, cn: str, *, ips: tuple[str, ...] = ("127.0.0.1",),
              dns: tuple[str, ...] = ("localhost",), days: int = 30,
              expired: bool = False, org: str = "kraft-test") -> Issued:
        """A leaf certificate for server and client use, written to `dir/file`."""
        key = ec.generate_private_key(ec.SECP256R1())
        start = _NOW - datetime.timedelta(days=10 if expired else 1)
        end = _NOW - datetime.timedelta(days=2) if expired else _NOW + datetime.timedelta(days=days)
        sans: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        sans += [x509.DNSName(d) for d in dns]
        builder = (
            x509.CertificateBuilder().subject_name(_name(cn, org)).issuer_name(self.cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                  ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False))
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        path = self.dir / file
        # replaced whole, as a Kubernetes Secret volume replaces its files: never half-written
        tmp = path.with_name(path.name + ".new")
        tmp.write_bytes(_pem_key(key) + cert.public_bytes(serialization.Encoding.PEM))
        tmp.chmod(0o600)
        os.replace(tmp, path)
        return Issued(cert, key, path)


def enable_mtls(cluster: LocalCluster, *, org: str = "kraft-test",
                super_nodes: bool = True) -> tuple[TestCA, Issued]:
    """Switch a LocalCluster (before its first start) to mTLS on the controller listener with
    the authorizer on: a CA under the cluster's directory, one certificate per node naming
    its id and its address, and an admin certificate (`User:CN=admin,O=<org>`, a super user,
    returned with the CA). `super_nodes`: the nodes are super users too (auto-join needs
    Alter); else they hold ClusterAction and Describe only."""
    ca = TestCA(cluster.base / "pki")
    nodes = ";".join(f"User:CN=node-{i},O={org}" for i in cluster.nodes)
    admin = f"User:CN=admin,O={org}"
    cluster.properties.update({
        "listener.security.protocol.map": "CONTROLLER:SSL",
        "listener.name.controller.ssl.truststore.location": str(ca.truststore),
        "listener.name.controller.ssl.client.auth": "required",
    })
    if super_nodes:
        cluster.properties["super.users"] = f"{admin};{nodes}"
    else:
        cluster.properties.update({"super.users": admin,
                                   "kraft.authorizer.cluster.action.principals": nodes,
                                   "kraft.authorizer.describe.principals": nodes})
    for nid, node in cluster.nodes.items():
        issued = ca.issue(f"node-{nid}.pem", f"node-{nid}", ips=(node.host,), dns=(), org=org)
        node.overrides["listener.name.controller.ssl.keystore.location"] = str(issued.keystore)
    return ca, ca.issue("admin.pem", "admin", ips=(), dns=(), org=org)


def client_tls(ca: TestCA, who: Issued) -> Callable[[], ssl.SSLContext]:
    """The context source of a client (`QuorumClient(tls=...)`) presenting `who`."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(cafile=str(ca.truststore))
    ctx.load_cert_chain(str(who.keystore))
    return lambda: ctx


def admin_tls(cluster: LocalCluster) -> Callable[[], ssl.SSLContext] | None:
    """The admin's client TLS of a cluster `enable_mtls` switched on, None for a plaintext
    one."""
    pki = cluster.base / "pki"
    if not (pki / "admin.pem").exists():
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(cafile=str(pki / "kraft-test-ca.pem"))
    ctx.load_cert_chain(str(pki / "admin.pem"))
    return lambda: ctx
