"""Which profile a user may start, and the KubeSpawner settings it yields."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from ..checkpoint import PRESTOP_COMMAND
from ..cull.notice import pod_env as cull_env
from ..spec import (PRIORITY_LABEL, PROFILE_LABEL, QUEUE_LABEL, TEAM_LABEL, Platform,
                    Pool, Priority, Profile, Team)

CHECKPOINT_VOLUME = "checkpoints"
ALLOWED_OPTION_KEYS = frozenset({"profile"})


@dataclass(frozen=True)
class UserRef:
    """The JupyterHub user a server is for: only what authorization needs."""

    name: str
    groups: frozenset[str]


@dataclass(frozen=True)
class Grant:
    """A profile a user is allowed to start, with everything it resolves to."""

    profile: Profile
    pool: Pool
    team: Team
    priority: Priority


class OptionsRejected(ValueError):
    """``user_options`` the user may not have. ``str()`` is safe to show the user;
    ``log_detail`` is for the admin's log."""

    def __init__(self, user_message: str, log_detail: str):
        super().__init__(user_message)
        self.log_detail = log_detail


def _choose_profile(allowed: tuple[Profile, ...], options: Mapping[str, Any]) -> Profile | None:
    slug = options.get("profile")
    if slug is None:
        return next((p for p in allowed if p.default), allowed[0] if allowed else None)
    return next((p for p in allowed if p.slug == slug), None)


def authorize(platform: Platform, user: UserRef, options: Any) -> Grant:
    """Resolve ``options`` (a form post or REST ``user_options``) for ``user``.

    Raises :class:`OptionsRejected` for anything not offered to this user: an unknown
    or forbidden profile, or fields no profile offers.
    """
    who = f"user {user.name!r} (groups: {', '.join(sorted(user.groups)) or 'none'})"
    if not isinstance(options, Mapping):
        raise OptionsRejected("Invalid server options.", f"{who}: options are not a mapping")
    extra = sorted(map(str, set(options) - ALLOWED_OPTION_KEYS))
    if extra:
        raise OptionsRejected(
            f"Unexpected server options: {', '.join(extra)}. Choose a profile on the form.",
            f"{who}: rejected fields not offered by any profile: {extra}")
    team = platform.team_for(user.groups)
    if team is None:
        raise OptionsRejected(
            "Your account is not in any team that may use GPUs. Ask your JupyterHub admin.",
            f"{who}: in no team of the platform spec")
    allowed = platform.profiles_for(user.groups)
    profile = _choose_profile(allowed, options)
    if profile is None:
        slug = options.get("profile")
        known = platform.profile(slug) if isinstance(slug, str) else None
        reason = "is not available to you" if known else "does not exist"
        raise OptionsRejected(
            f"The profile {slug!r} {reason}. Choose one of: "
            f"{', '.join(p.slug for p in allowed) or 'none'}.",
            f"{who}: requested {'forbidden' if known else 'unknown'} profile {slug!r}")
    return Grant(profile, platform.pool(profile.pool), team, platform.priority(profile.priority))


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
    environment: dict[str, str]
    volumes: list[dict] = field(default_factory=list)
    volume_mounts: list[dict] = field(default_factory=list)
    extra_pod_config: dict[str, Any] = field(default_factory=dict)
    lifecycle_hooks: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def trait_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))


def profile_env(grant: Grant) -> dict[str, str]:
    """Environment that tells the notebook what it runs on."""
    pool, profile = grant.pool, grant.profile
    return {
        "JUPYTERHUB_GPU_PROFILE": profile.slug,
        "JUPYTERHUB_GPU_MODEL": pool.gpu.name,
        "JUPYTERHUB_GPU_SHARING": pool.sharing.mode.value,
        "JUPYTERHUB_GPU_COUNT": str(profile.units),
        "JUPYTERHUB_GPU_MEMORY": f"{pool.unit_memory_gb}GB",
        "JUPYTERHUB_GPU_PREEMPTIBLE": str(pool.spot or grant.priority.preemptible).lower(),
        "JUPYTERHUB_GPU_TEAM": grant.team.name,
        **cull_env(profile),  # idle timeout, max age, GPU-idle rule, grace: for the notices
    }


def _checkpoint_parts(platform: Platform, grant: Grant) -> tuple[list, list, dict]:
    storage = platform.checkpoint_storage
    if not grant.profile.checkpoint.enabled or storage is None:
        return [], [], {}
    volume = {"name": CHECKPOINT_VOLUME,
              "persistentVolumeClaim": {"claimName": storage.claim_name}}
    # {username} is expanded by KubeSpawner to the user's escaped, unique name
    mount = {"name": CHECKPOINT_VOLUME, "mountPath": storage.mount_path,
             "subPath": "{username}"}
    return [volume], [mount], {"CHECKPOINT_DIR": storage.mount_path}


def spawn_settings(platform: Platform, grant: Grant) -> SpawnSettings:
    """The KubeSpawner settings that start ``grant.profile`` for its team."""
    profile, pool, team = grant.profile, grant.pool, grant.team
    gpu = {pool.resource_name: str(profile.units)}
    volumes, mounts, ckpt_env = _checkpoint_parts(platform, grant)
    return SpawnSettings(
        namespace=team.namespace,
        image=profile.image,
        cpu_guarantee=profile.cpu,
        cpu_limit=profile.cpu,
        mem_guarantee=profile.memory_bytes,
        mem_limit=profile.memory_bytes,
        extra_resource_guarantees=dict(gpu),
        extra_resource_limits=dict(gpu),
        node_selector=dict(pool.node_selector),
        tolerations=[t.toleration() for t in pool.taints],
        extra_labels={
            QUEUE_LABEL: team.local_queue,
            PRIORITY_LABEL: grant.priority.name,
            PROFILE_LABEL: profile.slug,
            TEAM_LABEL: team.name,
        },
        environment={**profile_env(grant), **ckpt_env},
        volumes=volumes,
        volume_mounts=mounts,
        extra_pod_config={
            "terminationGracePeriodSeconds": profile.checkpoint.grace_period_seconds
        } if profile.checkpoint.enabled else {},
        # on any stop (preemption, eviction, cull) first SIGTERM the kernels that
        # registered a checkpoint callback, within the grace period
        lifecycle_hooks={"preStop": {"exec": {"command": list(PRESTOP_COMMAND)}}},
    )


def merge_traits(base: Mapping[str, Any], settings: SpawnSettings) -> dict[str, Any]:
    """Admin-configured trait values (``base``) combined with a profile's settings.

    Dicts are merged (the profile wins on a shared key), lists are appended to, and
    everything else is replaced -- KubeSpawner's own ``kubespawner_override`` rules.
    """
    merged: dict[str, Any] = {}
    for name in SpawnSettings.trait_names():
        mine, theirs = getattr(settings, name), base.get(name)
        if isinstance(mine, dict) and isinstance(theirs, dict):
            merged[name] = {**theirs, **mine}
        elif isinstance(mine, list) and isinstance(theirs, list):
            merged[name] = [*theirs, *mine]
        else:
            merged[name] = mine
    return copy.deepcopy(merged)
