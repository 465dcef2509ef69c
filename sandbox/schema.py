"""What the API server does with a custom resource's structural schema on every write:
defaulting, pruning of unknown fields, OpenAPI validation and the CEL rules of
`x-kubernetes-validations` (including transition rules on `oldSelf`).

Validation is `jsonschema` over the OpenAPI v3 schema (`nullable` honoured, the
`x-kubernetes-*` keywords otherwise ignored); CEL is `cel-python` (the standard language
and macros: `has`, `size`, `all`, `exists`, ...; not Kubernetes' extension libraries).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import jsonschema

Obj = dict[str, Any]
TOP_LEVEL = ("apiVersion", "kind", "metadata")


def _cel_typed(schema: Obj) -> bool:
    """Whether a real API server gives this schema node a CEL type: a typed scalar, an
    int-or-string (dyn), an object (its untyped properties merely unreachable), but not an
    untyped node, nor a list or map whose items are untyped."""
    kind = schema.get("type")
    if not kind:
        return bool(schema.get("x-kubernetes-int-or-string"))
    if kind == "array":
        items = schema.get("items")
        return isinstance(items, dict) and _cel_typed(items)
    extra = schema.get("additionalProperties")
    if kind == "object" and isinstance(extra, dict) and not schema.get("properties"):
        return _cel_typed(extra)
    return True


def untyped_rules(schema: Obj, path: str = "openAPIV3Schema") -> list[str]:
    """The `x-kubernetes-validations` a real API server refuses when the CRD is written
    ("unable to convert structural schema to CEL declarations"): rules on a node with no CEL
    type (see `_cel_typed`). Each as its field path in the CRD's spec.validation."""
    found = []
    if schema.get("x-kubernetes-validations") and not _cel_typed(schema):
        found.append(f"{path}.x-kubernetes-validations")
    for key, sub in (schema.get("properties") or {}).items():
        if isinstance(sub, dict):
            found += untyped_rules(sub, f"{path}.properties[{key}]")
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            found += untyped_rules(schema[key], f"{path}.{key}")
    return found


def _nullable(schema: Any) -> Any:
    """The schema with OpenAPI's `nullable: true` written as JSON Schema's null type."""
    if isinstance(schema, list):
        return [_nullable(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _nullable(v) for k, v in schema.items()}
    if out.pop("nullable", False) and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


def apply_defaults(schema: Obj, value: Any) -> Any:
    """Fill the `default` of every absent property of every present object, recursively."""
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for key, sub in props.items():
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
            if key in value:
                value[key] = apply_defaults(sub, value[key])
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key in list(value):
                if key not in props:
                    value[key] = apply_defaults(extra, value[key])
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [apply_defaults(schema["items"], v) for v in value]
    return value


def prune(schema: Obj, value: Any, root: bool = False, path: str = "",
          dropped: list[str] | None = None) -> Any:
    """Drop the fields a structural schema does not know (unless it preserves them); their
    paths are appended to `dropped` when given."""
    if isinstance(value, dict):
        if schema.get("x-kubernetes-preserve-unknown-fields") and not schema.get("properties"):
            return value
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key in list(value):
            if root and key in TOP_LEVEL:
                continue
            where = f"{path}.{key}" if path else key
            if key in props:
                value[key] = prune(props[key], value[key], path=where, dropped=dropped)
            elif isinstance(extra, dict):
                value[key] = prune(extra, value[key], path=where, dropped=dropped)
            elif extra is True or schema.get("x-kubernetes-preserve-unknown-fields"):
                continue
            elif props or extra is False or schema.get("type") == "object":
                del value[key]
                if dropped is not None:
                    dropped.append(where)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [prune(schema["items"], v, path=f"{path}[{i}]", dropped=dropped)
                for i, v in enumerate(value)]
    return value


def _walk(schema: Obj, value: Any, old: Any, path: str
          ) -> Iterator[tuple[str, Obj, Any, Any]]:
    """(path, schema, value, old value) for every node that carries CEL rules."""
    if schema.get("x-kubernetes-validations"):
        yield path, schema, value, old
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, sub_value in value.items():
            sub = props.get(key) if key in props else (extra if isinstance(extra, dict)
                                                       else None)
            if sub is None:
                continue
            sub_old = old.get(key) if isinstance(old, dict) else None
            yield from _walk(sub, sub_value, sub_old, f"{path}.{key}" if path else key)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            yield from _walk(schema["items"], item, None, f"{path}[{i}]")


class StructuralSchema:
    """The schema of one served version of a CRD."""

    def __init__(self, openapi: Obj) -> None:
        self.openapi = openapi
        self._validator = jsonschema.Draft7Validator(_nullable(openapi))
        self._programs: dict[str, Any] = {}

    def admit(self, obj: Obj, old: Obj | None, unknown: list[str] | None = None
              ) -> tuple[Obj, list[tuple[str, str]]]:
        """Default and prune `obj` (a copy), then validate it against `old` (None on create);
        returns the object and the (field, problem) list; the pruned fields' paths go to
        `unknown` when given."""
        obj = copy.deepcopy(obj)
        apply_defaults(self.openapi, obj)
        prune(self.openapi, obj, root=True, dropped=unknown)
        problems = []
        for err in sorted(self._validator.iter_errors(obj), key=lambda e: list(e.path)):
            field = ".".join(str(p) for p in err.path) or "<root>"
            problems.append((field, err.message))
        if not problems:
            problems += self._cel(obj, old)
        return obj, problems

    def _program(self, rule: str) -> Any:
        if rule not in self._programs:
            import celpy

            env = celpy.Environment()
            self._programs[rule] = env.program(env.compile(rule))
        return self._programs[rule]

    def _cel(self, obj: Obj, old: Obj | None) -> list[tuple[str, str]]:
        import celpy

        problems = []
        for path, schema, value, old_value in _walk(self.openapi, obj, old, ""):
            for rule in schema["x-kubernetes-validations"]:
                text = rule.get("rule", "")
                if "oldSelf" in text and old_value is None:
                    continue  # a transition rule: only on updates of an existing value
                activation = {"self": celpy.json_to_cel(value)}
                if old_value is not None:
                    activation["oldSelf"] = celpy.json_to_cel(old_value)
                field = path or "<root>"
                if rule.get("fieldPath"):
                    field = (path + rule["fieldPath"]) if path else rule["fieldPath"].lstrip(".")
                try:
                    result = self._program(text).evaluate(activation)
                except Exception as exc:  # a rule the evaluator cannot run is reported
                    problems.append((field, f"rule {text!r} could not be evaluated: {exc}"))
                    continue
                if isinstance(result, Exception) or not bool(result):
                    problems.append((field, rule.get("message") or f"failed rule: {text}"))
        return problems
