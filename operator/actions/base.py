"""What every executor gets (`Env`) and gives back (`Outcome`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kraft_operator.kube import Kube
from kraft_operator.observed import Observed, PodState
from kraft_operator.render import QuorumRef


@dataclass(frozen=True, slots=True)
class Env:
    """One reconcile's context for running an action."""

    kube: Kube
    ref: QuorumRef
    body: dict[str, Any]
    observed: Observed
    admin_timeout_s: float = 10.0
    tls: Any = None
    """The operator's client TLS for kraft.admin (a quorum with TLS), else None."""

    def pod_of(self, node_id: int) -> PodState | None:
        return next((p for p in self.observed.pods if p.node_id == node_id and not p.deleting),
                    None)

    def bootstrap(self) -> list[str]:
        """Controller addresses of every node that has a pod (for kraft.admin), on the
        listener every live pod binds (`QuorumRef.dial`: mid-migration, pods run two
        layouts)."""
        ids = sorted({p.node_id for p in self.observed.pods})
        port = self.ref.dial(self.observed.pods).port
        return [self.ref.controller_address(i, port) for i in ids]

    @property
    def admin_tls(self) -> Any:
        """The operator's client TLS when the listener it dials is TLS, else None."""
        return self.tls if self.ref.dial(self.observed.pods).ssl else None


@dataclass(frozen=True, slots=True)
class Outcome:
    """What running an action did: `done` (carried out, or found already done), the Event
    reason and message, and whether it was a failure worth a Warning."""

    done: bool
    reason: str
    message: str
    warning: bool = False
