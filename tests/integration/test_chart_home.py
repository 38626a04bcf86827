"""GPUSpawner in the hub deployed from the z2jh 4.4.0 chart with our Helm values
(:mod:`.chart_hub`: ``helm template``, the objects applied, the hub Deployment's
container run with the chart's own ``jupyterhub_config.py``), servers started through
the hub's REST API: for every profile of the cluster spec, the running pod mounts the
user's home PVC -- which KubeSpawner creates as the chart asks -- and the checkpoint
PVC, and keeps every other setting the chart made.

Each PVC gets its volume as on AKS (jupyterhub_gpu/devcluster/storage.py): the home, of
``azurefile-csi-premium`` (ReadWriteMany), an Azure Files share the binder asks for at
once and no node attaches, so that the user's jobs and other servers mount it on any
node; the checkpoint PVC, of ``azurefile-csi``, an Azure Files share too.

Two hubs serve the module, one after the other (:mod:`.hub_image`): one in our hub
image's Python environment (the z2jh 4.4.0 hub image's pins -- JupyterHub 5.5.0,
KubeSpawner 7.0.0 -- plus what ``config/Dockerfile`` adds), what an admin's hub pod
runs, which starts every profile; and one in this environment (the newest pins, as the
rest of the cluster tier), which starts one profile only: the profiles differ in what
GPUSpawner gives the pod, not in what JupyterHub or KubeSpawner do with it, and one
profile shows the chart's config and GPUSpawner work with those versions (a hub start
and a server start cost CI about half a minute each). Deleting a named server runs
under both: that is where KubeSpawner 7.0.0 and 7.1 differ. Every server of a user mounts
the user's one home claim, ``claim-{username}``, which removing a named server keeps and
deleting the user deletes."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import pytest
import yaml
from kubernetes_asyncio.client import ApiException

from jupyterhub_gpu.bundle.namespaces import CheckpointVolume, checkpoint_claim
from jupyterhub_gpu.devcluster.storage import FILE_DRIVER, SELECTED_NODE, unique_volume_name
from jupyterhub_gpu.spec.parse import load_platform
from jupyterhub_gpu.spec.quantities import parse_cpu, parse_memory
from tests import z2jh_chart

from . import chart_hub, chart_hubapi, hub_image
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
#: (the hub's Python environment, profile): every profile under the image's pins, the
#: first under the newest (see the module's docstring)
CASES = [*((hub_image.IMAGE_PINS, slug) for slug in PROFILES), (hub_image.VENV_PINS, PROFILES[0])]


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
async def chart(request, cluster, checkpointed_spec, tmp_path_factory):
    """The chart's hub with ADMIN_VALUES in the admin's own values file, in the Python
    environment ``request.param`` names (:mod:`.hub_image`)."""
    async with chart_hub.serving(cluster, checkpointed_spec,
                                 tmp_path_factory.mktemp("chart-hub"), ADMIN_VALUES,
                                 hub_image.python_bin(request.param)) as served:
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
        """Delete every claim still there (KubeSpawner may have deleted one)."""
        for namespace, name in self.claims:
            try:
                await self.kube.core.delete_namespaced_persistent_volume_claim(name, namespace)
            except ApiException as e:
                if e.status != 404:
                    raise


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


# scope="module": pytest then orders the module's tests by hub (and the named-server
# test's too), so each hub starts once
@pytest.mark.parametrize(("chart", "slug"), CASES, indirect=["chart"], scope="module")
async def test_profile_pod_mounts_the_chart_home_and_the_checkpoint_volume(
        slug, chart, kube, checkpoint_claims, home_storage):
    hub, http = chart
    platform = checkpoint_claims
    profile = platform.profile(slug)
    group = (profile.allowed_groups or platform.teams[0].groups)[0]
    team, user = platform.team_for({group}), f"home-{slug}"
    # the values' pvcNameTemplate, claim-{username}
    home_storage.home(team.namespace, f"claim-{user}")
    await _room_for(kube, profile, team)
    await chart_hubapi.add_user(http, hub, user, [group])
    assert await chart_hubapi.start_server(http, hub, user, slug) in (201, 202)
    try:
        await wait_for(lambda: chart_hubapi.ready(http, hub, user), timeout=180,
                       what=f"{user}'s server")
        await _check_pod(kube, platform, slug, user, hub.values)
    finally:
        await chart_hubapi.stop_server(http, hub, user)


NAMED_SERVER, NAMED_PROFILE = "scratchpad", "cpu"


# KubeSpawner's KubeSpawner.delete_forever (jupyterhub/kubespawner,
# kubespawner/spawner.py), which JupyterHub calls when a named server is removed and,
# for each of the user's servers, when the user is deleted: 7.0.0 (the hub image's)
# skips a named server's claim when '{servername}' is not in pvc_name_template, 7.1.0
# when '{user_server}' is not (commit d11546e). KubeSpawner's default, claim-{user_server},
# gave each named server an empty home of its own, which 7.0.0 left behind on removal;
# the values' claim-{username} names no server: every server mounts the one home, a
# named server's removal keeps it under both versions, and the user's deletion (the
# default server's delete_forever) deletes it.
@pytest.mark.parametrize("chart", [hub_image.IMAGE_PINS, hub_image.VENV_PINS], indirect=True)
async def test_a_named_server_mounts_the_users_one_home_which_goes_only_with_the_user(
        request, chart, kube, checkpoint_claims, home_storage):
    """The named server mounts the user's home claim (the default server's); removing
    the server keeps it, and no claim of the server's own is left; deleting the user
    deletes the home."""
    hub, http = chart
    platform = checkpoint_claims
    profile = platform.profile(NAMED_PROFILE)
    group = (profile.allowed_groups or platform.teams[0].groups)[0]
    team = platform.team_for({group})
    user = f"named-{request.node.callspec.params['chart']}"  # one per hub: a disk the
    # first hub left must not be the second's
    home = f"claim-{user}"
    home_storage.home(team.namespace, home)  # deleted at the end if still there
    await _room_for(kube, profile, team)
    await chart_hubapi.add_user(http, hub, user, [group])
    assert await chart_hubapi.start_server(http, hub, user, NAMED_PROFILE,
                                           NAMED_SERVER) in (201, 202)
    removed = False
    try:
        await wait_for(lambda: chart_hubapi.ready(http, hub, user, NAMED_SERVER),
                       timeout=180, what=f"{user}'s server {NAMED_SERVER}")
        claim = await _home_claim(kube, team.namespace, user, hub.values)
        home_storage.home(team.namespace, claim)
        assert claim == home, f"{user}/{NAMED_SERVER} mounts a home of its own: {claim}"
        await chart_hubapi.remove_server(http, hub, user, NAMED_SERVER)
        removed = True
        assert await _claim_left(kube, team.namespace, home), (
            f"removing {user}/{NAMED_SERVER} deleted the user's home {home}")
        claims = (await kube.core.list_namespaced_persistent_volume_claim(
            team.namespace)).items
        assert [c.metadata.name for c in claims if user in c.metadata.name] == [home]
        await chart_hubapi.delete_user(http, hub, user)
        assert not await _claim_left(kube, team.namespace, home), (
            f"deleting {user} left their home {home}")
    finally:
        if not removed:
            await chart_hubapi.remove_server(http, hub, user, NAMED_SERVER)


async def _home_claim(kube, namespace: str, user: str, chart_values) -> str:
    """The claim the user's running pod mounts at the chart's home mount path."""
    (raw,) = (await kube.core.list_namespaced_pod(
        namespace, label_selector=f"hub.jupyter.org/username={user}")).items
    pod = kube.api_client.sanitize_for_serialization(raw)
    home = z2jh_chart.get(chart_values, "singleuser.storage.homeMountPath")
    (mount,) = [m for m in pod["spec"]["containers"][0]["volumeMounts"]
                if m["mountPath"] == home]
    (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == mount["name"]]
    return volume["persistentVolumeClaim"]["claimName"]


async def _claim_left(kube, namespace: str, name: str) -> bool:
    """The claim exists and nobody has asked to delete it."""
    try:
        claim = await kube.core.read_namespaced_persistent_volume_claim(name, namespace)
    except ApiException as e:
        if e.status == 404:
            return False
        raise
    return claim.metadata.deletion_timestamp is None


async def _room_for(kube, profile, team) -> None:
    """Wait until no earlier test holds the team's quota or a node of the profile's pools."""
    await wait_for(lambda: _quota_free(kube, team.namespace), timeout=120,
                   what=f"earlier tests' quota in {team.namespace} to be released")
    # An earlier test's node, empty since its server stopped, is being removed: a pod
    # bound to it in that moment is evicted by Karpenter ("Empty"). A new node each time.
    for name in profile.pool_names:
        await wait_for(lambda: kube.pool_is_empty(name), timeout=120,
                       what=f"pool {name}'s earlier node to go")


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
        "azurefile-csi-premium", ["ReadWriteMany"], storage["capacity"])
    # an Azure Files share, made at once (not for a node) and attached to none: pods
    # on any node mount it
    node = await kube.core.read_node(pod["spec"]["nodeName"])
    share = kube.api_client.sanitize_for_serialization(
        await kube.core.read_persistent_volume(claim.spec.volume_name))
    assert SELECTED_NODE not in (claim.metadata.annotations or {})
    assert share["spec"]["csi"]["driver"] == FILE_DRIVER
    assert share["spec"]["accessModes"] == ["ReadWriteMany"]
    assert unique_volume_name(share) not in {v.name for v in node.status.volumes_attached or []}

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
