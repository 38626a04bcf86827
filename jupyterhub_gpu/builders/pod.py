"""The KubeSpawner settings a granted profile yields (who may have which profile:
:mod:`jupyterhub_gpu.spec.grant`)."""

from __future__ import annotations

import copy
import hashlib
import re
from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from ..checkpoint import PRESTOP_COMMAND
from ..contract import (ENV_CHECKPOINT_DIR, ENV_COUNT, ENV_GPU_UNIT, ENV_MEMORY, ENV_MODEL,
                        ENV_NAMESPACE, ENV_POOL, ENV_PREEMPTIBLE, ENV_PROFILE, ENV_PROFILE_NAME,
                        ENV_SHARING, ENV_TEAM, GPU_MEMORY_ANNOTATION, GPU_MODEL_ANNOTATION,
                        POOL_ANNOTATION, POOL_GATE, PREEMPTIBLE_ANNOTATION, PREFIX,
                        PRIORITY_LABEL, PROFILE_LABEL, QUEUE_LABEL, TEAM_LABEL)
from ..cull.notice import pod_env as cull_env
from ..spec.grant import Grant
from ..spec.model import Checkpoint, CheckpointStorage, Platform, Pool

CHECKPOINT_VOLUME = "checkpoints"

#: what every notebook and job pod runs with, so that Pod Security's ``restricted``
#: level (enforced on the team namespaces, :mod:`jupyterhub_gpu.bundle.namespaces`)
#: admits it: no root (the image's user must be numeric and not 0, or the pod's
#: ``runAsUser`` set, as z2jh's ``singleuser.uid`` does), the runtime's default seccomp
#: profile; and for each container no privilege escalation and no capability
RESTRICTED_POD: Mapping[str, Any] = {"runAsNonRoot": True,
                                     "seccompProfile": {"type": "RuntimeDefault"}}
RESTRICTED_CONTAINER: Mapping[str, Any] = {"allowPrivilegeEscalation": False,
                                           "capabilities": {"drop": ["ALL"]}}


@dataclass(frozen=True)
class SpawnSettings:
    """KubeSpawner trait values a profile sets (names are KubeSpawner's traits)."""

    namespace: str
    image: str
    cpu_guarantee: float
    cpu_limit: float
    mem_guarantee: int  # bytes (JupyterHub's ByteSpecification reads "G" as GiB)
    mem_limit: int
    extra_resource_guarantees: dict[str, str]
    extra_resource_limits: dict[str, str]
    node_selector: dict[str, str]
    tolerations: list[dict]
    extra_labels: dict[str, str]
    environment: dict[str, Any]
    # node selector terms (ORed); merged into each of the admin's (see merge_traits)
    node_affinity_required: list[dict] = field(default_factory=list)
    volumes: list[dict] = field(default_factory=list)
    volume_mounts: list[dict] = field(default_factory=list)
    extra_pod_config: dict[str, Any] = field(default_factory=dict)
    lifecycle_hooks: dict[str, Any] = field(default_factory=dict)
    # the grace KubeSpawner's stop() deletes the pod with (its default is 1 s, which
    # would cut a checkpointing preStop hook short on a cull or a user's stop);
    # None keeps the admin's value
    delete_grace_period: int | None = None
    # no Kubernetes credentials in a notebook: it submits jobs through the hub's
    # service (jupyterhub_gpu.jobs), never to the API server itself
    automount_service_account_token: bool = False
    # Pod Security "restricted" (RESTRICTED_POD, RESTRICTED_CONTAINER), merged over
    # what KubeSpawner makes of uid, fs_gid and allow_privilege_escalation
    pod_security_context: dict[str, Any] = field(
        default_factory=lambda: copy.deepcopy(dict(RESTRICTED_POD)))
    container_security_context: dict[str, Any] = field(
        default_factory=lambda: copy.deepcopy(dict(RESTRICTED_CONTAINER)))

    @classmethod
    def trait_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))


#: the notebook's variables that depend on the pool, and the annotation a fallback
#: profile's pod reads each from (the hub sets them: :func:`pool_annotations`)
POOL_ENV_ANNOTATIONS = {ENV_POOL: POOL_ANNOTATION, ENV_MODEL: GPU_MODEL_ANNOTATION,
                        ENV_MEMORY: GPU_MEMORY_ANNOTATION, ENV_PREEMPTIBLE: PREEMPTIBLE_ANNOTATION}


