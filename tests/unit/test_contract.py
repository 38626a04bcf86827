"""Each name the package shares with another component stands in one module,
:mod:`jupyterhub_gpu.contract`; every other module imports it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import jupyterhub_gpu
from jupyterhub_gpu import contract

PACKAGE = Path(jupyterhub_gpu.__file__).parent


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def literals(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every string literal in ``path`` but its docstrings; an
    f-string counts as its literal parts."""
    tree = ast.parse(path.read_text(), str(path))
    skip = _docstrings(tree)
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in skip]


#: ordinary words that are also a contract value: too common to search for
#: (``component`` is also the field of an Event's source that names who reported it)
GENERIC = {"KUBESPAWNER_STATE_NAMESPACE", "HUB_COMPONENT", "PROXY_COMPONENT", "SPOT_VALUE",
           "GPU_TAINT_VALUE", "KWOK_NODE_VALUE", "COMPONENT_LABEL"}


def offending(value: str, text: str) -> bool:
    """``text`` is ``value``, or holds it as a name of its own (``value`` is specific
    enough: it has a ``.``, ``/``, ``_`` or ``-``); a path such as
    ``/etc/jupyterhub-gpu/platform.yaml`` is not the label prefix ``jupyterhub-gpu/``."""
    if text == value:
        return True
    if len(value) < 8 or not any(c in value for c in "./_-"):
        return False
    return re.search(r"(?<![A-Za-z0-9/_-])" + re.escape(value), text) is not None


CONTRACT = {name: value for name, value in vars(contract).items()
            if name.isupper() and isinstance(value, str) and name not in GENERIC}


def test_the_contract_has_the_names_of_the_issue():
    assert contract.MANAGED_LABEL == "jupyterhub-gpu/managed"
    assert contract.KUEUE_API_VERSION == "kueue.x-k8s.io/v1beta2"
    assert contract.SINGLEUSER_COMPONENT == "singleuser-server"
    assert len(CONTRACT) > 60


def test_the_scanner_finds_a_copy_in_code_and_in_an_f_string(tmp_path):
    source = tmp_path / "m.py"
    source.write_text('"""kueue.x-k8s.io/v1beta2 in a docstring is fine."""\n'
                      'A = "kueue.x-k8s.io/v1beta2"\n'
                      'B = f"component=singleuser-server,{A}"\n')
    found = [(line, text) for line, text in literals(source)
             if any(offending(v, text) for v in CONTRACT.values())]
    assert found == [(2, "kueue.x-k8s.io/v1beta2"), (3, "component=singleuser-server,")]


def test_each_contract_string_stands_only_in_the_contract():
    copies = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "contract.py" and path.parent == PACKAGE:
            continue
        for line, text in literals(path):
            copies += [f"{path.relative_to(PACKAGE)}:{line}: {name} = {value!r} in {text!r}"
                       for name, value in CONTRACT.items() if offending(value, text)]
    assert copies == []
