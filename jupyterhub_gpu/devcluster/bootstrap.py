"""What ``up`` puts into the running API server: Kueue's and Karpenter's prerequisites,
the bundle's team namespaces with the hub's RBAC and NetworkPolicies, the static fake GPU nodes (``minNodes``) with their daemonsets'
requests, the platform's Kueue objects and its Karpenter NodePools, with waits."""

from __future__ import annotations

import time
from typing import Callable, Iterable, TypeVar

from kubernetes.dynamic.exceptions import ConflictError

from ..builders.karpenter import karpenter_objects
from ..builders.kueue import kueue_objects
from ..builders.nodes import OVERHEAD_NAMESPACE, fake_node, overhead_daemonset
from ..bundle.namespaces import HubRef, team_objects
from ..contract import KARPENTER_API_VERSION as KARPENTER_API
from ..spec.model import Platform, Pool
from . import kueue_setup as ks
from .kube import AdminClient, KubeErrors
from .layout import Layout, Ports
from .pki import PkiPaths
from .sources import KueueSources

T = TypeVar("T")
Progress = Callable[[str], None]


class BootstrapError(RuntimeError):
    """The API server did not reach the expected state in time."""


def poll(check: Callable[[], T | None], timeout: float, what: str,
         interval: float = 0.25) -> T:
    """Call ``check`` until it returns something truthy; API and connection errors count as 'not yet'."""
    deadline = time.monotonic() + timeout
    last = "no answer"
    while True:
        try:
            result = check()
            if result:
                return result
            last = "not yet"
        except KubeErrors as e:
            last = str(e)
        if time.monotonic() >= deadline:
            raise BootstrapError(f"timed out after {timeout:.0f}s waiting for {what}: {last}")
        time.sleep(interval)


