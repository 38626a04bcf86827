"""``check-bundle`` on the z2jh Helm values: do they let the spec's pods run?

The values files are merged as Helm merges ``-f`` files (mappings deep-merged, the
last file winning on anything else); a drift names the file that set the field.
"""

from __future__ import annotations

import copy
import posixpath
import re
from typing import Any, Iterator

from ..builders.deviceplugin import node_labels
from ..contract import (AGENTPOOL_LABEL, AZURE_FILES_CLASS, AZURE_FILES_PREMIUM_CLASS,
                        MANAGED_LABEL, NODE_PURPOSE_LABEL, USAGE_SERVICE_NAME)
from ..spec.images import hub_image
from ..spec.model import Platform
from .diff import MISSING, Drift
from .helm import CHART_FAILURE_LIMIT, CHART_START_TIMEOUT, gpu_resources, login_groups, start_timeout
from .namespaces import HUB_PORT
from .userscheduler import TAG_PATH as SCHEDULER_TAG
from .userscheduler import WHY as SCHEDULER_WHY

STOCK_HUB_IMAGE = "quay.io/jupyterhub/k8s-hub"
_CONFIGURE = re.compile(r"configure_hub\(\s*c\s*,\s*[\"']([^\"']+)[\"']\s*\)")
Values = list[tuple[str, dict]]


def merge_values(files: Values) -> dict:
    def merge(a: dict, b: dict) -> dict:
        out = copy.deepcopy(a)
        for key, value in b.items():
            out[key] = (merge(out[key], value) if isinstance(value, dict)
                        and isinstance(out.get(key), dict) else copy.deepcopy(value))
        return out
    merged: dict = {}
    for _, values in files:
        merged = merge(merged, values or {})
    return merged


def get(values: Any, path: str, default: Any = MISSING) -> Any:
    for key in path.split("."):
        if not isinstance(values, dict) or key not in values:
            return default
        values = values[key]
    return values


def source(files: Values, path: str) -> str:
    """The last file that sets ``path``; if none does, the first: the admin's base
    values, which the later files (the generated ones) override, and where a setting
    the spec does not make belongs."""
    return next((name for name, v in reversed(files) if get(v, path) is not MISSING),
                files[0][0] if files else "helm values")


def _drift(files: Values, path: str, expected: Any, found: Any, hint: str,
           where: str | None = None) -> Drift:
    """``where``: the path to look up the setting file by, when ``path`` ends in a
    key with dots (a label)."""
    return Drift(source(files, where or path), "z2jh values", path, expected, found, hint)


def _spec_wiring(files: Values, values: dict) -> Iterator[Drift]:
    configs = get(values, "hub.extraConfig", {}) or {}
    paths = [m.group(1) for text in configs.values() if isinstance(text, str)
             for m in [_CONFIGURE.search(text)] if m]
    if not paths:
        yield _drift(files, "hub.extraConfig", 'configure_hub(c, "<spec path>")', MISSING,
                     "nothing wires GPUSpawner and the platform spec into the hub")
        return
    spec_dir = posixpath.dirname(paths[0])
    volumes = {v.get("name"): v for v in get(values, "hub.extraVolumes", []) or []}
    mounts = [m for m in get(values, "hub.extraVolumeMounts", []) or []
              if m.get("mountPath") in (spec_dir, paths[0])]
    if not any("configMap" in volumes.get(m.get("name"), {}) for m in mounts):
        yield _drift(files, "hub.extraVolumeMounts", f"a ConfigMap volume at {spec_dir}",
                     [m.get("mountPath") for m in get(values, "hub.extraVolumeMounts", []) or []],
                     f"configure_hub reads {paths[0]}")


def _timeouts(platform: Platform, files: Values, values: dict) -> Iterator[Drift]:
    need = start_timeout(platform)
    found = get(values, "singleuser.startTimeout", CHART_START_TIMEOUT)
    if not isinstance(found, int) or found < need:
        yield _drift(files, "singleuser.startTimeout", f">= {need}", found,
                     "the longest queuePatience + a new node's bootTime + startTimeout of "
                     "the profiles")


def _failure_limit(files: Values, values: dict) -> Iterator[Drift]:
    """JupyterHub exits after ``consecutive_failure_limit`` failed spawns in a row
    (``jupyterhub/handlers/base.py``, ``_track_failure_count``); the chart sets it
    from ``hub.consecutiveFailureLimit``."""
    found = get(values, "hub.consecutiveFailureLimit")
    if found is MISSING:
        found = f"{CHART_FAILURE_LIMIT} (the chart's default)"
    # null drops the chart's default (Helm): JupyterHub's own default, 0, applies
    if found not in (0, None):
        yield _drift(files, "hub.consecutiveFailureLimit", 0, found,
                     "queue-patience timeouts, refusals while Kueue is unavailable and "
                     "waitForPodsReady deletions are failed spawns: under a busy queue "
                     "the hub would exit")


