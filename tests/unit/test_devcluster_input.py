"""The dev cluster's answers to bad input, without starting a cluster."""

from __future__ import annotations

import os
import shutil
import socket
import sys

import pytest

from jupyterhub_gpu.devcluster.layout import Ports


def test_port_in_use_names_the_port_its_use_and_the_holder():
    from jupyterhub_gpu.devcluster.cluster import DevClusterError, _check_ports

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        ports = Ports(**{**Ports().as_dict(), "apiserver": port})
        with pytest.raises(DevClusterError) as info:
            _check_ports(ports)
    message = str(info.value)
    assert f"port {port} on 127.0.0.1 (for " in message
    assert "kube-apiserver" in message
    assert f"is in use by pid {os.getpid()} (" in message
    assert "devcluster down" in message


def test_port_karpenter_binds_on_every_interface_is_checked_there():
    """Karpenter listens on 0.0.0.0: a port held on another address of the machine
    would stop it, so its ports are checked on every interface."""
    from jupyterhub_gpu.devcluster.cluster import DevClusterError, _check_ports

    with socket.socket() as held:
        held.bind(("0.0.0.0", 0))
        held.listen()
        port = held.getsockname()[1]
        ports = Ports(**{**Ports().as_dict(), "karpenter_health": port})
        with pytest.raises(DevClusterError) as info:
            _check_ports(ports)
    assert f"port {port} on any interface (for Karpenter health probe) is in use" \
        in str(info.value)


def test_karpenter_is_configured_by_environment(tmp_path):
    from jupyterhub_gpu.devcluster.components import karpenter
    from jupyterhub_gpu.devcluster.layout import Layout

    layout = Layout(tmp_path)
    comp = karpenter(tmp_path / "karpenter-kwok", layout, Ports())
    assert comp.argv == (str(tmp_path / "karpenter-kwok"),), "it rejects --kubeconfig"
    assert comp.env == {"KUBECONFIG": str(layout.kubeconfig), "DISABLE_LEADER_ELECTION": "true",
                        "METRICS_PORT": "28090", "HEALTH_PROBE_PORT": "28091",
                        "INSTANCE_TYPES_FILE_PATH": str(layout.karpenter_instance_types),
                        "BATCH_MAX_DURATION": "10000000us", "BATCH_IDLE_DURATION": "1000000us"}
    assert comp.health.url == "http://127.0.0.1:28091/readyz"


def test_karpenter_batches_with_the_timers_it_is_given_and_keeps_them_on_a_restart(tmp_path):
    """A replay's scaled batching window reaches Karpenter's environment, and the
    cluster file keeps it, so a hand restart of Karpenter (restart_component) keeps it."""
    import json

    from jupyterhub_gpu.devcluster import cluster
    from jupyterhub_gpu.devcluster.components import KarpenterTimers, control_plane
    from jupyterhub_gpu.devcluster.layout import Layout
    from jupyterhub_gpu.devcluster.pki import PkiPaths

    layout = Layout(tmp_path)
    timers = KarpenterTimers(batch_max_seconds=10 / 300, batch_idle_seconds=1 / 300)
    bins = {n: tmp_path / n for n in ("etcd", "kube-apiserver", "kube-controller-manager",
                                      "kube-scheduler", "kwok", "kueue", "karpenter-kwok",
                                      "prometheus")}
    comps = {c.name: c for c in control_plane(bins, layout, Ports(), PkiPaths(tmp_path), timers)}
    assert (comps["karpenter"].env["BATCH_MAX_DURATION"],
            comps["karpenter"].env["BATCH_IDLE_DURATION"]) == ("33333us", "3333us")
    layout.make_dirs()
    layout.cluster_file.write_text(json.dumps({
        "binaries": {k: str(v) for k, v in bins.items()}, "ports": Ports().as_dict(),
        "karpenter_timers": {"batch_max_seconds": 0.1, "batch_idle_seconds": 0.01}}))
    comp, _ = cluster._running_component(layout, "karpenter")
    assert comp.env["BATCH_MAX_DURATION"] == "100000us"
    with pytest.raises(ValueError, match="batch_idle_seconds must be more than 0"):
        KarpenterTimers(batch_idle_seconds=0)


SERVE_AFTER_LOGGING = """
import http.server, sys
print({line!r}, flush=True)
class Ok(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers()
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Ok).serve_forever()
"""


@pytest.mark.parametrize("logged", ["all good", "failed constructing instance types"])
def test_a_healthy_component_that_logged_a_fatal_line_is_a_start_failure(tmp_path, logged):
    """Karpenter only logs an instance-types file it cannot parse and answers its health
    check; `up` must fail on it, naming the component and showing its log."""
    from jupyterhub_gpu.devcluster import procs
    from jupyterhub_gpu.devcluster.components import (KARPENTER_BAD_INSTANCE_TYPES, Component,
                                                      Health)
    from jupyterhub_gpu.devcluster.layout import Layout

    layout = Layout(tmp_path)
    layout.make_dirs()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    comp = Component("karpenter", (sys.executable, "-c", SERVE_AFTER_LOGGING.format(line=logged),
                                   str(port)),
                     Health(f"http://127.0.0.1:{port}/readyz"),
                     fatal_log=(KARPENTER_BAD_INSTANCE_TYPES,))
    proc = procs.launch(comp, layout)
    try:
        if logged == "all good":
            procs.wait_healthy(comp, proc, layout, None, timeout=30)
            return
        with pytest.raises(procs.ComponentError) as info:
            procs.wait_healthy(comp, proc, layout, None, timeout=30)
        message = str(info.value)
        assert message.startswith("karpenter logged 'failed constructing instance types' "
                                  "while starting: failed constructing instance types. "
                                  f"Last lines of {layout.log('karpenter')}:")
        assert message.endswith("\nfailed constructing instance types"), "the log tail is shown"
    finally:
        proc.kill()
        proc.wait()


