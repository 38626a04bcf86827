"""GPUSpawner in the hub deployed from the z2jh 4.4.0 chart with our Helm values
(:mod:`.chart_hub`: ``helm template``, the objects applied, the hub Deployment's
container run with the chart's own ``jupyterhub_config.py``), servers started through
the hub's REST API: for every profile of the cluster spec, the running pod mounts the
user's home PVC -- which KubeSpawner creates as the chart asks -- and the checkpoint
PVC, and keeps every other setting the chart made.

Each PVC gets its volume as on AKS (jupyterhub_gpu/devcluster/storage.py): the home, of
``managed-csi``, an Azure Disk provisioned for the node the scheduler picked and
attached to it by kube-controller-manager's attach-detach controller before the pod
runs; the checkpoint PVC, of ``azurefile-csi``, an Azure Files share."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import pytest
import yaml
from kubernetes_asyncio.client import ApiException

from jupyterhub_gpu.bundle.namespaces import CheckpointVolume, checkpoint_claim
from jupyterhub_gpu.devcluster.storage import DISK_DRIVER, SELECTED_NODE, unique_volume_name
from jupyterhub_gpu.spec.parse import load_platform
from jupyterhub_gpu.spec.quantities import parse_cpu, parse_memory
from tests import z2jh_chart

from . import chart_hub, chart_hubapi
from .conftest import HERE, wait_for

pytestmark = pytest.mark.skipif(
    not z2jh_chart.CHART.is_dir(),
    reason=f"z2jh chart not found at {z2jh_chart.CHART}: the chart is needed beside "
           f"the checkout")

# More of what an admin may put in their own values file (one more `helm -f`), so
# that every dict and list the chart sets has something of the admin's to keep.
ADMIN_VALUES = yaml.safe_load("""
singleuser:
  extraEnv: {TZ: Europe/Amsterdam}
  extraPodConfig: {enableServiceLinks: false}
  lifecycleHooks: {postStart: {exec: {command: ["true"]}}}
  extraTolerations: [{key: example.com/maintenance, operator: Exists, effect: NoSchedule}]
  storage:
    extraVolumes: [{name: datasets, emptyDir: {}}]
    extraVolumeMounts: [{name: datasets, mountPath: /home/jovyan/datasets}]
""")


def _one_profile_per_pool_set() -> list[str]:
    """The first profile of each pool (or fallback pool list). The pod's node selector,
    tolerations and GPU resources come from the pool; profiles of one pool differ only
    in timeouts, priority and groups, which touch no volume. Every example profile's pod is
    rendered under the chart's config offline (tests/unit/test_chart_shape.py); here one
    per pool runs, each on a node of its own."""
    firsts: dict[tuple[str, ...], str] = {}
    for p in yaml.safe_load((HERE / "platform.yaml").read_text())["profiles"]:
        firsts.setdefault(tuple(p.get("pools") or [p["pool"]]), p["slug"])
    return list(firsts.values())


PROFILES = _one_profile_per_pool_set()


@pytest.fixture(scope="module")
def checkpointed_spec(cluster_spec_path, example_spec_path, tmp_path_factory):
    """The cluster spec with the example's checkpointStorage, and checkpoints on (as
    the example's checkpointing profiles have them) for every profile."""
    spec = yaml.safe_load(cluster_spec_path.read_text())
    example = yaml.safe_load(example_spec_path.read_text())
    checkpoint = next(p["checkpoint"] for p in example["profiles"] if "checkpoint" in p)
    spec["checkpointStorage"] = example["checkpointStorage"]
    for profile in spec["profiles"]:
        profile["checkpoint"] = copy.deepcopy(checkpoint)
    path = tmp_path_factory.mktemp("chart") / "platform.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.fixture(scope="module")
async def chart(cluster, checkpointed_spec, tmp_path_factory):
    """The chart's hub with ADMIN_VALUES in the admin's own values file."""
    async with chart_hub.serving(cluster, checkpointed_spec,
                                 tmp_path_factory.mktemp("chart-hub"), ADMIN_VALUES) as served:
        yield served


