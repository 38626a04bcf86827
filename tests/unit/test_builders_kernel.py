"""The pure GPU-kernel builder: a kernel's pod is the pod a server of its grant gets
(GPU, placement, Kueue labels, namespace, image, environment, checkpoint directory),
with the user's home at the same path, restricted, without a token, running the
kernel launcher; and its NetworkPolicies let its owning server, and only that, reach
it (docs/kernels.md)."""

from __future__ import annotations

import kubernetes_validate
import pytest

from jupyterhub_gpu.builders.job import Home, Identity
from jupyterhub_gpu.builders.kernel import (LAUNCHER_MODULE, SERVER_ONLY_ENV, KernelRequest,
                                            Launch, Owner, build_kernel_pod, check_launch,
                                            kernel_name, kernel_policies)
from jupyterhub_gpu.builders.pod import spawn_settings
from jupyterhub_gpu.bundle import namespaces
from jupyterhub_gpu.contract import (COMPONENT_LABEL, ENV_CHECKPOINT_DIR, ENV_IDLE_TIMEOUT,
                                     ENV_MAX_AGE, ENV_PROFILE, KERNEL_COMPONENT, KERNEL_PORTS,
                                     KERNEL_RESPONSE_PORT, POOL_GATE, PRIORITY_LABEL,
                                     QUEUE_LABEL, SERVERNAME_KEY, SINGLEUSER_COMPONENT,
                                     USERNAME_KEY)
from jupyterhub_gpu.devcluster.build import K8S_VERSION
from jupyterhub_gpu.spec.grant import UserRef, authorize

SCHEMA_VERSION = K8S_VERSION.lstrip("v").rsplit(".", 1)[0]
ALICE = UserRef("alice", frozenset({"ml-eng"}))
KERNEL_ID = "5f0c2d9e-8b1a-4c3e-9d7f-0a1b2c3d4e5f"
LAUNCH = Launch(KERNEL_ID, "10.244.1.7:52699", "MCowBQYDK2VuAyEA" + "A" * 28)
OWNER = Owner("alice", "")
HOME = Home("claim-alice", "/home/jovyan")


def _request(platform, slug: str, **changes) -> KernelRequest:
    fields = {"name": kernel_name("alice", KERNEL_ID), "username": "alice", "owner": OWNER,
              "grant": authorize(platform, ALICE, {"profile": slug}), "launch": LAUNCH,
              "home": HOME, "identity": Identity(uid=1000, gid=100, fs_group=100)}
    return KernelRequest(**{**fields, **changes})


def _env(pod: dict) -> dict:
    """name -> value, or as the server's settings give a variable from a field:
    ``{"valueFrom": ...}``"""
    return {e["name"]: e["value"] if "value" in e else {"valueFrom": e["valueFrom"]}
            for e in pod["spec"]["containers"][0]["env"]}


@pytest.mark.parametrize("slug", ["t4-shared", "a100-mig-3g", "a100-training", "a100-spot"])
def test_a_kernel_pod_is_the_servers_pod_of_its_grant(platform, slug):
    req = _request(platform, slug)
    pod = build_kernel_pod(platform, req)
    kubernetes_validate.validate(pod, SCHEMA_VERSION, strict=True)
    server = spawn_settings(platform, req.grant, "alice")
    spec, (container,) = pod["spec"], pod["spec"]["containers"]
    assert pod["metadata"]["namespace"] == server.namespace == "jhub-ml-eng"
    assert container["image"] == server.image == req.grant.profile.image
    for key, value in server.extra_labels.items():  # queue, priority, profile, team
        assert pod["metadata"]["labels"][key] == value
    assert {QUEUE_LABEL, PRIORITY_LABEL} <= set(server.extra_labels)
    gpu = req.grant.pool.gpu_resources(req.grant.profile.units)
    assert gpu and all(container["resources"][kind][name] == count
                       for kind in ("requests", "limits") for name, count in gpu.items())
    assert spec["nodeSelector"] == server.node_selector
    assert spec["tolerations"] == server.tolerations
    assert container["lifecycle"] == server.lifecycle_hooks  # the checkpoint preStop hook
    env = _env(pod)
    assert env[ENV_PROFILE] == slug
    for name, value in server.environment.items():
        if name != ENV_IDLE_TIMEOUT:
            assert env.get(name) == (None if name in SERVER_ONLY_ENV else value), name
    assert env[ENV_IDLE_TIMEOUT] == str(req.grant.profile.kernel_idle_timeout_seconds)
    if req.grant.profile.checkpoint.enabled:
        assert env[ENV_CHECKPOINT_DIR] == platform.checkpoint_storage.mount_path
        assert (spec["terminationGracePeriodSeconds"]
                == req.grant.profile.checkpoint.grace_period_seconds)


