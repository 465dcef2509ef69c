"""The property docs say the defaults the model has: wherever a property's docstring in
`kraft.config.server_properties` calls a value "the default", that value is its default."""

from __future__ import annotations

import ast
import inspect
import itertools
import re

from kraft.config import server_properties
from kraft.config.server_properties import ServerProperties

_CALLED_DEFAULT = re.compile(r"(?:^|[\s`(])`?([\w.+-]+)`?:? \(the default\)")


def _docstrings() -> dict[str, str]:
    """Field name -> the docstring under it in the class body."""
    tree = ast.parse(inspect.getsource(server_properties))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef)
               and n.name == ServerProperties.__name__)
    out: dict[str, str] = {}
    body = cls.body
    for node, after in itertools.pairwise(body):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)):
            out[node.target.id] = after.value.value
    return out


def _as_text(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def test_the_value_a_docstring_calls_the_default_is_the_default() -> None:
    docs = _docstrings()
    checked = 0
    wrong = []
    for name, doc in docs.items():
        for said in _CALLED_DEFAULT.findall(" ".join(doc.split())):
            checked += 1
            default = _as_text(ServerProperties.model_fields[name].default)
            if said != default:
                wrong.append(f"{ServerProperties.model_fields[name].alias}: the docstring calls "
                             f"{said!r} the default, the model's is {default!r}")
    assert not wrong, "\n".join(wrong)
    assert checked >= 2  # kraft.lane.follower and kraft.lane.leader at least
