"""GPUSpawner configured the way the z2jh 4.4.0 chart configures KubeSpawner from our
Helm values (tests/z2jh_chart.py), rendered offline with KubeSpawner's own pod code."""

from __future__ import annotations

import pytest

from jupyterhub_gpu.builders.pod import CHECKPOINT_VOLUME, SpawnSettings
from tests import z2jh_chart

pytestmark = pytest.mark.skipif(
    not z2jh_chart.REFERENCE.is_dir(),
    reason=f"z2jh reference data not found at {z2jh_chart.REFERENCE}: the chart's "
           f"default values are needed beside the checkout")


def test_the_chart_fixture_covers_every_trait_gpuspawner_sets():
    covered = z2jh_chart.TRAITS | z2jh_chart.CHART_LEAVES_UNSET
    assert set(SpawnSettings.trait_names()) | {"start_timeout"} <= covered
    assert not z2jh_chart.TRAITS & z2jh_chart.CHART_LEAVES_UNSET


def test_the_chart_shapes_our_values_into_dicts_and_lists():
    ks = z2jh_chart.kubespawner_config(z2jh_chart.helm_values()).KubeSpawner
    assert ks.volumes == {"volume-{user_server}": {
        "name": "volume-{user_server}", "persistentVolumeClaim": {"claimName": "{pvc_name}"}}}
    assert ks.volume_mounts == {"volume-{user_server}": {
        "mountPath": "/home/jovyan", "name": "volume-{user_server}", "subPath": None}}
    assert (ks.storage_pvc_ensure, ks.storage_class, ks.storage_capacity,
            ks.storage_access_modes) == (True, "azurefile-csi-premium", "100Gi",
                                         ["ReadWriteMany"])
    assert ks.pvc_name_template == "claim-{username}"  # one home for all the user's servers
    image = z2jh_chart.helm_values()["singleuser"]["image"]
    assert ks.image == f"{image['name']}:{image['tag']}"  # the chart joins name and tag
    assert (ks.cpu_guarantee, ks.cpu_limit, ks.mem_guarantee, ks.mem_limit) == (1, 2, "4G", "8G")
    assert ks.start_timeout == 2460 and ks.namespace == "jupyterhub"
    assert [t["key"] for t in ks.tolerations] == ["hub.jupyter.org/dedicated",
                                                  "hub.jupyter.org_dedicated"]
    values = z2jh_chart.helm_values()
    assert ks.environment == values["singleuser"]["extraEnv"] == {
        "JUPYTERHUB_GPU_PROMETHEUS_URL": values["hub"]["extraEnv"]["JUPYTERHUB_GPU_PROMETHEUS_URL"]}
    for trait in ("lifecycle_hooks", "extra_pod_config", "node_selector",
                  "extra_resource_limits", "extra_resource_guarantees"):
        assert ks[trait] == {}, trait


def test_extra_volumes_as_lists_are_keyed_like_the_chart_keys_them():
    values = z2jh_chart.helm_values({"singleuser": {"storage": {
        "type": "static", "static": {"pvcName": "shared-home"},
        "extraVolumes": [{"name": "data", "emptyDir": {}}],
        "extraVolumeMounts": [{"name": "data", "mountPath": "/data"},
                              {"name": "data", "mountPath": "/data2"}]}}})
    ks = z2jh_chart.kubespawner_config(values).KubeSpawner
    assert ks.volumes == {
        "home": {"name": "home", "persistentVolumeClaim": {"claimName": "shared-home"}},
        "data": {"name": "data", "emptyDir": {}}}
    assert ks.volume_mounts == {
        "home": {"mountPath": "/home/jovyan", "name": "home", "subPath": "{username}"},
        "0-data": {"name": "data", "mountPath": "/data"},
        "1-data": {"name": "data", "mountPath": "/data2"}}
    assert "storage_pvc_ensure" not in ks


def test_a_null_in_a_values_file_removes_the_default_as_helm_does():
    values = z2jh_chart.helm_values({"singleuser": {"extraLabels": None}})
    assert "extra_labels" not in z2jh_chart.kubespawner_config(values).KubeSpawner


def _group_for(platform, profile) -> str:
    return (profile.allowed_groups or platform.teams[0].groups)[0]


async def test_every_example_profile_pod_mounts_the_chart_home_volume(make_spawner, platform):
    from kubernetes_asyncio.client import ApiClient

    config = z2jh_chart.kubespawner_config(z2jh_chart.helm_values())
    for profile in platform.profiles:
        spawner = make_spawner(user="alice", groups=[_group_for(platform, profile)],
                               config=config)
        await spawner._run_apply_user_options({"profile": profile.slug})
        async with ApiClient() as client:
            pod = client.sanitize_for_serialization(await spawner.get_pod_manifest())
        await spawner.api.api_client.close()
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        mounts = {m["name"]: m for m in pod["spec"]["containers"][0]["volumeMounts"]}
        assert volumes["volume-alice"]["persistentVolumeClaim"] == {
            "claimName": "claim-alice"}, profile.slug
        assert mounts["volume-alice"]["mountPath"] == "/home/jovyan", profile.slug
        assert (CHECKPOINT_VOLUME in volumes) == profile.checkpoint.enabled, profile.slug
        if profile.checkpoint.enabled:
            assert mounts[CHECKPOINT_VOLUME]["subPath"] == "alice"
        tolerations = [t["key"] for t in pod["spec"]["tolerations"]]
        assert tolerations[:2] == ["hub.jupyter.org/dedicated", "hub.jupyter.org_dedicated"]
        labels = pod["metadata"]["labels"]
        assert labels["hub.jupyter.org/network-access-hub"] == "true"
        assert labels["kueue.x-k8s.io/queue-name"] == spawner.gpu_grant.team.local_queue


async def test_a_fallback_pod_keeps_the_charts_required_node_purpose(make_spawner, platform):
    """With ``matchNodePurpose: require`` the chart requires a node-purpose term; the
    fallback profile's pools are added to each of its terms, not ORed beside them."""
    from kubernetes_asyncio.client import ApiClient

    values = z2jh_chart.helm_values(
        {"scheduling": {"userPods": {"nodeAffinity": {"matchNodePurpose": "require"}}}})
    config = z2jh_chart.kubespawner_config(values)
    assert config.KubeSpawner.node_affinity_required == [z2jh_chart.NODE_PURPOSE_TERM]
    spawner = make_spawner(user="max", groups=["ml-eng"], config=config)
    await spawner._run_apply_user_options({"profile": "a100-training"})
    async with ApiClient() as client:
        pod = client.sanitize_for_serialization(await spawner.get_pod_manifest())
    await spawner.api.api_client.close()
    terms = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [
        *z2jh_chart.NODE_PURPOSE_TERM["matchExpressions"],
        {"key": "kubernetes.azure.com/agentpool", "operator": "In",
         "values": ["a100spot", "a100"]}]}]
