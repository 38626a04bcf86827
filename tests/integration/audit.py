"""The kube-apiserver's audit log, as the cluster tier reads it.

``devcluster up`` starts the API server with an audit policy
(:func:`jupyterhub_gpu.devcluster.components.audit_policy`): every write, and every
request of an identity other than the components' admin cert (the hub's
ServiceAccount, its services), is logged at Metadata level in ``logs/audit.log`` under
the state dir. The log is written as requests complete, so a test brackets what it
does between two :meth:`AuditLog.fence` calls: the admin writes a ConfigMap of a
unique name, and the fence returns once that write is in the log, so everything the
API server answered before it is too.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path

from jupyterhub_gpu.devcluster.layout import Layout
from jupyterhub_gpu.devcluster.pki import ADMIN_USER

WRITES = frozenset({"create", "update", "patch", "delete", "deletecollection"})
FENCE_NAMESPACE = "default"


@dataclass(frozen=True)
class Request:
    """One request the API server answered (a watch: as soon as it started)."""

    user: str
    verb: str
    resource: str  # e.g. "pods", "pods/status", "workloads"
    namespace: str
    name: str
    code: int

    @classmethod
    def of(cls, event: dict) -> "Request":
        ref = event.get("objectRef") or {}
        resource = ref.get("resource", event.get("requestURI", ""))
        if ref.get("subresource"):
            resource += "/" + ref["subresource"]
        return cls(event["user"]["username"], event["verb"], resource,
                   ref.get("namespace", ""), ref.get("name", ""),
                   (event.get("responseStatus") or {}).get("code", 0))

    @property
    def is_write(self) -> bool:
        return self.verb in WRITES


class AuditLog:
    def __init__(self, state_dir: Path):
        self.dir = Layout(Path(state_dir)).logs_dir

    def _events(self) -> list[dict]:
        """Every event of the log and its rotated backup, oldest first."""
        files = sorted(self.dir.glob("audit*.log"), key=lambda p: p.stat().st_mtime)
        events = []
        for path in files:
            for line in path.read_text(errors="replace").splitlines():
                try:
                    events.append(json.loads(line))
                except json.JSONDecodeError:  # the line being written
                    continue
        return events

    async def fence(self, kube) -> str:
        """Write a marker as the admin; return its name once the log has it."""
        from .conftest import wait_for

        name = f"audit-fence-{uuid.uuid4().hex[:12]}"
        await kube.core.create_namespaced_config_map(
            FENCE_NAMESPACE, {"metadata": {"name": name}})
        await wait_for(lambda: any(self._is_fence(e, name) for e in self._events()),
                       timeout=60, what=f"the audit log to record {name}")
        await kube.core.delete_namespaced_config_map(name, FENCE_NAMESPACE)
        return name

    async def watching(self, user: str, resource: str, namespaces: set[str]) -> None:
        """Wait until ``user`` has started a watch on ``resource`` in each of
        ``namespaces`` (e.g. until a hub that just started has set up its shared
        watches). Not a quiet spell: KubeSpawner's reflectors relist on every
        reconnect, every few seconds, so a hub watching many namespaces is never
        quiet for long."""
        from .conftest import wait_for

        def missing() -> set[str]:
            started = {(e.get("objectRef") or {}).get("namespace", "")
                       for e in self._events() if e["user"]["username"] == user
                       and e["verb"] == "watch"
                       and (e.get("objectRef") or {}).get("resource") == resource}
            return namespaces - started

        await wait_for(lambda: not missing(), timeout=120, interval=1,
                       what=f"{user} to watch {resource} in {sorted(namespaces)}")

    @staticmethod
    def _is_fence(event: dict, name: str) -> bool:
        ref = event.get("objectRef") or {}
        return (event.get("stage") == "ResponseComplete" and event.get("verb") == "create"
                and ref.get("resource") == "configmaps" and ref.get("name") == name)

    def between(self, start: str, end: str) -> list[Request]:
        """The requests answered (or, a watch, started) after fence ``start`` and
        before fence ``end``, except the admin's deletion of ``start``."""
        events = self._events()
        first = next(i for i, e in enumerate(events) if self._is_fence(e, start))
        last = next(i for i, e in enumerate(events) if self._is_fence(e, end))
        seen, requests = set(), []
        for event in events[first + 1:last]:
            if event.get("stage") not in ("ResponseStarted", "ResponseComplete") \
                    or event["auditID"] in seen:
                continue
            seen.add(event["auditID"])
            if not ((event.get("objectRef") or {}).get("name") == start
                    and event["user"]["username"] == ADMIN_USER):
                requests.append(Request.of(event))
        return requests