def _condition(obj: dict | None, kind: str) -> bool:
    conds = ((obj or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == kind and c.get("status") == "True" for c in conds)


def install_crds(client: AdminClient, crds: Iterable[dict], timeout: float = 60) -> None:
    """Apply the CRDs and wait until every one is established."""
    names = []
    for crd in crds:
        client.apply(crd)
        names.append(crd["metadata"]["name"])
    for name in names:
        poll(lambda n=name: _condition(client.get(
            "apiextensions.k8s.io/v1", "CustomResourceDefinition", n), "Established"),
             timeout, f"CRD {name} to be established")


def install_kueue_prereqs(client: AdminClient, src: KueueSources, layout: Layout,
                          ports: Ports, pki: PkiPaths) -> None:
    """Namespace, CRDs, cert Secret, cert files and webhook configurations."""
    base_url = ks.webhook_base_url(ports)
    ca_pem = pki.webhook_ca_crt.read_bytes()
    client.apply(ks.namespace(ks.NAMESPACE))
    plurals = ks.conversion_crds(src.crd_kustomization)
    install_crds(client, (ks.with_conversion(c, plurals, base_url, ca_pem) for c in src.crds))
    client.apply(ks.webhook_secret(ca_pem, pki.webhook_ca_key.read_bytes(),
                                   pki.webhook_crt.read_bytes(), pki.webhook_key.read_bytes()))
    for name, source in (("tls.crt", pki.webhook_crt), ("tls.key", pki.webhook_key)):
        target = layout.kueue_cert_dir / name
        target.write_bytes(source.read_bytes())
        target.chmod(0o600)
    for config in ks.webhook_configurations(src.webhook_manifests, src.webhook_kustomization,
                                            base_url, ca_pem):
        client.apply(config)


def wait_kueue_webhooks(client: AdminClient, timeout: float = 60) -> None:
    """A dry-run ResourceFlavor create passes Kueue's webhooks only once they answer."""
    poll(lambda: client.create(ks.probe_flavor(), dry_run=True), timeout,
         "Kueue's webhooks to answer (dry-run create of a ResourceFlavor)")


def apply_team_objects(client: AdminClient, platform: Platform,
                       hub: HubRef = HubRef()) -> list[str]:
    """Apply the bundle's team objects (``config/team-namespaces.yaml``, as an admin
    does) for the hub ``hub``; return the team namespaces. The checkpoint PVC
    (``checkpointStorage``) gets its Azure Files volume from the dev cluster's CSI
    sidecars, as on AKS."""
    objects = team_objects(platform, hub)
    for obj in objects:
        client.apply(obj)
    return [obj["metadata"]["name"] for obj in objects if obj["kind"] == "Namespace"]


def wait_service_accounts(client: AdminClient, namespaces: Iterable[str],
                          timeout: float = 60) -> None:
    for ns in namespaces:
        poll(lambda n=ns: client.get("v1", "ServiceAccount", "default", n), timeout,
             f"the default ServiceAccount in namespace {ns}")


def create_static_nodes(client: AdminClient, platform: Platform) -> list[str]:
    """Create every pool's ``minNodes`` fake nodes (existing ones are kept); Karpenter
    adds the rest on demand."""
    names = []
    for pool in platform.pools:
        for index in range(pool.min_nodes):
            node = fake_node(pool, index)
            try:
                client.create(node)
            except ConflictError:
                pass
            names.append(node["metadata"]["name"])
    return names


def run_node_overhead(client: AdminClient, platform: Platform, timeout: float = 120) -> None:
    """Apply each pool's overhead DaemonSet and wait until its pod runs on every static
    node (the DaemonSet controller adds one to each node Karpenter adds later)."""
    for pool in platform.pools:
        client.apply(overhead_daemonset(pool))

    def running(pool: Pool) -> bool:
        ds = client.get("apps/v1", "DaemonSet", overhead_daemonset(pool)["metadata"]["name"],
                        OVERHEAD_NAMESPACE)
        st = (ds or {}).get("status") or {}
        desired = st.get("desiredNumberScheduled", 0)
        return desired >= pool.min_nodes and st.get("numberReady") == desired
    for pool in platform.pools:
        poll(lambda p=pool: running(p), timeout,
             f"the daemonset-overhead pods of pool {pool.name} to run on its nodes")


def wait_nodes_ready(client: AdminClient, names: list[str], timeout: float = 60) -> None:
    def ready() -> bool:
        nodes = {n["metadata"]["name"]: n for n in client.list("v1", "Node")}
        return all(_condition(nodes.get(name), "Ready") for name in names)
    poll(ready, timeout, f"{len(names)} static fake nodes to become Ready (kwok)")


def apply_kueue_objects(client: AdminClient, platform: Platform, timeout: float = 60) -> None:
    """Apply the platform's Kueue objects and wait for every ClusterQueue to be active."""
    objects = kueue_objects(platform)
    for obj in objects:
        poll(lambda o=obj: client.apply(o), 30, f"{obj['kind']} {obj['metadata']['name']}")
    for obj in objects:
        if obj["kind"] == "ClusterQueue":
            name = obj["metadata"]["name"]
            poll(lambda n=name: _condition(client.get(ks.API_VERSION, "ClusterQueue", n),
                                           "Active"), timeout, f"ClusterQueue {name} to be Active")


def _conditions(obj: dict) -> str:
    conds = (obj.get("status") or {}).get("conditions") or []
    return ", ".join(f"{c.get('type')}={c.get('status')} ({c.get('message') or c.get('reason')})"
                     for c in conds) or "none yet"


def apply_karpenter_objects(client: AdminClient, platform: Platform, timeout: float = 60) -> None:
    """Apply every pool's KWOKNodeClass and NodePool; wait until Karpenter reports each
    NodePool Ready (its template validated and its node class found)."""
    objects = karpenter_objects(platform)
    for obj in objects:
        client.apply(obj)
    for name in (o["metadata"]["name"] for o in objects if o["kind"] == "NodePool"):
        try:
            poll(lambda n=name: _condition(client.get(KARPENTER_API, "NodePool", n), "Ready"),
                 timeout, f"Karpenter to report NodePool {name} Ready")
        except BootstrapError as e:
            pool = client.get(KARPENTER_API, "NodePool", name)
            raise BootstrapError(f"{e}; its conditions: {_conditions(pool)}") from None


SCRAPE_TOKEN_SECONDS = 7 * 24 * 3600


def install_scrape_identity(client: AdminClient, layout: Layout) -> None:
    """The ServiceAccount Prometheus scrapes Kueue as, its token in
    ``layout.prometheus_token`` (TokenRequest API, as the kubelet mounts it)."""
    from kubernetes.client import CoreV1Api

    from .prometheus import SERVICE_ACCOUNT, rbac

    for obj in rbac():
        client.apply(obj)
    namespace, name = SERVICE_ACCOUNT
    answer = CoreV1Api(client.api_client).create_namespaced_service_account_token(
        name, namespace, {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                          "spec": {"expirationSeconds": SCRAPE_TOKEN_SECONDS}})
    layout.prometheus_token.write_text(answer.status.token)
