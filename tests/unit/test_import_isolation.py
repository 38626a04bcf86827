"""What a hub loads: ``import jupyterhub_gpu.hub.spawner`` (the ``gpu`` spawner entry
point) brings in nothing of the dev cluster, nor the devcluster extra's requirements."""

from __future__ import annotations

import json
import subprocess
import sys


def _loaded_after(statement: str) -> list[str]:
    """The modules a fresh interpreter holds after running ``statement``."""
    code = f"import json, sys\n{statement}\nprint(json.dumps(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    return json.loads(result.stdout.splitlines()[-1])


def test_the_spawner_loads_no_dev_cluster_module():
    loaded = _loaded_after("import jupyterhub_gpu.hub.spawner")
    assert "jupyterhub_gpu.hub.spawner" in loaded  # the check looks where it should
    assert [m for m in loaded if m.startswith("jupyterhub_gpu.devcluster")] == []
    assert "jupyterhub_gpu.devcommands" not in loaded


def test_the_spawner_loads_neither_cryptography_nor_the_sync_kubernetes_client():
    loaded = _loaded_after("import jupyterhub_gpu.hub.spawner")
    assert [m for m in loaded if m.split(".")[0] in ("cryptography", "kubernetes")] == []


def test_the_dev_cluster_does_load_them():
    """The check can fail: the dev cluster's ``up`` does bring both in."""
    loaded = _loaded_after("import jupyterhub_gpu.devcluster.cluster")
    assert {"cryptography", "kubernetes"} <= {m.split(".")[0] for m in loaded}
