"""The z2jh 4.4.0 chart's configuration of KubeSpawner, reproduced for tests.

The chart's hub (jupyterhub/zero-to-jupyterhub-k8s, release 4.4.0:
``jupyterhub/files/hub/jupyterhub_config.py`` with its ``z2jh.py`` helpers) turns the
Helm values into ``c.KubeSpawner`` traits, and only then runs ``hub.extraConfig``
(where ``configure_hub`` adds GPUSpawner). This module does what that config does, for

* every trait GPUSpawner sets on a spawn (:class:`SpawnSettings`, and
  ``start_timeout``), and
* the storage traits behind the user's home volume (``storage_pvc_ensure``,
  ``pvc_name_template``, ``storage_class``, ``storage_access_modes``,
  ``storage_capacity``, ``storage_extra_labels``),
* what Pod Security admission judges: ``uid``, ``fs_gid``,
  ``allow_privilege_escalation``, and ``init_containers`` (``singleuser.initContainers``
  and, with ``singleuser.cloudMetadata.blockWithIptables``, the chart's privileged
  iptables container that blocks the metadata server),

so that tests hold GPUSpawner against the shapes the chart really produces: e.g.
``volumes`` and ``volume_mounts`` as dicts, ``tolerations`` as a list, and the pod the
API server admits or refuses. Written from reading the chart; none of its code is
copied. What the chart sets that GPUSpawner never touches and admission does not judge
(preferred node and pod affinities, image pull secrets, ...) is left out: none of it
changes how a profile merges. The scheduler name is not reproduced but read from the
chart as Helm renders it (:func:`user_scheduler`), like the user-scheduler's
configuration the dev cluster runs. ``singleuser.extraFiles`` (a volume of a Secret the chart makes) is refused
rather than reproduced.

Values are read the way the chart's ``get_config`` reads them (a dotted path; a
missing or null level gives the default), after Helm has merged the ``-f`` files
over the chart's defaults (:func:`helm_values`).
"""

from __future__ import annotations

import copy
import re
import subprocess
from pathlib import Path
from typing import Any, Mapping

import pytest
import yaml
from traitlets.config import Config

from jupyterhub_gpu.bundle.namespaces import HubRef

REPO = Path(__file__).resolve().parent.parent
REFERENCE = REPO.parent / "shared" / "reference" / "z2jh-4.4.0"
DEFAULT_VALUES = REFERENCE / "values.yaml"
ADMIN_GUIDE = REPO / "docs" / "admin-guide.md"
#: the admin's own values file (kept out of git) in the admin guide's install command
ADMIN_OWN_VALUES = "~/jupyterhub-gpu-secrets.yaml"
RELEASE_NAMESPACE = HubRef().namespace  # the chart sets KubeSpawner.namespace to the hub's

# (trait, key under `singleuser`) that the chart copies when the value is not null
COPIED = (
    ("start_timeout", "startTimeout"),
    ("extra_labels", "extraLabels"),
    ("node_selector", "nodeSelector"),
    ("node_affinity_required", "extraNodeAffinity.required"),
    ("lifecycle_hooks", "lifecycleHooks"),
    ("mem_limit", "memory.limit"),
    ("mem_guarantee", "memory.guarantee"),
    ("cpu_limit", "cpu.limit"),
    ("cpu_guarantee", "cpu.guarantee"),
    ("extra_resource_limits", "extraResource.limits"),
    ("extra_resource_guarantees", "extraResource.guarantees"),
    ("environment", "extraEnv"),
    ("extra_pod_config", "extraPodConfig"),
    ("storage_extra_labels", "storage.extraLabels"),
    ("uid", "uid"),
    ("fs_gid", "fsGid"),
)
# what the chart adds to node_affinity_required with matchNodePurpose: require
NODE_PURPOSE_TERM = {"matchExpressions": [
    {"key": "hub.jupyter.org/node-purpose", "operator": "In", "values": ["user"]}]}
