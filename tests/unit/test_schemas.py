"""Every object the builders produce is valid for the API server that will get it:
pods and nodes against the Kubernetes OpenAPI schema, Kueue objects against the
CRDs that ship in the pinned Kueue module."""

from __future__ import annotations

import copy

import jsonschema
import kubernetes_validate
import pytest

from jupyterhub_gpu.builders import deviceplugin, kueue, nodes
from jupyterhub_gpu.devcluster.build import K8S_VERSION
from jupyterhub_gpu.hub.render import render_pod

SCHEMA_VERSION = K8S_VERSION.lstrip("v").rsplit(".", 1)[0]  # "1.35"


def _strict(schema: dict) -> dict:
    """A CRD's openAPIV3Schema with unknown fields rejected (the API server would
    silently prune them, hiding a misspelt field)."""
    schema = copy.deepcopy(schema)

    def visit(node):
        if isinstance(node, dict):
            if ("properties" in node and "additionalProperties" not in node
                    and not node.get("x-kubernetes-preserve-unknown-fields")):
                node["additionalProperties"] = False
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit(schema)
    schema["properties"]["metadata"] = {"type": "object"}
    return schema


def _crd_schema(crds: dict, kind: str, version: str = "v1beta2") -> dict:
    crd = crds[kind]
    served = next(v for v in crd["spec"]["versions"] if v["name"] == version)
    assert served["served"], f"{kind} {version} is not served"
    return _strict(served["schema"]["openAPIV3Schema"])


def _group_for(platform, profile) -> str:
    return profile.allowed_groups[0] if profile.allowed_groups else platform.teams[0].groups[0]


async def test_rendered_pods_are_valid(platform, example_spec_path, offline_kubeconfig):
    for profile in platform.profiles:
        pod = await render_pod(str(example_spec_path), "alice",
                               [_group_for(platform, profile)], profile.slug)
        kubernetes_validate.validate(pod, SCHEMA_VERSION, strict=True)
        assert pod["metadata"]["labels"]["jupyterhub-gpu/profile"] == profile.slug


def test_nodes_and_config_map_are_valid(platform):
    for pool in platform.pools:
        kubernetes_validate.validate(nodes.fake_node(pool, 0), SCHEMA_VERSION, strict=True)
    kubernetes_validate.validate(deviceplugin.config_map(platform), SCHEMA_VERSION, strict=True)


def test_kueue_objects_match_the_crds(platform, kueue_crds):
    for obj in kueue.kueue_objects(platform):
        assert obj["apiVersion"] == "kueue.x-k8s.io/v1beta2"
        jsonschema.validate(obj, _crd_schema(kueue_crds, obj["kind"]))


def test_strict_crd_schema_catches_a_misspelt_field(platform, kueue_crds):
    cq = kueue.cluster_queue(platform, platform.teams[0])
    cq["spec"]["cohort"] = cq["spec"].pop("cohortName")  # the v1beta1 name
    with pytest.raises(jsonschema.ValidationError, match="cohort"):
        jsonschema.validate(cq, _crd_schema(kueue_crds, "ClusterQueue"))
