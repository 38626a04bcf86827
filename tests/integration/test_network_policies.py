"""Who may reach whom, proven by a real NetworkPolicy evaluator: the truth table.

cyclonus (github.com/mattfenwick/cyclonus, built with the dev cluster by
``jupyterhub-gpu devcluster build``) evaluates, without a cluster or a CNI, every
NetworkPolicy that would be in the cluster:

* the z2jh 4.4.0 chart's own, as Helm renders the chart from the admin guide's
  install order (:func:`tests.z2jh_chart.helm_template`: our values files and the
  guide's example of the admin's own file; ``auth-azuread.yaml`` changes no
  NetworkPolicy, the example's ``proxy.https`` adds the ``autohttps`` pod's own);
* the shipped ``config/team-namespaces.yaml``;
* each multi-pod job's own (:func:`jupyterhub_gpu.builders.job.peer_policy`);
* each GPU kernel's own two (:func:`jupyterhub_gpu.builders.kernel.kernel_policies`),

for traffic between pods labelled exactly as the real code labels them: the notebook
pods the hub deployed from the chart creates (:mod:`.chart_hub`, in our hub image's
Python environment, the pods read back from the API server: two users' default
servers and one user's named server), the
pods of Jobs from :func:`build_job` with the labels the API server adds to a Job's
pods, GPU kernels' pods from :func:`build_kernel_pod` for two of those servers (as the
gpu-kernels service builds them), the hub and the proxy as the rendered chart labels
them; plus the cluster's
other pods and addresses that matter (kube-dns, Prometheus, the DCGM exporter, a
node's kubelet, Azure's metadata service and WireServer, the internet).

:data:`RULES` is the one table of who may reach whom. An edge that touches a pod of
a team namespace (a notebook or a job pod) and is allowed by no rule must be denied;
an edge a ``required`` rule names must be allowed. A new kind of pod adds its peers
to :func:`peers` and its rows to :data:`RULES`. Run with ``-s`` to see the table.

Pod addresses are realistic for AKS (pods 10.244.x.x, nodes 10.224.0.x): cyclonus
applies ``ipBlock`` rules to a pod's address too, as some engines do. Cilium, which
our AKS cluster runs, does not: on AKS "network policies cannot use ipBlock to allow
access to node or pod IPs" (Azure CNI Powered by Cilium, "Limitations"). So the
table is evaluated twice, the second time with every pod and node at an address no
``ipBlock`` of ours or the chart's can contain (an IPv6 one), which is what that
limitation means for these policies. Where the engines AKS offers differ from what
cyclonus models: docs/network-policies.md.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import pytest
import yaml

from jupyterhub_gpu.builders.job import JobGrant, JobRequest, build_job, peer_policy
from jupyterhub_gpu.builders.kernel import (KernelRequest, Launch, Owner, build_kernel_pod,
                                            kernel_name, kernel_policies)
from jupyterhub_gpu.bundle.namespaces import HubRef
from jupyterhub_gpu.contract import (COMPONENT_LABEL, JOB_COMPLETION_INDEX_ANNOTATION,
                                     JOB_NAME_LABEL, JOBS_PORT, KERNEL_PORTS,
                                     KERNEL_RESPONSE_PORT, KERNELS_PORT, NAMESPACE_NAME_LABEL,
                                     SERVERNAME_KEY, USERNAME_KEY)
from jupyterhub_gpu.devcluster.build import binaries
from jupyterhub_gpu.jobs.request import job_name
from jupyterhub_gpu.spec.grant import UserRef, authorize
from jupyterhub_gpu.spec.parse import load_platform
from tests import z2jh_chart

from . import chart_hub, chart_hubapi, hub_image
from .conftest import wait_for

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "config" / "platform.yaml"
TEAM_OBJECTS = REPO / "config" / "team-namespaces.yaml"
RELEASE_NAMESPACE = HubRef().namespace

pytestmark = pytest.mark.skipif(
    not z2jh_chart.CHART.is_dir(),
    reason=f"the z2jh 4.4.0 chart was not found at {z2jh_chart.CHART}: its NetworkPolicies "
           f"are half of what is evaluated")

Port = tuple[int, str]  # (number, protocol)
DNS = frozenset({(53, "UDP"), (53, "TCP")})
PORTS: tuple[Port, ...] = (
    (53, "UDP"), (53, "TCP"), (80, "TCP"), (443, "TCP"), (8000, "TCP"), (8001, "TCP"),
    (8081, "TCP"), (8888, "TCP"), (9090, "TCP"), (9400, "TCP"), (10101, "TCP"),
    (10102, "TCP"), (10103, "TCP"), (10104, "TCP"), (10250, "TCP"), (29500, "TCP"),
    (41234, "TCP"),  # a port NCCL's or Gloo's listening socket may get from the kernel
    (KERNEL_RESPONSE_PORT, "TCP"), *((port, "TCP") for port in sorted(KERNEL_PORTS.values())),
)
#: a GPU kernel's ports: Jupyter's five channels
KERNEL_CHANNELS = frozenset((port, "TCP") for port in KERNEL_PORTS.values())
#: the roles of the pods in team namespaces, which our policies fence
FENCED = frozenset({"notebook", "job", "kernel"})
ANYONE = frozenset({"notebook", "job", "kernel", "hub", "proxy", "dns", "prometheus", "dcgm",
                    "node", "metadata", "wireserver", "internet"})


@dataclass(frozen=True)
class Rule:
    """Pods of the ``sources`` roles may reach those of the ``destinations`` roles on
    ``ports`` (None: every port); ``required``: they must be able to."""

    sources: frozenset[str]
    destinations: frozenset[str]
    ports: frozenset[Port] | None
    required: bool
    why: str
    same_job: bool = False  # only between the pods of one Job
    own_kernel: bool = False  # only between a server and a GPU kernel it owns

    def covers(self, src: "Peer", dst: "Peer", port: Port) -> bool:
        return (src.role in self.sources and dst.role in self.destinations
                and (self.ports is None or port in self.ports)
                and (not self.same_job or (src.job != "" and src.job == dst.job))
                and (not self.own_kernel or src.name == dst.owner or dst.name == src.owner))


RULES: tuple[Rule, ...] = (
    Rule(frozenset({"job"}), frozenset({"job"}), None, True, same_job=True,
         why="the ranks of one job: PyTorch's rendezvous, then NCCL and Gloo on ports the "
             "kernel picks"),
    Rule(FENCED, frozenset({"dns"}), DNS, True, why="name resolution (kube-dns)"),
    Rule(FENCED, ANYONE, DNS, False,
         why="DNS on any address (a node-local cache), as z2jh allows its user servers"),
    Rule(FENCED, frozenset({"internet"}), frozenset({(443, "TCP")}), True,
         why="packages, data sets, model hubs"),
    Rule(FENCED, frozenset({"internet"}), None, False, why="the internet, on any port"),
    Rule(frozenset({"notebook"}), frozenset({"hub"}),
         frozenset({(8081, "TCP"), (JOBS_PORT, "TCP"), (KERNELS_PORT, "TCP")}),
         True, why="the hub's API, the gpu-jobs service and the gpu-kernels service"),
    Rule(frozenset({"notebook"}), frozenset({"kernel"}), KERNEL_CHANNELS, True, own_kernel=True,
         why="the owning server's kernel manager talks to its GPU kernel on Jupyter's five "
             "channels"),
    Rule(frozenset({"kernel"}), frozenset({"notebook"}),
         frozenset({(KERNEL_RESPONSE_PORT, "TCP")}), True, own_kernel=True,
         why="the kernel launcher sends its sealed connection information to its server"),
    Rule(frozenset({"hub", "proxy"}), frozenset({"notebook"}), frozenset({(8888, "TCP")}), True,
         why="the hub checks the server, the proxy forwards the user's browser"),
    Rule(frozenset({"notebook"}), frozenset({"prometheus"}), frozenset({(9090, "TCP")}), True,
         why="the JupyterLab status item's GPU use (JUPYTERHUB_GPU_PROMETHEUS_URL)"),
    Rule(frozenset({"prometheus"}), frozenset({"hub"}),
         frozenset({(8081, "TCP"), (10103, "TCP"), (KERNELS_PORT, "TCP")}),
         True, why="Prometheus scrapes /hub/metrics, the culler's metrics and the "
                   "gpu-kernels service's (config/service-monitors.yaml)"),
    Rule(frozenset({"hub"}), frozenset({"prometheus"}), frozenset({(9090, "TCP")}), True,
         why="the culler's GPU-idle rule and the usage page ask Prometheus"),
    Rule(frozenset({"hub"}), frozenset({"prometheus"}), None, False,
         why="z2jh's hub egress to private addresses (hub.networkPolicy.egressAllowRules."
             "privateIPs), where an ipBlock matches pods"),
)
#: pairs of roles judged besides those that touch a team namespace's pod: the
#: monitoring path between the hub's pod and Prometheus
JUDGED = frozenset({("prometheus", "hub"), ("hub", "prometheus")})


@dataclass(frozen=True)
class Peer:
    """One end of traffic: a pod (``namespace`` set) or an address outside the cluster."""

    name: str
    role: str
    ip: str
    namespace: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    namespace_labels: Mapping[str, str] = field(default_factory=dict)
    port_names: Mapping[int, str] = field(default_factory=dict)
    job: str = ""
    owner: str = ""  # a GPU kernel's: the name of its owning server's peer

    def traffic(self) -> dict:
        if not self.namespace:
            return {"IP": self.ip}
        return {"IP": self.ip, "Internal": {
            "PodLabels": dict(self.labels), "NamespaceLabels": dict(self.namespace_labels),
            "Namespace": self.namespace}}


def _tool(name: str) -> str:
    path = binaries()[name]
    if not os.access(path, os.X_OK):
        pytest.fail(f"{name} is not built: run `jupyterhub-gpu devcluster build`")
    return str(path)


@pytest.fixture(scope="module")
def chart() -> list[dict]:
    """The chart's objects as ``helm template`` renders them in the install order."""
    return z2jh_chart.helm_template(_tool("helm"))


