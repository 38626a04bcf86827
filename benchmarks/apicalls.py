"""API requests of the hub, from the kube-apiserver's audit log (``logs/audit*.log``
under the dev cluster's state dir; its policy logs every request of the hub's
ServiceAccount, see :mod:`tests.integration.audit`), within a wall-time window."""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Iterable

from jupyterhub_gpu.bundle.namespaces import HubRef
from jupyterhub_gpu.devcluster.layout import Layout

HUB_USER = f"system:serviceaccount:{HubRef().namespace}:{HubRef().service_account}"


def _when(event: dict) -> float:
    stamp = event.get("requestReceivedTimestamp", "")
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def count_requests(events: Iterable[dict], user: str, start: float,
                   end: float) -> Counter[tuple[str, str]]:
    """``{(verb, resource): n}`` of ``user``'s requests received in [start, end]
    (each request once, whatever stages the log has of it)."""
    seen, counts = set(), Counter()
    for event in events:
        if event.get("user", {}).get("username") != user or event.get("auditID") in seen:
            continue
        if not start <= _when(event) <= end:
            continue
        seen.add(event.get("auditID"))
        ref = event.get("objectRef") or {}
        resource = ref.get("resource", "?") + ("/" + ref["subresource"]
                                               if ref.get("subresource") else "")
        counts[(event.get("verb", "?"), resource)] += 1
    return counts


def read_events(state_dir: Path) -> list[dict]:
    events = []
    for path in sorted(Layout(state_dir).logs_dir.glob("audit*.log"),
                       key=lambda p: p.stat().st_mtime):
        for line in path.read_text(errors="replace").splitlines():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return events


def non_watch(counts: Counter) -> int:
    return sum(n for (verb, _), n in counts.items() if verb != "watch")


def describe(counts: Counter, per: float = 1.0) -> str:
    """``create pods 1, get pods 2.5, ...`` (each count divided by ``per``)."""
    return ", ".join(f"{verb} {resource} {n / per:.3g}"
                     for (verb, resource), n in sorted(counts.items()))
