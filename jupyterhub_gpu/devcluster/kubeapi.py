"""A small synchronous Kubernetes REST client for setting up the dev cluster.

Only what ``up``/``status`` need: discovery of a kind's resource path, server-side
apply, create (optionally dry-run), get, list and delete. Uses the admin client
cert; never goes through an HTTP proxy.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

from .pki import PkiPaths

FIELD_MANAGER = "jupyterhub-gpu-devcluster"


class ApiError(RuntimeError):
    def __init__(self, status: int, method: str, path: str, body: str):
        self.status = status
        try:
            message = json.loads(body).get("message", body)
        except ValueError:
            message = body
        super().__init__(f"{method} {path}: HTTP {status}: {message}")


@dataclass(frozen=True)
class Resource:
    name: str  # plural
    namespaced: bool


class KubeClient:
    def __init__(self, server: str, pki: PkiPaths, timeout: float = 30.0):
        self.server = server.rstrip("/")
        self.timeout = timeout
        ctx = ssl.create_default_context(cafile=str(pki.ca_crt))
        ctx.load_cert_chain(str(pki.admin_crt), str(pki.admin_key))
        self._opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=ctx))
        self._discovered: dict[str, dict[str, Resource]] = {}

    def request(self, method: str, path: str, body: dict | None = None,
                content_type: str = "application/json", query: dict | None = None) -> dict:
        url = self.server + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": content_type,
                                              "Accept": "application/json"})
        try:
            with self._opener.open(req, timeout=self.timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as e:
            raise ApiError(e.code, method, path, e.read().decode(errors="replace")) from None
        return json.loads(raw) if raw else {}

    # -- discovery -----------------------------------------------------------------

    def _resources(self, api_version: str) -> dict[str, Resource]:
        if api_version not in self._discovered:
            base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            listing = self.request("GET", base)
            self._discovered[api_version] = {
                r["kind"]: Resource(r["name"], r["namespaced"])
                for r in listing.get("resources", []) if "/" not in r["name"]}
        return self._discovered[api_version]

    def resource(self, api_version: str, kind: str) -> Resource:
        found = self._resources(api_version).get(kind)
        if found is None:  # a CRD may have been established since the last look
            self._discovered.pop(api_version, None)
            found = self._resources(api_version).get(kind)
        if found is None:
            raise ApiError(404, "DISCOVER", f"{api_version} {kind}", "kind not served")
        return found

    def path(self, api_version: str, kind: str, namespace: str | None = None,
             name: str | None = None) -> str:
        res = self.resource(api_version, kind)
        base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        if res.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{res.name}"
        return base + (f"/{name}" if name else "")

    def _obj_path(self, obj: dict, with_name: bool = True) -> str:
        meta = obj["metadata"]
        return self.path(obj["apiVersion"], obj["kind"], meta.get("namespace"),
                         meta["name"] if with_name else None)

    # -- verbs -----------------------------------------------------------------------

    def apply(self, obj: dict) -> dict:
        """Server-side apply ``obj`` (forcing ownership of conflicting fields)."""
        return self.request("PATCH", self._obj_path(obj), obj,
                            content_type="application/apply-patch+yaml",
                            query={"fieldManager": FIELD_MANAGER, "force": "true"})

    def create(self, obj: dict, dry_run: bool = False) -> dict:
        query = {"fieldManager": FIELD_MANAGER}
        if dry_run:
            query["dryRun"] = "All"
        return self.request("POST", self._obj_path(obj, with_name=False), obj, query=query)

    def get(self, api_version: str, kind: str, name: str,
            namespace: str | None = None) -> dict | None:
        try:
            return self.request("GET", self.path(api_version, kind, namespace, name))
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    def list(self, api_version: str, kind: str, namespace: str | None = None,
             **query: str) -> list[dict]:
        path = self.path(api_version, kind, namespace)
        return self.request("GET", path, query=query or None).get("items", [])

    def delete(self, api_version: str, kind: str, name: str,
               namespace: str | None = None) -> None:
        try:
            self.request("DELETE", self.path(api_version, kind, namespace, name))
        except ApiError as e:
            if e.status != 404:
                raise
