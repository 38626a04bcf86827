"""[usage] What the hub writes in the usage ledger for real servers, and the usage page
that shows it, with the dev cluster's Prometheus (test_prometheus.py's hub).

- :class:`Session`: what a test saw of one real server from the cluster (its pod's
  UID and times) and of its stop (between two instants, and why);
- :func:`evict_spot_node`: a spot VM taken back, as AKS surfaces it;
- :func:`check_ledger` and :func:`check_page`: the hub's rows against those sessions,
  and the page and its CSV against the rows and against Prometheus's own samples.
"""

from __future__ import annotations

import dataclasses
import html
import math
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from jupyterhub_gpu import contract
from jupyterhub_gpu.usage.config import DEFAULT_FILE
from jupyterhub_gpu.ledger.store import Kind, Ledger, StopReason, Usage

from .conftest import KARPENTER
from .hubrest import _auth
from .test_demo import URL
from .test_usage_page import _check

PAGE = f"{URL}/services/{contract.USAGE_SERVICE_NAME}/"
_CELL = re.compile(r'<td class="num" data-figure="([^"]*)">([^<]*)</td>')


def now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass(frozen=True)
class Session:
    """One real server as the test saw it: its pod (UID, created, first container
    started) and, once stopped, why and between which two instants."""

    user: str
    team: str
    profile: str
    pool: str
    uid: str
    requested_at: datetime
    running_at: datetime
    reason: StopReason | None = None
    stop_after: datetime | None = None
    stop_before: datetime | None = None

    @classmethod
    async def of_pod(cls, kube, namespace: str, pod_name: str, user: str, team: str,
                     profile: str, pool: str) -> "Session":
        pod = await kube.core.read_namespaced_pod(pod_name, namespace)
        (status,) = pod.status.container_statuses
        return cls(user, team, profile, pool, pod.metadata.uid,
                   pod.metadata.creation_timestamp, status.state.running.started_at)

    def stopped(self, reason: StopReason, after: datetime, before: datetime) -> "Session":
        return dataclasses.replace(self, reason=reason, stop_after=after, stop_before=before)


async def evict_spot_node(kube, namespace: str, pod_name: str, pool: str) -> str:
    """Take back the spot VM under the pod, as AKS does on the VM's Preempt scheduled
    event: node auto-drain cordons the node and evicts its pods through the Eviction
    API, then the VM is deleted. Deleting the node's NodeClaim (the admin client, as
    fault injection) makes the real Karpenter do both: it taints the node, evicts its
    pods through the Eviction API (DisruptionTarget ``EvictionByEvictionAPI``) and
    deletes the instance (kwok's node). The NodeClaim's name."""
    pod = await kube.core.read_namespaced_pod(pod_name, namespace)
    (claim,) = [c for c in await kube.node_claims(pool)
                if (c.get("status") or {}).get("nodeName") == pod.spec.node_name]
    name = claim["metadata"]["name"]
    await kube.custom.delete_cluster_custom_object(*KARPENTER, "nodeclaims", name)
    return name


def ledger_path(workdir: Path) -> Path:
    """The demo hub's ledger: the default SQLite file in its working directory."""
    return workdir / "hub" / DEFAULT_FILE


async def check_ledger(workdir: Path, sessions: list[Session], platform) -> list[Usage]:
    """The hub wrote one session row per server session, no more, each with what the
    cluster and the spec say (units, pool and its price) and its stop's time and
    reason; all the ledger's rows. (Its jobs service also records the training Jobs an
    earlier test left in the cluster: job rows are not this test's to count.)"""
    ledger = Ledger(f"sqlite:///{ledger_path(workdir)}")
    try:
        every = await ledger.rows()
    finally:
        ledger.dispose()
    rows = {r.key: r for r in every if r.kind is Kind.SESSION}
    assert sorted(rows) == sorted(f"pod:{s.uid}" for s in sessions), (
        sorted(rows), sessions)
    for s in sessions:
        row = rows[f"pod:{s.uid}"]
        pool = platform.pool(s.pool)
        profile = platform.profile(s.profile)
        assert (row.kind, row.user, row.team, row.profile, row.pool, row.gpu_units) == (
            Kind.SESSION, s.user, s.team, s.profile, s.pool, profile.units), row
        assert math.isclose(row.price_per_unit_hour, pool.price_per_unit_hour), row
        assert (row.requested_at, row.running_at) == (s.requested_at, s.running_at), row
        assert row.stop_reason is s.reason, row
        assert s.stop_after <= row.stopped_at <= s.stop_before, (row, s)
    return every


def shown(page_html: str) -> dict[str, str]:
    """The page's figures: ``data-figure`` key -> the cell's text."""
    return {html.unescape(k): html.unescape(v) for k, v in _CELL.findall(page_html)}


async def page_and_csv(http, token: str) -> tuple[dict[str, str], dict[str, str], str]:
    """The usage page's figures, its CSV's, and the page, as ``token``'s owner sees them."""
    async with http.get(PAGE, headers=_auth(token)) as r:
        assert r.status == 200, await r.text()
        page = await r.text()
    async with http.get(PAGE + contract.USAGE_CSV_PATH, headers=_auth(token)) as r:
        assert r.status == 200, await r.text()
        lines = [line.split(",") for line in (await r.text()).strip().splitlines()[1:]]
    return shown(page), {f"{f}/{n}/{m}": v for f, n, m, v in lines}, page


def check_page(figures: dict[str, str], rows: list[Usage], platform) -> None:
    """The page's GPU-hours, costs, counts and stop reasons are the rows' (the same
    arithmetic as test_usage_page.py's ledger-API rows)."""
    _check(figures, rows, {p.name for p in platform.pools if p.spot})


async def raw_samples(prom_query, metric: str, namespace: str, window: str) -> list[float]:
    """Every sample Prometheus stored of ``metric`` for the pods of ``namespace`` in the
    last ``window`` (a PromQL duration, ``90d``; a range selector answers the samples
    themselves)."""
    found = await prom_query(f'{metric}{{exported_namespace="{namespace}"}}[{window}]')
    return [float(v) for series in found for _, v in series["values"]]
