"""The NetworkPolicies we ship and create, as objects: every pod of a team namespace
denied both ways unless allowed, job pods fenced in, a multi-pod job's pods let reach
each other. What the policies allow together is proven by a real evaluator in
tests/integration/test_network_policies.py (the truth table)."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import yaml

from jupyterhub_gpu.builders.job import JobGrant, JobRequest, build_job, labels, peer_policy
from jupyterhub_gpu.bundle import namespaces
from jupyterhub_gpu.contract import (COMPONENT_LABEL, JOB_NAME_LABEL, MANAGED_LABEL,
                                     SINGLEUSER_COMPONENT)
from jupyterhub_gpu.devcluster.build import K8S_VERSION

REPO = Path(__file__).resolve().parents[2]
SCHEMA_VERSION = K8S_VERSION.lstrip("v").rsplit(".", 1)[0]
FORBIDDEN = {*namespaces.PRIVATE_RANGES, namespaces.METADATA_SERVER, namespaces.WIRESERVER}


def _policies(platform, team) -> list[dict]:
    return [o for o in namespaces.team_objects(platform)
            if o["kind"] == "NetworkPolicy" and o["metadata"]["namespace"] == team.namespace]


def _selects(policy: dict, pod_labels: dict) -> bool:
    match = policy["spec"]["podSelector"].get("matchLabels") or {}
    assert set(policy["spec"]["podSelector"]) <= {"matchLabels"}
    return all(pod_labels.get(k) == v for k, v in match.items())


def _request(platform, slug: str, team_name: str = "ml-eng") -> JobRequest:
    team = next(t for t in platform.teams if t.name == team_name)
    return JobRequest("job-alice-0a1b2c", "alice", "alice",
                      JobGrant.of(platform, platform.job_profile(slug), team),
                      "registry.example/notebook:1", ("python", "train.py"))


def test_every_team_namespace_denies_everything_not_allowed(platform):
    for team in platform.teams:
        deny = [p for p in _policies(platform, team) if p["spec"]["podSelector"] == {}]
        assert [p["spec"] for p in deny] == [{
            "podSelector": {}, "policyTypes": ["Ingress", "Egress"], "ingress": [], "egress": []}
        ], team.name


def test_job_pods_are_selected_for_ingress_and_egress_and_let_in_nothing(platform):
    req = _request(platform, "a100-train")
    pod_labels = build_job(req).job["spec"]["template"]["metadata"]["labels"]
    team = req.grant.team
    selecting = [p for p in _policies(platform, team)
                 if p["spec"]["podSelector"] and _selects(p, pod_labels)]
    assert [p["metadata"]["name"] for p in selecting] == [namespaces.JOBS_POLICY_NAME]
    (policy,) = selecting
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert policy["spec"]["ingress"] == []
    dns, internet = policy["spec"]["egress"]
    assert "to" not in dns and {p["port"] for p in dns["ports"]} == {namespaces.DNS_PORT}
    assert set(internet["to"][0]["ipBlock"]["except"]) == FORBIDDEN


def test_notebooks_egress_excludes_the_wireserver_too(platform):
    policy = namespaces.network_policy(platform.teams[0], namespaces.HubRef())
    internet = policy["spec"]["egress"][-1]["to"][0]["ipBlock"]
    assert internet["cidr"] == "0.0.0.0/0" and set(internet["except"]) == FORBIDDEN


def test_a_multi_pod_jobs_pods_reach_each_other_and_no_one_else(platform):
    req = _request(platform, "a100-ddp-2")
    policy = peer_policy(req)
    kubernetes_validate.validate(policy, SCHEMA_VERSION, strict=True)
    same_job = {"podSelector": {"matchLabels": {JOB_NAME_LABEL: req.name}}}
    assert policy["metadata"]["namespace"] == req.grant.team.namespace
    assert policy["metadata"]["labels"] == labels(req)
    assert policy["spec"] == {"podSelector": same_job["podSelector"],
                              "policyTypes": ["Ingress", "Egress"],
                              "ingress": [{"from": [same_job]}], "egress": [{"to": [same_job]}]}


def test_a_one_pod_job_has_no_policy_of_its_own(platform):
    assert peer_policy(_request(platform, "a100-train")) is None



def test_the_hub_and_proxy_reach_team_notebooks_by_selectors():
    """helm-values/values.yaml lets the hub and the proxy out to the user servers of
    the team namespaces by namespace and pod labels, not only by z2jh's private-range
    ipBlock, which Cilium on AKS does not match against pod addresses; the labels and
    port are the ones the bundle and GPUSpawner use."""
    values = yaml.safe_load((REPO / "helm-values" / "values.yaml").read_text())
    to_servers = {"to": [{"namespaceSelector": {"matchLabels": {MANAGED_LABEL: "true"}},
                          "podSelector": {"matchLabels": {
                              COMPONENT_LABEL: SINGLEUSER_COMPONENT}}}],
                  "ports": [{"port": namespaces.SINGLEUSER_PORT}]}
    assert to_servers in values["hub"]["networkPolicy"]["egress"]
    assert to_servers in values["proxy"]["chp"]["networkPolicy"]["egress"]