def _namespace_labels(team_objects: list[dict]) -> dict[str, dict[str, str]]:
    """Each namespace's labels, with the one the API server puts on every namespace."""
    labels = {ns: {} for ns in (RELEASE_NAMESPACE, "kube-system", "monitoring", "gpu-operator")}
    for obj in team_objects:
        if obj["kind"] == "Namespace":
            labels[obj["metadata"]["name"]] = dict(obj["metadata"].get("labels") or {})
    return {ns: {**found, NAMESPACE_NAME_LABEL: ns} for ns, found in labels.items()}


def _port_names(pod: dict) -> dict[int, str]:
    """The names of a pod's (or pod template's) container ports, by number."""
    return {p["containerPort"]: p.get("name", "")
            for c in pod["spec"]["containers"] for p in c.get("ports") or []}


def _pod_template(chart: list[dict], component: str) -> dict:
    """The pod template of the chart's Deployment of ``component``."""
    (template,) = [t for t in (d["spec"]["template"] for d in chart if d["kind"] == "Deployment")
                   if t["metadata"]["labels"].get(COMPONENT_LABEL) == component]
    return template


#: (peer, user, team, server name, profile) of the notebook pods: team A may run
#: multi-pod jobs; user-b also runs a named CPU server beside their GPU one
NOTEBOOKS = (("notebook-a", "user-a", "ml-eng", "", "t4-shared"),
             ("notebook-b", "user-b", "data-science", "", "t4-shared"),
             ("notebook-b2", "user-b", "data-science", "lab2", "cpu"))
