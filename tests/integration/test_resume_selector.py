"""The resume service (``gpu-resume``) finds GPUSpawner's pods whatever component
label the spawner is configured with."""

from __future__ import annotations

from traitlets.config import Config

from jupyterhub_gpu import resume
from jupyterhub_gpu.contract import COMPONENT_LABEL, PROFILE_LABEL


async def test_resume_lists_the_pods_of_a_spawner_with_its_own_component_label(spawn):
    config = Config()
    config.GPUSpawner.component_label = "gpu-notebook"
    spawner = await spawn("rita", ["experimentation"], "t4-shared", config=config)
    pods = await resume._pods([spawner.namespace])
    mine = [p for p in pods if p["metadata"]["name"] == spawner.pod_name]
    assert mine, f"resume did not list {spawner.pod_name}: {[p['metadata']['name'] for p in pods]}"
    labels = mine[0]["metadata"]["labels"]
    assert (labels[COMPONENT_LABEL], labels[PROFILE_LABEL]) == ("gpu-notebook", "t4-shared")
