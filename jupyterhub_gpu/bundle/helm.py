"""The part of the z2jh Helm values that follows from the spec:
``helm-values/generated.yaml``, passed after ``helm-values/values.yaml``.

* ``singleuser.startTimeout``: JupyterHub applies the spawner's ``start_timeout``
  before GPUSpawner has loaded the user's profile, so the chart-wide value must not
  cut short any profile's wait: it is the largest
  :func:`~jupyterhub_gpu.spec.boot.spawn_patience` of all profiles (the time a user
  may sit in the Kueue queue, then a new node of the profile's slowest pool, its
  ``startTimeout`` and a minute's margin). Shorter profiles are bounded by their own
  patience, not by this value.
* ``scheduling.userScheduler.pluginConfig``: z2jh's user-scheduler packs pods onto
  the busiest node (``MostAllocated``) so that idle nodes empty and the autoscaler
  removes them. Its default scores cpu and memory only; here every GPU resource the
  pools advertise is scored too, so time-sliced shares and MIG slices fill one node
  before the next is started.
* ``prePuller``: z2jh's continuous image puller (a DaemonSet) on every pool,
  tolerating every pool's taints, pulls the profiles' notebook images
  (``extraImages``) onto each new node as soon as it joins: on a GPU node the pull
  runs while the GPU Operator installs the driver (and a MIG node reboots), before
  the node can take the notebook, so the first notebook's pull only waits for what
  is left. It saves none of the boot itself; DaemonSet pods never keep a node from
  scaling down.
* ``hub.image``, ``singleuser.image``: the hub image and the notebook image in the
  spec's ``registry`` (:mod:`jupyterhub_gpu.spec.images`), tagged with this version.
* ``hub.allowNamedServers``: a user may run several servers at once, each of its
  own profile (a CPU server beside a GPU server); GPUSpawner refuses a GPU server
  beyond the spec's ``gpuServersPerUser`` before it touches the Kubernetes API.
* ``hub.config.OAuthenticator``: who may log in -- the members of the spec's teams'
  groups (``manage_groups`` makes the token's groups the user's JupyterHub groups,
  which GPUSpawner reads). Set on the OAuthenticator base class so it applies to
  whichever OAuthenticator ``hub.config.JupyterHub.authenticator_class`` names.
"""

from __future__ import annotations

from ..spec.boot import spawn_patience
from ..spec.images import hub_image, notebook_image
from ..spec.model import Platform

GPU_SCORE_WEIGHT = 10  # GPU units dominate cpu/memory (weight 1 each) when packing
CHART_START_TIMEOUT = 300  # the z2jh chart's singleuser.startTimeout
CHART_FAILURE_LIMIT = 5  # the z2jh chart's hub.consecutiveFailureLimit


def start_timeout(platform: Platform) -> int:
    return max((spawn_patience(platform, p) for p in platform.profiles),
               default=CHART_START_TIMEOUT)


def gpu_resources(platform: Platform) -> list[str]:
    return sorted({pool.resource_name for pool in platform.gpu_pools})


def scoring_resources(platform: Platform) -> list[dict]:
    return [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1},
            *({"name": r, "weight": GPU_SCORE_WEIGHT} for r in gpu_resources(platform))]


def login_groups(platform: Platform) -> list[str]:
    return sorted({g for team in platform.teams for g in team.groups})


def pool_tolerations(platform: Platform) -> list[dict]:
    """A toleration of every taint of the spec's pools, each once."""
    taints = dict.fromkeys(t for p in platform.pools for t in p.taints)
    return [t.toleration() for t in taints]


def notebook_images(platform: Platform) -> dict[str, dict[str, str]]:
    """The profiles' images as z2jh's ``prePuller.extraImages`` (name and tag)."""
    images = dict.fromkeys(p.image for p in platform.profiles)
    pulled = {}
    for i, image in enumerate(images):
        name, _, tag = image.rpartition(":")
        if not name or "/" in tag:  # no tag: the ':' was a registry's port
            name, tag = image, "latest"
        pulled[f"notebook-{i}"] = {"name": name, "tag": tag}
    return pulled


def _image(name_tag: tuple[str, str]) -> dict[str, str]:
    return {"name": name_tag[0], "tag": name_tag[1]}


def generated_values(platform: Platform) -> dict:
    """Helm values derived from ``platform`` (validated against z2jh's schema)."""
    return {
        "hub": {"image": _image(hub_image(platform.registry)),
                "allowNamedServers": True, "config": {"OAuthenticator": {
            "manage_groups": True, "allowed_groups": login_groups(platform)}}},
        "singleuser": {"startTimeout": start_timeout(platform),
                       "image": _image(notebook_image(platform.registry))},
        "prePuller": {"continuous": {"enabled": True},
                      "extraTolerations": pool_tolerations(platform),
                      "extraImages": notebook_images(platform)},
        "scheduling": {"userScheduler": {"pluginConfig": [{
            "name": "NodeResourcesFit",
            "args": {"scoringStrategy": {"type": "MostAllocated",
                                         "resources": scoring_resources(platform)}},
        }]}},
    }
