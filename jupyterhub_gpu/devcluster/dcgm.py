"""The dev cluster's DCGM exporter: what NVIDIA's dcgm-exporter serves, for kwok's GPUs.

kwok's nodes have no GPUs and no DCGM, so this process plays the exporter of every
GPU node at once: it watches the cluster's pods and nodes (one shared watch each,
never a request per pod) and serves, on ``/metrics``, one series per GPU of every
running pod that carries :data:`~jupyterhub_gpu.devcluster.contract.FAKE_DCGM_ANNOTATION`, with
the values that annotation gives (a test or the demo sets them). A pod without it
has no series (the real exporter serves every GPU of its node; here a GPU exists
only as a pod's), nor has a pod whose node is gone (the real exporter is a DaemonSet
pod on the node, gone with it).

The series have the real exporter's names and labels (dcgm-exporter 4.x with
Kubernetes pod mapping on, ``DCGM_FI_DRIVER_VERSION`` as a label counter):
``gpu``, ``UUID``, ``pci_bus_id``, ``device``, ``modelName``, ``Hostname`` (the
node), ``DCGM_FI_DRIVER_VERSION``, and for a MIG instance ``GPU_I_PROFILE`` and
``GPU_I_ID``. As the real exporter reads a device's MIG profile from DCGM, not from the
resource it was allocated as (under the single MIG strategy a slice is
``nvidia.com/gpu``), a GPU here is a MIG instance when its node's GPUs are partitioned:
the MIG manager's ``nvidia.com/mig.config`` layout (``all-3g.40gb``) names the profile.
The i-th GPU of a pod is ``gpu="i"``; its UUID is derived from the pod's UID, so it is
stable for the pod's life.

The pod labels ``pod``, ``namespace`` and ``container`` follow the real exporter's
pod-mapping rule (NVIDIA/dcgm-exporter, ``internal/pkg/transformation/kubernetes.go``:
``PodMapper.toDeviceToPod`` and ``iterateGPUDevices``; the names from
``internal/pkg/appconfig/const.go`` and ``internal/pkg/transformation/const.go``):
a device is mapped to its pod only when its resource is ``nvidia.com/gpu``, starts
with ``nvidia.com/mig-``, or is named in the exporter's ``NVIDIA_RESOURCE_NAMES``
(its flag ``--nvidia-resource-names``, comma-separated, empty by default:
``pkg/cmd/app.go``); the GPU Operator sets no such variable. Any other device's
series are still served, without the pod labels: so a time-sliced GPU renamed
``nvidia.com/gpu.shared`` (the device plugin's ``renameByDefault``, which the bundle
no longer uses) would reach Prometheus with no pod, as on AKS. :func:`maps_to_pod` is the rule;
``tests/unit/test_dcgm_exporter.py`` checks it case by case against that file.

Run: ``python -m jupyterhub_gpu.devcluster.dcgm --kubeconfig K --port P``
``[--nvidia-resource-names a,b]`` (or ``NVIDIA_RESOURCE_NAMES=a,b`` in its
environment).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import math
import os
import threading
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any, Iterable, Mapping

from ..contract import (DCGM_ENGINE_ACTIVE, DCGM_FB_FREE, DCGM_FB_USED, DCGM_GPU_UTIL,
                        GPU_PRODUCT_LABEL, GPU_RESOURCE, MIG_CONFIG_LABEL, MIG_RESOURCE_PREFIX,
                        NVIDIA_PREFIX, SHARED_SUFFIX)
from ..spec.sharing import layout_mig_profile
from .contract import ENV_DCGM_RESOURCE_NAMES, FAKE_DCGM_ANNOTATION
from .layout import HOST
from .watchproc import process_client, process_parser, serve, watch_all

log = logging.getLogger("devcluster.dcgm")

DRIVER_VERSION = "570.124.06"
DEFAULT_MODEL = "NVIDIA fake GPU"
#: the fields served, with the real exporter's HELP text and type
FIELDS = {
    DCGM_GPU_UTIL: "GPU utilization (in %).",
    DCGM_FB_FREE: "Framebuffer memory free (in MiB).",
    DCGM_FB_USED: "Framebuffer memory used (in MiB).",
    DCGM_ENGINE_ACTIVE: "Ratio of time the graphics engine is active.",
}
#: dcgm-exporter's flag for ``NVIDIA_RESOURCE_NAMES`` (``pkg/cmd/app.go``)
RESOURCE_NAMES_FLAG = "--nvidia-resource-names"


@dataclass(frozen=True)
class Sample:
    """One series: a DCGM field of one GPU."""

    field: str
    labels: tuple[tuple[str, str], ...]
    value: float


def resource_names(value: str) -> frozenset[str]:
    """The resource names of a comma-separated list, each trimmed, as dcgm-exporter
    reads ``NVIDIA_RESOURCE_NAMES`` (urfave/cli's string-slice flag); empty items are
    dropped."""
    return frozenset(name.strip() for name in value.split(",") if name.strip())


def maps_to_pod(resource: str, named: frozenset[str] = frozenset()) -> bool:
    """Whether dcgm-exporter maps a device of ``resource`` to the pod it is allocated to
    (``toDeviceToPod``): ``nvidia.com/gpu``, a ``nvidia.com/mig-`` resource, or one of
    ``named`` (its ``NVIDIA_RESOURCE_NAMES``). Not ``nvidia.com/gpu.shared``."""
    return resource == GPU_RESOURCE or resource in named or resource.startswith(
        MIG_RESOURCE_PREFIX)


def _gpu_resources(pod: Mapping[str, Any],
                   named: frozenset[str]) -> list[tuple[str, str, int]]:
    """(container, resource, count) of every NVIDIA resource (or one of ``named``) the
    pod's containers limit."""
    found = []
    for container in (pod.get("spec") or {}).get("containers") or []:
        limits = (container.get("resources") or {}).get("limits") or {}
        for resource, quantity in sorted(limits.items()):
            if resource.startswith(NVIDIA_PREFIX) or resource in named:
                try:
                    count = int(str(quantity))
                except ValueError:
                    continue
                found.append((container["name"], resource, count))
    return found


def _values(pod: Mapping[str, Any]) -> dict[str, float] | None:
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(FAKE_DCGM_ANNOTATION)
    if raw is None:
        return None
    try:
        given = json.loads(raw)
    except ValueError:
        log.warning("pod %s: %s is not JSON: %r", pod["metadata"].get("name"),
                    FAKE_DCGM_ANNOTATION, raw)
        return None
    if not isinstance(given, dict):
        return None
    values = {}
    for field, value in given.items():
        if field in FIELDS and isinstance(value, (int, float)) and math.isfinite(value):
            values[field] = float(value)
    return values


def _gpu_uuid(pod_uid: str, index: int) -> str:
    digest = hashlib.sha256(f"{pod_uid}/{index}".encode()).digest()[:16]
    return f"GPU-{uuid.UUID(bytes=digest)}"


def pod_samples(pod: Mapping[str, Any], node_labels: Mapping[str, str],
                named: frozenset[str] = frozenset()) -> list[Sample]:
    """The series of one pod (pure): none unless it runs, has GPUs and the annotation;
    with the labels ``container``, ``namespace`` and ``pod`` only on the GPUs of a
    resource :func:`maps_to_pod` (``named``: the exporter's ``NVIDIA_RESOURCE_NAMES``)."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    values = _values(pod)
    node = (pod.get("spec") or {}).get("nodeName")
    if values is None or status.get("phase") != "Running" or not node:
        return []
    model = node_labels.get(GPU_PRODUCT_LABEL, DEFAULT_MODEL)
    mig_profile = layout_mig_profile(node_labels.get(MIG_CONFIG_LABEL, ""))
    samples, index = [], 0
    for container, resource, count in _gpu_resources(pod, named):
        for _ in range(count):
            labels = {"gpu": str(index), "UUID": _gpu_uuid(meta.get("uid", ""), index),
                      "pci_bus_id": f"00000000:{index + 1:02X}:00.0",
                      "device": f"nvidia{index}", "modelName": model, "Hostname": node}
            if mig_profile:  # the device is a MIG instance, whatever its resource
                labels |= {"GPU_I_PROFILE": mig_profile, "GPU_I_ID": str(index + 1)}
            labels["DCGM_FI_DRIVER_VERSION"] = DRIVER_VERSION
            if maps_to_pod(resource, named):
                labels |= {"container": container, "namespace": meta.get("namespace", ""),
                           "pod": meta.get("name", "")}
            samples += [Sample(field, tuple(labels.items()), value)
                        for field, value in values.items()]
            index += 1
    return samples


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def exposition(samples: Iterable[Sample]) -> str:
    """The Prometheus text format of ``samples``, grouped by field (pure)."""
    by_field: dict[str, list[Sample]] = {}
    for sample in samples:
        by_field.setdefault(sample.field, []).append(sample)
    lines = []
    for field in FIELDS:
        if field not in by_field:
            continue
        lines += [f"# HELP {field} {FIELDS[field]}", f"# TYPE {field} gauge"]
        for sample in by_field[field]:
            labels = ",".join(f'{k}="{_escape(v)}"' for k, v in sample.labels)
            lines.append(f"{field}{{{labels}}} {sample.value:g}")
    return "\n".join(lines) + "\n"


class Store:
    """The watched pods and nodes (by name), shared by the watch threads and the server;
    ``named``: the resources mapped to pods besides the built-in ones."""

    def __init__(self, named: frozenset[str] = frozenset()) -> None:
        self.named = named
        self._lock = threading.Lock()
        self.pods: dict[tuple[str, str], dict] = {}
        self.nodes: dict[str, dict] = {}
        self.synced = {"pods": False, "nodes": False}

    def replace(self, kind: str, objects: dict) -> None:
        with self._lock:
            setattr(self, kind, objects)
            self.synced[kind] = True

    def update(self, kind: str, key, obj: dict | None) -> None:
        with self._lock:
            objects = getattr(self, kind)
            if obj is None:
                objects.pop(key, None)
            else:
                objects[key] = obj

    def samples(self) -> list[Sample]:
        """The series of every pod on a node that exists: the real exporter is a
        DaemonSet pod on each GPU node, so a node that is gone (a spot eviction, a
        scale-down) serves nothing, even while its pods are still listed as Running."""
        with self._lock:
            nodes = {name: (n.get("metadata") or {}).get("labels") or {}
                     for name, n in self.nodes.items()}
            pods = list(self.pods.values())
        return [s for pod in pods
                if (node := (pod.get("spec") or {}).get("nodeName")) in nodes
                for s in pod_samples(pod, nodes[node], self.named)]


def _pod_key(obj: dict) -> tuple[str, str]:
    return obj["metadata"]["namespace"], obj["metadata"]["name"]


def _node_key(obj: dict) -> str:
    return obj["metadata"]["name"]


def _handler(store: Store) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path == "/health":
                ready = all(store.synced.values())
                self._answer(200 if ready else 503, "ok\n" if ready else "syncing\n")
            elif self.path == "/metrics":
                self._answer(200, exposition(store.samples()),
                             "text/plain; version=0.0.4; charset=utf-8")
            else:
                self._answer(404, "not found\n")

        def _answer(self, code: int, body: str, kind: str = "text/plain") -> None:
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args) -> None:  # scrapes every few seconds: not logged
            pass

    return Handler


def parse_args(argv: list[str] | None, environ: Mapping[str, str]) -> argparse.Namespace:
    """The command line; ``resource_names`` as dcgm-exporter reads its flag: the flag
    (repeatable, comma-separated) if given, else ``NVIDIA_RESOURCE_NAMES`` from
    ``environ``, else none."""
    parser = process_parser(__doc__.splitlines()[0])
    parser.add_argument(
        RESOURCE_NAMES_FLAG, action="append", dest="resource_names",
        help=f"resources to map to pods besides {GPU_RESOURCE} and {MIG_RESOURCE_PREFIX}*, "
             f"comma-separated, e.g. {GPU_RESOURCE}{SHARED_SUFFIX} (default: "
             f"${ENV_DCGM_RESOURCE_NAMES}, else none)")
    args = parser.parse_args(argv)
    given = args.resource_names
    args.resource_names = resource_names(
        ",".join(given) if given is not None else environ.get(ENV_DCGM_RESOURCE_NAMES, ""))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv, os.environ)
    api_client = process_client(args)
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    store, stop = Store(args.resource_names), threading.Event()
    watch_all(api_client, store, (("pods", core.list_pod_for_all_namespaces, _pod_key),
                                  ("nodes", core.list_node, _node_key)), stop)
    log.info("serving DCGM metrics on http://%s:%d/metrics; pod labels for %s, %s* and %s",
             HOST, args.port, GPU_RESOURCE, MIG_RESOURCE_PREFIX,
             ", ".join(sorted(args.resource_names)) or f"no other ({ENV_DCGM_RESOURCE_NAMES})")
    return serve(args.port, _handler(store), stop)


if __name__ == "__main__":
    raise SystemExit(main())
