"""A GPU kernel's start request, checked before anything touches Kubernetes: a bounded
JSON body with exactly its four fields, a GPU profile the user's groups may use, under
the spec's per-user cap, a launch whose values are what they say, and a response
address that is the caller's own server (docs/kernels.md)."""

from __future__ import annotations

import json

import pytest

from jupyterhub_gpu.builders.kernel import KernelRequest, Owner, build_kernel_pod, kernel_name
from jupyterhub_gpu.kernels.request import (MAX_BODY_BYTES, KernelRefused, check_response_address,
                                            check_start, gpu_profiles_for, read_body)
from jupyterhub_gpu.spec.grant import UserRef
from jupyterhub_gpu.spec.parse import parse_platform

ALICE = UserRef("alice", frozenset({"ml-eng"}))
DANA = UserRef("dana", frozenset({"data-science"}))
KERNEL_ID = "5f0c2d9e-8b1a-4c3e-9d7f-0a1b2c3d4e5f"
KEY = "MCowBQYDK2VuAyEA" + "B" * 28


def _body(**changes) -> dict:
    return {"profile": "t4-shared", "kernel_id": KERNEL_ID,
            "response_address": "10.244.1.7:52699", "public_key": KEY, **changes}


def _refused(platform, body, user=ALICE, active=0) -> KernelRefused:
    with pytest.raises(KernelRefused) as e:
        check_start(platform, user, body, active)
    return e.value


def test_a_good_request_yields_the_grant_and_launch_the_pod_is_built_from(platform):
    start = check_start(platform, ALICE, _body(profile="a100-training"), 1)
    assert start.grant.profile.slug == "a100-training"
    assert start.grant.team.namespace == "jhub-ml-eng"
    assert start.launch.kernel_id == KERNEL_ID
    pod = build_kernel_pod(platform, KernelRequest(kernel_name("alice", KERNEL_ID), "alice",
                                                   Owner("alice", ""), start.grant,
                                                   start.launch))
    assert pod["spec"]["containers"][0]["command"][-1] == KEY


def test_only_the_users_gpu_profiles_have_kernels(platform):
    mine = {p.slug for p in gpu_profiles_for(platform, ALICE.groups)}
    assert "cpu" not in mine and "t4-shared" in mine
    assert mine == {p.slug for p in platform.profiles_for(ALICE.groups)} - {"cpu"}
    assert gpu_profiles_for(platform, {"nobody"}) == ()


def test_a_profile_the_user_may_not_use_is_refused(platform):
    forbidden = [p for p in platform.profiles
                 if platform.uses_gpu(p) and p not in gpu_profiles_for(platform, DANA.groups)]
    assert forbidden  # the example spec keeps some GPU profile from data-science
    refused = _refused(platform, _body(profile=forbidden[0].slug), user=DANA)
    assert refused.status == 403
    assert refused.user_message.startswith(f"You may not use profile '{forbidden[0].slug}'")


def test_unknown_cpu_and_teamless_are_refused_in_words(platform):
    assert _refused(platform, _body(profile="h100")).user_message.startswith(
        "Unknown profile 'h100'; your GPU profiles: ")
    assert "has no GPU, so it has no GPU kernel" in _refused(
        platform, _body(profile="cpu")).user_message
    stranger = _refused(platform, _body(), user=UserRef("eve", frozenset({"guests"})))
    assert (stranger.status, stranger.user_message) == (
        403, "You are in no team of this hub, so you may start no GPU kernel.")
    long = _refused(platform, _body(profile="x\n" * 500))
    assert "\n" not in long.log_detail and len(long.log_detail) < 300


def test_the_cap_counts_the_users_kernels_and_zero_switches_them_off(platform, example_spec):
    assert platform.gpu_kernels_per_user == 2
    check_start(platform, ALICE, _body(), 1)
    over = _refused(platform, _body(), active=2)
    assert over.status == 409
    assert over.user_message.startswith("You have 2 GPU kernel(s) running or queued, the most "
                                        "one user may have at once (2)")
    example_spec["gpuKernelsPerUser"] = 0
    off = parse_platform(example_spec)
    assert _refused(off, _body(), active=0).user_message.startswith(
        "GPU kernels are switched off on this hub")


@pytest.mark.parametrize("body,words", [
    (["t4-shared"], "must be a JSON object"),
    (_body(namespace="kube-system"), "may not set namespace: the namespace is your team's"),
    (_body(image="evil:latest", pool="a100"), "may not set image, pool"),
    (_body(command=["sh"]), "unknown: 'command'"),
    ({"profile": "t4-shared"}, "missing: kernel_id, response_address, public_key"),
    (_body(kernel_id="../../etc"), "Invalid kernel_id: "),
    (_body(kernel_id=7), "'kernel_id' must be a string"),
    (_body(response_address="evil.example:52699"), "Invalid response_address: "),
    (_body(public_key="--exec=sh"), "Invalid public_key: "),
])
def test_a_malformed_or_forged_request_is_refused_naming_what(platform, body, words):
    refused = _refused(platform, body)
    assert words in refused.user_message and refused.status == 400


def test_the_body_is_bounded_and_json():
    assert read_body(json.dumps(_body()).encode()) == _body()
    with pytest.raises(KernelRefused) as e:
        read_body(b" " * (MAX_BODY_BYTES + 1))
    assert e.value.status == 413
    with pytest.raises(KernelRefused, match="must be JSON"):
        read_body(b"{profile: t4}")
    with pytest.raises(KernelRefused, match="must be JSON"):
        read_body(b"\xff\xfe")


def test_the_kernel_answers_only_to_the_callers_own_server(platform):
    launch = check_start(platform, ALICE, _body(), 0).launch
    check_response_address(launch, "10.244.1.7")
    with pytest.raises(KernelRefused) as e:
        check_response_address(launch, "10.244.1.8")
    assert e.value.status == 403 and "10.244.1.8:52699" in e.value.user_message
    other_port = check_start(platform, ALICE, _body(response_address="10.244.1.7:8888"), 0)
    with pytest.raises(KernelRefused):
        check_response_address(other_port.launch, "10.244.1.7")
    v6 = check_start(platform, ALICE, _body(response_address="[fd00::7]:52699"), 0)
    check_response_address(v6.launch, "fd00::7")
