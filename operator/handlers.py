"""The kopf handlers and the periodic passes: a pass of a KRaftQuorum every interval (the
operator's own loop per object, see `Reconciler.watch`) and at once when one is created,
changed or found at start or when one of its pods or claims changes (`Reconciler.poke`), each
running one level-based reconcile pass (`Reconciler.reconcile`):

    claim the object (`kraft_operator.claims`): a pass of an operator that does not hold the
    claim only says so (a log line, one Event, the condition OperatorConflict) and stops
      -> observe (objects, the pods' own reports, a live DescribeQuorum)
      -> write the records the nodes reported (directory ids)
      -> plan (the pure planner: one next safe action)
      -> make the standing objects match (Services, ConfigMap, PodDisruptionBudget)
      -> write status (rebuilt from what was observed; currentOperation before the action;
         skipped when nothing in it changed)
      -> run the one action -> a Kubernetes Event for it, structured logs, metrics.

Passes of one resource never overlap (a lock per resource: the periodic pass and kopf's change
handlers of one object run concurrently). A call the API server refuses (403: a verb missing from the
operator's RBAC) is reported, never silent: the condition Forbidden naming the verb and the
resource, a Warning Event and an error log line (`Reconciler._report_refusal`). A bad spec (one
the models refuse, or a spec.config the ServerProperties model refuses) is reported as a
condition and nothing is touched;
`spec.paused` (or the pause annotation) only observes and reports.

Deleting a KRaftQuorum needs nothing of the operator: everything it made is owned by the object
(the garbage collector deletes it), except the claims `storage.onDelete: Retain` keeps. So no
handler is a kopf timer, daemon or deletion handler, and kopf puts no finalizer on a
KRaftQuorum (it removes the one an older operator's timer made it put there the next time it
handles the object): the object goes at once, with or without a running operator.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import re
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import pydantic
from kraft_operator import models, observe, render
from kraft_operator.actions import Env, Outcome, execute, records, standing
from kraft_operator.actions import tls as tls_action
from kraft_operator.claims import Claim, Claims
from kraft_operator.kube import ApiError, Conflict, Forbidden, Kube, NotFound
from kraft_operator.metrics import Metrics
from kraft_operator.planner import Plan, ReportDegraded, Wait, plan
from kraft_operator.policy import OperatorPolicy
from kraft_operator.voter_events import voter_set_changes

log = logging.getLogger("kraft_operator")

Obj = dict[str, Any]

CONFLICT = "OperatorConflict"
"""The condition an operator that does not hold the object's claim writes (True, reason
CLAIMED_ELSEWHERE); the holder's status writes carry it as stored, and turn it False once the
operator it names as refused holds the claim itself."""
CLAIMED_ELSEWHERE = "ClaimedByAnotherOperator"
_REFUSED = re.compile(r"^operator (\S+) ")

FORBIDDEN = "Forbidden"
"""The condition (and the Warning Event's reason) of a pass the API server refused a call of
(403: the operator's ServiceAccount lacks a verb its RBAC should grant): True naming the verb
and resource, until a pass runs without a refusal (then False, reason Permitted)."""
_CANNOT = re.compile(r'cannot (\S+) resource "([^"]+)"(?: in API group "([^"]*)")?')


def _now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _conditions(previous: list[Obj], wanted: list[tuple[str, str, str, str]],
                generation: int) -> list[Obj]:
    """Conditions with lastTransitionTime kept while a condition's status is unchanged."""
    prev = {c.get("type"): c for c in previous or []}
    now = _now_rfc3339()
    out = []
    for type_, status, reason, message in wanted:
        old = prev.get(type_)
        since = old.get("lastTransitionTime") if old and old.get("status") == status else None
        out.append({"type": type_, "status": status, "reason": reason, "message": message,
                    "lastTransitionTime": since or now, "observedGeneration": generation})
    return out


def steady_caught_up_times(previous: Obj, status: Obj) -> None:
    """Keep each replica's stored lastCaughtUpTime while it stays caught up.

    The leader moves a caught-up replica's last-caught-up time at every fetch, so copying it
    would change the status at every pass. A caught-up replica's time is kept as stored (it
    says since when it has been caught up, to the pass); a new time is taken when the replica
    is new or its caughtUp changes, and while it lags the leader's time is shown as it is (it
    no longer moves: it says when the replica was last caught up)."""
    for key in ("voters", "observers"):
        before = {(r.get("id"), r.get("directoryId")): r for r in previous.get(key) or []}
        for replica in status.get(key) or []:
            old = before.get((replica.get("id"), replica.get("directoryId")))
            if (old is not None and replica.get("caughtUp") and old.get("caughtUp")
                    and old.get("lastCaughtUpTime") and "lastCaughtUpTime" in replica):
                replica["lastCaughtUpTime"] = old["lastCaughtUpTime"]


def status_unchanged(previous: Obj, patch: Obj) -> bool:
    """Whether merging this status patch would change nothing stored (a None removes; an
    object merges key by key, as a JSON merge patch does)."""
    for key, value in patch.items():
        stored = previous.get(key)
        if value is None:
            if stored is not None:
                return False
        elif isinstance(value, dict) and isinstance(stored, dict):
            if not status_unchanged(stored, value):
                return False
        elif stored != value:
            return False
    return True


class Reconciler:
    """Runs reconcile passes for any number of KRaftQuorums (see the module docstring)."""

    def __init__(self, kube: Kube, metrics: Metrics | None = None, *, identity: str = "",
                 admin_timeout_s: float = 10.0, chain: int = 1,
                 claims: Claims | None = None, policy: OperatorPolicy | None = None) -> None:
        """`chain`: after an action that was carried out, up to this many passes run at once
        (each observing again) instead of waiting for the next trigger, so creating objects
        one per pass does not take one interval each. `claims`: this operator's claims
        on the objects (by default with the identity and the Lease timings' defaults).
        `policy`: the allow-lists and where the operator's pods are (`kraft_operator.policy`;
        by default nothing is refused)."""
        self.policy = policy or OperatorPolicy()
        self.kube = kube
        self.chain = max(1, chain)
        self._progressed = False
        self.metrics = metrics or Metrics()
        self.identity = identity or f"kraft-operator-{uuid.uuid4().hex[:6]}"
        self.claims = claims or Claims(kube, self.identity)
        self.admin_timeout_s = admin_timeout_s
        self._locks: dict[str, asyncio.Lock] = {}
        self._warned: set[tuple[str, int, str]] = set()
        self._told: dict[str, tuple[str, str]] = {}  # the holder each refusal was told for
        self._conflicts: set[str] = set()  # objects this operator wrote OperatorConflict on
        self._known: set[str] = set()
        self._periodic: dict[str, asyncio.Task[None]] = {}
        self._forbidden: dict[str, str] = {}  # the last refusal of each object's passes
        self._poked: set[str] = set()  # objects with a pass coming for a pod or claim change
        self._told_forbidden: set[tuple[str, str]] = set()  # (uid, message) told by Event

    # ------------------------------------------------------------------ periodic passes

    def watch(self, namespace: str, name: str, event_type: str | None,
              interval_s: float) -> None:
        """Follow one KRaftQuorum's watch events: a loop of passes every `interval_s` runs
        while it exists (kopf's timers would need a finalizer on the object)."""
        key = f"{namespace}/{name}"
        if event_type == "DELETED":
            self._known.discard(key)
            self.claims.forget(namespace, name)
            return
        self._known.add(key)
        task = self._periodic.get(key)
        if task is None or task.done():
            self._periodic[key] = asyncio.get_running_loop().create_task(
                self._every(namespace, name, interval_s), name=f"reconcile {key}")

    async def _every(self, namespace: str, name: str, interval_s: float) -> None:
        key = f"{namespace}/{name}"
        while True:
            await asyncio.sleep(interval_s)
            if key not in self._known:
                self._periodic.pop(key, None)
                return
            await self.reconcile(namespace, name, "timer")

    def poke(self, namespace: str, name: str, delay_s: float = 0.2) -> None:
        """A pod or claim of this KRaftQuorum changed (a watch event): a pass soon, instead
        of at the next interval. The events of a burst (a pod's status written several
        times as it starts) within `delay_s` make one pass; one that arrives during a pass
        makes one more after it."""
        key = f"{namespace}/{name}"
        if key not in self._known or key in self._poked:
            return
        self._poked.add(key)
        asyncio.get_running_loop().create_task(self._poked_pass(namespace, name, delay_s),
                                               name=f"poked {key}")

    async def _poked_pass(self, namespace: str, name: str, delay_s: float) -> None:
        key = f"{namespace}/{name}"
        try:
            await asyncio.sleep(delay_s)
        finally:
            self._poked.discard(key)
        if key in self._known:
            await self.reconcile(namespace, name, "watch")

    async def stop(self) -> None:
        """On a clean stop: end the periodic passes, release the claims and withdraw the
        OperatorConflict conditions this operator wrote (it no longer runs)."""
        tasks = list(self._periodic.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._periodic.clear()
        await self.claims.release()
        for key in sorted(self._conflicts):
            namespace, name = key.split("/", 1)
            with contextlib.suppress(ApiError, OSError):
                body = await self.kube.get(models.API_VERSION, models.PLURAL, namespace, name)
                previous = (body.get("status") or {}).get("conditions") or []
                if any(c.get("type") == CONFLICT and _refused(c) == self.identity
                       for c in previous):
                    await self.kube.patch(models.API_VERSION, models.PLURAL, namespace, name, {
                        "metadata": {"resourceVersion": body["metadata"]["resourceVersion"]},
                        "status": {"conditions": [c for c in previous
                                                  if c.get("type") != CONFLICT]}},
                        subresource="status")
                    log.info("event=conflict_withdrawn quorum=%s identity=%s", key,
                             self.identity)

    async def reconcile(self, namespace: str, name: str, trigger: str = "timer") -> str | None:
        """One pass; returns the name of the action it ran (None when it could not run)."""
        key = f"{namespace}/{name}"
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            action = None
            for _ in range(self.chain):
                started = time.monotonic()
                self._progressed = False
                try:
                    action = await self._pass(namespace, name, trigger)
                except Forbidden as exc:  # not a wedge: a condition, an Event, a log line
                    self.metrics.reconciles.labels("error").inc()
                    self.metrics.errors.labels("forbidden").inc()
                    await self._report_refusal(namespace, name, exc.message)
                    return None
                except Exception as exc:  # the next pass starts over from what it observes
                    self.metrics.reconciles.labels("error").inc()
                    self.metrics.errors.labels("reconcile").inc()
                    log.warning("event=reconcile_failed quorum=%s trigger=%s error=%r", key,
                                trigger, f"{type(exc).__name__}: {exc}", exc_info=True)
                    return None
                self.metrics.reconciles.labels("ok").inc()
                self.metrics.duration.observe(time.monotonic() - started)
                if not self._progressed:
                    break
                trigger = "progress"
            return action

    # ------------------------------------------------------------------ one pass

    async def _pass(self, namespace: str, name: str, trigger: str) -> str | None:
        kube = self.kube
        try:
            body = await kube.get(models.API_VERSION, models.PLURAL, namespace, name)
        except NotFound:
            return None
        meta = body.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            return None
        claim = await self.claims.take(namespace, name, meta.get("uid") or "")
        if not claim.held:
            await self._claimed_elsewhere(body, claim)
            return CLAIMED_ELSEWHERE
        generation = int(meta.get("generation") or 1)
        try:
            ref = render.QuorumRef.from_body(body)
        except pydantic.ValidationError as exc:
            await self._refuse_spec(body, exc)
            return "InvalidSpec"
        problems = render.config_problems(ref.spec.config)
        pki_state = await self._pki(ref, body)
        seen = await observe.gather(kube, ref, body, tls=pki_state.client)
        if pki_state.enabled:
            seen = dataclasses.replace(seen, observed=dataclasses.replace(
                seen.observed, tls_generation=pki_state.generation,
                tls_problem=pki_state.problem))
        # it sees the reported directory ids already
        result = plan(ref.spec, seen.observed, self.policy)
        action = result.action
        paused = result.condition("ReconciliationPaused").status == "True"
        refused = self.policy.refusal(ref.spec)
        touch = not problems and not paused and refused is None
        if touch:
            for correction in seen.corrections:
                recorded = await records.apply(kube, namespace, correction)
                if recorded is not None:
                    await self._event(body, recorded)
            in_use = {p.node_id for p in seen.observed.pods} | \
                {p.node_id for p in seen.observed.pvcs}
            node = getattr(action, "node_id", None)
            if isinstance(node, int):
                in_use.add(node)
            changed = await standing.ensure(kube, ref, sorted(in_use), self.policy)
            changed += await standing.claim_owners(kube, ref, list(seen.claims))
            for what in changed:
                log.info("event=standing_object quorum=%s/%s change=%r", namespace, name, what)
        key = f"{namespace}/{name}"
        # this pass's refused reads, else the refusal that failed the last pass (an action's)
        refusal = seen.forbidden[0] if seen.forbidden else self._forbidden.get(key)
        status = self._status(body, ref, result, seen, problems, refusal)
        for message in seen.forbidden:
            await self._tell_forbidden(body, message)
        # the listeners' record is the planner's (a TLS migration's phase); the PKI adds
        # what it serves (its CAs' dates, a CA renewal's step)
        status["tls"] = {**{k: v for k, v in (pki_state.status or {}).items()
                            if k != "enabled"}, **status.get("tls", {})}
        stored = body.get("status") or {}
        if not status_unchanged(stored, status):
            # only a change a user would see: an identical patch would still be a new
            # resourceVersion and a new row in `kubectl get -w`
            await kube.patch(models.API_VERSION, models.PLURAL, namespace, name,
                             {"status": status}, subresource="status")
            # told once it is on record: a pass that fails before tells it next time
            for change in voter_set_changes(stored, status):
                log.info("event=voter_set_changed quorum=%s/%s reason=%s message=%r",
                         namespace, name, change.reason, change.message)
                await self._event(body, change)
        for warning in result.warnings:
            if (ref.uid, generation, warning) not in self._warned:
                self._warned.add((ref.uid, generation, warning))
                await self._event(body, Outcome(True, "SpecWarning", warning, warning=True))
        outcome: Outcome | None = None
        if not self.claims.held(namespace, name):  # not renewed in time: another may act
            log.warning("event=claim_lost quorum=%s/%s action=%s skipped", namespace, name,
                        type(action).__name__)
            return None
        if touch or isinstance(action, Wait | ReportDegraded):
            env = Env(kube, ref, body, seen.observed, self.admin_timeout_s, pki_state.client)
            outcome = await execute(action, env)
        kind = type(action).__name__
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in status["conditions"])
        healed = self.metrics.track_ready(ref.uid, ready)
        fields = " ".join(f"{k}={v}" for k, v in vars_of(action).items())
        log.info("event=reconcile quorum=%s/%s trigger=%s generation=%d action=%s %s "
                 "outcome=%s ready=%s message=%r", namespace, name, trigger, generation, kind,
                 fields, "none" if outcome is None else ("done" if outcome.done else "pending"),
                 ready, outcome.message if outcome else result.message)
        if healed is not None:
            log.info("event=healed quorum=%s/%s seconds=%.1f", namespace, name, healed)
        if outcome is not None:
            self.metrics.actions.labels(kind, outcome.reason,
                                        "done" if outcome.done else
                                        ("failed" if outcome.warning else "pending")).inc()
            if outcome.warning and not outcome.done:
                self.metrics.errors.labels("action").inc()
            if not isinstance(action, ReportDegraded) or self._degraded_changed(body, status):
                await self._event(body, outcome)
            self._progressed = outcome.done and not isinstance(action, ReportDegraded)
        if self._forbidden.pop(key, None) is not None:  # the pass got through this time
            self._progressed = True  # the next pass at once: it writes what holds now
        if not seen.forbidden:
            self._told_forbidden = {t for t in self._told_forbidden if t[0] != ref.uid}
        return kind

    def _status(self, body: Obj, ref: render.QuorumRef, result: Plan,
                seen: observe.Observation, problems: list[str],
                refusal: str | None = None) -> Obj:
        status: Obj = dict(result.status_fields)
        status["selector"] = ref.selector
        generation = int(body["metadata"].get("generation") or 1)
        wanted = []
        for c in result.conditions:
            message = c.message
            if c.type == "Quorate" and c.status != "True" and seen.quorum_error:
                message = f"{message}: {seen.quorum_error}"
            if c.type == "Degraded" and problems and c.reason == "InvalidConfig":
                message = "spec.config: " + "; ".join(problems)
            wanted.append((c.type, c.status, c.reason, message))
        stored = body.get("status") or {}
        previous = stored.get("conditions") or []
        if refusal is not None:
            wanted.append((FORBIDDEN, "True", FORBIDDEN, forbidden_message(refusal)))
        elif any(c.get("type") == FORBIDDEN for c in previous):
            wanted.append((FORBIDDEN, "False", "Permitted",
                           "the API server permitted every call of the last pass"))
        status["conditions"] = _conditions(previous, wanted, generation) + \
            self._carried_conflict(previous, generation)
        steady_caught_up_times(stored, status)
        return status

    async def _pki(self, ref: render.QuorumRef, body: Obj) -> tls_action.TlsState:
        """The quorum's PKI for this pass (kraft_operator.actions.tls): Secrets made to match
        unless the quorum is paused."""
        if not ref.tls:
            return tls_action.TlsState(False)
        pods = await self.kube.list("v1", "pods", ref.namespace, label_selector=ref.selector)
        paused = ref.spec.paused or ((body.get("metadata") or {}).get("annotations") or {}).get(
            models.PAUSE_ANNOTATION, "").lower() == "true"
        return await tls_action.ensure(self.kube, ref, pods, write=not paused)

    @staticmethod
    def _degraded_changed(body: Obj, status: Obj) -> bool:
        def degraded(conds: list[Obj]) -> tuple[Any, ...]:
            c = next((c for c in conds if c.get("type") == "Degraded"), {})
            return (c.get("status"), c.get("reason"), c.get("message"))

        before = degraded((body.get("status") or {}).get("conditions") or [])
        return before != degraded(status["conditions"])

    async def _refuse_spec(self, body: Obj, exc: pydantic.ValidationError) -> None:
        """A spec the models refuse: conditions say why; nothing else is touched."""
        meta = body["metadata"]
        problems = "; ".join(
            f"spec.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        generation = int(meta.get("generation") or 1)
        previous = (body.get("status") or {}).get("conditions") or []
        conditions = _conditions(previous, [
            ("Ready", "False", "InvalidSpec", problems),
            ("Progressing", "False", "InvalidSpec", ""),
            ("Degraded", "True", "InvalidSpec", problems),
        ], generation)
        keep = [c for c in previous
                if c.get("type") not in ("Ready", "Progressing", "Degraded", CONFLICT)]
        keep += self._carried_conflict(previous, generation)
        await self.kube.patch(models.API_VERSION, models.PLURAL, meta.get("namespace"),
                              meta["name"], {"status": {"conditions": keep + conditions}},
                              subresource="status")
        key = (meta.get("uid", ""), generation, problems)
        if key not in self._warned:
            self._warned.add(key)
            await self._event(body, Outcome(False, "InvalidSpec", problems, warning=True))
        log.warning("event=invalid_spec quorum=%s/%s problems=%r", meta.get("namespace"),
                    meta["name"], problems)

    def _carried_conflict(self, previous: list[Obj], generation: int) -> list[Obj]:
        """The OperatorConflict condition another operator wrote, as stored (this operator,
        the holder, never fights over it); False once the operator it says was refused is
        this one, holding the claim now."""
        stored = next((c for c in previous if c.get("type") == CONFLICT), None)
        if stored is None:
            return []
        if stored.get("status") == "True" and _refused(stored) == self.identity:
            return _conditions([stored], [(CONFLICT, "False", "ClaimHeld",
                                           f"operator {self.identity} holds the claim")],
                               generation)
        return [stored]

    async def _claimed_elsewhere(self, body: Obj, claim: Claim) -> None:
        """Another operator holds the claim: say so (a log line and a Warning Event once per
        holder, the OperatorConflict condition) and touch nothing else."""
        meta = body["metadata"]
        key = f"{meta.get('namespace')}/{meta['name']}"
        if not claim.holder:  # taken meanwhile by one not seen yet: the next pass knows
            return
        message = (f"operator {self.identity} does nothing to this KRaftQuorum: operator "
                   f"{claim.holder} holds its claim (Lease {claim.lease}); run one operator")
        told = (meta.get("uid", ""), claim.holder)
        if self._told.get(key) != told:
            self._told[key] = told
            log.warning("event=claimed_by_another_operator quorum=%s identity=%s holder=%s "
                        "lease=%s action=none", key, self.identity, claim.holder, claim.lease)
            await self._event(body, Outcome(False, CLAIMED_ELSEWHERE, message, warning=True))
        previous = (body.get("status") or {}).get("conditions") or []
        stored = next((c for c in previous if c.get("type") == CONFLICT), {})
        if (stored.get("status"), stored.get("reason"), stored.get("message")) == \
                ("True", CLAIMED_ELSEWHERE, message):
            return
        generation = int(meta.get("generation") or 1)
        conditions = [c for c in previous if c.get("type") != CONFLICT] + _conditions(
            [stored] if stored else [], [(CONFLICT, "True", CLAIMED_ELSEWHERE, message)],
            generation)
        try:  # only over the status it read: the holder's write in between wins
            await self.kube.patch(models.API_VERSION, models.PLURAL, meta.get("namespace"),
                                  meta["name"], {
                                      "metadata": {"resourceVersion": meta["resourceVersion"]},
                                      "status": {"conditions": conditions}},
                                  subresource="status")
        except (Conflict, NotFound):
            return
        self._conflicts.add(key)

    async def _report_refusal(self, namespace: str, name: str, message: str) -> None:
        """A pass the API server refused a call of (403): the Forbidden condition on the
        object (when its status may still be written), a Warning Event and an error log line
        naming the verb and the resource, so a missing RBAC rule is seen, not a silent
        wedge. Passes go on as usual; the first that runs without a refusal clears it."""
        key = f"{namespace}/{name}"
        self._forbidden[key] = message
        try:
            body = await self.kube.get(models.API_VERSION, models.PLURAL, namespace, name)
        except NotFound:
            return
        except (ApiError, OSError) as exc:
            log.error("event=forbidden quorum=%s %s condition=unwritten error=%r", key,
                      _verb_resource(message), str(exc))
            return
        await self._tell_forbidden(body, message)
        previous = (body.get("status") or {}).get("conditions") or []
        stored = next((c for c in previous if c.get("type") == FORBIDDEN), {})
        text = forbidden_message(message)
        if (stored.get("status"), stored.get("message")) == ("True", text):
            return
        generation = int(body["metadata"].get("generation") or 1)
        conditions = [c for c in previous if c.get("type") != FORBIDDEN] + _conditions(
            [stored] if stored else [], [(FORBIDDEN, "True", FORBIDDEN, text)], generation)
        try:
            await self.kube.patch(models.API_VERSION, models.PLURAL, namespace, name,
                                  {"status": {"conditions": conditions}}, subresource="status")
        except (ApiError, OSError) as exc:  # the status itself may be what is refused
            log.error("event=forbidden quorum=%s %s condition=unwritten error=%r", key,
                      _verb_resource(message), str(exc))

    async def _tell_forbidden(self, body: Obj, message: str) -> None:
        """The error log line of a refusal at every pass that meets it; its Warning Event
        once per object and message (until a pass runs without a refusal)."""
        meta = body["metadata"]
        key = f"{meta.get('namespace')}/{meta['name']}"
        log.error("event=forbidden quorum=%s %s message=%r", key, _verb_resource(message),
                  message)
        told = (meta.get("uid", ""), message)
        if told not in self._told_forbidden:
            self._told_forbidden.add(told)
            await self._event(body, Outcome(False, FORBIDDEN, forbidden_message(message),
                                            warning=True))

    async def _event(self, body: Obj, outcome: Outcome) -> None:
        """A Kubernetes Event about the KRaftQuorum."""
        meta = body["metadata"]
        now = _now_rfc3339()
        event = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta.get("namespace")},
            "involvedObject": {"apiVersion": models.API_VERSION, "kind": models.KIND,
                               "name": meta["name"], "namespace": meta.get("namespace"),
                               "uid": meta.get("uid")},
            "reason": outcome.reason, "message": outcome.message[:1024],
            "type": "Warning" if outcome.warning else "Normal",
            # the identity in the component too: `kubectl describe` shows only the component
            # ("From"), and two operators' Events must be told apart there
            "source": {"component": f"kraft-operator/{self.identity}"},
            "reportingComponent": "kraft-operator", "reportingInstance": self.identity,
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }
        try:
            await self.kube.create("v1", "events", meta.get("namespace"), event)
        except (ApiError, OSError) as exc:
            self.metrics.errors.labels("event").inc()
            log.warning("event=event_post_failed reason=%s error=%r", outcome.reason, str(exc))


def forbidden_message(message: str) -> str:
    """What the Forbidden condition and Event say of a refusal: the verb and the resource
    the operator may not use, then the API server's own message."""
    match = _CANNOT.search(message)
    if match is None:
        return f"the API server refused a call of the operator: {message}"
    verb, resource, group = match.group(1), match.group(2), match.group(3) or ""
    named = f"{resource}.{group}" if group else resource
    return (f"the operator may not {verb} {named}: grant it in its ClusterRole or Role "
            f"(the API server says: {message})")


def _verb_resource(message: str) -> str:
    match = _CANNOT.search(message)
    if match is None:
        return "verb=? resource=?"
    group = match.group(3) or ""
    return f"verb={match.group(1)} resource={match.group(2)}{'.' + group if group else ''}"


def _refused(condition: Obj) -> str | None:
    """The operator an OperatorConflict condition says does nothing."""
    match = _REFUSED.match(condition.get("message") or "")
    return match.group(1) if match else None


def vars_of(action: object) -> dict[str, Any]:
    """An action's fields, for a log line."""
    slots = getattr(type(action), "__slots__", ())
    return {s: getattr(action, s) for s in slots if s not in ("initial_voters",)}


def register(registry: Any, reconciler: Reconciler, interval_s: float = 5.0) -> None:
    """Add the handlers to a kopf registry: an immediate pass when a KRaftQuorum is created,
    changed (spec or annotations) or found at start, or when one of its pods or claims
    changes (`Reconciler.poke`), and its watch events followed so that a pass runs every
    `interval_s` while it exists (no timer: see the module docstring)."""
    import kopf

    group, version, plural = models.GROUP, models.VERSION, models.PLURAL

    @kopf.on.startup(registry=registry)
    def _configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.posting.level = logging.WARNING
        settings.watching.server_timeout = 120
        settings.watching.client_timeout = 150
        # kopf's own bookkeeping in annotations: the CRD's status schema has no room for it.
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
            prefix="kopf.kraft.dev")
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
            prefix="kopf.kraft.dev", key="last-handled-configuration")
        # the pods and claims watched are the quorums' only, selected by the API server
        quorums = (f"app.kubernetes.io/managed-by={render.MANAGED_BY},"
                   f"app.kubernetes.io/name={render.APP_NAME}")
        for plural_ in ("pods", "persistentvolumeclaims"):
            settings.watching.label_selectors["", "v1", plural_] = quorums

    @kopf.on.login(registry=registry)
    def _login(**kwargs: Any) -> Any:
        return kopf.login_via_client(**kwargs)

    @kopf.on.event(group, version, plural, registry=registry)
    async def _seen(type: str | None, namespace: str, name: str, **_: Any) -> None:
        reconciler.watch(namespace, name, type, interval_s)

    # A change of a quorum's pod or claim (a pod Ready or not, its Node failed, a claim
    # bound or gone) runs a pass of its KRaftQuorum at once rather than at the next interval.
    owned = {"app.kubernetes.io/managed-by": render.MANAGED_BY,
             "app.kubernetes.io/name": render.APP_NAME,
             "app.kubernetes.io/instance": kopf.PRESENT}

    @kopf.on.event("", "v1", "pods", labels=owned, registry=registry)
    async def _pod_seen(namespace: str, labels: Any, **_: Any) -> None:
        reconciler.poke(namespace, labels["app.kubernetes.io/instance"])

    @kopf.on.event("", "v1", "persistentvolumeclaims", labels=owned, registry=registry)
    async def _claim_seen(namespace: str, labels: Any, **_: Any) -> None:
        reconciler.poke(namespace, labels["app.kubernetes.io/instance"])

    @kopf.on.create(group, version, plural, registry=registry)
    async def _created(namespace: str, name: str, **_: Any) -> None:
        await reconciler.reconcile(namespace, name, "create")

    @kopf.on.update(group, version, plural, registry=registry)
    async def _updated(namespace: str, name: str, **_: Any) -> None:
        await reconciler.reconcile(namespace, name, "update")

    @kopf.on.resume(group, version, plural, registry=registry)
    async def _resumed(namespace: str, name: str, **_: Any) -> None:
        await reconciler.reconcile(namespace, name, "resume")