def test_a_fallback_profiles_kernel_waits_for_its_pool_as_its_server_would(platform):
    req = _request(platform, "a100-training")
    assert req.grant.fallbacks  # a100spot, then a100
    spec = build_kernel_pod(platform, req)["spec"]
    assert spec["schedulingGates"] == [{"name": POOL_GATE}]
    terms = spec["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == spawn_settings(platform, req.grant, "alice").node_affinity_required
    assert spec["nodeSelector"] == {} and spec["tolerations"] == []


def test_the_kernel_runs_as_the_servers_user_with_no_privilege_and_no_token(platform):
    pod = build_kernel_pod(platform, _request(platform, "t4-shared"))
    spec, (container,) = pod["spec"], pod["spec"]["containers"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["enableServiceLinks"] is False
    assert spec["restartPolicy"] == "Never"
    assert spec["securityContext"] == {"runAsNonRoot": True,
                                       "seccompProfile": {"type": "RuntimeDefault"},
                                       "runAsUser": 1000, "runAsGroup": 100, "fsGroup": 100}
    assert container["securityContext"] == {"allowPrivilegeEscalation": False,
                                            "capabilities": {"drop": ["ALL"]}}
    assert not any(e["name"].startswith("JUPYTERHUB_API") for e in container["env"])


def test_the_users_home_is_where_their_server_has_it(platform):
    pod = build_kernel_pod(platform, _request(platform, "a100-training"))
    spec, (container,) = pod["spec"], pod["spec"]["containers"]
    home = next(v for v in spec["volumes"] if v["persistentVolumeClaim"]["claimName"]
                == "claim-alice")
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts[home["name"]]["mountPath"] == "/home/jovyan"
    assert container["workingDir"] == "/home/jovyan"
    assert len(spec["volumes"]) == 2  # the home and the checkpoint directory
    without = build_kernel_pod(platform, _request(platform, "t4-shared", home=None))
    assert without["spec"]["volumes"] == [] and "workingDir" not in without["spec"][
        "containers"][0]


def test_the_kernel_has_its_own_idle_timeout_and_not_the_servers_rules(platform, example_spec):
    from jupyterhub_gpu.spec.parse import parse_platform

    example_spec["profiles"][0]["kernelIdleTimeout"] = "7m"
    example_spec["profiles"][0]["maxAge"] = "8h"
    changed = parse_platform(example_spec)
    env = _env(build_kernel_pod(changed, _request(changed, "t4-shared")))
    assert env[ENV_IDLE_TIMEOUT] == "420"
    assert ENV_MAX_AGE not in env
    default = _env(build_kernel_pod(platform, _request(platform, "a100-mig-3g")))
    assert default[ENV_IDLE_TIMEOUT] == "900"  # 15 minutes unless the profile says


def test_a_cpu_profile_has_no_gpu_kernel(platform):
    with pytest.raises(ValueError, match="^profile 'cpu' is on a CPU-only pool"):
        build_kernel_pod(platform, _request(platform, "cpu"))


def test_the_container_runs_the_launcher_told_where_to_answer(platform):
    pod = build_kernel_pod(platform, _request(platform, "t4-shared"))
    (container,) = pod["spec"]["containers"]
    assert container["command"] == ["python", "-m", LAUNCHER_MODULE, "--kernel-id", KERNEL_ID,
                                    "--response-address", LAUNCH.response_address,
                                    "--public-key", LAUNCH.public_key]
    assert {p["containerPort"] for p in container["ports"]} == set(KERNEL_PORTS.values())


@pytest.mark.parametrize("launch,field", [
    (Launch("not-a-uuid", "10.0.0.1:52699", LAUNCH.public_key), "kernel_id"),
    (Launch(KERNEL_ID + " --x", "10.0.0.1:52699", LAUNCH.public_key), "kernel_id"),
    (Launch(KERNEL_ID, "10.0.0.1", LAUNCH.public_key), "response_address"),
    (Launch(KERNEL_ID, "10.0.0.1:0", LAUNCH.public_key), "response_address"),
    (Launch(KERNEL_ID, "host;rm -rf:52699", LAUNCH.public_key), "response_address"),
    (Launch(KERNEL_ID, "10.0.0.1:52699", "short"), "public_key"),
    (Launch(KERNEL_ID, "10.0.0.1:52699", "a key with spaces and more of them"), "public_key"),
])
def test_a_launch_that_is_not_what_it_says_is_refused_naming_the_field(launch, field):
    with pytest.raises(ValueError, match=f"^{field}: "):
        check_launch(launch)
    check_launch(LAUNCH)
    check_launch(Launch(KERNEL_ID, "[fd00::7]:52699", LAUNCH.public_key))


def test_kernel_names_are_dns_labels_and_differ_by_kernel():
    long = kernel_name("a" * 80 + "--x", KERNEL_ID)
    assert len(long) <= 63 and long.startswith("kernel-a") and long.endswith("5f0c2d9e8b1a")
    other = kernel_name("alice", "0" * 8 + KERNEL_ID[8:])
    assert kernel_name("alice", KERNEL_ID) == "kernel-alice-5f0c2d9e8b1a" != other
    assert kernel_name("", KERNEL_ID) == "kernel-5f0c2d9e8b1a"


def _selects(policy: dict, labels: dict) -> bool:
    match = policy["spec"]["podSelector"]["matchLabels"]
    return all(labels.get(k) == v for k, v in match.items())


def _peer_matches(rule_peers: list[dict], labels: dict) -> bool:
    return any(all(labels.get(k) == v for k, v in p["podSelector"]["matchLabels"].items())
               for p in rule_peers)


def _server_labels(user: str, server: str) -> dict:
    return {COMPONENT_LABEL: SINGLEUSER_COMPONENT, USERNAME_KEY: user, SERVERNAME_KEY: server}


def test_only_the_owning_server_reaches_its_kernel_and_only_on_the_kernel_ports(platform):
    req = _request(platform, "t4-shared")
    pod_labels = build_kernel_pod(platform, req)["metadata"]["labels"]
    on_kernel, on_server = kernel_policies(req)
    for policy in (on_kernel, on_server):
        kubernetes_validate.validate(policy, SCHEMA_VERSION, strict=True)
        assert policy["metadata"]["namespace"] == "jhub-ml-eng"
        assert len(policy["metadata"]["name"]) <= 63
    owner, sibling = _server_labels("alice", ""), _server_labels("alice", "other")
    stranger = _server_labels("bob", "")
    other_kernel = {**pod_labels, "jupyterhub-gpu/kernel-id": "0" * 8 + KERNEL_ID[8:]}
    assert _selects(on_kernel, pod_labels) and not _selects(on_kernel, other_kernel)
    assert _selects(on_server, owner)
    assert not any(_selects(on_server, x) for x in (sibling, stranger, pod_labels))
    (ingress,) = on_kernel["spec"]["ingress"]
    assert _peer_matches(ingress["from"], owner)
    assert not any(_peer_matches(ingress["from"], x) for x in (sibling, stranger))
    assert {p["port"] for p in ingress["ports"]} == set(KERNEL_PORTS.values())
    (back,) = on_kernel["spec"]["egress"]
    assert _peer_matches(back["to"], owner) and back["ports"] == [
        {"port": KERNEL_RESPONSE_PORT, "protocol": "TCP"}]
    (answer,) = on_server["spec"]["ingress"]
    assert _peer_matches(answer["from"], pod_labels)
    assert not _peer_matches(answer["from"], other_kernel)
    assert answer["ports"] == [{"port": KERNEL_RESPONSE_PORT, "protocol": "TCP"}]
    (out,) = on_server["spec"]["egress"]
    assert _peer_matches(out["to"], pod_labels) and not _peer_matches(out["to"], other_kernel)
    assert {p["port"] for p in out["ports"]} == set(KERNEL_PORTS.values())


def test_another_users_kernel_of_the_same_id_is_selected_by_neither_policy(platform):
    """A kernel's id is no secret (it is in the notebook's URLs): bob, who starts a
    kernel of alice's kernel's id in her namespace, gets a pod that her policies do
    not select, and his policies do not select hers."""
    alices = _request(platform, "t4-shared")
    bobs = _request(platform, "t4-shared", owner=Owner("bob", ""),
                    name=kernel_name("bob", KERNEL_ID))
    assert alices.launch.kernel_id == bobs.launch.kernel_id
    alice_pod, bob_pod = (build_kernel_pod(platform, r)["metadata"]["labels"]
                          for r in (alices, bobs))
    for mine, theirs, req in ((alice_pod, bob_pod, alices), (bob_pod, alice_pod, bobs)):
        on_kernel, on_server = kernel_policies(req)
        assert _selects(on_kernel, mine) and not _selects(on_kernel, theirs)
        (answer,), (out,) = on_server["spec"]["ingress"], on_server["spec"]["egress"]
        assert _peer_matches(answer["from"], mine) and not _peer_matches(answer["from"], theirs)
        assert _peer_matches(out["to"], mine) and not _peer_matches(out["to"], theirs)


def test_the_teams_standing_policy_gives_kernels_dns_and_the_internet_only(platform):
    req = _request(platform, "t4-shared")
    pod_labels = build_kernel_pod(platform, req)["metadata"]["labels"]
    assert pod_labels[COMPONENT_LABEL] == KERNEL_COMPONENT
    standing = [o for o in namespaces.team_objects(platform)
                if o["kind"] == "NetworkPolicy" and o["metadata"]["namespace"] == "jhub-ml-eng"
                and o["spec"]["podSelector"]]
    selecting = [p for p in standing if _selects(p, pod_labels)]
    assert [p["metadata"]["name"] for p in selecting] == [namespaces.KERNELS_POLICY_NAME]
    (policy,) = selecting
    assert policy["spec"]["ingress"] == []
    # a job's egress: neither the hub (no token in the pod) nor Prometheus (the GPU
    # status item runs in the server)
    assert policy["spec"]["egress"] == [namespaces.DNS_EGRESS, namespaces.INTERNET_EGRESS]
    assert policy["spec"]["egress"] == namespaces.jobs_policy(req.grant.team)["spec"]["egress"]


def test_the_owner_is_read_from_the_server_pods_labels_and_long_names_stay_labels(platform):
    user = "a-very-long-user-name-a-very-long-user-name"
    server_pod = {"metadata": {"labels": {**_server_labels(user, "gpu-notebook"),
                                          "app": "jupyterhub"}}}
    owner = Owner.of(server_pod)
    assert owner.server_labels == _server_labels(user, "gpu-notebook")
    req = _request(platform, "t4-shared", owner=owner,
                   name=kernel_name(owner.user_slug, KERNEL_ID))
    on_kernel, on_server = kernel_policies(req)
    names = {p["metadata"]["name"] for p in (on_kernel, on_server)}
    assert len(names) == 2 and all(len(n) <= 63 and n.startswith("kernel-a-very") for n in names)
    assert on_server["spec"]["podSelector"]["matchLabels"] == owner.server_labels
    for policy in (on_kernel, on_server):
        kubernetes_validate.validate(policy, SCHEMA_VERSION, strict=True)