#: (peer, owning server's peer, its team, kernel id, IP) of the GPU kernels, of profile
#: KERNEL_PROFILE
KERNELS = (("kernel-a", "notebook-a", "ml-eng", "5f0c2d9e-8b1a-4c3e-9d7f-0a1b2c3d4e5f",
            "10.244.2.20"),
           ("kernel-b", "notebook-b", "data-science", "0a1b2c3d-4e5f-4c3e-9d7f-5f0c2d9e8b1a",
            "10.244.5.20"))
KERNEL_PROFILE = "t4-shared"
#: a server's public key as the kernel's command carries it (its value matters not here)
SERVER_KEY = "MCowBQYDK2VuAyEA" + "C" * 28


@pytest.fixture(scope="module")
async def notebooks(cluster, kube, cluster_spec_path, cluster_platform,
                    tmp_path_factory) -> dict[str, dict]:
    """Each notebook peer's pod as the chart's hub creates it (its labels and ports are
    what the policies select on), read back from the API server; the hub stopped. The
    pod exists as soon as KubeSpawner creates it, before Kueue admits it."""
    pods = {}
    async with chart_hub.serving(cluster, cluster_spec_path, tmp_path_factory.mktemp("chart-hub"),
                                 python_bin=hub_image.python_bin(hub_image.IMAGE_PINS)) as (hub, http):
        try:
            for name, user, team, server, profile in NOTEBOOKS:
                await chart_hubapi.add_user(http, hub, user, [team])
                assert await chart_hubapi.start_server(http, hub, user, profile,
                                                       server) in (201, 202)
            for name, user, team, server, _ in NOTEBOOKS:
                namespace = cluster_platform.team_for({team}).namespace

                async def created(ns=namespace, u=user, s=server):
                    return [p for p in await chart_hubapi.user_pods(kube, ns, u)
                            if p["metadata"]["labels"].get(SERVERNAME_KEY, "") == s]
                (pods[name],) = await wait_for(created, timeout=60,
                                               what=f"{user}'s pod of server {server!r}")
        finally:
            for _, user, _, server, _ in NOTEBOOKS:
                if server:
                    await chart_hubapi.remove_server(http, hub, user, server)
            await chart_hubapi.stop_all_servers(http, hub)
            for _, user, team, _, _ in NOTEBOOKS:
                await chart_hubapi.delete_home(
                    kube, cluster_platform.team_for({team}).namespace, user)
    return pods


