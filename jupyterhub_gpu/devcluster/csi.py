"""The dev cluster's storage process: AKS's CSI sidecars and the kubelet's wait for
attached volumes, for kwok's nodes (the rules, and what is real and what is emulated,
are :mod:`.storage`'s).

One shared watch per kind (claims, volumes, VolumeAttachments, pods, nodes; the
reflector of :mod:`.dcgm`), never a request per object to find work: every change
wakes one worker, which goes over what the watches hold and

* creates the PersistentVolume of every claim the binder asked a driver for
  (kubernetes-csi/external-provisioner), and deletes a released one;
* attaches every VolumeAttachment of Azure Disk (kubernetes-csi/external-attacher:
  its finalizer and ``status.attached``) and lets a deleted one go;
* marks with :data:`~jupyterhub_gpu.devcluster.contract.VOLUMES_ATTACHED_ANNOTATION` every
  pending pod on a node whose volumes are all bound and, where the driver requires
  it, attached to that node (the kubelet's volume manager), which kwok's
  ``pod-ready-volumes`` stage then starts.

Run: ``python -m jupyterhub_gpu.devcluster.csi --kubeconfig K --port P``; ``/health``
answers 200 once every watch has listed.
"""

from __future__ import annotations

import logging
import threading
from http.server import BaseHTTPRequestHandler
from typing import Any, Callable

from .contract import VOLUMES_ATTACHED_ANNOTATION
from . import storage
from .layout import HOST
from .watchproc import process_client, process_parser, serve, watch_all

log = logging.getLogger("devcluster.csi")
MERGE = "application/merge-patch+json"
# a strategic merge patch adds or removes one finalizer without rewriting the list (a
# whole list would re-add one another controller removed meanwhile: refused)
STRATEGIC = "application/strategic-merge-patch+json"
KINDS = ("claims", "volumes", "attachments", "pods", "nodes")


def _namespaced(obj: dict) -> tuple[str, str]:
    return obj["metadata"]["namespace"], obj["metadata"]["name"]


def _named(obj: dict) -> str:
    return obj["metadata"]["name"]


def _without(finalizer: str) -> dict:
    return {"metadata": {"$deleteFromPrimitiveList/finalizers": [finalizer]}}


