"""Each name the package shares with another component stands in one module: the
product's in :mod:`jupyterhub_gpu.contract`, the dev cluster's own (the demo's, kwok's,
the replay's) in :mod:`jupyterhub_gpu.devcluster.contract`; every other module imports
it, and the product's contract never imports the dev cluster's."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import jupyterhub_gpu
from jupyterhub_gpu import contract
from jupyterhub_gpu.devcluster import contract as dev_contract

PACKAGE = Path(jupyterhub_gpu.__file__).parent
#: each registry, as a path under the package
PRODUCT_REGISTRY = Path("contract.py")
DEV_REGISTRY = Path("devcluster", "contract.py")


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
#: (``component`` is also the field of an Event's source that names who reported it;
#: ``admin`` the usage page's role; ``metrics`` a key of Kueue's configuration)
GENERIC = {"KUBESPAWNER_STATE_NAMESPACE", "HUB_COMPONENT", "PROXY_COMPONENT", "SPOT_VALUE",
           "GPU_TAINT_VALUE", "KWOK_NODE_VALUE", "COMPONENT_LABEL", "DEMO_ADMIN",
           "SERVICE_METRICS_PATH"}


def offending(value: str, text: str) -> bool:
    """``text`` is ``value``, or holds it as a name of its own (``value`` is specific
    enough: it has a ``.``, ``/``, ``_`` or ``-``); a path such as
    ``/etc/jupyterhub-gpu/platform.yaml`` is not the label prefix ``jupyterhub-gpu/``."""
    if text == value:
        return True
    if len(value) < 8 or not any(c in value for c in "./_-"):
        return False
    return re.search(r"(?<![A-Za-z0-9/_-])" + re.escape(value), text) is not None


def registry(module) -> dict[str, str]:
    """The specific names a contract module defines (not those it imports)."""
    own = {n.targets[0].id for n in ast.parse(Path(module.__file__).read_text()).body
           if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name)}
    return {name: value for name, value in vars(module).items()
            if name in own and name.isupper() and isinstance(value, str)
            and name not in GENERIC}


CONTRACT = registry(contract)
DEV_CONTRACT = registry(dev_contract)


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


def copies(names: dict[str, str], registry_path: Path) -> list[str]:
    """Where a string of ``names`` is written in the package outside ``registry_path``."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(PACKAGE) == registry_path:
            continue
        for line, text in literals(path):
            found += [f"{path.relative_to(PACKAGE)}:{line}: {name} = {value!r} in {text!r}"
                      for name, value in names.items() if offending(value, text)]
    return found


def test_each_contract_string_stands_only_in_the_contract():
    assert copies(CONTRACT, PRODUCT_REGISTRY) == []


def test_each_dev_cluster_string_stands_only_in_the_dev_clusters_contract():
    assert copies(DEV_CONTRACT, DEV_REGISTRY) == []


def test_the_dev_clusters_contract_has_its_own_names():
    """The demo's and kwok's names are the dev cluster's, and none is the product's too."""
    assert dev_contract.ENV_DEMO_SPEC == "JUPYTERHUB_GPU_SPEC"
    assert dev_contract.RUN_FOR_ANNOTATION == "jupyterhub-gpu/run-for"
    assert set(DEV_CONTRACT).isdisjoint(vars(contract))
    assert set(DEV_CONTRACT.values()).isdisjoint(CONTRACT.values())


def test_the_products_contract_imports_nothing():
    """The notebook image and the hub read it: it may not reach the dev cluster's."""
    tree = ast.parse((PACKAGE / PRODUCT_REGISTRY).read_text())
    assert [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))] == []
