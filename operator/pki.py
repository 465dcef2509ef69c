"""The quorum's PKI as pure functions: certificate authorities, the certificates they issue,
and the decisions of when to renew them (no I/O; `kraft_operator.actions.tls` keeps the
results in Secrets).

As Strimzi does: per KRaftQuorum a cluster CA, which signs each node's certificate (subject
`CN=node-<id>`, the principal the node's authorizer binds to node id `<id>`; SANs the pod's
DNS names), and a clients CA, which signs the operator's own client certificate (subject
`CN=kraft-operator`, granted Alter and Describe). Keys are ECDSA P-256: a node's handshake
and a pass that issues a certificate stay cheap.

Renewal: a certificate is renewed `renewal_days` before it expires (`needs_renewal`); so is
a CA the operator generated. A renewed CA is trusted beside the old one until every node's
certificate is signed by the new one (`trust_bundle`), then the old one is dropped.
"""

from __future__ import annotations

import datetime
import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

OPERATOR_CN = "kraft-operator"
"""The subject of the operator's client certificate (its principal `User:CN=kraft-operator`)."""
BACKDATE = datetime.timedelta(minutes=5)
"""How far a certificate's notBefore is set in the past: a node whose clock is a little
behind the operator's accepts it at once."""


class PkiError(ValueError):
    """Material that cannot be used (a user-supplied CA that does not load, a key that does
    not match its certificate); the message names what is wrong, never the key."""


def node_cn(node_id: int) -> str:
    return f"node-{node_id}"


def principal(cn: str) -> str:
    """Kafka's principal of a certificate whose subject is this one common name."""
    return f"User:CN={cn}"


@dataclass(frozen=True, slots=True)
class KeyPair:
    """A certificate and its private key, both PEM text."""

    cert_pem: str
    key_pem: str

    @property
    def keystore_pem(self) -> str:
        """The key then the certificate (`ssl.keystore.location`'s one file)."""
        return self.key_pem.strip() + "\n" + self.cert_pem.strip() + "\n"


@dataclass(frozen=True, slots=True)
class CertInfo:
    """What the operator reads of a certificate to decide on it (no key material)."""

    subject_cn: str
    issuer_cn: str
    not_before: datetime.datetime
    not_after: datetime.datetime
    dns_names: tuple[str, ...]
    fingerprint: str
    is_ca: bool

    @classmethod
    def parse(cls, pem: str) -> CertInfo:
        """The first certificate of a PEM text."""
        return cls.of(_load_certs(pem)[0])

    @classmethod
    def of(cls, cert: x509.Certificate) -> CertInfo:
        try:
            sans = tuple(cert.extensions.get_extension_for_class(
                x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName))
        except x509.ExtensionNotFound:
            sans = ()
        try:
            is_ca = cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        except x509.ExtensionNotFound:
            is_ca = False
        return cls(_cn(cert.subject), _cn(cert.issuer), cert.not_valid_before_utc,
                   cert.not_valid_after_utc, sans, fingerprint(cert), is_ca)


def _cn(name: x509.Name) -> str:
    attrs = name.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(attrs[0].value) if attrs else ""


def fingerprint(cert: x509.Certificate) -> str:
    return cert.fingerprint(hashes.SHA256()).hex()


def fingerprint_of(pem: str) -> str:
    """The SHA-256 fingerprint of a PEM text's first certificate."""
    return fingerprint(_load_certs(pem)[0])


def _load_certs(pem: str) -> list[x509.Certificate]:
    try:
        certs = x509.load_pem_x509_certificates(pem.encode())
    except ValueError as exc:
        raise PkiError(f"not a PEM certificate: {exc}") from None
    if not certs:
        raise PkiError("no certificate in the PEM text")
    return certs


