"""The PKI module: CAs, the certificates they issue (subject, SANs, usages, validity), the
renewal window, a user's CA checked, and the trust bundle of a CA overlap."""

from __future__ import annotations

import datetime

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID
from kraft_operator import pki

NOW = datetime.datetime(2026, 12, 2, 12, 0, tzinfo=datetime.UTC)
DAY = datetime.timedelta(days=1)
SANS = ["kq-1", "kq-1.kq", "kq-1.kq.ns", "kq-1.kq.ns.svc", "kq-1.kq.ns.svc.cluster.local"]


@pytest.fixture(scope="module")
def ca() -> pki.KeyPair:
    return pki.generate_ca("ns/kq cluster CA", NOW, 365)


def test_a_node_certificate_names_its_node_and_its_pods_dns_names(ca: pki.KeyPair) -> None:
    leaf = pki.issue(ca, pki.node_cn(1), SANS, NOW, 90)
    info = pki.CertInfo.parse(leaf.cert_pem)
    assert info.subject_cn == "node-1" and info.issuer_cn == "ns/kq cluster CA"
    assert list(info.dns_names) == SANS
    assert not info.is_ca
    assert info.not_after == NOW + 90 * DAY
    assert info.not_before < NOW  # backdated for a node whose clock is a little behind
    cert = x509.load_pem_x509_certificate(leaf.cert_pem.encode())
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert set(usages) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    assert pki.signed_by(leaf.cert_pem, ca.cert_pem)
    assert pki.principal(info.subject_cn) == "User:CN=node-1"
    assert leaf.keystore_pem.index("PRIVATE KEY") < leaf.keystore_pem.index("CERTIFICATE")


def test_a_client_certificate_is_for_client_auth_only(ca: pki.KeyPair) -> None:
    leaf = pki.issue(ca, pki.OPERATOR_CN, [], NOW, 90, server=False)
    cert = x509.load_pem_x509_certificate(leaf.cert_pem.encode())
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usages) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    assert pki.CertInfo.parse(leaf.cert_pem).dns_names == ()


def test_a_certificate_never_outlives_its_ca() -> None:
    short = pki.generate_ca("short", NOW, 10)
    leaf = pki.issue(short, "node-0", ["a"], NOW, 365)
    assert pki.CertInfo.parse(leaf.cert_pem).not_after == \
        pki.CertInfo.parse(short.cert_pem).not_after


def test_the_ca_is_a_ca_with_its_validity() -> None:
    info = pki.CertInfo.parse(pki.generate_ca("c", NOW, 365).cert_pem)
    assert info.is_ca and info.subject_cn == info.issuer_cn == "c"
    assert info.not_after == NOW + 365 * DAY


@pytest.mark.parametrize(("days_left", "renew"), [(31, False), (30.01, False), (30, True),
                                                  (29, True), (0, True), (-1, True)])
def test_renewal_starts_renewal_days_before_expiry(days_left: float, renew: bool) -> None:
    info = pki.CertInfo("n", "c", NOW - 300 * DAY, NOW + days_left * DAY, (), "f", False)
    assert pki.needs_renewal(info, NOW, 30) is renew


def test_a_certificate_not_valid_yet_is_renewed() -> None:
    info = pki.CertInfo("n", "c", NOW + DAY, NOW + 300 * DAY, (), "f", False)
    assert pki.needs_renewal(info, NOW, 30)


def test_a_stored_leaf_stays_only_when_subject_sans_issuer_and_window_all_fit(
        ca: pki.KeyPair) -> None:
    leaf = pki.issue(ca, "node-1", SANS, NOW, 90).cert_pem
    assert pki.leaf_current(leaf, ca.cert_pem, "node-1", SANS, NOW, 30)
    assert not pki.leaf_current(leaf, ca.cert_pem, "node-2", SANS, NOW, 30)
    assert not pki.leaf_current(leaf, ca.cert_pem, "node-1", SANS[:-1], NOW, 30)
    assert not pki.leaf_current(leaf, ca.cert_pem, "node-1", SANS, NOW + 61 * DAY, 30)
    other = pki.generate_ca("other", NOW, 365)
    assert not pki.leaf_current(leaf, other.cert_pem, "node-1", SANS, NOW, 30)
    assert not pki.signed_by(leaf, other.cert_pem)
    assert not pki.leaf_current("not a certificate", ca.cert_pem, "node-1", SANS, NOW, 30)


def test_the_overlap_bundle_trusts_old_and_new_once_and_drops_the_expired(
        ca: pki.KeyPair) -> None:
    new = pki.generate_ca("new", NOW, 365)
    clients = pki.generate_ca("clients", NOW, 365)
    bundle = pki.trust_bundle([new.cert_pem, ca.cert_pem], [clients.cert_pem, ca.cert_pem])
    assert [pki.CertInfo.parse(c).subject_cn for c in pki.split_certs(bundle)] == \
        ["new", "ns/kq cluster CA", "clients"]
    expired = pki.generate_ca("expired", NOW - 400 * DAY, 365)
    kept = pki.trust_bundle([new.cert_pem, expired.cert_pem], now=NOW)
    assert [pki.CertInfo.parse(c).subject_cn for c in pki.split_certs(kept)] == ["new"]
    assert "PRIVATE" not in bundle


def test_a_users_ca_must_match_its_key_and_be_a_ca(ca: pki.KeyPair) -> None:
    other = pki.generate_ca("other", NOW, 365)
    cert, _ = pki.load_ca(other.cert_pem + ca.cert_pem, ca.key_pem)  # the one of the key
    assert pki.fingerprint(cert) == pki.CertInfo.parse(ca.cert_pem).fingerprint
    with pytest.raises(pki.PkiError, match="matches the CA key"):
        pki.load_ca(other.cert_pem, ca.key_pem)
    leaf = pki.issue(ca, "node-0", ["a"], NOW, 30)
    with pytest.raises(pki.PkiError, match="not a CA"):
        pki.load_ca(leaf.cert_pem, leaf.key_pem)
    with pytest.raises(pki.PkiError, match="does not load") as err:
        pki.load_ca(ca.cert_pem, "garbage")
    assert "garbage" not in str(err.value)
