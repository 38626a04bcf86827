"""The dev cluster's admin client: the ``kubernetes`` client's DynamicClient
(discovery, server-side apply) with the admin client cert, for ``up``, the demo's
pool lines and the cluster tests' set-up.

Objects go in and out as plain dicts, as the pure builders make them. Every call
raises :class:`kubernetes.client.exceptions.ApiException` on an API error (``get``
answers ``None`` for a missing object); a kind the server does not serve (yet: a
CRD not established) raises ResourceNotFoundError.
"""

from __future__ import annotations

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError, ResourceNotFoundError
from urllib3.exceptions import HTTPError

from .pki import PkiPaths

FIELD_MANAGER = "jupyterhub-gpu-devcluster"
DISCOVERY_CACHE = "discovery.json"  # beside the PKI directory, in the state dir
KubeErrors = (ApiException, ResourceNotFoundError, HTTPError, OSError)
"""What a call may raise while the cluster is not (yet) in the state asked for: an
API error, a kind not served yet, a connection that failed."""


class AdminClient:
    """The cluster's admin (``system:masters``), for setting it up."""

    def __init__(self, server: str, pki: PkiPaths):
        conf = k8s.Configuration()
        conf.host = server
        conf.ssl_ca_cert = str(pki.ca_crt)
        conf.cert_file, conf.key_file = str(pki.admin_crt), str(pki.admin_key)
        self.server = server
        self.api_client = k8s.ApiClient(conf)
        self.dynamic = DynamicClient(self.api_client,
                                     cache_file=str(pki.dir.parent / DISCOVERY_CACHE))

    def _resource(self, api_version: str, kind: str):
        return self.dynamic.resources.get(api_version=api_version, kind=kind)

    def apply(self, obj: dict) -> dict:
        """Server-side apply ``obj`` (forcing ownership of conflicting fields)."""
        meta = obj["metadata"]
        return self._resource(obj["apiVersion"], obj["kind"]).server_side_apply(
            body=obj, name=meta["name"], namespace=meta.get("namespace"),
            field_manager=FIELD_MANAGER, force_conflicts=True).to_dict()

    def create(self, obj: dict, dry_run: bool = False) -> dict:
        res = self._resource(obj["apiVersion"], obj["kind"])
        return res.create(body=obj, namespace=obj["metadata"].get("namespace"),
                          field_manager=FIELD_MANAGER,
                          **({"dry_run": "All"} if dry_run else {})).to_dict()

    def annotate(self, api_version: str, kind: str, name: str, namespace: str | None,
                 annotations: dict[str, str]) -> bool:
        """Merge ``annotations`` into an object's; False if it does not exist (any
        more): unlike an apply, this never creates it."""
        try:
            self._resource(api_version, kind).patch(
                name=name, namespace=namespace, body={"metadata": {"annotations": annotations}},
                content_type="application/merge-patch+json", field_manager=FIELD_MANAGER)
            return True
        except NotFoundError:
            return False

    def get(self, api_version: str, kind: str, name: str,
            namespace: str | None = None) -> dict | None:
        try:
            return self._resource(api_version, kind).get(name=name,
                                                         namespace=namespace).to_dict()
        except NotFoundError:
            return None

    def list(self, api_version: str, kind: str, namespace: str | None = None,
             label_selector: str | None = None) -> list[dict]:
        listing = self._resource(api_version, kind).get(namespace=namespace,
                                                        label_selector=label_selector)
        return listing.to_dict().get("items", [])
