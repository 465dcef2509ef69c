"""Certificates for the HTTP port's TLS tests, made with `cryptography`: a CA, server
certificates naming an IP address, client certificates naming a subject, as PEM files."""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _name(common_name: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if org is not None:
        attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _pem_key(key: ec.EllipticCurvePrivateKey, password: bytes | None = None) -> bytes:
    enc: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password) if password
        else serialization.NoEncryption())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, enc)


@dataclass
class Ca:
    """A self-signed CA that issues leaf certificates."""

    name: str
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    @classmethod
    def make(cls, name: str) -> Ca:
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        cert = (x509.CertificateBuilder().subject_name(_name(name)).issuer_name(_name(name))
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - dt.timedelta(minutes=5))
                .not_valid_after(now + dt.timedelta(days=1))
                .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                .add_extension(x509.KeyUsage(
                    digital_signature=True, key_cert_sign=True, crl_sign=True,
                    content_commitment=False, key_encipherment=False, data_encipherment=False,
                    key_agreement=False, encipher_only=False, decipher_only=False),
                    critical=True)
                .sign(key, hashes.SHA256()))
        return cls(name, key, cert)

    def pem(self) -> bytes:
        """The CA certificate (a truststore)."""
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def write(self, path: Path) -> Path:
        path.write_bytes(self.pem())
        return path

    def issue(self, common_name: str, *, ip: str | Sequence[str] | None = None,
              org: str | None = None, client: bool = False,
              ) -> tuple[bytes, bytes, x509.Certificate]:
        """(key PEM, certificate chain PEM, certificate) of a leaf: a server certificate for
        `ip` (one address or several), or a client certificate (`client`)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        builder = (x509.CertificateBuilder().subject_name(_name(common_name, org))
                   .issuer_name(self.cert.subject).public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(now - dt.timedelta(minutes=5))
                   .not_valid_after(now + dt.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None),
                                  critical=True)
                   .add_extension(x509.ExtendedKeyUsage(
                       [ExtendedKeyUsageOID.CLIENT_AUTH if client
                        else ExtendedKeyUsageOID.SERVER_AUTH]), critical=False))
        if ip is not None:
            ips = [ip] if isinstance(ip, str) else list(ip)
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address(a)) for a in ips]), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        chain = cert.public_bytes(serialization.Encoding.PEM) + self.pem()
        return _pem_key(key), chain, cert

    def keystore(self, path: Path, common_name: str, **kwargs: object) -> x509.Certificate:
        """Write a PEM keystore (key and chain in one file, as Kafka's PEM keystore) for a
        new leaf; returns its certificate."""
        key, chain, cert = self.issue(common_name, **kwargs)  # type: ignore[arg-type]
        path.write_bytes(key + chain)
        return cert
