"""The quorum's PKI in Secrets (`kraft_operator.pki` decides, this keeps): made to match on
every pass of a quorum with TLS, before it is observed (the operator's own admin calls need
its client certificate) and planned (a pod's spec hash takes the trust generation).

Secrets, each owned by the KRaftQuorum (the garbage collector deletes them with it):

- `<name>-cluster-ca` (`ca.key`) and `<name>-cluster-ca-cert` (`ca.crt`, the current CA, and
  `ca-<generation>.crt` for a previous one still trusted): the CA that signs the nodes;
- `<name>-clients-ca` and `<name>-clients-ca-cert`: the CA that signs client certificates
  (the operator's own);
- `<pod>-certs` per node (`node.pem`: its key and chain; `truststore.pem`: the CAs it
  trusts), mounted read-only at /etc/kraft-tls;
- `<name>-operator-certs` (`operator.pem`, `truststore.pem`): the operator's client
  certificate, which it reads back on each pass.

A CA renewal (a generated CA in its renewal window) is three steps, each rolled (pods one
at a time, the leader last, by the planner's rollout, because the trust generation is part of
the pods' spec hash): (1) a new CA, trusted beside the old; once every pod runs with that
trust, (2) the nodes' certificates re-issued by the new CA; once every pod runs with them,
(3) the old CA dropped. A leaf renewal alone changes no spec hash: the node reloads a changed
file for its next connection, once the kubelet has updated the Secret's files.

Nothing here logs, returns or reports key material: the log lines name Secrets and
certificate subjects, fingerprints and dates.
"""

from __future__ import annotations

import base64
import datetime
import logging
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kraft_operator import models, pki, render
from kraft_operator.kube import Conflict, Kube, NotFound

log = logging.getLogger("kraft_operator.tls")

Obj = dict[str, Any]
GENERATION_ANNOTATION = "kraft.dev/ca-cert-generation"
"""On a CA's cert Secret: the current CA's generation (0, 1, ...), as Strimzi's
`strimzi.io/ca-cert-generation`; a previous CA still trusted is `ca-<generation>.crt`."""
ISSUER_ANNOTATION = "kraft.dev/issuer-fingerprint"
CA_KEYS = ("ca.crt", "ca.key")
TLS_KEYS = ("tls.crt", "tls.key")


@dataclass(frozen=True, slots=True)
class TlsState:
    """What one pass's PKI gives the rest of the pass."""

    enabled: bool
    generation: str = ""
    """The trust generation a pod's spec hash takes ("" without TLS)."""
    problem: str | None = None
    """Why the PKI could not be made (the quorum goes Degraded, no pod is created)."""
    client: Callable[[], ssl.SSLContext] | None = None
    """The operator's client TLS for kraft.admin (None without TLS)."""
    status: Obj | None = None
    changes: tuple[str, ...] = field(default=())


@dataclass
class _Ca:
    """One CA as stored: the signing pair, every certificate trusted, its generation."""

    signer: pki.KeyPair
    trusted: list[str]
    generation: int
    renewing: bool
    """An older CA is still trusted beside the signer."""
    user_supplied: bool = False


class _Unwritten(Exception):
    """Material that is missing while nothing may be written (a paused quorum)."""


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _data(obj: Obj | None) -> dict[str, str]:
    if obj is None:
        return {}
    out = {}
    for key, value in (obj.get("data") or {}).items():
        try:
            out[key] = base64.b64decode(value).decode()
        except (ValueError, UnicodeDecodeError):
            continue
    return out