def _job_pods(platform, team_name: str, profile: str, user: str, suffix: str,
              ) -> tuple[list[dict], dict | None]:
    """Each rank's pod labels, and the job's own policy. The pod template's labels are
    build_job's; the API server adds the Job's name and uid to them when the Job is
    created (kubernetes pkg/registry/batch/job/strategy.go: generateSelector), and
    the Job controller adds an Indexed Job's completion index to each pod."""
    team = next(t for t in platform.teams if t.name == team_name)
    grant = JobGrant.of(platform, platform.job_profile(profile), team)
    req = JobRequest(job_name(user, suffix), user, user, grant, "notebook:latest",
                     ("python", "t.py"))
    job = build_job(req).job
    uid = f"00000000-0000-0000-0000-{suffix:0>12}"
    added = {"job-name": req.name, JOB_NAME_LABEL: req.name,
             "controller-uid": uid, "batch.kubernetes.io/controller-uid": uid}
    ranks = range(job["spec"]["completions"])
    indexed = job["spec"].get("completionMode") == "Indexed"
    pods = [{**job["spec"]["template"]["metadata"]["labels"], **added,
             **({JOB_COMPLETION_INDEX_ANNOTATION: str(rank)} if indexed else {})}
            for rank in ranks]
    return pods, peer_policy(req)


def _kernel(platform, team_name: str, notebook: dict, kernel_id: str, server_ip: str,
            ) -> tuple[dict, tuple[dict, dict]]:
    """A GPU kernel of ``notebook``'s server, as the gpu-kernels service builds it: its
    pod and its two policies."""
    owner = Owner.of(notebook)
    user = UserRef(owner.user_slug, frozenset({team_name}))
    grant = authorize(platform, user, {"profile": KERNEL_PROFILE})
    req = KernelRequest(kernel_name(owner.user_slug, kernel_id), owner.user_slug, owner, grant,
                        Launch(kernel_id, f"{server_ip}:{KERNEL_RESPONSE_PORT}", SERVER_KEY))
    return build_kernel_pod(platform, req), kernel_policies(req)