def _key_pem(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def _cert_pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def generate_ca(common_name: str, now: datetime.datetime, validity_days: int) -> KeyPair:
    """A self-signed CA certificate and its new key."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE)
            .not_valid_after(now + datetime.timedelta(days=validity_days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True,
                                         crl_sign=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False,
                                         decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                           critical=False)
            .sign(key, hashes.SHA256()))
    return KeyPair(_cert_pem(cert), _key_pem(key))


def load_ca(cert_pem: str, key_pem: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey
                                                  | object]:
    """The CA certificate (of those in `cert_pem`) whose public key is `key_pem`'s, and the
    key; raises PkiError naming what is wrong (a user-supplied CA)."""
    try:
        key = serialization.load_pem_private_key(key_pem.encode(), password=None)
    except (ValueError, TypeError) as exc:
        raise PkiError(f"the CA key does not load (an unencrypted PEM key is needed): "
                       f"{type(exc).__name__}") from None
    public = key.public_key().public_bytes(serialization.Encoding.DER,
                                           serialization.PublicFormat.SubjectPublicKeyInfo)
    for cert in _load_certs(cert_pem):
        mine = cert.public_key().public_bytes(serialization.Encoding.DER,
                                              serialization.PublicFormat.SubjectPublicKeyInfo)
        if mine == public:
            if not CertInfo.of(cert).is_ca:
                raise PkiError("the certificate of the CA key is not a CA (basicConstraints "
                               "CA:TRUE is needed)")
            return cert, key
    raise PkiError("no certificate in the CA's certificates matches the CA key")


def issue(ca: KeyPair, common_name: str, dns_names: Sequence[str], now: datetime.datetime,
          validity_days: int, *, server: bool = True) -> KeyPair:
    """A leaf certificate signed by `ca`: clientAuth, and serverAuth too when `server` (a
    node is both); it never outlives the CA."""
    ca_cert, ca_key = load_ca(ca.cert_pem, ca.key_pem)
    key = ec.generate_private_key(ec.SECP256R1())
    not_after = min(now + datetime.timedelta(days=validity_days), ca_cert.not_valid_after_utc)
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
    if server:
        usages.insert(0, ExtendedKeyUsageOID.SERVER_AUTH)
    builder = (x509.CertificateBuilder()
               .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
               .issuer_name(ca_cert.subject).public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - BACKDATE).not_valid_after(not_after)
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                   ca_cert.public_key()), critical=False))  # type: ignore[arg-type]
    if dns_names:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName(n) for n in dns_names]), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    return KeyPair(_cert_pem(cert), _key_pem(key))


def needs_renewal(info: CertInfo, now: datetime.datetime, renewal_days: int) -> bool:
    """Whether a certificate is inside its renewal window (or expired, or not valid yet)."""
    if now < info.not_before:
        return True
    return info.not_after - now <= datetime.timedelta(days=renewal_days)


def signed_by(leaf_pem: str, ca_cert_pem: str) -> bool:
    """Whether the leaf's signature verifies with this CA certificate's key."""
    try:
        leaf = _load_certs(leaf_pem)[0]
        ca = _load_certs(ca_cert_pem)[0]
        leaf.verify_directly_issued_by(ca)
    except (PkiError, ValueError, TypeError):
        return False
    except Exception:  # cryptography's InvalidSignature
        return False
    return True


def leaf_current(leaf_pem: str, ca_cert_pem: str, common_name: str, dns_names: Iterable[str],
                 now: datetime.datetime, renewal_days: int) -> bool:
    """Whether a stored leaf certificate can stay: signed by the current CA, for this subject
    and exactly these SANs, and not in its renewal window."""
    try:
        info = CertInfo.parse(leaf_pem)
    except PkiError:
        return False
    return (info.subject_cn == common_name and set(info.dns_names) == set(dns_names)
            and signed_by(leaf_pem, ca_cert_pem) and not needs_renewal(info, now, renewal_days))


def split_certs(pem: str) -> list[str]:
    """Each certificate of a PEM text as its own PEM text."""
    return [_cert_pem(c) for c in _load_certs(pem)]


def trust_bundle(*groups: Iterable[str], now: datetime.datetime | None = None) -> str:
    """The CA certificates a node trusts, one PEM text: each group's certificates in order,
    duplicates once, an expired one left out when `now` is given."""
    seen: set[str] = set()
    out = []
    for group in groups:
        for pem in group:
            for cert in _load_certs(pem):
                fp = fingerprint(cert)
                if fp in seen or (now is not None and cert.not_valid_after_utc <= now):
                    continue
                seen.add(fp)
                out.append(_cert_pem(cert))
    return "".join(out)


def digest(*texts: str) -> str:
    """A short digest of public texts (certificates): what a pod's spec hash takes so a new
    trust bundle rolls the pods."""
    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode())
        h.update(b"\0")
    return h.hexdigest()[:16]
