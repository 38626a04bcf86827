"""The fake DCGM exporter's pod-mapping rule (:mod:`jupyterhub_gpu.devcluster.dcgm`),
case by case against the real exporter's.

Upstream: NVIDIA/dcgm-exporter ``internal/pkg/transformation/kubernetes.go``
(``PodMapper.toDeviceToPod``, and ``iterateGPUDevices`` when ``KUBERNETES_VIRTUAL_GPUS``
is on): a device from the kubelet's pod-resources API is mapped to its pod only if
its resource is ``appconfig.NvidiaResourceName`` (``nvidia.com/gpu``), is in
``Config.NvidiaResourceNames`` or starts with ``appconfig.NvidiaMigResourcePrefix``
(``nvidia.com/mig-``; ``internal/pkg/appconfig/const.go``); a device it skips keeps
its series, without the ``pod``/``namespace``/``container`` attributes
(``internal/pkg/transformation/const.go``; ``internal/pkg/rendermetrics`` writes an
attribute only when it is set). ``NvidiaResourceNames`` is the string-slice flag
``--nvidia-resource-names`` / ``NVIDIA_RESOURCE_NAMES`` (``pkg/cmd/app.go``, empty by
default): comma-separated and trimmed, a flag given on the command line replacing the
environment's value (urfave/cli v2 ``flag_string_slice.go``).
"""

from __future__ import annotations

import json

import pytest

from jupyterhub_gpu import contract
from jupyterhub_gpu.devcluster import contract as dev_contract
from jupyterhub_gpu.devcluster import dcgm

POD_LABELS = {"pod", "namespace", "container"}
SHARED = contract.GPU_RESOURCE + contract.SHARED_SUFFIX  # time-slicing, renameByDefault
VALUES = json.dumps({contract.DCGM_GPU_UTIL: 37})


def _pod(*containers: tuple[str, dict]) -> dict:
    return {"metadata": {"name": "jupyter-alice", "namespace": "jhub-data-science",
                         "uid": "u-1", "annotations": {dev_contract.FAKE_DCGM_ANNOTATION: VALUES}},
            "status": {"phase": "Running"},
            "spec": {"nodeName": "aks-t4dev-0", "containers": [
                {"name": name, "resources": {"limits": limits}} for name, limits in containers]}}


def _labels(pod: dict, named: frozenset[str] = frozenset()) -> list[dict]:
    return [dict(s.labels) for s in dcgm.pod_samples(pod, {}, named)]


def test_a_time_sliced_pods_gpu_is_served_without_its_pod():
    """[aks] #28 item 1: the device plugin's renamed ``nvidia.com/gpu.shared`` is not a
    resource the exporter maps, so the GPU's series reach Prometheus with no pod."""
    (labels,) = _labels(_pod(("notebook", {SHARED: "1", "cpu": "2"})))
    assert not POD_LABELS & set(labels), labels
    assert labels["Hostname"] == "aks-t4dev-0" and labels["UUID"].startswith("GPU-")
    text = dcgm.exposition(dcgm.pod_samples(_pod(("notebook", {SHARED: "1"})), {}))
    assert 'pod="' not in text and text.rstrip().endswith(" 37")


@pytest.mark.parametrize("resource", [contract.GPU_RESOURCE,
                                      contract.MIG_RESOURCE_PREFIX + "3g.40gb",
                                      contract.MIG_RESOURCE_PREFIX + "1g.10gb"])
def test_whole_gpus_and_mig_slices_carry_their_pod(resource):
    (labels,) = _labels(_pod(("notebook", {resource: "1"})))
    assert (labels["pod"], labels["namespace"], labels["container"]) == (
        "jupyter-alice", "jhub-data-science", "notebook")


def test_only_the_containers_mapped_devices_carry_the_pod():
    """Each device is judged by its own resource, in whichever container it is."""
    pod = _pod(("notebook", {contract.GPU_RESOURCE: "1"}), ("sidecar", {SHARED: "1"}))
    mapped, unmapped = _labels(pod)
    assert mapped["container"] == "notebook" and not POD_LABELS & set(unmapped)


def test_a_resource_named_in_nvidia_resource_names_is_mapped():
    named = dcgm.resource_names(SHARED)
    (labels,) = _labels(_pod(("notebook", {SHARED: "1"})), named)
    assert labels["pod"] == "jupyter-alice"
    # a named resource outside nvidia.com/ is a GPU the exporter maps too
    (other,) = _labels(_pod(("notebook", {"example.com/a100": "1"})),
                       dcgm.resource_names("example.com/a100"))
    assert other["pod"] == "jupyter-alice"
    assert _labels(_pod(("notebook", {"example.com/a100": "1"}))) == []