@dataclass
class Storage:
    """PVCs a test made, or KubeSpawner made for it; all deleted at the end (their
    volumes go with them: reclaim policy Delete)."""

    kube: object
    claims: list[tuple[str, str]] = field(default_factory=list)

    async def claim(self, pvc: dict) -> None:
        """Create ``pvc`` (unless it exists)."""
        namespace, name = pvc["metadata"]["namespace"], pvc["metadata"]["name"]
        try:
            await self.kube.core.create_namespaced_persistent_volume_claim(namespace, pvc)
            self.claims.append((namespace, name))
        except ApiException as e:
            if e.status != 409:
                raise

    def home(self, namespace: str, claim: str) -> None:
        """The home PVC KubeSpawner will create (``singleuser.storage``)."""
        self.claims.append((namespace, claim))

    async def delete_all(self) -> None:
        for namespace, name in self.claims:
            await self.kube.core.delete_namespaced_persistent_volume_claim(name, namespace)


@pytest.fixture(scope="module")
async def checkpoint_claims(kube, checkpointed_spec):
    """The checkpoint PVC the bundle ships (config/team-namespaces.yaml) in every team
    namespace (each gets its Azure Files share when the binder asks)."""
    platform = load_platform(checkpointed_spec)
    storage = Storage(kube)
    for team in platform.teams:
        await storage.claim(checkpoint_claim(platform, team, CheckpointVolume()))
    yield platform
    await storage.delete_all()


@pytest.fixture
async def home_storage(kube):
    storage = Storage(kube)
    yield storage
    await storage.delete_all()  # the pods are gone or going: the PVCs follow them


async def _quota_free(kube, namespace: str) -> bool:
    """No Workload of an earlier test still holds quota in the team's queue."""
    def holds(wl):
        conds = {c["type"]: c["status"] for c in wl.get("status", {}).get("conditions", [])}
        return conds.get("QuotaReserved") == "True" and conds.get("Finished") != "True"
    return not any(holds(wl) for wl in await kube.workloads(namespace))


def _by_name(items: list[dict]) -> dict[str, dict]:
    return {item["name"]: item for item in items}


@pytest.mark.parametrize("slug", PROFILES)
async def test_profile_pod_mounts_the_chart_home_and_the_checkpoint_volume(
        slug, chart, kube, checkpoint_claims, home_storage):
    hub, http = chart
    platform = checkpoint_claims
    profile = platform.profile(slug)
    group = (profile.allowed_groups or platform.teams[0].groups)[0]
    team, user = platform.team_for({group}), f"home-{slug}"
    # KubeSpawner's pvc_name_template, claim-{user_server}
    home_storage.home(team.namespace, f"claim-{user}")
    await wait_for(lambda: _quota_free(kube, team.namespace), timeout=120,
                   what=f"earlier tests' quota in {team.namespace} to be released")
    # An earlier test's node, empty since its server stopped, is being removed: a pod
    # bound to it in that moment is evicted by Karpenter ("Empty"). A new node each time.
    for name in profile.pool_names:
        await wait_for(lambda: kube.pool_is_empty(name), timeout=120,
                       what=f"pool {name}'s earlier node to go")
    await chart_hubapi.add_user(http, hub, user, [group])
    assert await chart_hubapi.start_server(http, hub, user, slug) in (201, 202)
    try:
        await wait_for(lambda: chart_hubapi.ready(http, hub, user), timeout=180,
                       what=f"{user}'s server")
        await _check_pod(kube, platform, slug, user, hub.values)
    finally:
        await chart_hubapi.stop_server(http, hub, user)