#: the z2jh chart's singleuser.storage.dynamic.storageAccessModes, and KubeSpawner's
#: pvc_name_template (the chart passes none unless pvcNameTemplate is set)
CHART_HOME_ACCESS_MODES = ["ReadWriteOnce"]
KUBESPAWNER_PVC_NAME_TEMPLATE = "claim-{user_server}"
#: AKS's built-in classes whose volumes pods on many nodes mount at once
READ_WRITE_MANY_CLASSES = (AZURE_FILES_CLASS, AZURE_FILES_PREMIUM_CLASS)
#: KubeSpawner's template fields that differ between one user's servers
_SERVER_FIELDS = re.compile(
    r"\{(servername|escaped_servername|unescaped_servername|user_server)\}")


def _homes(files: Values, values: dict) -> Iterator[Drift]:
    """The home a dynamic ``singleuser.storage`` gives: one claim per user
    (``pvcNameTemplate`` naming no server: KubeSpawner 7.0.0's ``delete_forever`` keeps
    a named server's claim unless the template has ``{servername}``, 7.1's unless it
    has ``{user_server}``, so a per-server claim leaks on one of them), ReadWriteMany
    on an Azure Files class, which jobs and the user's other servers mount from any
    node (the attach-detach controller refuses a ReadWriteOnce volume a second node)."""
    if get(values, "singleuser.storage.type", "dynamic") != "dynamic":
        return
    template = get(values, "singleuser.storage.dynamic.pvcNameTemplate", None)
    if _SERVER_FIELDS.search(str(template or KUBESPAWNER_PVC_NAME_TEMPLATE)):
        yield _drift(files, "singleuser.storage.dynamic.pvcNameTemplate", "claim-{username}",
                     template or f"{KUBESPAWNER_PVC_NAME_TEMPLATE} (KubeSpawner's default)",
                     "a claim per server: each named server gets an empty home of its own, "
                     "and deleting it leaves its disk on KubeSpawner 7.0.0 or 7.1")
    modes = get(values, "singleuser.storage.dynamic.storageAccessModes")
    if "ReadWriteMany" not in (CHART_HOME_ACCESS_MODES if modes is MISSING else modes or []):
        yield _drift(files, "singleuser.storage.dynamic.storageAccessModes",
                     ["ReadWriteMany"],
                     f"{CHART_HOME_ACCESS_MODES} (the chart's default)" if modes is MISSING
                     else modes, "a job or another server of the user on another node than "
                     "the notebook's would wait in Multi-Attach error")
    found = get(values, "singleuser.storage.dynamic.storageClass", None)
    if found not in READ_WRITE_MANY_CLASSES:
        yield _drift(files, "singleuser.storage.dynamic.storageClass",
                     f"one of {list(READ_WRITE_MANY_CLASSES)}", found,
                     "the home must be an Azure Files share: an Azure Disk attaches to one "
                     "node at a time")


def _scale_to_zero(platform: Platform, files: Values, values: dict) -> Iterator[Drift]:
    if get(values, "scheduling.userPlaceholder.enabled", True) is not False:
        yield _drift(files, "scheduling.userPlaceholder.enabled", False,
                     get(values, "scheduling.userPlaceholder.enabled", True),
                     "placeholder pods keep nodes up")
    purpose = get(values, "scheduling.userPods.nodeAffinity.matchNodePurpose", "prefer")
    if purpose == "require":
        yield _drift(files, "scheduling.userPods.nodeAffinity.matchNodePurpose",
                     "prefer or ignore", purpose,
                     f"GPU nodes carry no {NODE_PURPOSE_LABEL}=user label")
    if get(values, "singleuser.extraNodeAffinity.required", []):
        yield _drift(files, "singleuser.extraNodeAffinity.required", [],
                     get(values, "singleuser.extraNodeAffinity.required"),
                     "GPU pods must be free to land on their profile's pool")
    for key, value in (get(values, "singleuser.nodeSelector", {}) or {}).items():
        if key != AGENTPOOL_LABEL and any(node_labels(p).get(key) != value
                                          for p in platform.pools):
            yield _drift(files, f"singleuser.nodeSelector.{key}", MISSING, value,
                         "not every GPU pool's nodes carry this label",
                         where="singleuser.nodeSelector")
    yield from _pullers(platform, files, values)


def _tolerates(tolerations: list, key: str) -> bool:
    return any(t.get("operator") == "Exists" and not t.get("key") or t.get("key") == key
               for t in tolerations or [])


def _pullers(platform: Platform, files: Values, values: dict) -> Iterator[Drift]:
    why = ("the notebook image is pulled onto a new node while its GPU driver installs "
           "only if the continuous image puller runs there")
    if not get(values, "prePuller.continuous.enabled", True):
        yield _drift(files, "prePuller.continuous.enabled", True, False, why)
        return
    tolerations = get(values, "prePuller.extraTolerations", []) or []
    keys = sorted({t.key for p in platform.pools for t in p.taints})
    missing = [k for k in keys if not _tolerates(tolerations, k)]
    if missing:
        yield _drift(files, "prePuller.extraTolerations", f"tolerations of {keys}",
                     tolerations, why)