@pytest.fixture(scope="module")
def world(chart, notebooks) -> tuple[list[Peer], list[dict]]:
    """(the peers, every NetworkPolicy)."""
    platform = load_platform(SPEC)
    team_objects = [d for d in yaml.safe_load_all(TEAM_OBJECTS.read_text()) if d]
    ns_labels = _namespace_labels(team_objects)
    policies = [d for d in [*chart, *team_objects] if d["kind"] == "NetworkPolicy"]
    for policy in policies:  # helm template leaves the release namespace out
        policy["metadata"].setdefault("namespace", RELEASE_NAMESPACE)

    a, b = "ml-eng", "data-science"  # team A may run multi-pod jobs
    peers: list[Peer] = []
    for name, team, ip in (("notebook-a", a, "10.244.1.10"), ("notebook-b", b, "10.244.4.10"),
                           ("notebook-b2", b, "10.244.4.11")):
        pod = notebooks[name]
        ns = next(t.namespace for t in platform.teams if t.name == team)
        peers.append(Peer(name, "notebook", ip, ns, pod["metadata"]["labels"], ns_labels[ns],
                          _port_names(pod)))
    servers = {p.name: p for p in peers}
    for name, owner, team, kernel_id, ip in KERNELS:
        pod, own = _kernel(platform, team, notebooks[owner], kernel_id, servers[owner].ip)
        policies += list(own)
        ns = pod["metadata"]["namespace"]
        assert ns == servers[owner].namespace
        peers.append(Peer(name, "kernel", ip, ns, pod["metadata"]["labels"], ns_labels[ns],
                          _port_names(pod), owner=owner))
    for team, profile, user, suffix, ips in (
            (a, "a100-ddp-2", "user-a", "a1", ("10.244.2.10", "10.244.3.10")),
            (a, "a100-ddp-2", "user-a", "a2", ("10.244.2.11", "10.244.3.11")),
            (b, "t4-job", "user-b", "b1", ("10.244.5.10",))):
        ranks, own = _job_pods(platform, team, profile, user, suffix)
        policies += [own] if own else []
        ns = next(t.namespace for t in platform.teams if t.name == team)
        peers += [Peer(f"job-{suffix}-rank{rank}", "job", ip, ns, labels, ns_labels[ns],
                       job=labels[JOB_NAME_LABEL])
                  for rank, (labels, ip) in enumerate(zip(ranks, ips))]
    for role, ip in (("hub", "10.244.0.5"), ("proxy", "10.244.0.6")):
        template = _pod_template(chart, role)
        peers.append(Peer(role, role, ip, RELEASE_NAMESPACE, template["metadata"]["labels"],
                          ns_labels[RELEASE_NAMESPACE], _port_names(template)))
    peers += [
        Peer("kube-dns", "dns", "10.244.0.2", "kube-system", {"k8s-app": "kube-dns"},
             ns_labels["kube-system"], {53: "dns"}),
        Peer("prometheus", "prometheus", "10.244.0.7", "monitoring",
             {"app.kubernetes.io/name": "prometheus"}, ns_labels["monitoring"], {9090: "web"}),
        Peer("dcgm-exporter", "dcgm", "10.244.2.2", "gpu-operator",
             {"app": "nvidia-dcgm-exporter"}, ns_labels["gpu-operator"], {9400: "gpu-metrics"}),
        Peer("node-kubelet", "node", "10.224.0.4"),
        Peer("metadata", "metadata", "169.254.169.254"),
        Peer("wireserver", "wireserver", "168.63.129.16"),
        Peer("internet", "internet", "93.184.215.14"),
    ]
    return peers, policies


def _edges(peers: list[Peer]) -> list[tuple[Peer, Peer]]:
    """Every pair that touches a pod of a team namespace, and the :data:`JUDGED` ones."""
    return [(s, d) for s in peers for d in peers
            if s is not d and ((s.role in FENCED or d.role in FENCED)
                               and (s.namespace or d.namespace)
                               or (s.role, d.role) in JUDGED)]


