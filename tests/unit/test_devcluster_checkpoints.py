"""The dev cluster gives each team's checkpoint PVC a volume (nothing provisions one
there, and the scheduler places no pod whose PVC is unbound)."""

from __future__ import annotations

from pathlib import Path

from jupyterhub_gpu.bundle.namespaces import team_objects
from jupyterhub_gpu.devcluster.bootstrap import checkpoint_volumes
from jupyterhub_gpu.spec.parse import load_platform

CLUSTER_SPEC = Path(__file__).parent.parent / "integration" / "platform.yaml"


def test_each_teams_checkpoint_claim_comes_after_a_volume_reserved_for_it(platform):
    objects = checkpoint_volumes(platform)
    claims = [o for o in team_objects(platform) if o["kind"] == "PersistentVolumeClaim"]
    assert claims and [o for o in objects if o["kind"] == "PersistentVolumeClaim"] == claims
    for volume, claim in zip(objects[::2], objects[1::2]):
        assert volume["kind"] == "PersistentVolume"
        spec = volume["spec"]
        assert spec["claimRef"] == {"namespace": claim["metadata"]["namespace"],
                                    "name": claim["metadata"]["name"]}
        assert (spec["storageClassName"], spec["accessModes"], spec["capacity"]["storage"]) == (
            claim["spec"]["storageClassName"], claim["spec"]["accessModes"],
            claim["spec"]["resources"]["requests"]["storage"])
    assert len({o["metadata"]["name"] for o in objects[::2]}) == len(platform.teams)


def test_a_spec_without_checkpoint_storage_gets_none():
    cluster = load_platform(CLUSTER_SPEC)  # the cluster tier's: its tests make their own
    assert cluster.checkpoint_storage is None
    assert checkpoint_volumes(cluster) == []
