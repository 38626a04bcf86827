"""Least privilege for every pod in a team namespace (issue #25): the notebook pod
GPUSpawner makes under the z2jh chart's config meets Pod Security "restricted", and
notebooks and jobs of one user share one checkpoint directory, which no other user's
name can reach. (Admission by the real API server: tests/integration/test_pod_security.py.)"""

from __future__ import annotations

import re

import pytest
from kubespawner.slugs import safe_slug

from jupyterhub_gpu.builders.pod import (RESTRICTED_CONTAINER, RESTRICTED_POD,
                                         USER_DIR_HASH_DIGITS, user_dir)
from tests import z2jh_chart

chart = pytest.mark.skipif(
    not z2jh_chart.REFERENCE.is_dir(),
    reason=f"z2jh reference data not found at {z2jh_chart.REFERENCE}: the chart's "
           f"default values are needed beside the checkout")


async def _notebook_pod(make_spawner, values=None, spec=True) -> dict:
    from kubernetes_asyncio.client import ApiClient

    config = z2jh_chart.kubespawner_config(z2jh_chart.helm_values(*([values] if values else [])))
    spawner = make_spawner(user="alice", groups=["ml-eng"], config=config, spec=spec)
    if spec:
        await spawner._run_apply_user_options({"profile": "a100-training"})
    async with ApiClient() as client:
        pod = client.sanitize_for_serialization(await spawner.get_pod_manifest())
    await spawner.api.api_client.close()
    return pod


@chart
async def test_the_charts_notebook_pod_is_restricted(make_spawner):
    """z2jh 4.4.0 gives the container uid 1000 and allowPrivilegeEscalation false and
    the pod fsGroup 100; GPUSpawner adds runAsNonRoot, the RuntimeDefault seccomp
    profile and drops every capability. Our values turn off the chart's privileged
    metadata-blocking init container."""
    pod = await _notebook_pod(make_spawner)
    assert pod["spec"]["securityContext"] == {"fsGroup": 100, **RESTRICTED_POD}
    (notebook,) = pod["spec"]["containers"]
    assert notebook["securityContext"] == {"runAsUser": 1000, **RESTRICTED_CONTAINER}
    assert not pod["spec"].get("initContainers")


@chart
async def test_the_charts_default_metadata_block_is_a_privileged_init_container(make_spawner):
    """What our values turn off: with the chart's default blockWithIptables the pod
    gets a root, privileged init container, which "restricted" (and "baseline")
    refuse."""
    values = {"singleuser": {"cloudMetadata": {"blockWithIptables": True}}}
    pod = await _notebook_pod(make_spawner, values)
    (init,) = pod["spec"]["initContainers"]
    assert init["name"] == z2jh_chart.METADATA_BLOCK_CONTAINER
    assert init["securityContext"]["privileged"] is True
    assert z2jh_chart.helm_values()["singleuser"]["cloudMetadata"]["blockWithIptables"] is False


@chart
async def test_an_admins_looser_setting_does_not_loosen_a_gpu_pod(make_spawner):
    values = {"singleuser": {"allowPrivilegeEscalation": True}}
    pod = await _notebook_pod(make_spawner, values)
    assert pod["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] is False


@chart
async def test_without_a_spec_gpuspawner_is_kubespawner(make_spawner):
    """No spec, no profile: the pod is KubeSpawner's as the chart configures it."""
    pod = await _notebook_pod(make_spawner, spec=False)
    assert pod["spec"]["securityContext"] == {"fsGroup": 100}


PLAIN = ["alice", "bob-smith", "a1", "x" * 48]
# each pair: a name and one that looks like it (KubeSpawner's slug of it, or a
# near-identical spelling), which must get different directories
LOOK_ALIKES = [
    ("Alice", "alice"),
    ("alice.smith", "alice-smith"),
    ("alice_smith", "alice-smith"),
    ("alice.smith", safe_slug("alice.smith", max_length=48)),
    ("a" * 49, "a" * 48),
    ("a" * 60, safe_slug("a" * 60, max_length=48)),
    ("a" * 60 + "b", "a" * 60 + "c"),
    ("alice--x", "alice-x"),
    ("../bob", "bob"),
    ("", "x"),
]


@pytest.mark.parametrize("name", PLAIN)
def test_a_plain_name_is_its_own_directory_as_kubespawner_names_it(name):
    assert user_dir(name) == name == safe_slug(name, max_length=48)


@pytest.mark.parametrize("one, other", LOOK_ALIKES)
def test_look_alike_names_get_different_directories(one, other):
    assert user_dir(one) != user_dir(other)
    for name in (one, other):
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+|---[0-9a-f]+)*", user_dir(name)), name
        assert len(user_dir(name)) <= 24 + 3 + USER_DIR_HASH_DIGITS


def test_a_hashed_directory_carries_128_bits():
    """KubeSpawner's safe slug hashes with 8 hex digits (32 bits): a name whose slug
    is another user's is found by trying some 2**32 names. Ours carries 128."""
    digest = user_dir("Alice.Smith").rsplit("---", 1)[1]
    assert len(digest) == USER_DIR_HASH_DIGITS == 32
