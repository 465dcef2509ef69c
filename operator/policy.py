"""The operator's own settings about what a KRaftQuorum may ask for and who may reach its pods.

Whoever may write a KRaftQuorum picks its pods' image and service account: left open, that is
anyone's code running with any service account of the namespace. The allow-lists close it:

- `allowed_images`: glob patterns (`fnmatch`, `*` matches any run of characters, `/` and `:`
  included) that `spec.image` must match, e.g. `registry.example.com/kraft-quorum:*` and
  `registry.example.com/kraft-quorum@sha256:*`. A pattern without a wildcard matches that
  image exactly (never as a prefix: `repo/kraft` would otherwise admit `repo/kraft-evil`).
- `allowed_service_accounts`: glob patterns that `spec.podTemplate.serviceAccountName` must
  match when it is set (unset, the pods run as the namespace's `default` account, always
  allowed).

None (the setting absent) allows anything; an empty list allows nothing (for the service
account: nothing but the default). A refused spec becomes a Degraded condition (reason
ImageNotAllowed or ServiceAccountNotAllowed) and a Warning Event; no object is created or
changed until the spec or the settings change.

`operator_namespace` and `operator_pod_labels` say where the operator's own pods are, so each
quorum's NetworkPolicy can open the controller port to them and no other pod.

Settings come from the command line or the environment (`from_env`); the chart sets the
environment from its values.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from kraft_operator import models

ENV_ALLOWED_IMAGES = "KRAFT_OPERATOR_ALLOWED_IMAGES"
ENV_ALLOWED_SERVICE_ACCOUNTS = "KRAFT_OPERATOR_ALLOWED_SERVICE_ACCOUNTS"
ENV_POD_LABELS = "KRAFT_OPERATOR_POD_LABELS"
DEFAULT_POD_LABELS = {"app.kubernetes.io/name": "kraft-operator"}
"""The operator pods' labels when nothing says otherwise: the chart's (and the sandbox's)
`app.kubernetes.io/name`."""

IMAGE_NOT_ALLOWED = "ImageNotAllowed"
SERVICE_ACCOUNT_NOT_ALLOWED = "ServiceAccountNotAllowed"


def parse_list(text: str | None) -> tuple[str, ...] | None:
    """A comma- or newline-separated list; None stays None (the setting absent)."""
    if text is None:
        return None
    return tuple(item.strip() for item in text.replace("\n", ",").split(",") if item.strip())


def parse_labels(text: str | None) -> dict[str, str]:
    """`k=v,k2=v2` as a dict; a malformed entry is a ValueError naming it."""
    labels: dict[str, str] = {}
    for item in parse_list(text) or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"operator pod label {item!r} is not key=value")
        labels[key.strip()] = value.strip()
    return labels


def _matches(value: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(value, p) for p in patterns)


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a spec is refused: the Degraded reason and a message naming the field."""

    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class OperatorPolicy:
    """See the module docstring."""

    allowed_images: tuple[str, ...] | None = None
    allowed_service_accounts: tuple[str, ...] | None = None
    operator_namespace: str = "default"
    operator_pod_labels: Mapping[str, str] = field(
        default_factory=lambda: dict(DEFAULT_POD_LABELS))

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, *,
                 operator_namespace: str = "default") -> OperatorPolicy:
        env = os.environ if env is None else env
        labels = parse_labels(env.get(ENV_POD_LABELS)) or dict(DEFAULT_POD_LABELS)
        return cls(parse_list(env.get(ENV_ALLOWED_IMAGES)),
                   parse_list(env.get(ENV_ALLOWED_SERVICE_ACCOUNTS)),
                   operator_namespace, labels)

    def refusal(self, spec: models.KRaftQuorumSpec) -> Refusal | None:
        """The first allow-list the spec breaks, or None."""
        if self.allowed_images is not None and not _matches(spec.image, self.allowed_images):
            allowed = ", ".join(self.allowed_images) or "none"
            return Refusal(IMAGE_NOT_ALLOWED,
                           f"spec.image {spec.image!r} is not in the operator's allowed images "
                           f"({allowed}); no pod is created or changed")
        account = spec.pod_template.service_account_name
        if (account is not None and account != "default"
                and self.allowed_service_accounts is not None
                and not _matches(account, self.allowed_service_accounts)):
            allowed = ", ".join(self.allowed_service_accounts) or "only the default"
            return Refusal(SERVICE_ACCOUNT_NOT_ALLOWED,
                           f"spec.podTemplate.serviceAccountName {account!r} is not in the "
                           f"operator's allowed service accounts ({allowed}); no pod is "
                           f"created or changed")
        return None