def _rfc3339(when: datetime.datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


class _Store:
    """The quorum's Secrets: read once, written when what is wanted differs."""

    def __init__(self, kube: Kube, ref: render.QuorumRef, write: bool = True) -> None:
        self.kube = kube
        self.ref = ref
        self.write = write
        self.changes: list[str] = []

    async def get(self, name: str) -> Obj | None:
        try:
            return await self.kube.get("v1", "secrets", self.ref.namespace, name)
        except NotFound:
            return None

    async def put(self, name: str, have: Obj | None, data: Mapping[str, str],
                  annotations: Mapping[str, str] | None = None, why: str = "") -> None:
        """Create the Secret or replace its data (stale keys removed); nothing while the
        quorum is paused (`write` False)."""
        if not self.write:
            return
        meta = self.ref._meta(name, self.ref.labels, annotations=annotations)
        encoded = {k: _b64(v) for k, v in data.items()}
        if have is None:
            try:
                await self.kube.create("v1", "secrets", self.ref.namespace, {
                    "apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": meta,
                    "data": encoded})
            except Conflict:
                return  # made meanwhile: the next pass reads it
            self.changes.append(f"created Secret {name} {why}".strip())
            return
        stale = {k: None for k in (have.get("data") or {}) if k not in encoded}
        patch: Obj = {"metadata": {"labels": meta["labels"],
                                   "ownerReferences": meta["ownerReferences"],
                                   "annotations": dict(annotations or {}),
                                   "resourceVersion": have["metadata"].get("resourceVersion")},
                      "data": {**stale, **encoded}}
        try:
            await self.kube.patch("v1", "secrets", self.ref.namespace, name, patch)
        except (Conflict, NotFound):
            return
        self.changes.append(f"updated Secret {name} {why}".strip())


async def _generated_ca(store: _Store, kind: str, key_name: str, cert_name: str,
                        now: datetime.datetime, advance: bool) -> _Ca:
    """A CA the operator generates: made when missing, renewed in its window (the old one
    stays trusted until `advance` says its successor has taken over)."""
    tls = store.ref.spec.tls
    key_obj, cert_obj = await store.get(key_name), await store.get(cert_name)
    key_pem = _data(key_obj).get("ca.key")
    certs = _data(cert_obj)
    generation = int(((cert_obj or {}).get("metadata", {}).get("annotations") or {})
                     .get(GENERATION_ANNOTATION, "0") or 0)
    cn = f"{store.ref.namespace}/{store.ref.name} {kind} CA"
    if (key_pem is None or "ca.crt" not in certs) and not store.write:
        raise _Unwritten(f"the {kind} CA is not made yet")
    if key_pem is None or "ca.crt" not in certs:
        pair = pki.generate_ca(cn, now, tls.validity_days)
        await store.put(key_name, key_obj, {"ca.key": pair.key_pem},
                        {GENERATION_ANNOTATION: "0"})
        await store.put(cert_name, cert_obj, {"ca.crt": pair.cert_pem},
                        {GENERATION_ANNOTATION: "0"}, why=f"({kind} CA generated)")
        log.info("event=ca_generated quorum=%s/%s ca=%s fingerprint=%s", store.ref.namespace,
                 store.ref.name, kind, pki.CertInfo.parse(pair.cert_pem).fingerprint[:16])
        return _Ca(pair, [pair.cert_pem], 0, False)
    signer = pki.KeyPair(certs["ca.crt"], key_pem)
    pki.load_ca(signer.cert_pem, signer.key_pem)  # a key that does not match: PkiError
    old = {k: v for k, v in certs.items() if k != "ca.crt"}
    info = pki.CertInfo.parse(signer.cert_pem)
    if old and advance:  # step 3: the new CA signs everything; the old one goes
        await store.put(cert_name, cert_obj, {"ca.crt": signer.cert_pem},
                        {GENERATION_ANNOTATION: str(generation)},
                        why=f"({kind} CA renewal: the old CA is no longer trusted)")
        log.info("event=ca_retired quorum=%s/%s ca=%s generation=%d", store.ref.namespace,
                 store.ref.name, kind, generation)
        return _Ca(signer, [signer.cert_pem], generation, False)
    if not old and pki.needs_renewal(info, now, tls.renewal_days):  # step 1
        pair = pki.generate_ca(cn, now, tls.validity_days)
        generation += 1
        await store.put(key_name, key_obj, {"ca.key": pair.key_pem},
                        {GENERATION_ANNOTATION: str(generation)})
        await store.put(cert_name, cert_obj,
                        {"ca.crt": pair.cert_pem, f"ca-{generation - 1}.crt": signer.cert_pem},
                        {GENERATION_ANNOTATION: str(generation)},
                        why=f"({kind} CA renewal: the new CA trusted beside the old)")
        log.info("event=ca_renewed quorum=%s/%s ca=%s generation=%d old_not_after=%s",
                 store.ref.namespace, store.ref.name, kind, generation,
                 _rfc3339(info.not_after))
        return _Ca(pair, [pair.cert_pem, signer.cert_pem], generation, True)
    return _Ca(signer, [signer.cert_pem, *old.values()], generation, bool(old))


async def _user_ca(store: _Store, name: str) -> _Ca:
    """A CA the user keeps (spec.tls.caSecretName): read, never renewed."""
    data = _data(await store.get(name))
    for cert_key, key_key in (CA_KEYS, TLS_KEYS):
        if cert_key in data and key_key in data:
            cert, _ = pki.load_ca(data[cert_key], data[key_key])
            signer_pem = pki.split_certs(data[cert_key])
            mine = pki.fingerprint(cert)
            signer = next(p for p in signer_pem if pki.CertInfo.parse(p).fingerprint == mine)
            return _Ca(pki.KeyPair(signer, data[key_key]), signer_pem, 0, False, True)
    if not data:
        raise pki.PkiError(f"spec.tls.caSecretName: Secret {name} is not found (or empty)")
    raise pki.PkiError(f"spec.tls.caSecretName: Secret {name} has neither ca.crt with ca.key "
                       "nor tls.crt with tls.key")


def _settled(ref: render.QuorumRef, pods: list[Obj], generation: str) -> bool:
    """Every wanted node's pod runs, ready, with the spec hash of this trust generation."""
    want = ref.spec_hash(generation)
    current = set()
    for p in pods:
        meta = p.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            continue
        ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                    for c in (p.get("status") or {}).get("conditions") or [])
        if (meta.get("annotations") or {}).get(models.POD_SPEC_HASH_ANNOTATION) != want \
                or not ready:
            return False
        label = (meta.get("labels") or {}).get(models.NODE_ID_LABEL)
        if label is not None and label.isdigit():
            current.add(int(label))
    return set(range(ref.spec.replicas)) <= current


