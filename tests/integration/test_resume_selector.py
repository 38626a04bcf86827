"""The resume service (``gpu-resume``) finds GPUSpawner's pods whatever component
label the spawner is configured with."""

from __future__ import annotations

from traitlets.config import Config

from jupyterhub_gpu.hub import resume
from jupyterhub_gpu.contract import COMPONENT_LABEL, PROFILE_LABEL
from jupyterhub_gpu.hub.render import OfflineHub, OfflineUser, _Group
from jupyterhub_gpu.hub.spawner import GPUSpawner


class OwnLabelSpawner(GPUSpawner):
    """Its own shared watches (KubeSpawner shares them per class): they select its
    label, while the other tests' spawners watch KubeSpawner's default one."""

    reflectors: dict = {}


async def test_resume_lists_the_pods_of_a_spawner_with_its_own_component_label(
        cluster, cluster_spec_path):
    config = Config()
    config.GPUSpawner.platform_file = str(cluster_spec_path)
    config.GPUSpawner.start_timeout = 300
    config.GPUSpawner.component_label = "gpu-notebook"
    spawner = OwnLabelSpawner(user=OfflineUser("rita", [_Group("experimentation")]),
                              hub=OfflineHub(), config=config)
    spawner.user_options = {"profile": "t4-shared"}
    await spawner._run_apply_user_options(spawner.user_options)
    try:
        await spawner.start()
        pods = await resume._pods([spawner.namespace])
    finally:
        await spawner.stop(now=True)
        for reflector in OwnLabelSpawner.reflectors.values():
            await reflector.stop()
    mine = [p for p in pods if p["metadata"]["name"] == spawner.pod_name]
    assert mine, f"resume did not list {spawner.pod_name}: {[p['metadata']['name'] for p in pods]}"
    labels = mine[0]["metadata"]["labels"]
    assert (labels[COMPONENT_LABEL], labels[PROFILE_LABEL]) == ("gpu-notebook", "t4-shared")