def _user_scheduler(platform: Platform, files: Values, values: dict) -> Iterator[Drift]:
    if not get(values, "scheduling.userScheduler.enabled", True):
        return
    fit = next((p for p in get(values, "scheduling.userScheduler.pluginConfig", []) or []
                if p.get("name") == "NodeResourcesFit"), {})
    scored = [r.get("name") for r in get(fit, "args.scoringStrategy.resources", []) or []]
    missing = [r for r in gpu_resources(platform) if r not in scored]
    if missing:
        yield _drift(files, "scheduling.userScheduler.pluginConfig", f"scores {missing}",
                     scored, "pack GPU units so idle GPU nodes empty and scale down")


def _network(files: Values, values: dict) -> Iterator[Drift]:
    if not get(values, "hub.networkPolicy.enabled", True):
        return
    for rule in get(values, "hub.networkPolicy.ingress", []) or []:
        for peer in rule.get("from") or []:
            if get(peer, f"namespaceSelector.matchLabels.{MANAGED_LABEL}", None) == "true":
                return
    yield _drift(files, "hub.networkPolicy.ingress",
                 f"from namespaces labelled {MANAGED_LABEL}=true on port {HUB_PORT}",
                 get(values, "hub.networkPolicy.ingress", []),
                 "user servers in team namespaces could not reach the hub")


def _login(platform: Platform, files: Values, values: dict) -> Iterator[Drift]:
    for section, config in (get(values, "hub.config", {}) or {}).items():
        allowed = (config or {}).get("allowed_groups") if isinstance(config, dict) else None
        if allowed is None:
            continue
        missing = [g for g in login_groups(platform) if g not in allowed]
        if missing:
            yield _drift(files, f"hub.config.{section}.allowed_groups",
                         f"to include {missing}", allowed,
                         "members of these teams' groups could not log in")


def _image(platform: Platform, files: Values, values: dict) -> Iterator[Drift]:
    name = get(values, "hub.image.name", STOCK_HUB_IMAGE)
    if name == STOCK_HUB_IMAGE:
        yield _drift(files, "hub.image.name", "an image built from config/Dockerfile",
                     name, "the stock hub image lacks jupyterhub-gpu")
    elif name != (ours := hub_image(platform.registry)[0]):
        yield _drift(files, "hub.image.name", ours, name,
                     "the spec's registry names the registry once; the hub image is there")
    hub = f"{name}:{get(values, 'hub.image.tag', '')}"
    for i, container in enumerate(get(values, "hub.extraContainers", []) or []):
        if container.get("name") == USAGE_SERVICE_NAME and container.get("image") != hub:
            yield _drift(files, f"hub.extraContainers[{i}].image", hub, container.get("image"),
                         "the usage page's container runs jupyterhub-gpu: the hub image",
                         where="hub.extraContainers")


def _one_culler(files: Values, values: dict) -> Iterator[Drift]:
    configs = get(values, "hub.extraConfig", {}) or {}
    ours = any(isinstance(t, str) and "culler_service(" in t for t in configs.values())
    if ours and get(values, "cull.enabled", True) is not False:
        yield _drift(files, "cull.enabled", False, get(values, "cull.enabled", True),
                     "two cullers: the chart's would stop servers after its own "
                     "cull.timeout, whatever their profile's idleTimeout or maxAge")


def check_helm(platform: Platform, files: Values) -> list[Drift]:
    values = merge_values(files)
    return [*_spec_wiring(files, values), *_timeouts(platform, files, values),
            *_failure_limit(files, values), *_homes(files, values),
            *_scale_to_zero(platform, files, values), *_user_scheduler(platform, files, values),
            *_network(files, values), *_login(platform, files, values),
            *_image(platform, files, values), *_one_culler(files, values)]


def pinned_minor(tf: str) -> str | None:
    """The default of ``variable "kubernetes_version"`` in ``tf`` (``None``: null or
    absent)."""
    block = re.search(r'variable\s+"kubernetes_version"\s*\{(.*?)\n\}', tf, re.S)
    default = re.search(r'^\s*default\s*=\s*"([^"]*)"', block.group(1), re.M) if block else None
    return default.group(1) if default else None


def check_scheduler_minor(tf_file: str, tf: str, files: Values) -> list[Drift]:
    """The user-scheduler's image on the minor Terraform pins for the cluster."""
    values = merge_values(files)
    if not get(values, "scheduling.userScheduler.enabled", True):
        return []
    minor = pinned_minor(tf)
    if minor is None or not re.fullmatch(r"\d+\.\d+", minor):
        return [Drift(tf_file, 'variable "kubernetes_version"', "default", "a minor such as 1.35",
                      minor if minor is not None else "null", SCHEDULER_WHY)]
    tag = get(values, SCHEDULER_TAG)
    if tag is MISSING or not re.fullmatch(rf"v{re.escape(minor)}\.\d+", str(tag)):
        return [Drift(source(files, SCHEDULER_TAG), "z2jh values", SCHEDULER_TAG,
                      f"v{minor}.<patch>", tag, SCHEDULER_WHY)]
    return []