def _pool_facts(grant: Grant, pool: Pool) -> dict[str, str]:
    """The pool-dependent variables of a server of ``grant`` on ``pool``."""
    return {ENV_POOL: pool.name, ENV_MODEL: pool.gpu.name,
            ENV_MEMORY: f"{pool.unit_memory_gb}GB",
            ENV_PREEMPTIBLE: str(pool.spot or grant.priority.preemptible).lower()}


def pool_annotations(grant: Grant) -> dict[str, dict[str, str]]:
    """For each pool of a fallback profile, the annotations the hub records on its pod
    once Kueue has admitted it there (:mod:`jupyterhub_gpu.kueue.poolgate`)."""
    return {pool.name: {POOL_ENV_ANNOTATIONS[var]: value
                        for var, value in _pool_facts(grant, pool).items()}
            for pool in grant.pools}


def pool_env(grant: Grant) -> dict[str, Any]:
    """The pool the server runs on and its GPU: a single-pool profile's, or for a
    fallback profile the one Kueue admitted it to, which only the annotations the hub
    sets before the pod may start tell (the kubelet resolves them when it starts the
    container)."""
    if not grant.fallbacks:
        return _pool_facts(grant, grant.pool)
    return {var: {"valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{key}']"}}}
            for var, key in POOL_ENV_ANNOTATIONS.items()}


def placement(pools: tuple[Pool, ...]) -> tuple[dict[str, str], list[dict], list[dict]]:
    """(node selector, tolerations, node affinity terms) of a pod that may run on
    ``pools`` (the preferred first), which Kueue admits to one of them.

    A single-pool profile selects and tolerates its pool itself, as it always has:
    Kueue's merge of the flavor's ``nodeLabels`` (equal to the selector) and
    ``tolerations`` (de-duplicated) changes nothing, and the pod still lands on its
    pool should Kueue not manage its namespace. A fallback profile's pod carries no
    pool selector (Kueue fails to merge a flavor's ``nodeLabels`` into a nodeSelector
    that has another value for the key) and no pool toleration: Kueue adds the
    admitted flavor's. Its node affinity keeps Kueue (which checks a flavor's
    ``nodeLabels`` against it) and the scheduler to the profile's pools, and its own
    scheduling gate (:func:`spawn_settings`) holds it until the hub has recorded the
    admitted pool."""
    if len(pools) == 1:
        return dict(pools[0].node_selector), [t.toleration() for t in pools[0].taints], []
    by_label: dict[str, list[str]] = {}
    for pool in pools:
        for key, value in pool.node_selector.items():
            by_label.setdefault(key, []).append(value)
    terms = [{"matchExpressions": [{"key": key, "operator": "In", "values": values}]}
             for key, values in by_label.items()]
    return {}, [], terms


def profile_env(grant: Grant) -> dict[str, Any]:
    """Environment that tells the notebook what it runs on (the JupyterLab status
    item, :mod:`jupyterhub_gpu.labext`, shows it)."""
    pool, profile = grant.pool, grant.profile
    return {
        ENV_PROFILE: profile.slug,
        ENV_PROFILE_NAME: profile.display_name,
        **pool_env(grant),
        ENV_SHARING: pool.sharing.mode.name,  # the same on every pool of a profile
        ENV_GPU_UNIT: pool.sharing.mode.form_label(pool.sharing),
        ENV_COUNT: str(profile.units),
        ENV_TEAM: grant.team.name,
        ENV_NAMESPACE: grant.team.namespace,
        **cull_env(profile),  # idle timeout, max age, GPU-idle rule, grace: for the notices
    }


#: a user name used as it is for their directory: a DNS label (KubeSpawner's safe
#: ``{username}`` keeps these too) without "--", which every hashed name has
_PLAIN_NAME = re.compile(r"[a-z]([a-z0-9-]{0,46}[a-z0-9])?")
#: hex digits of SHA-256 in a hashed directory name: 128 bits, so that no one can
#: pick a name whose directory is another user's (KubeSpawner's 8 give 32 bits)
USER_DIR_HASH_DIGITS = 32
_STEM = 24  # characters of the readable part of a hashed name


