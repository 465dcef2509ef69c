"""Generate docs/configuration.md: every KRaftQuorum field (from the operator's pydantic models,
through the same structural schema as the CRD), every key `spec.config` accepts (the
ServerProperties model), and every value of the Helm chart (values.schema.json, values.yaml).

    python tools/gen_config_docs.py            # writes docs/configuration.md
    python tools/gen_config_docs.py --check    # exit 1 when the file differs from the models
    python tools/gen_config_docs.py -          # print to stdout
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import typing
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "configuration.md"
CHART = ROOT / "charts" / "kraft-operator"


def _cell(text: Any) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _type(node: dict[str, Any]) -> str:
    if node.get("x-kubernetes-int-or-string"):
        return "integer or string"
    if "type" not in node and node.get("x-kubernetes-preserve-unknown-fields"):
        return "any value"  # its CEL rule, in the Validation column, says which
    kind = node.get("type", "object")
    if kind == "array":
        return f"array of {_type(node.get('items') or {})}"
    if kind == "object" and isinstance(node.get("additionalProperties"), dict):
        return f"map of {_type(node['additionalProperties'])}"
    return str(kind)


def _rules(node: dict[str, Any]) -> str:
    out = []
    for key, label in (("minimum", ">="), ("maximum", "<="), ("minLength", "length >="),
                       ("maxLength", "length <="), ("minItems", "items >="),
                       ("maxItems", "items <=")):
        if key in node:
            out.append(f"{label} {node[key]}")
    if "enum" in node:
        out.append("one of " + ", ".join(f"`{v}`" for v in node["enum"]))
    if "pattern" in node:
        out.append(f"matches `{node['pattern']}`")
    for rule in node.get("x-kubernetes-validations") or []:
        out.append(_cell(rule.get("message") or rule.get("rule")))
    return "; ".join(out)


def _default(node: dict[str, Any]) -> str:
    if "default" not in node or node["default"] in ({}, None):
        return ""
    return f"`{json.dumps(node['default'])}`"


def _rows(node: dict[str, Any], prefix: str) -> list[str]:
    rows = []
    required = set(node.get("required") or [])
    for name, sub in sorted((node.get("properties") or {}).items()):
        path = f"{prefix}.{name}"
        described = _cell(sub.get("description", ""))
        if name in required:
            described = ("**required.** " + described).strip()
        rows.append(f"| `{path}` | {_type(sub)} | {_default(sub)} | {_rules(sub)} | "
                    f"{described} |")
        target = sub.get("items") if sub.get("type") == "array" else sub
        if isinstance(target, dict) and target.get("properties"):
            rows += _rows(target, path + ("[]" if sub.get("type") == "array" else ""))
    return rows


def _table(rows: list[str]) -> list[str]:
    return ["| Field | Type | Default | Validation | Description |",
            "|---|---|---|---|---|", *rows]


def _server_properties() -> list[str]:
    from kraft_operator import render

    from kraft.config.server_properties import OVERRIDE_SECURITY_PREFIXES, ServerProperties

    reserved = set(getattr(render, "RESERVED_KEYS", ()))
    unrendered = tuple(getattr(render.models.ConfigChecker, "UNRENDERED_PREFIXES", ()))
    rows = ["| Property | Type | Default | In spec.config |", "|---|---|---|---|"]
    for name, field in sorted(ServerProperties.model_fields.items(),
                              key=lambda kv: kv[1].alias or kv[0]):
        key = field.alias or name
        annotation = str(field.annotation) if typing.get_args(field.annotation) else \
            getattr(field.annotation, "__name__", str(field.annotation))
        annotation = re.sub(r"\b[a-z_]+(?:\.[a-z_]+)*\.(?=[A-Za-z])", "", annotation)
        default = "" if field.is_required() else f"`{json.dumps(field.default, default=str)}`"
        allowed = "no: set by the operator" if key in reserved else \
            "no: TLS is not issued by the operator yet" \
            if key.startswith(OVERRIDE_SECURITY_PREFIXES) else "yes"
        if key.startswith(unrendered):
            allowed = "no: not rendered by the operator yet"
        rows.append(f"| `{key}` | {_cell(annotation)} | {default} | {allowed} |")
    return rows


def _values_rows(schema: dict[str, Any], values: Any, node: dict[str, Any],
                 prefix: str) -> list[str]:
    rows = []
    if "$ref" in node:
        node = schema["definitions"][node["$ref"].rsplit("/", 1)[1]]
    for name, sub in (node.get("properties") or {}).items():
        path = f"{prefix}{name}"
        resolved = schema["definitions"][sub["$ref"].rsplit("/", 1)[1]] if "$ref" in sub \
            else sub
        value = values.get(name) if isinstance(values, dict) else None
        if resolved.get("properties") and isinstance(value, dict) and name != "spec":
            rows += _values_rows(schema, value, resolved, path + ".")
            continue
        kind = resolved.get("type") or ("string or number" if "oneOf" in resolved else "")
        shown = "" if value is None else f"`{json.dumps(value)}`"
        rows.append(f"| `{path}` | {kind} | {shown} | {_rules(resolved)} | "
                    f"{_cell(resolved.get('description', ''))} |")
    return rows


def render_doc() -> str:
    from kraft_operator import crdgen, models

    spec = crdgen.model_schema(models.KRaftQuorumSpec)
    status = crdgen.model_schema(models.KRaftQuorumStatus)
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    lines = [
        "# Configuration reference",
        "",
        "<!-- Generated by `python tools/gen_config_docs.py` from operator/models.py, the",
        "     ServerProperties model and charts/kraft-operator/values.schema.json. Do not edit:",
        "     tests/shipping/test_docs.py fails when this file differs from them. -->",
        "",
        f"The `{models.KIND}` resource (`{models.API_VERSION}`, plural `{models.PLURAL}`, "
        f"short name `{', '.join(models.SHORT_NAMES)}`), every field with its type, default "
        "and validation, as the CRD in `crds/` serves them (`kubectl explain kq.spec` shows "
        "the same descriptions). docs/operator.md explains what the operator does with them.",
        "",
        "## spec",
        "",
        *_table(_rows(spec, "spec")),
        "",
        "## status",
        "",
        "Written by the operator only; rebuilt from the live quorum on every pass.",
        "",
        *_table(_rows(status, "status")),
        "",
        "## Annotations",
        "",
        "| Annotation | On | Meaning |",
        "|---|---|---|",
        f"| `{models.PAUSE_ANNOTATION}` | KRaftQuorum | `\"true\"`: as `spec.paused` |",
        f"| `{models.RECOVER_ANNOTATION}` | KRaftQuorum | after a quorum loss, the node id to "
        "recover from (docs/operator.md, docs/runbook.md) |",
        f"| `{models.APPROVE_ROLLOUT_ANNOTATION}` | KRaftQuorum | approves a rollout that "
        "waits for approval (condition AwaitingApproval) |",
        f"| `{models.DIRECTORY_ID_ANNOTATION}` | Pod, PersistentVolumeClaim | the node's "
        "directory id (written by the operator) |",
        f"| `{models.NODE_ID_LABEL}` (label) | Pod, PersistentVolumeClaim | the node id |",
        "",
        "## spec.config: server.properties keys",
        "",
        "Values are strings, checked against the `ServerProperties` model (a wrong key or "
        "value is reported as condition Degraded, reason InvalidConfig, and nothing is "
        "changed). Times are milliseconds.",
        "",
        *_server_properties(),
        "",
        "The TLS keys (`ssl.*`) may also be given per listener as "
        "`listener.name.<listener, lower case>.ssl.*`, which wins over the bare key (as in "
        "Kafka). `super.users` and the `kraft.authorizer.*` lists are principals separated "
        "by semicolons (`User:CN=node-1,O=acme;User:CN=admin,O=acme`). What each key does, "
        "the authorization table and how to bring and rotate certificates: docs/security.md. "
        "A node reads them from its own server.properties; the operator does not issue "
        "certificates yet, so it refuses them in `spec.config`.",
        "",
        "## Helm chart values (charts/kraft-operator)",
        "",
        "Checked by `values.schema.json` on `helm install`, `helm upgrade`, `helm template` "
        "and `helm lint`.",
        "",
        "| Key | Type | Default | Validation | Description |",
        "|---|---|---|---|---|",
        *_values_rows(schema, values, schema, ""),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", nargs="?", default=str(OUT), help="output file, or - for stdout")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when the file differs from what the models generate")
    args = parser.parse_args(argv)
    text = render_doc()
    if args.path == "-":
        sys.stdout.write(text)
        return 0
    path = Path(args.path)
    if args.check:
        if not path.exists() or path.read_text() != text:
            print(f"{path} is out of date: run python tools/gen_config_docs.py",
                  file=sys.stderr)
            return 1
        return 0
    path.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
