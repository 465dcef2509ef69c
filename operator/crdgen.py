"""Generate the KRaftQuorum CustomResourceDefinition from the pydantic models.

    python -m kraft_operator.crdgen            # writes crds/kraftquorums.kraft.dev.yaml
    python -m kraft_operator.crdgen --check    # exit 1 when the file differs from the models
    python -m kraft_operator.crdgen -          # print to stdout

pydantic's JSON schema is turned into a Kubernetes structural schema: references inlined,
optional fields made plain (absent rather than null), int-or-string unions marked, free-form
objects marked to keep their fields, titles dropped.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml
from kraft_operator import models
from pydantic import BaseModel

CRD_FILE = Path(__file__).resolve().parents[1] / "crds" / f"{models.CRD_NAME}.yaml"
# kubectl's client-side apply stores the whole object in an annotation limited to this size.
ANNOTATION_LIMIT_BYTES = 262_144

_DROP = {"title"}


def _resolve(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_resolve(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        merged = dict(_resolve(target, defs))
        merged.update(_resolve({k: v for k, v in node.items() if k != "$ref"}, defs))
        return _structural(merged)
    if "allOf" in node and len(node["allOf"]) == 1:
        merged = dict(_resolve(node["allOf"][0], defs))
        merged.update(_resolve({k: v for k, v in node.items() if k != "allOf"}, defs))
        return _structural(merged)
    resolved = {}
    for key, value in node.items():
        if key in _DROP:
            continue
        if key == "properties":
            resolved[key] = {name: _resolve(value[name], defs) for name in sorted(value)}
        else:
            resolved[key] = _resolve(value, defs)
    return _structural(resolved)


def _structural(node: dict[str, Any]) -> dict[str, Any]:
    node = {k: v for k, v in node.items() if k not in _DROP}
    options = node.get("anyOf")
    if options is not None:
        rest = [o for o in options if o.get("type") != "null"]
        types = sorted(o.get("type", "") for o in rest)
        if len(rest) == 1:
            del node["anyOf"]
            node = {**rest[0], **node}
            if node.get("default", 0) is None:
                del node["default"]
        elif types == ["integer", "string"]:
            node["anyOf"] = [{"type": "integer"}, {"type": "string"}]
            node["x-kubernetes-int-or-string"] = True
    if node.get("type") == "object" and "properties" not in node:
        extra = node.get("additionalProperties")
        if extra is None or extra is True:
            node.pop("additionalProperties", None)
            node["x-kubernetes-preserve-unknown-fields"] = True
    if node.get("type") == "object" and "properties" in node:
        node.pop("additionalProperties", None)
    return _ordered(node)


_ORDER = ("description", "type", "format", "enum", "pattern", "minimum", "maximum",
          "minLength", "anyOf", "x-kubernetes-int-or-string", "default", "items",
          "additionalProperties", "x-kubernetes-preserve-unknown-fields", "properties",
          "required", "x-kubernetes-list-type", "x-kubernetes-list-map-keys",
          "x-kubernetes-validations")


def _ordered(node: dict[str, Any]) -> dict[str, Any]:
    keys = sorted(node, key=lambda k: (_ORDER.index(k) if k in _ORDER else len(_ORDER), k))
    return {k: node[k] for k in keys}


def model_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The structural OpenAPI v3 schema of one model, descriptions and defaults included."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.pop("$defs", {})
    schema = _resolve(raw, defs)
    if model.__doc__:
        schema["description"] = " ".join(model.__doc__.split())
    return _ordered(schema)


def _condition_column(name: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "type": "string",
        "description": description,
        "jsonPath": f'.status.conditions[?(@.type=="{name}")].status',
    }


def build_crd() -> dict[str, Any]:
    """The CustomResourceDefinition of KRaftQuorum, as a dict."""
    spec_schema = model_schema(models.KRaftQuorumSpec)
    status_schema = model_schema(models.KRaftQuorumStatus)
    root = {
        "description": " ".join((models.KRaftQuorum.__doc__ or "").split()),
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string", "description": "API version of the object."},
            "kind": {"type": "string", "description": "Kind of the object."},
            "metadata": {"type": "object"},
            "spec": spec_schema,
            "status": status_schema,
        },
        "required": ["spec"],
        "x-kubernetes-validations": models.QUORUM_VALIDATIONS,
    }
    columns = [
        _condition_column("Ready", "Every voter caught up and the spec realized"),
        _condition_column("Quorate", "A leader answers for a majority"),
        {"name": "Leader", "type": "integer", "description": "Leader's node id",
         "jsonPath": ".status.leader.id"},
        {"name": "Epoch", "type": "integer", "description": "Leader epoch",
         "jsonPath": ".status.leader.epoch"},
        {"name": "Voters", "type": "integer", "description": "Voters in the quorum's voter set",
         "jsonPath": ".status.replicas"},
        {"name": "Desired", "type": "integer", "description": "Voters the spec asks for",
         "jsonPath": ".spec.replicas"},
        {"name": "Healthy", "type": "integer",
         "description": "Voters caught up with a ready pod", "jsonPath": ".status.healthyVoters"},
        {"name": "High-Watermark", "type": "integer", "description": "High watermark",
         "jsonPath": ".status.highWatermark"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        # -o wide
        {"name": "Cluster-Id", "type": "string", "priority": 1,
         "description": "Cluster id the nodes are formatted with", "jsonPath": ".status.clusterId"},
        {"name": "Operation", "type": "string", "priority": 1,
         "description": "The operation in progress", "jsonPath": ".status.currentOperation.type"},
    ]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": models.CRD_NAME,
            "labels": {"app.kubernetes.io/name": "kraft-operator",
                       "app.kubernetes.io/part-of": "kraft-quorum"},
        },
        "spec": {
            "group": models.GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": models.KIND,
                "listKind": f"{models.KIND}List",
                "plural": models.PLURAL,
                "singular": models.SINGULAR,
                "shortNames": list(models.SHORT_NAMES),
                "categories": ["kraft"],
            },
            "versions": [
                {
                    "name": models.VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": root},
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.replicas",
                            "statusReplicasPath": ".status.replicas",
                            "labelSelectorPath": ".status.selector",
                        },
                    },
                    "additionalPrinterColumns": columns,
                }
            ],
        },
    }


def render() -> str:
    """The CRD file's text."""
    header = "# Generated by `python -m kraft_operator.crdgen` from operator/models.py. Do not edit.\n"
    body = str(yaml.safe_dump(build_crd(), sort_keys=False, width=100, allow_unicode=True))
    return header + body


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kraft_operator.crdgen", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("output", nargs="?", default=str(CRD_FILE),
                        help="file to write, '-' for stdout (default: the repository's crds/)")
    parser.add_argument("--check", action="store_true",
                        help="compare with the file instead of writing it")
    args = parser.parse_args(argv)
    text = render()
    if len(text.encode()) >= ANNOTATION_LIMIT_BYTES:
        sys.stderr.write(f"crdgen: the CRD is {len(text.encode())} bytes, over client-side "
                         f"apply's {ANNOTATION_LIMIT_BYTES}-byte annotation limit\n")
        return 1
    if args.output == "-":
        sys.stdout.write(text)
        return 0
    path = Path(args.output)
    if args.check:
        if not path.exists() or path.read_text() != text:
            sys.stderr.write(f"crdgen: {path} differs from the models; run python -m "
                             "kraft_operator.crdgen\n")
            return 1
        return 0
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
