"""Run the demo's JupyterHub as it runs in its pod on AKS: no kubeconfig, only the
in-cluster config.

A pod gets the API server's address in ``KUBERNETES_SERVICE_HOST`` and
``KUBERNETES_SERVICE_PORT``, and its ServiceAccount's token, the cluster CA and its
namespace as files in ``/var/run/secrets/kubernetes.io/serviceaccount``. Here the
hub process runs in a private mount namespace (``unshare``) in which that directory
holds a token for the hub's ServiceAccount (:mod:`.hub_rbac`); the host's own
``/var/run`` is untouched. The hub's managed services (gpu-resume, the culler)
inherit what JupyterHub passes them, as in the pod.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from pathlib import Path
from urllib.parse import urlparse

from jupyterhub_gpu.bundle.namespaces import HubRef
from jupyterhub_gpu.devcluster import demo

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# In the mount namespace: a fresh tmpfs over /var/run's real directory ($1; the host's
# is not changed), the ServiceAccount directory ($2) bind-mounted from $3, then the hub.
_IN_POD = ('set -e; mount -n -t tmpfs tmpfs "$1"; mkdir -p "$2"; mount -n --bind "$3" "$2"; '
           'shift 3; exec "$@"')


def unshare_command() -> list[str]:
    """``unshare`` for a private mount namespace (as root, or in a user namespace)."""
    if shutil.which("unshare") is None:
        raise RuntimeError("the hub-pod tests need `unshare` (util-linux)")
    command = ["unshare", "--mount", "--propagation", "private"]
    return command if os.geteuid() == 0 else [*command, "--map-root-user"]


def can_unshare() -> str | None:
    """None if a private mount namespace with a tmpfs can be made, else why not."""
    probe = subprocess.run([*unshare_command(), "sh", "-c", "mount -n -t tmpfs tmpfs /mnt"],
                           capture_output=True, text=True)
    return None if probe.returncode == 0 else probe.stderr.strip() or "unshare failed"


def service_account_dir(directory: Path, token: str, ca_pem: bytes, hub: HubRef) -> Path:
    """What the kubelet mounts into the hub pod: token, ca.crt, namespace."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "token").write_text(token)
    (directory / "ca.crt").write_bytes(ca_pem)
    (directory / "namespace").write_text(hub.namespace)
    return directory


async def start_hub_in_pod(spec: Path, sa_dir: Path, api_server: str, workdir: Path,
                           url: str, hub_port: int, proxy_api_port: int
                           ) -> asyncio.subprocess.Process:
    """:func:`jupyterhub_gpu.devcluster.demo.start_hub`, but in the pod's environment."""
    server = urlparse(api_server)
    env = {**demo.hub_env(spec, None, url, hub_port, proxy_api_port),
           "KUBERNETES_SERVICE_HOST": server.hostname,
           "KUBERNETES_SERVICE_PORT": str(server.port)}
    hub_dir = workdir / "hub"
    hub_dir.mkdir(parents=True, exist_ok=True)
    with open(workdir / "hub.log", "ab") as log:
        return await asyncio.create_subprocess_exec(
            *unshare_command(), "sh", "-c", _IN_POD, "sh", str(Path("/var/run").resolve()),
            str(SA_DIR), str(sa_dir), *demo.hub_command(),
            cwd=hub_dir, stdout=log, stderr=log, env=env, start_new_session=True,
            preexec_fn=demo.interruptible)
