"""The inputs Kueue's verdicts are taken on, one table for both tiers.

The unit tier (tests/unit/test_fit.py, test_fallback_pod.py, test_bundle_autoscaler.py)
takes Kueue's verdict on these pods from the model in tests/kueue_admission.py; the
cluster tier (tests/integration/test_kueue_model.py) holds the real Kueue to the same
verdicts on the same pods and the same ResourceFlavors, built from the bundle.

``python -m tests.kueue_cases DIR`` prints every case's pod as JSON (``{case id: pod}``;
the NAP spec is written into DIR): the cluster tier renders them in a process of its
own, with no ``KUBECONFIG``: KubeSpawner loads a kubeconfig when it is constructed (the
cluster tier's names one that exists only while its cluster runs), and rendering
closes KubeSpawner's shared client. No request is sent (:mod:`jupyterhub_gpu.hub.render`).
"""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from jupyterhub_gpu.builders import kueue
from jupyterhub_gpu.spec.model import Platform
from jupyterhub_gpu.spec.parse import load_platform

from . import kueue_admission

REPO = Path(__file__).resolve().parent.parent
EXAMPLE_SPEC = REPO / "config" / "platform.yaml"
NAP = "node-auto-provisioning"
#: the example's pool moved to Node Auto Provisioning in the NAP case
NAP_POOL = "a100spot"


def nap_spec(spec: dict, *names: str) -> dict:
    """``spec`` with the pools ``names`` on Node Auto Provisioning, as whole-GPU pools
    (a CPU-only pool stays CPU-only)."""
    for pool in spec["pools"]:
        if pool["name"] in names:
            pool["autoscaler"] = NAP
            if pool["gpu"] != "none":
                pool["sharing"] = {"mode": "exclusive"}
    return spec


@dataclass(frozen=True)
class Case:
    """The pod of profile ``slug`` started by ``user`` of ``group``, on the example spec,
    or (``nap``) on the example with :data:`NAP_POOL` on Node Auto Provisioning, whose
    pods select ``karpenter.sh/nodepool`` where the others select the AKS agent pool."""

    slug: str
    user: str
    group: str
    nap: bool = False

    @property
    def id(self) -> str:
        return f"{self.slug}-nap" if self.nap else self.slug

    def spec_path(self, directory: Path) -> Path:
        """The spec file of this case (written into ``directory`` for the NAP case)."""
        if not self.nap:
            return EXAMPLE_SPEC
        path = directory / f"{self.id}.yaml"
        path.write_text(yaml.safe_dump(nap_spec(yaml.safe_load(EXAMPLE_SPEC.read_text()),
                                                NAP_POOL)))
        return path

    async def pod(self, directory: Path) -> dict:
        """The pod GPUSpawner renders for this case."""
        from jupyterhub_gpu.hub.render import render_pod

        return await render_pod(str(self.spec_path(directory)), self.user, [self.group],
                                self.slug)

    def platform(self, directory: Path) -> Platform:
        return load_platform(self.spec_path(directory))


def _example_cases() -> list[Case]:
    platform = load_platform(EXAMPLE_SPEC)
    return [Case(p.slug, "alice", (p.allowed_groups or platform.teams[0].groups)[0])
            for p in platform.profiles]


#: every profile of the example spec; and the fallback profile with one pool on NAP
CASES = (*_example_cases(), Case("a100-training", "max", "ml-eng", nap=True))


def flavors(platform: Platform) -> list[dict]:
    """The bundle's ResourceFlavors, one per pool, in the ClusterQueues' order."""
    return [kueue.resource_flavor(p) for p in kueue.ordered_pools(platform)]


def model_verdict(pod: dict, platform: Platform) -> list[str]:
    """The flavors the model says Kueue may give ``pod`` in a ClusterQueue with every
    pool's flavor in one resource group (as the bundle's ClusterQueues have them)."""
    candidates = flavors(platform)
    keys = {k for f in candidates for k in f["spec"]["nodeLabels"]}
    return [f["metadata"]["name"] for f in candidates
            if kueue_admission.may_admit(pod, f, keys)]


async def _all_pods(directory: Path) -> dict[str, dict]:
    return {case.id: await case.pod(directory) for case in CASES}


if __name__ == "__main__":
    json.dump(asyncio.run(_all_pods(Path(sys.argv[1]))), sys.stdout)
