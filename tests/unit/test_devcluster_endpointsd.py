"""The endpoints role's targets from Services and Pods (:mod:`jupyterhub_gpu.devcluster.
endpointsd`), checked against upstream: the label names and values are those of
prometheus/prometheus ``discovery/kubernetes/endpoints.go`` (``buildEndpoints``),
``pod.go`` (``podLabels``) and ``kubernetes.go`` (``addObjectMetaLabels``); which pods
and ports make addresses is kubernetes/kubernetes ``pkg/controller/endpoint/
endpoints_controller.go`` (ready pods only; a named targetPort resolved per pod)."""

from __future__ import annotations

from jupyterhub_gpu.devcluster.endpointsd import target_groups

M = "__meta_kubernetes_"


def _svc(target_port, selector=None) -> dict:
    return {"metadata": {"name": "hub", "namespace": "jh", "labels": {"app.kubernetes.io/name": "x"},
                         "annotations": {"prometheus.io/scrape": "true"}},
            "spec": {"selector": selector if selector is not None else {"component": "hub"},
                     "ports": [{"name": "hub", "port": 8081, "targetPort": target_port}]}}


def _pod(name="hub-0", ready=True, labels=None, namespace="jh") -> dict:
    return {"metadata": {"name": name, "namespace": namespace, "uid": "u1",
                         "labels": labels if labels is not None else {"component": "hub"},
                         "ownerReferences": [{"kind": "ReplicaSet", "name": "hub-1",
                                              "controller": True}]},
            "spec": {"nodeName": "n1", "containers": [
                {"name": "hub", "image": "img", "ports": [{"name": "http", "containerPort": 8081}]}]},
            "status": {"phase": "Running", "podIP": "127.64.0.5", "hostIP": "10.1.0.1",
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def test_a_ready_pod_behind_a_named_target_port_is_one_target_with_upstreams_labels():
    (group,) = target_groups([_svc("http")], [_pod()])
    assert group["targets"] == ["127.64.0.5:8081"]
    labels = group["labels"]
    assert {k: labels[k] for k in (
        f"{M}namespace", f"{M}endpoints_name", f"{M}service_name", f"{M}endpoint_port_name",
        f"{M}endpoint_port_protocol", f"{M}endpoint_ready", f"{M}endpoint_address_target_kind",
        f"{M}endpoint_address_target_name", f"{M}endpoint_node_name", f"{M}pod_name",
        f"{M}pod_ip", f"{M}pod_phase", f"{M}pod_ready", f"{M}pod_controller_kind",
        f"{M}pod_container_name", f"{M}pod_container_port_name",
        f"{M}pod_container_port_number", f"{M}pod_container_init")} == {
        f"{M}namespace": "jh", f"{M}endpoints_name": "hub", f"{M}service_name": "hub",
        f"{M}endpoint_port_name": "hub", f"{M}endpoint_port_protocol": "TCP",
        f"{M}endpoint_ready": "true", f"{M}endpoint_address_target_kind": "Pod",
        f"{M}endpoint_address_target_name": "hub-0", f"{M}endpoint_node_name": "n1",
        f"{M}pod_name": "hub-0", f"{M}pod_ip": "127.64.0.5", f"{M}pod_phase": "Running",
        f"{M}pod_ready": "true", f"{M}pod_controller_kind": "ReplicaSet",
        f"{M}pod_container_name": "hub", f"{M}pod_container_port_name": "http",
        f"{M}pod_container_port_number": "8081", f"{M}pod_container_init": "false"}
    # label names sanitized, each with its `present` twin (addObjectAnnotationsAndLabels)
    assert labels[f"{M}service_label_app_kubernetes_io_name"] == "x"
    assert labels[f"{M}service_labelpresent_app_kubernetes_io_name"] == "true"
    assert labels[f"{M}endpoints_label_app_kubernetes_io_name"] == "x"
    assert labels[f"{M}service_annotation_prometheus_io_scrape"] == "true"
    assert labels[f"{M}pod_label_component"] == "hub"


def test_no_address_for_an_unready_unmatched_or_foreign_pod_or_an_unresolved_port():
    assert target_groups([_svc("http")], [_pod(ready=False), _pod(labels={"component": "x"}),
                                          _pod(namespace="other")]) == []
    assert target_groups([_svc("metrics")], [_pod()]) == []  # no container port of that name
    assert target_groups([_svc("http", selector={})], [_pod()]) == []  # no selector, no Endpoints
    (group,) = target_groups([_svc(9000)], [_pod()])  # a number needs no container port
    assert group["targets"] == ["127.64.0.5:9000"]
    assert f"{M}pod_container_name" not in group["labels"]
