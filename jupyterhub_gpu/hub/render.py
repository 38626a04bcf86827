"""Render the exact pod a profile creates, offline, with the real KubeSpawner code.

KubeSpawner loads a kubeconfig when it is constructed (it never calls the API then).
With no cluster configured we give it a placeholder that points at an unroutable
address, so ``render`` works on a laptop; no request is ever sent. (The kubernetes
client reads ``KUBECONFIG`` when it is first imported, so this runs before that.)
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..spec.grant import OptionsRejected

_PLACEHOLDER_KUBECONFIG = {
    "apiVersion": "v1", "kind": "Config", "current-context": "offline",
    "clusters": [{"name": "offline", "cluster": {"server": "https://127.0.0.1:9"}}],
    "contexts": [{"name": "offline", "context": {"cluster": "offline", "user": "offline"}}],
    "users": [{"name": "offline", "user": {"token": "offline"}}],
}


@dataclass
class _Group:
    name: str


@dataclass
class OfflineUser:
    """The attributes of a JupyterHub user that building a pod reads."""

    name: str
    groups: list[_Group]
    id: int = 1
    url: str = field(init=False)

    def __post_init__(self) -> None:
        self.url = f"/user/{self.name}/"


@dataclass
class OfflineHub:
    public_host: str = ""
    url: str = "http://hub:8081/hub/"
    base_url: str = "/hub/"
    api_url: str = "http://hub:8081/hub/api"


def _ensure_kubeconfig() -> None:
    if os.environ.get("KUBERNETES_SERVICE_HOST") or os.environ.get("KUBECONFIG"):
        return
    if (Path.home() / ".kube" / "config").exists():
        return
    path = Path(tempfile.mkdtemp(prefix="jupyterhub-gpu-render-")) / "kubeconfig"
    path.write_text(yaml.safe_dump(_PLACEHOLDER_KUBECONFIG))
    os.environ["KUBECONFIG"] = str(path)


async def render_pod(platform_file: str, user: str, groups: list[str], profile: str,
                     config: Any = None) -> dict:
    """The pod manifest GPUSpawner would create for ``user`` starting ``profile``, under
    the hub's traitlets ``config`` if given (e.g. what the z2jh chart sets).

    Raises :class:`OptionsRejected` when the user may not start that profile.
    """
    _ensure_kubeconfig()  # before kubernetes_asyncio is imported: it reads KUBECONFIG then
    from kubernetes_asyncio.client import ApiClient

    from ..spec.grant import UserRef, authorize
    from .spawner import GPUSpawner
    from ..spec.source import SpecSource

    options = {"profile": profile}
    authorize(SpecSource.shared(platform_file).current(), UserRef(user, frozenset(groups)),
              options)

    spawner = GPUSpawner(user=OfflineUser(user, [_Group(g) for g in groups]),
                         hub=OfflineHub(), platform_file=platform_file,
                         **({"config": config} if config is not None else {}))
    spawner.user_options = options
    spawner.apply_profile(options)
    async with ApiClient() as client:
        pod = client.sanitize_for_serialization(await spawner.get_pod_manifest())
    pod["metadata"]["namespace"] = spawner.namespace  # where KubeSpawner creates it
    await spawner.api.api_client.close()  # the (unused) client KubeSpawner opened
    return pod


__all__ = ["OptionsRejected", "render_pod"]