# traits GPUSpawner sets that the chart's hub config (4.4.0) leaves at KubeSpawner's
# default: no singleuser value maps to them
CHART_LEAVES_UNSET = frozenset({"delete_grace_period", "automount_service_account_token",
                                "pod_security_context", "container_security_context"})
# every trait kubespawner_config may set
TRAITS = frozenset({name for name, _ in COPIED} | {
    "namespace", "image", "tolerations", "volumes", "volume_mounts", "storage_pvc_ensure",
    "pvc_name_template", "storage_class", "storage_access_modes", "storage_capacity",
    "allow_privilege_escalation", "init_containers"})
# the chart's init container that blocks the cloud metadata server with iptables
# (files/hub/jupyterhub_config.py, "cloud_metadata"): root, privileged, NET_ADMIN
METADATA_BLOCK_CONTAINER = "block-cloud-metadata"


def coalesce(defaults: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``override`` over ``defaults`` as Helm merges a values file: maps key by key,
    a null removes the key, anything else (lists too) replaces."""
    merged = copy.deepcopy(dict(defaults))
    for key, value in override.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = coalesce(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def install_order() -> list[str]:
    """The ``-f`` files of the admin guide's ``helm upgrade --install jupyterhub``, in
    order: our values files (paths from the checkout's root), then
    :data:`ADMIN_OWN_VALUES`."""
    text = ADMIN_GUIDE.read_text()
    lines = text[text.index("helm upgrade --install jupyterhub"):].splitlines()
    end = next(i for i, line in enumerate(lines) if not line.rstrip().endswith("\\"))
    return re.findall(r"-f (\S+)", "\n".join(lines[:end + 1]))


def admin_own_example() -> dict[str, Any]:
    """The admin guide's example of :data:`ADMIN_OWN_VALUES` (the YAML block headed by
    its name), placeholders and all: what stands in for the admin's own file where a
    test brings none. Its ``client_secret`` is the guide's placeholder text; nothing the
    chart renders checks it."""
    text = ADMIN_GUIDE.read_text()
    start = text.index(f"```yaml\n# {ADMIN_OWN_VALUES}") + len("```yaml\n")
    return yaml.safe_load(text[start:text.index("```", start)])


def install_layers(own: Mapping[str, Any] | None = None) -> list[Path | Mapping[str, Any]]:
    """The values files of :func:`install_order`, each our file's path, the admin's own
    file being ``own`` (else :func:`admin_own_example`)."""
    own = admin_own_example() if own is None else own
    return [own if name == ADMIN_OWN_VALUES else REPO / name for name in install_order()]


def helm_values(*overlays: Mapping[str, Any]) -> dict[str, Any]:
    """The chart's defaults, then the install order's values files (:func:`install_layers`),
    then ``overlays`` (like more ``-f``). Skips the calling test when the reference
    data is not beside the checkout."""
    if not DEFAULT_VALUES.is_file():
        pytest.skip(f"z2jh reference data not found at {REFERENCE}: the chart's default "
                    "values are needed beside the checkout (../shared/reference/README.md)")
    values = yaml.safe_load(DEFAULT_VALUES.read_text())
    layers = [yaml.safe_load(layer.read_text()) if isinstance(layer, Path) else layer
              for layer in install_layers()]
    for layer in [*layers, *overlays]:
        values = coalesce(values, layer or {})
    return values


def get(values: Mapping[str, Any], key: str, default: Any = None) -> Any:
    """A dotted key, as the chart's ``get_config`` resolves it."""
    value: Any = values
    for level in key.split("."):
        if not isinstance(value, Mapping) or level not in value:
            return default
        value = value[level]
    return value


def _image(values: Mapping[str, Any]) -> str | None:
    name, tag = get(values, "singleuser.image.name"), get(values, "singleuser.image.tag")
    return f"{name}:{tag}" if name and tag else name


def _home(values: Mapping[str, Any], ks: Any) -> tuple[dict, dict]:
    """The home volume and its mount, keyed by volume name as the chart keys them."""
    storage = get(values, "singleuser.storage") or {}
    home_path = storage.get("homeMountPath")
    if storage.get("type") == "dynamic":
        dynamic = storage.get("dynamic") or {}
        if dynamic.get("pvcNameTemplate"):
            ks.pvc_name_template = dynamic["pvcNameTemplate"]
        ks.storage_pvc_ensure = True
        for trait, value in (("storage_class", dynamic.get("storageClass")),
                             ("storage_access_modes", dynamic.get("storageAccessModes")),
                             ("storage_capacity", storage.get("capacity"))):
            if value is not None:
                ks[trait] = value
        name, claim, sub_path = dynamic.get("volumeNameTemplate"), "{pvc_name}", dynamic.get(
            "subPath")
    elif storage.get("type") == "static":
        static = storage.get("static") or {}
        name, claim, sub_path = "home", static.get("pvcName"), static.get("subPath")
    else:
        return {}, {}
    return ({name: {"name": name, "persistentVolumeClaim": {"claimName": claim}}},
            {name: {"mountPath": home_path, "name": name, "subPath": sub_path}})


def _extra_volumes(values: Mapping[str, Any], volumes: dict, mounts: dict) -> None:
    """storage.extraVolumes / extraVolumeMounts, each a dict or a list: a list of
    volumes is keyed by name, a list of mounts by "<index>-<name>"."""
    extra = get(values, "singleuser.storage.extraVolumes", {}) or {}
    volumes.update(extra if isinstance(extra, Mapping) else {v["name"]: v for v in extra})
    extra = get(values, "singleuser.storage.extraVolumeMounts", {}) or {}
    mounts.update(extra if isinstance(extra, Mapping)
                  else {f"{i}-{m['name']}": m for i, m in enumerate(extra)})


def _init_containers(values: Mapping[str, Any]) -> list[dict]:
    """``singleuser.initContainers``, then the metadata block when it is on."""
    containers = copy.deepcopy(get(values, "singleuser.initContainers", []) or [])
    metadata = get(values, "singleuser.cloudMetadata", {}) or {}
    if metadata.get("blockWithIptables") is True:
        image = get(values, "singleuser.networkTools.image", {}) or {}
        containers.append({
            "name": METADATA_BLOCK_CONTAINER, "image": f"{image['name']}:{image['tag']}",
            "command": ["iptables", "--append", "OUTPUT", "--protocol", "tcp",
                        "--destination", metadata["ip"], "--destination-port", "80",
                        "--jump", "DROP"],
            "securityContext": {"privileged": True, "runAsUser": 0,
                                "capabilities": {"add": ["NET_ADMIN"]}}})
    return containers


#: the release name the admin guide installs the chart as (``helm upgrade --install jupyterhub``)
RELEASE_NAME = "jupyterhub"
CHART = REFERENCE / "chart" / "jupyterhub"


def common_labels(values: Mapping[str, Any]) -> dict[str, str]:
    """``c.KubeSpawner.common_labels`` as the chart's hub config sets it (its "implement
    common labels" part): on every user pod, beside KubeSpawner's own. Not in
    :func:`kubespawner_config`, which holds only what GPUSpawner's merging meets."""
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    name = get(values, "nameOverride") or chart["name"]
    chart_label = f"{chart['name']}-{chart['version'].replace('+', '_')}"
    return {"app.kubernetes.io/name": name, "app": name,
            "app.kubernetes.io/instance": RELEASE_NAME, "release": RELEASE_NAME,
            "helm.sh/chart": chart_label, "chart": chart_label,
            "app.kubernetes.io/managed-by": "kubespawner"}


def kubespawner_config(values: Mapping[str, Any],
                       namespace: str = RELEASE_NAMESPACE) -> Config:
    """``c.KubeSpawner`` as the chart's hub config leaves it for these ``values``,
    before ``hub.extraConfig`` runs."""
    c = Config()
    ks = c.KubeSpawner
    ks.namespace = namespace
    for trait, key in COPIED:
        value = get(values, f"singleuser.{key}")
        if value is not None:
            ks[trait] = copy.deepcopy(value)
    if _image(values):
        ks.image = _image(values)
    # set even when null: None, False and True all mean something to KubeSpawner
    ks.allow_privilege_escalation = get(values, "singleuser.allowPrivilegeEscalation")
    init_containers = _init_containers(values)
    if init_containers:
        ks.init_containers = init_containers
    if get(values, "scheduling.userPods.nodeAffinity.matchNodePurpose") == "require":
        ks.node_affinity_required = [*ks.get("node_affinity_required", []), NODE_PURPOSE_TERM]
    tolerations = [*get(values, "scheduling.userPods.tolerations", []),
                   *get(values, "singleuser.extraTolerations", [])]
    if tolerations:
        ks.tolerations = copy.deepcopy(tolerations)
    if get(values, "singleuser.extraFiles"):
        raise NotImplementedError("singleuser.extraFiles (a volume of the chart's own "
                                  "Secret) is not reproduced here")
    volumes, mounts = _home(values, ks)
    _extra_volumes(values, volumes, mounts)
    ks.volumes, ks.volume_mounts = copy.deepcopy(volumes), copy.deepcopy(mounts)
    return c


def helm_template(helm: Path | str, own: Mapping[str, Any] | None = None) -> list[dict]:
    """The chart's objects as ``helm template`` renders them (release
    :data:`RELEASE_NAME` in :data:`RELEASE_NAMESPACE`) from the admin guide's install
    order (:func:`install_layers`: ``own`` in the admin's own file's place, given to
    Helm on stdin). Skips the calling test when the chart is not beside the checkout.

    With the guide's example as the admin's own file, ``helm-values/auth-azuread.yaml``
    changes only the ``hub`` Secret's data (the rendered values) and the Deployments'
    ``checksum/*`` annotations: no NetworkPolicy, Service, ConfigMap or pod spec. The
    example's ``proxy.https`` adds the chart's ``autohttps`` objects (its Deployment,
    Service ``proxy-http``, NetworkPolicy ``autohttps``, ...) and points
    ``proxy-public`` at them."""
    if not CHART.is_dir():
        pytest.skip(f"z2jh chart not found at {CHART} (../shared/reference/README.md)")
    args, stdin = [], None
    for layer in install_layers(own):
        if isinstance(layer, Path):
            args += ["-f", str(layer)]
        else:
            args, stdin = [*args, "-f", "-"], yaml.safe_dump(dict(layer))
    out = subprocess.run(
        [str(helm), "template", RELEASE_NAME, str(CHART), "--namespace", RELEASE_NAMESPACE,
         *args], input=stdin, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def user_scheduler(objects: list[dict]) -> tuple[str, dict] | None:
    """(the scheduler name the chart's hub gives KubeSpawner's pods, the user-scheduler's
    KubeSchedulerConfiguration) from the rendered chart, or None with
    ``scheduling.userScheduler.enabled`` false.

    The name is the hub ConfigMap's ``user-scheduler`` entry, which
    ``files/hub/jupyterhub_config.py`` reads (``get_name("user-scheduler")``, from
    ``z2jh.py``) into ``c.KubeSpawner.scheduler_name``; the configuration is the
    ``config.yaml`` of the user-scheduler's ConfigMap
    (``templates/scheduling/user-scheduler/configmap.yaml``)."""
    maps = [o["data"] for o in objects if o["kind"] == "ConfigMap"]
    configs = [yaml.safe_load(d["config.yaml"]) for d in maps
               if "KubeSchedulerConfiguration" in d.get("config.yaml", "")]
    if not configs:
        return None
    (config,), (hub,) = configs, [d for d in maps if "user-scheduler" in d]
    return hub["user-scheduler"], config
