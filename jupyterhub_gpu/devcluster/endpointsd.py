"""The targets Prometheus' ``endpoints`` service discovery would find, from Services and
Pods (emulated: the dev cluster cannot hold the Endpoints objects it reads).

kwok gives pods loopback IPs (:func:`.components.pod_cidr`), and the API server refuses
Endpoints and EndpointSlices with a loopback address ("may not be in the loopback
range"), so the dev cluster runs no Endpoints controller and a ServiceMonitor's
``kubernetes_sd_configs`` (role ``endpoints``, the Prometheus Operator's default) would
find nothing. :func:`target_groups` computes what it would find, as ``file_sd`` target
groups with the same meta labels; Prometheus then applies the operator's relabeling
itself.

Emulated from upstream:

- the Endpoints controller (kubernetes/kubernetes ``pkg/controller/endpoint/
  endpoints_controller.go``): one Endpoints object per Service with a selector, named
  and labelled as the Service; an address per Running, Ready pod with an IP that the
  selector matches, a port per Service port whose ``targetPort`` resolves on that pod
  (a number, or a container port's name);
- Prometheus' endpoints role (prometheus/prometheus ``discovery/kubernetes/
  endpoints.go`` ``buildEndpoints``, ``pod.go`` ``podLabels``, ``kubernetes.go``
  ``addObjectMetaLabels``): per address and port, ``__address__`` and the
  ``__meta_kubernetes_*`` labels of the namespace, the Endpoints object, the endpoint,
  the Service, the pod and the matching container port.

Left out: not-ready addresses, the extra targets upstream adds for a pod's container
ports no Service port covers, and node or namespace metadata (off by default).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

META = "__meta_kubernetes_"


def sanitize(name: str) -> str:
    """Prometheus' ``strutil.SanitizeLabelName``."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def _object_labels(role: str, meta: Mapping) -> dict[str, str]:
    """``addObjectMetaLabels``: name, labels and annotations, each with its ``present``."""
    out = {f"{META}{role}_name": meta["name"]}
    for kind, values in (("label", meta.get("labels")), ("annotation", meta.get("annotations"))):
        for key, value in (values or {}).items():
            out[f"{META}{role}_{kind}_{sanitize(key)}"] = value
            out[f"{META}{role}_{kind}present_{sanitize(key)}"] = "true"
    return out


def ready(pod: Mapping) -> bool:
    """Running, Ready, with an IP and not being deleted: an address of its Endpoints."""
    status = pod.get("status") or {}
    return (status.get("phase") == "Running" and bool(status.get("podIP"))
            and not (pod["metadata"].get("deletionTimestamp"))
            and any(c.get("type") == "Ready" and c.get("status") == "True"
                    for c in status.get("conditions") or []))


def _pod_labels(pod: Mapping) -> dict[str, str]:
    status, meta = pod.get("status") or {}, pod["metadata"]
    out = {f"{META}pod_ip": status.get("podIP", ""), f"{META}pod_ready": "true",
           f"{META}pod_phase": status.get("phase", ""),
           f"{META}pod_node_name": pod["spec"].get("nodeName", ""),
           f"{META}pod_host_ip": status.get("hostIP", ""), f"{META}pod_uid": meta.get("uid", ""),
           **_object_labels("pod", meta)}
    for owner in meta.get("ownerReferences") or []:
        if owner.get("controller"):
            out[f"{META}pod_controller_kind"] = owner["kind"]
            out[f"{META}pod_controller_name"] = owner["name"]
    return out


def _target_port(port: Mapping, pod: Mapping) -> int | None:
    target = port.get("targetPort", port["port"])
    if isinstance(target, int):
        return target
    for container in pod["spec"]["containers"]:
        for cport in container.get("ports") or []:
            if cport.get("name") == target:
                return cport["containerPort"]
    return None


def _container_labels(pod: Mapping, number: int) -> dict[str, str]:
    containers = [*pod["spec"]["containers"], *(pod["spec"].get("initContainers") or [])]
    for index, container in enumerate(containers):
        for cport in container.get("ports") or []:
            if cport["containerPort"] == number:
                return {f"{META}pod_container_name": container["name"],
                        f"{META}pod_container_image": container.get("image", ""),
                        f"{META}pod_container_port_name": cport.get("name", ""),
                        f"{META}pod_container_port_number": str(number),
                        f"{META}pod_container_port_protocol": cport.get("protocol", "TCP"),
                        f"{META}pod_container_init": str(
                            index >= len(pod["spec"]["containers"])).lower()}
    return {}


def _matches(selector: Mapping, labels: Mapping) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def target_groups(services: list[dict], pods: list[dict]) -> list[dict]:
    """One ``file_sd`` target group per Service with a selector and a ready pod: the
    targets the endpoints role finds for its Endpoints object."""
    groups = []
    for svc in services:
        selector, meta = svc["spec"].get("selector"), svc["metadata"]
        if not selector:
            continue  # no Endpoints controller output for a selector-less Service
        namespace = meta["namespace"]
        group_labels = {f"{META}namespace": namespace,
                        **_object_labels("endpoints", {"name": meta["name"],
                                                       "labels": meta.get("labels")}),
                        **_object_labels("service", meta)}
        targets = []
        for pod in pods:
            if (pod["metadata"]["namespace"] != namespace or not ready(pod)
                    or not _matches(selector, pod["metadata"].get("labels") or {})):
                continue
            for port in svc["spec"]["ports"]:
                number = _target_port(port, pod)
                if number is None:
                    continue
                targets.append({
                    "__address__": f"{pod['status']['podIP']}:{number}",
                    f"{META}endpoint_port_name": port.get("name", ""),
                    f"{META}endpoint_port_protocol": port.get("protocol", "TCP"),
                    f"{META}endpoint_ready": "true",
                    f"{META}endpoint_address_target_kind": "Pod",
                    f"{META}endpoint_address_target_name": pod["metadata"]["name"],
                    f"{META}endpoint_node_name": pod["spec"].get("nodeName", ""),
                    **_pod_labels(pod), **_container_labels(pod, number)})
        groups += [{"targets": [t.pop("__address__")], "labels": {**group_labels, **t}}
                   for t in targets]
    return groups