@pytest.mark.parametrize("resource, named, mapped", [
    ("nvidia.com/gpu", "", True),
    ("nvidia.com/mig-3g.40gb", "", True),
    ("nvidia.com/gpu.shared", "", False),
    ("nvidia.com/a100", "", False),
    ("nvidia.com/mig", "", False),  # the prefix is "nvidia.com/mig-"
    ("nvidia.com/gpu.shared", "nvidia.com/a100, nvidia.com/gpu.shared", True),
    ("nvidia.com/a100", "nvidia.com/a100,nvidia.com/a10", True),
    ("nvidia.com/a1", "nvidia.com/a100,nvidia.com/a10", False),  # names, not prefixes
])
def test_the_mapping_rule_is_the_exporters(resource, named, mapped):
    assert dcgm.maps_to_pod(resource, dcgm.resource_names(named)) is mapped


def test_nvidia_resource_names_comes_from_the_flag_else_the_environment():
    base = ["--kubeconfig=k", "--port=1"]
    env = {dev_contract.ENV_DCGM_RESOURCE_NAMES: " nvidia.com/gpu.shared ,,nvidia.com/a100"}
    assert dcgm.parse_args(base, {}).resource_names == frozenset()
    assert dcgm.parse_args(base, env).resource_names == {"nvidia.com/gpu.shared",
                                                         "nvidia.com/a100"}
    flags = [f"{dcgm.RESOURCE_NAMES_FLAG}=nvidia.com/a10,nvidia.com/h100",
             f"{dcgm.RESOURCE_NAMES_FLAG}=nvidia.com/l4"]
    assert dcgm.parse_args(base + flags, env).resource_names == {
        "nvidia.com/a10", "nvidia.com/h100", "nvidia.com/l4"}


def test_the_served_series_follow_the_exporters_setting():
    """What ``/metrics`` serves: the store's pods, under its ``NVIDIA_RESOURCE_NAMES``."""
    pods = {("jhub-data-science", "jupyter-alice"): _pod(("notebook", {SHARED: "1"}))}
    for named, labelled in ((frozenset(), False), (dcgm.resource_names(SHARED), True)):
        store = dcgm.Store(named)
        store.replace("pods", pods)
        store.replace("nodes", {"aks-t4dev-0": {"metadata": {"name": "aks-t4dev-0"}}})
        (sample,) = store.samples()
        assert ("pod", "jupyter-alice") in sample.labels if labelled else not (
            POD_LABELS & dict(sample.labels).keys())


def test_a_node_that_is_gone_serves_no_series():
    """The exporter runs on its node (a DaemonSet): once the node is deleted (a spot
    eviction) its GPUs' series end, though the pod may still be listed as Running
    until the pod garbage collector removes it."""
    store = dcgm.Store()
    store.replace("pods", {("jhub-data-science", "jupyter-alice"):
                           _pod(("notebook", {contract.GPU_RESOURCE: "1"}))})
    store.replace("nodes", {"aks-t4dev-0": {"metadata": {"name": "aks-t4dev-0"}}})
    assert len(store.samples()) == 1
    store.update("nodes", "aks-t4dev-0", None)
    assert store.samples() == []


@pytest.mark.parametrize("resource", [contract.GPU_RESOURCE,  # the single MIG strategy
                                      contract.MIG_RESOURCE_PREFIX + "3g.40gb"])  # mixed
def test_a_mig_instance_is_named_by_its_device_not_its_resource(resource):
    """The real exporter reads a device's GPU instance profile from DCGM
    (``GPU_I_PROFILE``, ``GPU_I_ID``), whatever resource the device plugin advertised it
    as: under the single strategy a 3g.40gb slice is ``nvidia.com/gpu``, and still a
    MIG instance with its pod. Here the device is the node's, partitioned by the MIG
    manager's layout label."""
    node = {contract.MIG_CONFIG_LABEL: "all-3g.40gb"}
    (labels,) = [dict(s.labels) for s in dcgm.pod_samples(_pod(("notebook", {resource: "1"})),
                                                           node)]
    assert (labels["GPU_I_PROFILE"], labels["GPU_I_ID"], labels["pod"]) == (
        "3g.40gb", "1", "jupyter-alice")
    whole = {contract.MIG_CONFIG_LABEL: "all-disabled"}
    (labels,) = [dict(s.labels) for s in dcgm.pod_samples(
        _pod(("notebook", {contract.GPU_RESOURCE: "1"})), whole)]
    assert "GPU_I_PROFILE" not in labels and labels["pod"] == "jupyter-alice"
