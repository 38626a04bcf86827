"""The bundle's Prometheus rules and dashboard, the spec's ``monitoring`` section, and the
dev cluster's DCGM exporter and Prometheus config (pure builders)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from jupyterhub_gpu import contract
from jupyterhub_gpu.builders.deviceplugin import node_labels
from jupyterhub_gpu.devcluster import contract as dev_contract
from jupyterhub_gpu.bundle import monitoring
from jupyterhub_gpu.devcluster import dcgm, prometheus
from jupyterhub_gpu.devcluster.layout import Layout, Ports
from jupyterhub_gpu.spec.parse import SpecError, load_platform, parse_platform
from jupyterhub_gpu.spec.model import Autoscaler, Monitoring

EXAMPLE = "config/platform.yaml"


def _spec(**monitoring_section):
    data = yaml.safe_load(open(EXAMPLE).read())
    data["monitoring"] = monitoring_section
    return data


def test_monitoring_defaults_and_overrides():
    assert load_platform(EXAMPLE).monitoring == Monitoring()
    platform = parse_platform(_spec(gpuUtilizationTarget=40, queueWaitP95="2m",
                                    spotEvictionRate=0.1, poolAtMaxFor="1h",
                                    idleGpuNodeFor="5m"))
    assert platform.monitoring == Monitoring(40, 120, 0.1, 3600, 300)


@pytest.mark.parametrize("field, value, words", [
    ("gpuUtilizationTarget", 140, "monitoring: gpuUtilizationTarget: must be a percentage"),
    ("spotEvictionRate", 20, "monitoring: spotEvictionRate: must be a ratio from 0 to 1"),
    ("queueWaitP95", "soon", "monitoring: queueWaitP95:"),
    ("alertEveryone", True, "monitoring: alertEveryone: unknown field"),
])
def test_a_bad_monitoring_field_is_named(field, value, words):
    with pytest.raises(SpecError) as info:
        parse_platform(_spec(**{field: value}))
    assert any(e.startswith(words) for e in info.value.errors), info.value.errors


def test_rules_carry_the_specs_facts_and_thresholds():
    platform = parse_platform(_spec(gpuUtilizationTarget=40, queueWaitP95="2m"))
    rule = monitoring.prometheus_rule(platform)
    assert (rule["apiVersion"], rule["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    rules = {(r.get("record") or r["alert"], tuple(sorted(r.get("labels", {}).items()))): r
             for g in rule["spec"]["groups"] for r in g["rules"]}
    for pool in platform.pools:
        assert rules[(monitoring.MAX_NODES, (("pool", pool.name),))]["expr"] == \
            f"vector({pool.max_nodes})"
        assert rules[(monitoring.PRICE, (("pool", pool.name),))]["expr"] == \
            f"vector({pool.price_per_node_hour:g})"
    for team in platform.teams:
        assert (monitoring.TEAM_OF, (("namespace", team.namespace), ("team", team.name))) in rules
    alerts = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r}
    assert alerts["JupyterhubGpuUtilizationUnderTarget"]["expr"].endswith("< 40")
    assert alerts["JupyterhubGpuQueueWaitHigh"]["expr"].endswith("> 120")
    assert set(alerts) >= {"JupyterhubGpuPoolAtMaxNodes", "JupyterhubGpuNodeWithoutGpuPod"}


def test_the_spot_rule_names_the_spot_pools_and_goes_without_them():
    platform = load_platform("tests/integration/platform.yaml")
    spot = {p.name for p in platform.pools if p.spot}
    expr = monitoring.expressions(platform)[
        f"jupyterhub-gpu.usage/{monitoring.SPOT_EVICTIONS}"]
    assert f'pool=~"{"|".join(p.name for p in platform.pools if p.spot)}"' in expr and spot
    data = yaml.safe_load(open(EXAMPLE).read())
    for pool in data["pools"]:
        pool["spot"] = False
    without = monitoring.expressions(parse_platform(data))
    assert not [k for k in without if "spot_eviction" in k or "SpotEviction" in k]


def test_the_dashboard_reads_recorded_series_and_kueue():
    exprs = [t["expr"] for p in monitoring.dashboard()["panels"] for t in p["targets"]]
    assert monitoring.POOL_UTIL in exprs and monitoring.TEAM_UTIL in exprs
    assert any("kueue_pending_workloads" in e for e in exprs)
    json.dumps(monitoring.dashboard())


def test_no_rule_or_panel_reads_what_the_cluster_autoscalers_pools_lack():
    """Karpenter's series exist only where Karpenter runs and is scraped: never for the
    cluster autoscaler's pools, and not on AKS, whose Node Auto Provisioning runs it in
    the control plane."""
    platform = load_platform(EXAMPLE)
    assert {p.autoscaler for p in platform.pools} == {Autoscaler.CLUSTER_AUTOSCALER}
    read = {name: expr for name, expr in monitoring.expressions(platform).items()
            if "karpenter_" in expr}
    assert read == {}


@pytest.mark.parametrize("key, label", [
    # kube-state-metrics' labelName (internal/store/utils.go): label_ + the key with
    # every character but [a-zA-Z0-9_] made _, snake-cased
    ("kubernetes.azure.com/agentpool", "label_kubernetes_azure_com_agentpool"),
    ("karpenter.sh/nodepool", "label_karpenter_sh_nodepool"),
    ("example.com/poolName", "label_example_com_pool_name"),
])
def test_node_labels_are_named_as_kube_state_metrics_names_them(key, label):
    assert monitoring.ksm_label(key) == label


def test_each_pool_is_found_by_its_own_autoscalers_label():
    data = yaml.safe_load(open(EXAMPLE).read())
    for pool in data["pools"]:
        if pool["name"] == "a100spot":
            pool["autoscaler"] = "node-auto-provisioning"
    rule = monitoring.node_pool_rule(parse_platform(data))
    agentpool = monitoring.ksm_label(Autoscaler.CLUSTER_AUTOSCALER.pool_label)
    nodepool = monitoring.ksm_label(Autoscaler.NODE_AUTO_PROVISIONING.pool_label)
    assert f'{agentpool}=~"t4dev|a100mig|a100|cpu"' in rule["expr"]
    assert f'{nodepool}=~"a100spot"' in rule["expr"]
    only_ca = monitoring.node_pool_rule(load_platform(EXAMPLE))["expr"]
    assert nodepool not in only_ca and f'{agentpool}=~"t4dev|a100mig|a100spot|a100|cpu"' in only_ca


def test_kube_state_metrics_is_allowed_every_label_the_rules_read():
    """config/kube-prometheus-stack-values.yaml (the admin guide installs
    kube-prometheus-stack with it) lets kube-state-metrics export the pool label of
    either autoscaler: ``--metric-labels-allowlist=nodes=[...]``."""
    values = yaml.safe_load(open("config/kube-prometheus-stack-values.yaml").read())
    entries = values["kube-state-metrics"]["metricLabelsAllowlist"]
    allowed = {key for e in entries if e.startswith("nodes=[")
               for key in e.removeprefix("nodes=[").removesuffix("]").split(",")}
    assert {a.pool_label for a in Autoscaler} <= allowed
    guide = open("docs/admin-guide.md").read()
    assert (f"helm install {monitoring.KPS_RELEASE} prometheus-community/kube-prometheus-stack "
            f"\\\n  --version 77.0.0 --namespace {monitoring.KPS_NAMESPACE} --create-namespace "
            "\\\n  -f config/kube-prometheus-stack-values.yaml --wait") in guide


@pytest.mark.parametrize("release, namespace, url", [
    # the chart's fullname: the release name when it holds the chart's name ...
    ("kube-prometheus-stack", "monitoring",
     "http://kube-prometheus-stack-prometheus.monitoring.svc.cluster.local:9090"),
    ("my-kube-prometheus-stack", "obs",
     "http://my-kube-prometheus-stack-prometheus.obs.svc.cluster.local:9090"),
    # ... else <release>-kube-prometheus-stack, cut to 26 characters
    ("prom", "monitoring", "http://prom-kube-prometheus-stack-prometheus.monitoring.svc.cluster.local:9090"),
    ("monitoring", "monitoring", "http://monitoring-kube-prometheus-prometheus.monitoring.svc.cluster.local:9090"),
])
def test_the_prometheus_url_follows_the_charts_naming(release, namespace, url):
    assert monitoring.prometheus_url(release, namespace) == url


def _pod(annotation=None, phase="Running", limits=None):
    meta = {"name": "jupyter-alice", "namespace": "jhub-data-science", "uid": "u-1",
            "annotations": {} if annotation is None else
            {dev_contract.FAKE_DCGM_ANNOTATION: annotation}}
    return {"metadata": meta, "status": {"phase": phase},
            "spec": {"nodeName": "aks-t4dev-0", "containers": [
                {"name": "notebook", "resources": {"limits": limits or {"nvidia.com/gpu": "2"}}}]}}


def test_the_exporter_serves_an_annotated_running_pods_gpus_with_the_real_labels():
    samples = dcgm.pod_samples(_pod(json.dumps({contract.DCGM_GPU_UTIL: 7})),
                               {contract.GPU_PRODUCT_LABEL: "Tesla-T4"})
    assert len(samples) == 2
    labels = dict(samples[1].labels)
    assert labels["gpu"] == "1" and labels["device"] == "nvidia1"
    assert labels["UUID"].startswith("GPU-") and labels["UUID"] != dict(samples[0].labels)["UUID"]
    assert (labels["modelName"], labels["Hostname"], labels["pod"], labels["namespace"],
            labels["container"]) == ("Tesla-T4", "aks-t4dev-0", "jupyter-alice",
                                     "jhub-data-science", "notebook")
    assert "GPU_I_PROFILE" not in labels and labels["DCGM_FI_DRIVER_VERSION"]
    text = dcgm.exposition(samples)
    assert text.startswith(f"# HELP {contract.DCGM_GPU_UTIL} ")
    assert f'{contract.DCGM_GPU_UTIL}{{gpu="0",' in text and text.rstrip().endswith(" 7")


def test_the_exporter_leaves_out_what_the_real_one_could_not_map():
    assert dcgm.pod_samples(_pod(), {}) == []  # no annotation
    assert dcgm.pod_samples(_pod("{}", phase="Pending"), {}) == []
    assert dcgm.pod_samples(_pod("not json"), {}) == []
    assert dcgm.pod_samples(_pod('{"DCGM_FI_DEV_GPU_UTIL": 1}', limits={"cpu": "1"}), {}) == []


def test_a_mig_slice_has_the_mig_labels(platform):
    """A slice of the MIG pool (an nvidia.com/gpu under the single strategy), on a node
    labelled as the pool's are."""
    pod = _pod(json.dumps({contract.DCGM_ENGINE_ACTIVE: 0.5}),
               limits={platform.pool("a100mig").resource_name: "1"})
    (sample,) = dcgm.pod_samples(pod, node_labels(platform.pool("a100mig")))
    assert dict(sample.labels)["GPU_I_PROFILE"] == "3g.40gb" and sample.value == 0.5