class Store:
    """What the watches hold, by kind; every change wakes the worker."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.objects: dict[str, dict] = {kind: {} for kind in KINDS}
        self.synced = {kind: False for kind in KINDS}
        self.changed = threading.Event()

    def replace(self, kind: str, objects: dict) -> None:
        with self._lock:
            self.objects[kind] = objects
            self.synced[kind] = True
        self.changed.set()

    def update(self, kind: str, key, obj: dict | None) -> None:
        with self._lock:
            if obj is None:
                self.objects[kind].pop(key, None)
            else:
                self.objects[kind][key] = obj
        self.changed.set()

    def snapshot(self) -> dict[str, dict]:
        with self._lock:
            return {kind: dict(objects) for kind, objects in self.objects.items()}


class Sidecars:
    """The provisioner, the attacher and the kubelet's volume wait, over a Store."""

    def __init__(self, api_client: Any, store: Store):
        from kubernetes import client

        self.core, self.storage_api = client.CoreV1Api(api_client), client.StorageV1Api(api_client)
        self.store = store
        # (action, uid, resourceVersion) done: an object acted on is acted on again
        # only once it changed (the watch may not have shown our own write yet)
        self.done: set[tuple[str, str, str]] = set()

    def _once(self, action: str, obj: dict, do: Callable[[], Any]) -> None:
        meta = obj["metadata"]
        key = (action, meta.get("uid", ""), meta.get("resourceVersion", ""))
        if key in self.done:
            return
        from kubernetes.client.exceptions import ApiException

        try:
            do()
            log.info("%s %s", action, meta.get("name"))
        except ApiException as e:
            if e.status not in (404, 409):  # gone, or made meanwhile: nothing to do
                log.warning("%s %s: HTTP %s %s", action, meta.get("name"), e.status, e.reason)
                return
        self.done.add(key)

    def provision(self, objects: dict[str, dict]) -> None:
        for claim in objects["claims"].values():
            volume = storage.volume_for(claim)
            if volume is not None and volume["metadata"]["name"] not in objects["volumes"]:
                self._once("provision", claim,
                           lambda v=volume: self.core.create_persistent_volume(v))
        for volume in objects["volumes"].values():
            if storage.to_delete(volume):
                self._once("delete", volume, lambda v=volume: self._delete_volume(v))

    def _delete_volume(self, volume: dict) -> None:
        name = volume["metadata"]["name"]
        self.core.delete_persistent_volume(name)
        self.core.patch_persistent_volume(name, _without(storage.PROVISIONER_FINALIZER),
                                          _content_type=STRATEGIC)

    def attach(self, objects: dict[str, dict]) -> None:
        for attachment in objects["attachments"].values():
            action = storage.attacher_action(attachment)
            if action is not None:
                self._once(action, attachment,
                           lambda a=attachment, act=action: self._attach(a, act))

    def _attach(self, attachment: dict, action: str) -> None:
        meta = attachment["metadata"]
        finalizer = storage.attacher_finalizer(attachment["spec"]["attacher"])
        patch = ({"metadata": {"finalizers": [finalizer]}} if action == "attach"
                 else _without(finalizer))
        self.storage_api.patch_volume_attachment(meta["name"], patch, _content_type=STRATEGIC)
        if action == "attach":
            self.storage_api.patch_volume_attachment_status(
                meta["name"], {"status": {"attached": True}}, _content_type=MERGE)

    def start_pods(self, objects: dict[str, dict]) -> None:
        mark = {"metadata": {"annotations": {VOLUMES_ATTACHED_ANNOTATION: "true"}}}
        for pod in objects["pods"].values():
            annotations = pod["metadata"].get("annotations") or {}
            if (VOLUMES_ATTACHED_ANNOTATION in annotations
                    or not storage.waits_for_volumes(pod)):
                continue
            node = objects["nodes"].get(pod["spec"]["nodeName"])
            if storage.volumes_ready(pod, objects["claims"], objects["volumes"], node):
                namespace, name = _namespaced(pod)
                self._once("volumes attached", pod, lambda n=name, ns=namespace:
                           self.core.patch_namespaced_pod(n, ns, mark, _content_type=MERGE))

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self.store.changed.wait(1.0)
            self.store.changed.clear()
            if not all(self.store.synced.values()):
                continue
            objects = self.store.snapshot()
            for step in (self.provision, self.attach, self.start_pods):
                try:
                    step(objects)
                except Exception:  # noqa: BLE001 - keep serving; the next change retries
                    log.exception("%s failed", step.__name__)
            uids = {obj["metadata"].get("uid") for kind in objects.values()
                    for obj in kind.values()}
            self.done = {done for done in self.done if done[1] in uids}


def _handler(store: Store) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            ready = all(store.synced.values())
            code = 404 if self.path != "/health" else 200 if ready else 503
            body = b"ok\n" if code == 200 else b"not ready\n"
            self.send_response(code)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:  # health checks: not logged
            pass

    return Handler


def main(argv: list[str] | None = None) -> int:
    args = process_parser(__doc__.splitlines()[0]).parse_args(argv)
    api_client = process_client(args)
    from kubernetes import client

    core, storage_api = client.CoreV1Api(api_client), client.StorageV1Api(api_client)
    store, stop = Store(), threading.Event()
    watch_all(api_client, store, (
        ("claims", core.list_persistent_volume_claim_for_all_namespaces, _namespaced),
        ("volumes", core.list_persistent_volume, _named),
        ("attachments", storage_api.list_volume_attachment, _named),
        ("pods", core.list_pod_for_all_namespaces, _namespaced),
        ("nodes", core.list_node, _named)), stop)
    threading.Thread(target=Sidecars(api_client, store).run, args=(stop,), daemon=True,
                     name="sidecars").start()
    log.info("CSI sidecars for %s; health on http://%s:%d/health",
             ", ".join(storage.ATTACH_REQUIRED), HOST, args.port)
    return serve(args.port, _handler(store), stop)


if __name__ == "__main__":
    raise SystemExit(main())