def _evaluate(policies: list[dict], traffic: list[dict], tmp: Path) -> list[bool]:
    """cyclonus' verdict on each traffic, in order."""
    policy_dir = tmp / "policies"
    policy_dir.mkdir()
    for i, policy in enumerate(policies):  # one policy a file: how cyclonus reads them
        (policy_dir / f"{i:03d}.yaml").write_text(yaml.safe_dump(policy))
    (tmp / "traffic.json").write_text(json.dumps(traffic))
    out = subprocess.run(
        [_tool("cyclonus"), "analyze", "--mode", "query-traffic", "--policy-path",
         str(policy_dir), "--traffic-path", str(tmp / "traffic.json")],
        capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    verdicts = re.findall(r"\|\s*IS ALLOWED\?\s*\|\s*(TRUE|FALSE)\s*\|", out.stdout)
    assert len(verdicts) == len(traffic), out.stdout[-2000:]
    return [v == "TRUE" for v in verdicts]


def _table(edges, verdicts: dict, bad: set) -> str:
    width = max(len(s.name) + len(d.name) for s, d in edges) + 4
    head = "source -> destination".ljust(width) + " ".join(
        f"{n}{'/U' if p == 'UDP' else ''}".rjust(6) for n, p in PORTS)
    rows = [head]
    for src, dst in edges:
        cells = [("!" if (src.name, dst.name, port) in bad else "")
                 + ("yes" if verdicts[src.name, dst.name, port] else "-") for port in PORTS]
        rows.append(f"{src.name} -> {dst.name}".ljust(width)
                    + " ".join(c.rjust(6) for c in cells))
    return "\n".join(rows)


def _beyond_ip_blocks(peers: list[Peer]) -> list[Peer]:
    """The pods and nodes at addresses no IPv4 ipBlock contains (IPv6 unique-local
    ones): ipBlock then matches no pod or node, as under Cilium on AKS."""
    return [dataclasses.replace(p, ip=f"fd00::{i + 1:x}") if p.namespace or p.role == "node"
            else p for i, p in enumerate(peers)]


@pytest.mark.parametrize("ip_blocks_match_pods", [True, False],
                         ids=["ipBlock-matches-pods", "ipBlock-matches-no-pod"])
def test_every_edge_is_what_the_rules_say(world, tmp_path, ip_blocks_match_pods):
    """The truth table (source x destination x port): no edge allowed that no rule
    allows, no required edge denied; whether or not ipBlock rules match pods."""
    peers, policies = world
    if not ip_blocks_match_pods:
        peers = _beyond_ip_blocks(peers)
    edges = _edges(peers)
    cases = [(src, dst, port) for src, dst in edges for port in PORTS]
    traffic = [{"Source": src.traffic(), "Destination": dst.traffic(), "Protocol": port[1],
                "ResolvedPort": port[0], "ResolvedPortName": dst.port_names.get(port[0], "")}
               for src, dst, port in cases]
    allowed = _evaluate(policies, traffic, tmp_path)
    verdicts, wrong = {}, []
    for (src, dst, port), ok in zip(cases, allowed):
        verdicts[src.name, dst.name, port] = ok
        rules = [r for r in RULES if r.covers(src, dst, port)]
        if ok and not rules:
            wrong.append((src, dst, port, "allowed, but no rule allows it"))
        elif not ok and any(r.required for r in rules):
            why = next(r.why for r in rules if r.required)
            wrong.append((src, dst, port, f"denied, but required ({why})"))
    bad = {(s.name, d.name, p) for s, d, p, _ in wrong}
    print("\n" + _table(edges, verdicts, bad))
    assert not wrong, "\n".join(f"{s.name} -> {d.name} {p[0]}/{p[1]}: {why}"
                                for s, d, p, why in wrong)


def test_the_table_covers_every_kind_of_peer(world):
    """Every rule's roles have a peer, and the multi-pod jobs have two ranks each: the
    table cannot pass by leaving out what it should judge."""
    peers, policies = world
    roles = {p.role for p in peers}
    assert roles == ANYONE
    for rule in RULES:
        assert rule.sources <= roles and rule.destinations <= roles
    jobs = [p.job for p in peers if p.role == "job"]
    assert sum(jobs.count(j) == 2 for j in set(jobs)) == 2
    assert sum(p["metadata"]["name"] in jobs for p in policies) == 2
    # each kernel has a stranger (another user's server) and notebook-b's kernel a
    # sibling (the same user's other server) that must not reach it
    names = {p.name: p for p in peers}
    for kernel in (p for p in peers if p.role == "kernel"):
        owner = names[kernel.owner]
        others = [p for p in peers if p.role == "notebook" and p is not owner]
        assert any(p.labels[USERNAME_KEY] != owner.labels[USERNAME_KEY] for p in others)
    assert names["notebook-b2"].labels[USERNAME_KEY] == names["notebook-b"].labels[USERNAME_KEY]
    assert sum(p["metadata"]["name"].startswith("kernel-") for p in policies) == 2 * len(KERNELS)