def generation_of(node_bundle: str, issuers: set[str]) -> str:
    """The trust generation: the CAs the nodes trust and those their certificates are
    signed by. A change of either rolls the pods."""
    return "tls-" + pki.digest(node_bundle, *sorted(issuers))


def client_tls(operator: pki.KeyPair, truststore: str) -> Callable[[], ssl.SSLContext]:
    """The operator's client context (kraft.admin's `tls`), from PEM in memory."""
    from kraft.config.security import ssl_settings
    from kraft.config.tls import TlsContexts

    contexts = TlsContexts(ssl_settings({
        "ssl.keystore.type": "PEM", "ssl.keystore.key": operator.key_pem,
        "ssl.keystore.certificate.chain": operator.cert_pem,
        "ssl.truststore.type": "PEM", "ssl.truststore.certificates": truststore}))
    return contexts.client_context


async def ensure(kube: Kube, ref: render.QuorumRef, pods: list[Obj],
                 now: datetime.datetime | None = None, *, write: bool = True) -> TlsState:
    """Make the quorum's PKI Secrets match (see the module docstring); the state the pass
    goes on with. A quorum without TLS gets nothing (Secrets of an earlier TLS stay).
    `write` False (a paused quorum): only read what is stored."""
    if not ref.tls:
        return TlsState(False)
    tls = ref.spec.tls
    if tls.issuer_ref is not None:
        return TlsState(True, problem="spec.tls.issuerRef: cert-manager issuers are not "
                        "supported yet; remove it (the operator issues the certificates) or "
                        "set spec.tls.caSecretName")
    now = now or datetime.datetime.now(datetime.UTC)
    store = _Store(kube, ref, write)
    try:
        return await _ensure(store, ref, pods, now)
    except pki.PkiError as exc:
        return TlsState(True, problem=str(exc), changes=tuple(store.changes))
    except _Unwritten:
        return TlsState(True, status={"enabled": True})


async def _node_secrets(store: _Store, ref: render.QuorumRef,
                        ids: list[int]) -> dict[int, Obj | None]:
    return {i: await store.get(ref.node_secret(i)) for i in ids}


