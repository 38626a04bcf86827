"""The baseline hub's spawner: plain KubeSpawner, configured as the z2jh 4.4.0 chart
configures it (:mod:`tests.z2jh_chart`, from our Helm values, home storage off: the dev
cluster has no volume provisioner), with a ``profile_list`` that makes the same pods as
GPUSpawner: one entry per (team, profile the team's groups may start), whose
``kubespawner_override`` is what GPUSpawner would set (same namespace, image,
resources, placement, Kueue labels, environment). Written as an admin would write it
by hand: overrides replace the chart's lists, no merging.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jupyterhub_gpu.builders.pod import CHECKPOINT_VOLUME, spawn_settings
from jupyterhub_gpu.contract import POOL_GATE
from jupyterhub_gpu.spec.boot import spawn_patience
from jupyterhub_gpu.spec.grant import UserRef, authorize
from jupyterhub_gpu.spec.model import Platform

#: the overlay of the chart's values both benchmark hubs use
CHART_OVERLAY = {"singleuser": {"storage": {"type": "none"}}}
KUBESPAWNER_USERNAME = "{username}"  # KubeSpawner expands it for each user


def chart_config():
    """``c.KubeSpawner`` as the chart's hub config leaves it (a traitlets Config)."""
    from tests.z2jh_chart import helm_values, kubespawner_config

    return kubespawner_config(helm_values(CHART_OVERLAY))


def baseline_slug(profile: str, team: str) -> str:
    return f"{profile}--{team}"


def _without_pool_gate(settings):
    """A fallback profile's pods carry a scheduling gate of ours that only GPUSpawner
    lifts (it records the pool Kueue chose); KubeSpawner's pods go without it."""
    pod_config = dict(settings.extra_pod_config or {})
    gates = [g for g in pod_config.pop("schedulingGates", []) if g["name"] != POOL_GATE]
    if gates:
        pod_config["schedulingGates"] = gates
    return dataclasses.replace(settings, extra_pod_config=pod_config)


def profile_list(platform: Platform) -> list[dict[str, Any]]:
    """KubeSpawner's ``profile_list`` equivalent to the spec's profiles."""
    entries = []
    for team in platform.teams:
        user = UserRef("baseline", frozenset(team.groups))
        for profile in platform.profiles_for(user.groups):
            if platform.team_for(user.groups) != team:
                continue
            settings = spawn_settings(platform, authorize(platform, user,
                                                          {"profile": profile.slug}),
                                      user.name)
            # one entry for every user: KubeSpawner's own {username} names their
            # checkpoint directory (GPUSpawner names it by user_dir)
            mounts = [dict(m, subPath=KUBESPAWNER_USERNAME) if m["name"] == CHECKPOINT_VOLUME
                      else m for m in settings.volume_mounts]
            settings = dataclasses.replace(settings, volume_mounts=mounts)
            override = {k: v for k, v in dataclasses.asdict(_without_pool_gate(settings))
                        .items() if v is not None and v != [] and v != {}}
            # the start timeout GPUSpawner gives the same profile
            override["start_timeout"] = spawn_patience(platform, profile)
            entries.append({"slug": baseline_slug(profile.slug, team.name),
                            "display_name": f"{profile.display_name} ({team.name})",
                            "kubespawner_override": override})
    return entries