def user_dir(username: str) -> str:
    """The user's directory on the checkpoint PVC, for their notebooks and their
    jobs alike: the JupyterHub user name itself if it is a lowercase DNS label of at
    most 48 characters without "--" (what KubeSpawner's ``{username}`` gives it
    too), else a readable stem, "---" and a 128-bit hash of the whole name. The two
    kinds cannot meet (a plain name has no "--"); two hashed names meet only if
    their hashes do. Only ``[a-z0-9-]``: never a path separator, "..", or a
    ``{field}`` KubeSpawner would expand."""
    if _PLAIN_NAME.fullmatch(username) and "--" not in username:
        return username
    stem = re.sub(r"[^a-z0-9]+", "-", username.lower()).strip("-")[:_STEM].strip("-")
    digest = hashlib.sha256(username.encode("utf-8")).hexdigest()[:USER_DIR_HASH_DIGITS]
    return f"{stem or 'x'}---{digest}"


def checkpoint_parts(storage: CheckpointStorage | None, checkpoint: Checkpoint,
                     username: str) -> tuple[list, list, dict]:
    """(volumes, mounts, environment) of the directory of user ``username`` (their
    JupyterHub name) on the checkpoint PVC (:func:`user_dir`), when ``checkpoint`` is
    on and the spec has checkpoint storage."""
    if not checkpoint.enabled or storage is None:
        return [], [], {}
    volume = {"name": CHECKPOINT_VOLUME,
              "persistentVolumeClaim": {"claimName": storage.claim_name}}
    mount = {"name": CHECKPOINT_VOLUME, "mountPath": storage.mount_path,
             "subPath": user_dir(username)}
    return [volume], [mount], {ENV_CHECKPOINT_DIR: storage.mount_path}


def spawn_settings(platform: Platform, grant: Grant, username: str) -> SpawnSettings:
    """The KubeSpawner settings that start ``grant.profile`` for its team, for the
    JupyterHub user ``username``."""
    profile, pool, team = grant.profile, grant.pool, grant.team
    gpu = pool.gpu_resources(profile.units)  # none on a CPU-only pool
    volumes, mounts, ckpt_env = checkpoint_parts(platform.checkpoint_storage,
                                                 profile.checkpoint, username)
    selector, tolerations, affinity = placement(grant.pools)
    gates = [{"name": POOL_GATE}] if grant.fallbacks else []  # see placement()
    pod_config: dict[str, Any] = {"schedulingGates": gates} if gates else {}
    if profile.checkpoint.enabled:
        pod_config["terminationGracePeriodSeconds"] = profile.checkpoint.grace_period_seconds
    return SpawnSettings(
        namespace=team.namespace,
        image=profile.image,
        cpu_guarantee=profile.cpu,
        cpu_limit=profile.cpu,
        mem_guarantee=profile.memory_bytes,
        mem_limit=profile.memory_bytes,
        extra_resource_guarantees=dict(gpu),
        extra_resource_limits=dict(gpu),
        node_selector=selector,
        tolerations=tolerations,
        node_affinity_required=affinity,
        extra_labels={
            QUEUE_LABEL: team.local_queue,
            PRIORITY_LABEL: grant.priority.name,
            PROFILE_LABEL: profile.slug,
            TEAM_LABEL: team.name,
        },
        environment={**profile_env(grant), **ckpt_env},
        volumes=volumes,
        volume_mounts=mounts,
        extra_pod_config=pod_config,
        # on any stop (preemption, eviction, cull) first SIGTERM the kernels that
        # registered a checkpoint callback, within the grace period
        lifecycle_hooks={"preStop": {"exec": {"command": list(PRESTOP_COMMAND)}}},
        delete_grace_period=(profile.checkpoint.grace_period_seconds
                             if profile.checkpoint.enabled else None),
    )


PROFILE_KEY_PREFIX = PREFIX  # dict keys of a profile's items (see merge_traits)