def test_a_new_pin_rebuilds_only_its_own_binary(monkeypatch):
    from jupyterhub_gpu.devcluster import build

    if not shutil.which("go"):
        pytest.skip("no `go` on PATH")
    before = build.binaries()
    pins = dict(build.PINS)
    pins["karpenter-kwok"] = build.Pin("sigs.k8s.io/karpenter", "v9.9.9", "sigs.k8s.io/karpenter/kwok")
    pins["extra"] = build.Pin("example.invalid/extra", "v1.0.0", "example.invalid/extra")
    monkeypatch.setattr(build, "PINS", pins)
    after = build.binaries()
    assert after["karpenter-kwok"] != before["karpenter-kwok"]
    assert {k: v for k, v in after.items() if k not in ("karpenter-kwok", "extra")} == {
        k: v for k, v in before.items() if k != "karpenter-kwok"}


def test_other_build_tags_rebuild_the_binary(monkeypatch):
    """Build tags are part of a pin, so of its binary's cache key: a binary built with
    other tags is never taken for the one wanted."""
    import dataclasses

    from jupyterhub_gpu.devcluster import build

    if not shutil.which("go"):
        pytest.skip("no `go` on PATH")
    before = build.binaries()
    pins = dict(build.PINS)
    pins["promtool"] = dataclasses.replace(pins["promtool"], tags=())
    monkeypatch.setattr(build, "PINS", pins)
    after = build.binaries()
    assert after["promtool"] != before["promtool"]
    assert {k: v for k, v in after.items() if k != "promtool"} == {
        k: v for k, v in before.items() if k != "promtool"}


def test_clusters_on_other_ports_hand_out_other_pod_ips():
    """A demo (default ports) and test runs (shifted by JUPYTERHUB_GPU_TEST_PORT_OFFSET,
    in hundreds, up to 3000) on one machine: a pod IP of one must never be a pod IP of another, or
    the hub of one reaches the other's notebook."""
    import ipaddress

    from jupyterhub_gpu.devcluster.components import pod_cidr
    from jupyterhub_gpu.devcluster.layout import Ports

    default = Ports()
    shifted = [Ports.shifted(offset) for offset in range(0, 3100, 100)]
    nets = [ipaddress.ip_network(pod_cidr(p), strict=False) for p in [default, *shifted]]
    assert all(n.subnet_of(ipaddress.ip_network("127.0.0.0/8")) for n in nets)
    assert len(set(nets)) == len(nets)


def test_restarting_a_component_without_a_cluster_or_by_a_wrong_name_says_so(tmp_path):
    """`devcluster restart` on a state dir with no cluster, or with a name that is not a
    component, stops nothing and says why (the real restarts are the reliability tests')."""
    import json

    from jupyterhub_gpu.devcluster import build, cluster
    from jupyterhub_gpu.devcluster.layout import COMPONENTS, Layout

    with pytest.raises(cluster.DevClusterError, match="no dev cluster is running from "):
        cluster.restart_component("kueue", tmp_path)
    layout = Layout(tmp_path)
    layout.make_dirs()
    layout.cluster_file.write_text(json.dumps({
        "server": "https://127.0.0.1:1", "ports": Ports().as_dict(),
        "binaries": {name: f"/nonexistent/{name}" for name in build.PINS}}))
    with pytest.raises(cluster.DevClusterError) as info:
        cluster.stop_component("kueu", tmp_path)
    assert str(info.value) == f"unknown component 'kueu'; one of: {', '.join(COMPONENTS)}"
    assert cluster.stop_component("kueue", tmp_path) == "not running"


def test_the_api_server_keeps_an_audit_log_in_the_state_dir(tmp_path):
    """kube-apiserver writes its audit log under the cluster's state dir, by a policy
    ``up`` writes there too: every write and every request of another identity than the
    components' at Metadata level; the components' own reads are left out (cheap)."""
    import yaml

    from jupyterhub_gpu.devcluster import components
    from jupyterhub_gpu.devcluster.layout import Layout
    from jupyterhub_gpu.devcluster.pki import ADMIN_USER, PkiPaths

    layout = Layout(tmp_path)
    argv = components.kube_apiserver(tmp_path / "kube-apiserver", layout, Ports(),
                                     PkiPaths(tmp_path / "pki")).argv
    assert f"--audit-policy-file={tmp_path / 'config' / 'audit-policy.yaml'}" in argv
    assert f"--audit-log-path={tmp_path / 'logs' / 'audit.log'}" in argv
    policy = yaml.safe_load(yaml.safe_dump(components.audit_policy()))
    assert policy["kind"] == "Policy" and policy["rules"][-1] == {"level": "Metadata"}
    quiet = [r for r in policy["rules"] if ADMIN_USER in r.get("users", [])]
    assert quiet == [{"level": "None", "users": [ADMIN_USER, "system:apiserver"],
                      "verbs": ["get", "list", "watch"]}]