async def _ensure(store: _Store, ref: render.QuorumRef, pods: list[Obj],
                  now: datetime.datetime) -> TlsState:
    tls = ref.spec.tls
    ids = render.node_ids(ref, (int(lbl) for p in pods if (lbl := (
        (p.get("metadata") or {}).get("labels") or {}).get(models.NODE_ID_LABEL, "")).isdigit()))
    nodes = await _node_secrets(store, ref, ids)
    operator_obj = await store.get(ref.operator_secret)

    # what the pods run with now: the trust generation before this pass changes anything
    def stored_generation() -> str:
        bundles = {_data(s).get(render.TRUSTSTORE_FILE, "") for s in nodes.values()}
        issuers = {((s or {}).get("metadata", {}).get("annotations") or {})
                   .get(ISSUER_ANNOTATION, "") for s in nodes.values()}
        return generation_of("".join(sorted(bundles)), issuers)

    settled = _settled(ref, pods, stored_generation())
    if tls.ca_secret_name:
        cluster = clients = await _user_ca(store, tls.ca_secret_name)
    else:
        # step 3 is taken only once every node's certificate is the new CA's
        cluster_fp = None
        cert_obj = await store.get(ref.cluster_ca_cert_secret)
        if cert_obj is not None:
            cur = _data(cert_obj).get("ca.crt")
            cluster_fp = pki.CertInfo.parse(cur).fingerprint if cur else None
        nodes_moved = cluster_fp is not None and all(
            ((s or {}).get("metadata", {}).get("annotations") or {}).get(ISSUER_ANNOTATION)
            == cluster_fp for s in nodes.values())
        cluster = await _generated_ca(store, "cluster", ref.cluster_ca_secret,
                                      ref.cluster_ca_cert_secret, now, settled and nodes_moved)
        clients_cur = _data(await store.get(ref.clients_ca_cert_secret)).get("ca.crt")
        op_cert = _data(operator_obj).get("operator.pem", "")
        operator_moved = bool(clients_cur) and pki.signed_by(op_cert, clients_cur or "")
        clients = await _generated_ca(store, "clients", ref.clients_ca_secret,
                                      ref.clients_ca_cert_secret, now,
                                      settled and operator_moved)
    node_bundle = pki.trust_bundle(cluster.trusted, clients.trusted)
    if clients is cluster:
        node_bundle = pki.trust_bundle(cluster.trusted)
    signer_fp = pki.CertInfo.parse(cluster.signer.cert_pem).fingerprint
    # every pod runs with the trust bundle wanted now (a new CA among it): what step 2 waits on
    on_bundle = settled and all(_data(s).get(render.TRUSTSTORE_FILE) == node_bundle
                                for s in nodes.values())
    for node_id, have in nodes.items():
        data = _data(have)
        cn = pki.node_cn(node_id)
        sans = ref.host_names(node_id)
        keystore = data.get(render.KEYSTORE_FILE, "")
        leaf = keystore[keystore.find("-----BEGIN CERTIFICATE"):] if keystore else ""
        current = pki.leaf_current(leaf, cluster.signer.cert_pem, cn, sans, now,
                                   tls.renewal_days) if leaf else False
        # step 2 of a renewal: a certificate of the old CA, still trusted, waits for the roll
        # that makes every node trust the new one
        old_but_trusted = (not current and cluster.renewing and not on_bundle and leaf
                           and any(pki.signed_by(leaf, c) for c in cluster.trusted[1:])
                           and pki.leaf_current(leaf, _signer_of(leaf, cluster.trusted), cn,
                                                sans, now, 0))  # in its window, still valid
        if old_but_trusted:
            issuer = ((have or {}).get("metadata", {}).get("annotations") or {}).get(
                ISSUER_ANNOTATION, "")
            if data.get(render.TRUSTSTORE_FILE) != node_bundle:
                await store.put(ref.node_secret(node_id), have, {**data, render.TRUSTSTORE_FILE:
                                                                 node_bundle},
                                {ISSUER_ANNOTATION: issuer}, why="(trust bundle)")
            continue
        if current and data.get(render.TRUSTSTORE_FILE) == node_bundle:
            continue
        if current:
            pair_text = keystore
            why = "(trust bundle)"
        else:
            pair = pki.issue(cluster.signer, cn, sans, now, tls.validity_days)
            pair_text = pair.key_pem.strip() + "\n" + pair.cert_pem.strip() + "\n" + \
                cluster.signer.cert_pem.strip() + "\n"
            info = pki.CertInfo.parse(pair.cert_pem)
            why = f"(certificate {cn} issued, valid until {_rfc3339(info.not_after)})"
            log.info("event=certificate_issued quorum=%s/%s subject=CN=%s not_after=%s "
                     "issuer_fingerprint=%s", ref.namespace, ref.name, cn,
                     _rfc3339(info.not_after), signer_fp[:16])
        await store.put(ref.node_secret(node_id), have,
                        {render.KEYSTORE_FILE: pair_text, render.TRUSTSTORE_FILE: node_bundle},
                        {ISSUER_ANNOTATION: signer_fp}, why=why)
    nodes = await _node_secrets(store, ref, ids)

    # the operator's client certificate: re-issued by a renewed clients CA at once (the nodes
    # trusted the new clients CA in step 1 of its renewal only once settled)
    op = _data(operator_obj)
    op_pem = op.get("operator.pem", "")
    op_leaf = op_pem[op_pem.find("-----BEGIN CERTIFICATE"):] if op_pem else ""
    cluster_bundle = pki.trust_bundle(cluster.trusted)
    op_current = bool(op_leaf) and pki.leaf_current(op_leaf, clients.signer.cert_pem,
                                                     pki.OPERATOR_CN, [], now, tls.renewal_days)
    if not op_current and clients.renewing and not on_bundle and op_leaf and \
            pki.leaf_current(op_leaf, _signer_of(op_leaf, clients.trusted), pki.OPERATOR_CN,
                             [], now, 0):
        op_current = True  # the nodes do not trust the new clients CA yet
    if not op_current or op.get(render.TRUSTSTORE_FILE) != cluster_bundle:
        if not op_current:
            pair = pki.issue(clients.signer, pki.OPERATOR_CN, [], now, tls.validity_days,
                             server=False)
            op_pem = pair.keystore_pem
            log.info("event=certificate_issued quorum=%s/%s subject=CN=%s not_after=%s",
                     ref.namespace, ref.name, pki.OPERATOR_CN,
                     _rfc3339(pki.CertInfo.parse(pair.cert_pem).not_after))
        await store.put(ref.operator_secret, operator_obj,
                        {"operator.pem": op_pem, render.TRUSTSTORE_FILE: cluster_bundle},
                        why="(operator client certificate)")
    op_leaf = op_pem[op_pem.find("-----BEGIN CERTIFICATE"):]
    op_pair = pki.KeyPair(op_leaf, op_pem[:op_pem.find("-----BEGIN CERTIFICATE")])

    generation = stored_generation()
    step = None
    if cluster.renewing or clients.renewing:
        moved = all(((s or {}).get("metadata", {}).get("annotations") or {})
                    .get(ISSUER_ANNOTATION) == signer_fp for s in nodes.values())
        step = ("certificates re-issued by the new CA; the old CA is dropped once every pod "
                "runs with them") if moved else \
            "the new CA is trusted beside the old; the certificates are re-issued once every " \
            "pod trusts it"
    status = {"enabled": True,
              "clusterCaNotAfter": _rfc3339(pki.CertInfo.parse(cluster.signer.cert_pem)
                                            .not_after),
              "clientsCaNotAfter": _rfc3339(pki.CertInfo.parse(clients.signer.cert_pem)
                                            .not_after),
              **({"caRenewal": step} if step else {})}  # absent, as a merge patch leaves it
    for change in store.changes:
        log.info("event=pki_changed quorum=%s/%s change=%r", ref.namespace, ref.name, change)
    return TlsState(True, generation, None, client_tls(op_pair, cluster_bundle), status,
                    tuple(store.changes))


def _signer_of(leaf: str, trusted: list[str]) -> str:
    return next((c for c in trusted if pki.signed_by(leaf, c)), "")