def _merge_dicts(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``override`` merged into ``base`` as KubeSpawner's ``kubespawner_override``
    merges a dict into a dict trait (its ``recursive_update``), into a new dict: a
    nested dict is merged key by key, a ``None`` value removes the key, and any other
    value replaces the one in ``base``."""
    merged = dict(base)
    for key, value in override.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, Mapping):
            below = merged.get(key)
            merged[key] = _merge_dicts(below if isinstance(below, Mapping) else {}, value)
        else:
            merged[key] = value
    return merged


def _sorted_values(items: Mapping[str, Any]) -> list[Any]:
    """A dict as KubeSpawner puts it into the pod: its values, sorted by key."""
    return [items[key] for key in sorted(items)]


def _profile_keys(items: list[Any]) -> dict[str, Any]:
    """A profile's list as a dict keyed ``jupyterhub-gpu/<index>-<name>`` (the index
    zero-padded, so the keys sort in list order)."""
    width = len(str(len(items)))
    keyed = {}
    for index, item in enumerate(items):
        name = item.get("name") if isinstance(item, Mapping) else None
        suffix = f"-{name}" if isinstance(name, str) else ""
        keyed[f"{PROFILE_KEY_PREFIX}{index:0{width}d}{suffix}"] = item
    return keyed


def _merge_value(base: Any, mine: Any) -> Any:
    if mine is None:
        return base
    if isinstance(mine, Mapping) and isinstance(base, Mapping):
        return _merge_dicts(base, mine)
    if isinstance(mine, list) and isinstance(base, list):
        return [*base, *mine]
    if isinstance(mine, list) and isinstance(base, Mapping):
        return {**base, **_profile_keys(mine)}
    if isinstance(mine, Mapping) and isinstance(base, list):
        return [*base, *_sorted_values(mine)]
    return mine


def _all_terms(base: Any, mine: list[dict]) -> Any:
    """Node selector terms are ORed: each of the admin's terms gets the profile's
    expressions (one term per profile term), so both must hold."""
    if not mine or not base:
        return mine or base
    return [{**b, "matchExpressions": [*(b.get("matchExpressions") or []),
                                       *m["matchExpressions"]]}
            for b in base for m in mine]


def merge_traits(base: Mapping[str, Any], settings: SpawnSettings) -> dict[str, Any]:
    """The trait values of a spawn: a profile's ``settings`` combined with the values
    the admin configured (``base``, e.g. what the z2jh chart set), for every trait in
    :class:`SpawnSettings`. Neither argument is changed; the result shares nothing.

    KubeSpawner takes ``volumes``, ``volume_mounts`` and ``tolerations`` as a list or
    as a dict, and puts a dict into the pod as its values sorted by key; the keys
    themselves are dropped. The z2jh 4.x chart sets ``volumes`` and
    ``volume_mounts`` as dicts (the home volume among them). So, by the two types:

    * dict and dict: merged as ``kubespawner_override`` merges dicts (nested dicts key
      by key, the profile wins on a shared key, ``None`` removes the key);
    * list and list: the admin's items, then the profile's (``kubespawner_override``
      would replace the list, dropping e.g. the chart's user-pod tolerations);
    * admin dict, profile list: the admin's dict with every entry kept, plus each
      profile item under the key ``jupyterhub-gpu/<index>-<name>`` (``-<name>`` when
      the item has a ``name``). The chart's keys are volume names (or their
      templates) and ``<index>-<name>``, which never contain ``/``; an admin's own key
      is replaced only if it is one of these;
    * admin list, profile dict: the admin's items, then the profile's values sorted by
      key, as KubeSpawner would order them;
    * a profile value of ``None``: the admin's value (``delete_grace_period`` of a
      profile without checkpoints);
    * ``node_affinity_required``: the admin's terms, each with the profile's
      expressions added (terms are ORed, so appending would loosen the admin's);
    * anything else (scalars such as ``image``, ``cpu_limit``, ``namespace``, or a
      trait the admin left unset): the profile's value.

    The admin's type is kept, so a ``pre_spawn_hook`` written for the chart's dicts
    still works. Nothing is de-duplicated: an admin volume with the same name as a
    profile's makes the pod invalid, and the Kubernetes API says so.
    """
    merged = {name: _merge_value(base.get(name), getattr(settings, name))
              for name in SpawnSettings.trait_names()}
    merged["node_affinity_required"] = _all_terms(base.get("node_affinity_required"),
                                                  settings.node_affinity_required)
    return copy.deepcopy(merged)