def test_the_dev_prometheus_scrapes_everything_with_servicemonitor_labels(tmp_path):
    layout, ports = Layout(tmp_path), Ports()
    conf = prometheus.config(layout, ports)
    jobs = {j["job_name"]: j for j in conf["scrape_configs"]}
    assert set(jobs) == {"jupyterhub", "gpu-kernels", "kueue", "karpenter", "dcgm-exporter"}
    assert jobs["jupyterhub"]["metrics_path"] == "/hub/metrics"
    # the hub's gpu-kernels service, where the demo runs it, with the hub's token
    assert jobs["gpu-kernels"]["metrics_path"] == "/services/gpu-kernels/metrics"
    assert jobs["gpu-kernels"]["authorization"] == jobs["jupyterhub"]["authorization"]
    assert jobs["kueue"]["authorization"]["credentials_file"] == str(layout.prometheus_token)
    exporter = jobs["dcgm-exporter"]
    assert exporter["honor_labels"] is False
    assert exporter["static_configs"][0]["labels"]["namespace"] == "gpu-operator"
    target = prometheus.register_hub(layout, 18081, "secret")
    assert json.loads(target.read_text()) == [{"targets": ["127.0.0.1:18081"]}]
    assert layout.prometheus_hub_token.read_text() == "secret"
    targets = {job: [t for files in jobs[job]["file_sd_configs"] for pattern in files["files"]
                     for f in layout.prometheus_sd_dir.glob(Path(pattern).name)
                     for t in json.loads(f.read_text())[0]["targets"]]
               for job in ("jupyterhub", "gpu-kernels")}
    assert targets == {"jupyterhub": ["127.0.0.1:18081"],
                       "gpu-kernels": [f"127.0.0.1:{18081 + dev_contract.KERNELS_PORT_ABOVE_HUB}"]}
    prometheus.unregister_hub(layout, 18081)
    assert list(layout.prometheus_sd_dir.iterdir()) == []


def test_check_bundle_names_an_edited_rule_and_dashboard():
    from jupyterhub_gpu.bundle.check import check_grafana_dashboard, check_prometheus_rules

    platform = load_platform(EXAMPLE)
    rule = monitoring.prometheus_rule(platform)
    assert check_prometheus_rules(platform, "rules.yaml", [rule]) == []
    rule["spec"]["groups"][2]["rules"][0]["expr"] = "vector(1)"
    (drift,) = check_prometheus_rules(platform, "rules.yaml", [rule])
    assert drift.field.endswith("rules[0].expr") and drift.found == "vector(1)"
    board = monitoring.dashboard()
    assert check_grafana_dashboard("d.json", board) == []
    board["panels"][0]["targets"][0]["expr"] = "up"
    assert [d.found for d in check_grafana_dashboard("d.json", board)] == ["up"]