async def _check_pod(kube, platform, slug, user, chart_values) -> None:
    """The running server's pod, home claim and volume, as the chart and the profile
    made them."""
    profile = platform.profile(slug)
    group = (profile.allowed_groups or platform.teams[0].groups)[0]
    team, pool = platform.team_for({group}), platform.pool(profile.pool)
    storage = z2jh_chart.get(chart_values, "singleuser.storage")
    claim_name = f"claim-{user}"
    (raw,) = (await kube.core.list_namespaced_pod(
        team.namespace, label_selector=f"hub.jupyter.org/username={user}")).items
    pod = kube.api_client.sanitize_for_serialization(raw)
    assert pod["status"]["phase"] == "Running"
    volumes = _by_name(pod["spec"]["volumes"])
    (notebook,) = pod["spec"]["containers"]
    mounts = _by_name(notebook["volumeMounts"])
    home = f"volume-{user}"  # the chart's volumeNameTemplate, volume-{user_server}
    assert volumes[home]["persistentVolumeClaim"] == {"claimName": claim_name}
    assert mounts[home]["mountPath"] == storage["homeMountPath"]
    assert "subPath" not in mounts[home]
    ckpt = platform.checkpoint_storage
    assert volumes["checkpoints"]["persistentVolumeClaim"] == {"claimName": ckpt.claim_name}
    assert (mounts["checkpoints"]["mountPath"], mounts["checkpoints"]["subPath"]) == (
        ckpt.mount_path, user)
    assert volumes["datasets"] == {"name": "datasets", "emptyDir": {}}
    assert mounts["datasets"]["mountPath"] == "/home/jovyan/datasets"

    claim = await kube.core.read_namespaced_persistent_volume_claim(claim_name,
                                                                    team.namespace)
    assert claim.status.phase == "Bound"  # KubeSpawner made it as the chart asked
    assert (claim.spec.storage_class_name, claim.spec.access_modes,
            claim.spec.resources.requests["storage"]) == (
        "managed-csi", ["ReadWriteOnce"], storage["capacity"])
    # an Azure Disk, provisioned for the pod's node and attached there before it ran
    node = await kube.core.read_node(pod["spec"]["nodeName"])
    disk = kube.api_client.sanitize_for_serialization(
        await kube.core.read_persistent_volume(claim.spec.volume_name))
    assert claim.metadata.annotations[SELECTED_NODE] == node.metadata.name
    assert disk["spec"]["csi"]["driver"] == DISK_DRIVER
    assert unique_volume_name(disk) in {v.name for v in node.status.volumes_attached}

    # every other trait the chart set and a profile touches: the chart's part is kept
    tolerations = pod["spec"]["tolerations"]
    chart_tolerations = [*z2jh_chart.get(chart_values, "scheduling.userPods.tolerations"),
                         *ADMIN_VALUES["singleuser"]["extraTolerations"]]
    assert tolerations[:3] == chart_tolerations
    assert all(t.toleration() in tolerations for t in pool.taints)
    labels = pod["metadata"]["labels"]
    assert labels["hub.jupyter.org/network-access-hub"] == "true"
    assert labels["kueue.x-k8s.io/queue-name"] == team.local_queue
    assert pod["spec"]["nodeSelector"] == pool.node_selector
    env = {e["name"]: e.get("value") for e in notebook["env"]}
    assert (env["TZ"], env["JUPYTERHUB_GPU_PROFILE"], env["CHECKPOINT_DIR"]) == (
        "Europe/Amsterdam", slug, ckpt.mount_path)
    assert set(notebook["lifecycle"]) == {"postStart", "preStop"}
    assert pod["spec"]["enableServiceLinks"] is False
    assert pod["spec"]["terminationGracePeriodSeconds"] == (
        profile.checkpoint.grace_period_seconds)
    resources = notebook["resources"]
    assert parse_cpu(resources["requests"]["cpu"]) == profile.cpu  # not the chart's 1
    assert parse_memory(resources["limits"]["memory"]) == profile.memory_bytes
    gpu = {r: n for r, n in resources["limits"].items() if r.startswith("nvidia.com/")}
    assert gpu == pool.gpu_resources(profile.units)  # none for a CPU profile
    assert notebook["image"] == profile.image
    assert pod["metadata"]["namespace"] == team.namespace
