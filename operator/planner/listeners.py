"""The quorum's controller listeners: the layouts a TLS migration rolls the pods through, and
their record in status.tls (pure; `kraft_operator.planner.tls_migration` decides the steps).

A quorum runs on one controller listener, recorded in status.tls (its name, port and
protocol; a new quorum starts on CONTROLLER, port 9093, with the protocol its spec asks for).
A migration to the other protocol adds a second listener on the other port (CONTROLLER on
9093, CONTROLLER_SSL or CONTROLLER_PLAINTEXT on 9094); its phase says which layout the pods
are rolled to. A node binds every listener of its layout and dials its peers with the first
one's protocol; the authorizer is on only in a layout whose one listener is TLS.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kraft_operator import models
from kraft_operator.observed import (
    DEFAULT_LISTENER,
    PLAINTEXT,
    SSL,
    ControllerListener,
    ListenerState,
    PodState,
    TlsMigration,
)

HOME_PORT = 9093
AWAY_PORT = 9094
HOME_NAME = "CONTROLLER"
PHASES = 3

PHASE_TEXT = {
    0: "the old listener alone",
    1: "both listeners, the old one dialled",
    2: "both listeners, the new one dialled",
    3: "the new listener alone",
}


def listener_for(protocol: str, port: int) -> ControllerListener:
    """The listener of `protocol` on `port`: CONTROLLER on the home port, CONTROLLER_SSL or
    CONTROLLER_PLAINTEXT on the other."""
    name = HOME_NAME if port == HOME_PORT else f"{HOME_NAME}_{protocol}"
    return ControllerListener(name, protocol, port)


def other_listener(steady: ControllerListener) -> ControllerListener:
    """The listener a migration away from `steady` adds: the other protocol, the other port."""
    protocol = PLAINTEXT if steady.ssl else SSL
    return listener_for(protocol, AWAY_PORT if steady.port == HOME_PORT else HOME_PORT)


@dataclass(frozen=True, slots=True)
class Layout:
    """The controller listeners a node binds, the one it dials first, and whether the
    authorizer is on."""

    listeners: tuple[ControllerListener, ...]
    authorizer: bool

    @property
    def dialled(self) -> ControllerListener:
        return self.listeners[0]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(item.name for item in self.listeners)

    @property
    def has_ssl(self) -> bool:
        """Some listener is TLS: the nodes need the PKI's files."""
        return any(item.ssl for item in self.listeners)

    @property
    def key(self) -> str:
        """What the pods' spec hash takes of the layout: "" for one CONTROLLER listener on
        the home port (whatever its protocol, which the trust generation says), so a quorum
        that never migrated keeps the hash it had before migrations existed."""
        if len(self.listeners) == 1 and self.listeners[0].name == HOME_NAME \
                and self.listeners[0].port == HOME_PORT:
            return ""
        return ",".join(item.text() for item in self.listeners) + \
            (";authorizer" if self.authorizer else "")

    def annotation(self) -> str:
        """The pods' kraft.dev/controller-listeners annotation."""
        return ",".join(item.text() for item in self.listeners)


def steady_layout(listener: ControllerListener) -> Layout:
    return Layout((listener,), listener.ssl)


def layout_of(state: ListenerState) -> Layout:
    """The layout the pods are (to be) rolled to."""
    mig = state.migration
    if mig is None:
        return steady_layout(state.steady)
    source, target = state.steady, mig.target
    if mig.phase <= 0:
        return steady_layout(source)
    if mig.phase == 1:
        return Layout((source, target), False)
    if mig.phase == 2:
        return Layout((target, source), False)
    return steady_layout(target)


def parse_listeners(text: str | None) -> tuple[ControllerListener, ...] | None:
    """A pod's kraft.dev/controller-listeners annotation, None when absent or unreadable."""
    if not text:
        return None
    found = [ControllerListener.parse(part) for part in text.split(",")]
    if not found or any(item is None for item in found):
        return None
    return tuple(item for item in found if item is not None)


# --- the record in status.tls -----------------------------------------------------------------


def wanted_ssl(spec: models.KRaftQuorumSpec, status: Mapping[str, Any]) -> bool:
    """spec.tls.enabled when set; unset, what status.tls recorded, and for a quorum with no
    record: on when it is new (no cluster id yet), off for one formatted before the operator
    knew TLS."""
    if spec.tls.enabled is not None:
        return spec.tls.enabled
    recorded = (status.get("tls") or {}).get("enabled")
    if isinstance(recorded, bool):
        return recorded
    return not status.get("clusterId")


def _time(text: object) -> float:
    try:
        return datetime.strptime(str(text), "%Y-%m-%dT%H:%M:%SZ").replace(
            tzinfo=UTC).timestamp()
    except ValueError:
        return 0.0


def listener_state(spec: models.KRaftQuorumSpec, status: Mapping[str, Any]) -> ListenerState:
    """The controller listeners status.tls records, and what the spec wants. A quorum with
    no record runs on CONTROLLER at 9093: TLS when it is new and its spec wants it, else
    PLAINTEXT (one formatted before the operator knew TLS)."""
    wanted = wanted_ssl(spec, status)
    tls = status.get("tls") or {}
    enabled = tls.get("enabled")
    steady_ssl = enabled if isinstance(enabled, bool) else (wanted and not status.get("clusterId"))
    protocol = SSL if steady_ssl else PLAINTEXT
    port = tls.get("port")
    name = tls.get("listener")
    if isinstance(port, int) and isinstance(name, str) and name:
        steady = ControllerListener(name, protocol, port)
    else:
        steady = ControllerListener(HOME_NAME, protocol, HOME_PORT)
    migration = None
    raw = tls.get("migration")
    if isinstance(raw, Mapping):
        target = other_listener(steady)
        phase = raw.get("phase")
        if isinstance(phase, int) and 0 <= phase <= PHASES and raw.get("protocol") == \
                target.protocol:
            migration = TlsMigration(target, phase, _time(raw.get("startedAt")))
    return ListenerState(steady, migration, wanted)


def tls_status(state: ListenerState) -> dict[str, Any]:
    """status.tls's record of the listeners (a None removes the migration)."""
    mig = state.migration
    out: dict[str, Any] = {"enabled": state.steady.ssl, "listener": state.steady.name,
                           "port": state.steady.port, "migration": None}
    if mig is not None:
        out["migration"] = {
            "protocol": mig.target.protocol, "listener": mig.target.name,
            "port": mig.target.port, "phase": mig.phase,
            "layout": layout_of(state).annotation(),
            "message": f"phase {mig.phase} of {PHASES}: {PHASE_TEXT[mig.phase]}",
            "startedAt": datetime.fromtimestamp(mig.started_at, UTC).strftime(
                "%Y-%m-%dT%H:%M:%SZ")}
    return out


# --- what the operator dials ----------------------------------------------------------------


def dial_listener(layout: Layout, pods: Iterable[PodState],
                  steady: ControllerListener = DEFAULT_LISTENER) -> ControllerListener:
    """The listener the operator's own admin calls use: the first of `layout` that every
    live pod binds (mid-roll some pods still run the layout before), else the layout's
    first. A pod without the annotation binds `steady`."""
    bound = [{item.name for item in (p.listeners or (steady,))}
             for p in pods if not p.deleting]
    for item in layout.listeners:
        if all(item.name in names for names in bound):
            return item
    return layout.dialled
