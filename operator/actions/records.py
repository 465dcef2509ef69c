"""Records: write the directory id a node's process reports onto its pod and its claim.

A volume formatted `--no-initial-controllers` gets its directory id from `kraft format`; the
operator learns it from the node itself (see `kraft_operator.observe`) and keeps it on the
pod and the claim, so it is known while the process is down."""

from __future__ import annotations

from kraft_operator import models, render
from kraft_operator.actions.base import Outcome
from kraft_operator.kube import Kube, NotFound
from kraft_operator.observe import Correction


async def apply(kube: Kube, namespace: str, correction: Correction) -> Outcome | None:
    """Patch one record; an Event-worthy outcome when a disk turned out replaced or a
    joining node's id became known, None when the object is gone."""
    plural = "pods" if correction.kind == "pod" else "persistentvolumeclaims"
    patch = {"metadata": {"annotations": {models.DIRECTORY_ID_ANNOTATION: correction.new,
                                          render.DIRECTORY_CONFIRMED_ANNOTATION: "true"}}}
    try:
        await kube.patch("v1", plural, namespace, correction.name, patch)
    except NotFound:
        return None
    if correction.kind != "pvc":
        return None
    if correction.replaced:
        return Outcome(True, "DiskReplaced",
                       f"node {correction.node_id}'s volume {correction.name} was emptied and "
                       f"re-formatted: new directory id {correction.new} (was {correction.old})",
                       warning=True)
    if correction.old != correction.new:
        return Outcome(True, "DirectoryIdReported",
                       f"node {correction.node_id}'s volume {correction.name} holds directory "
                       f"id {correction.new}")
    return None
