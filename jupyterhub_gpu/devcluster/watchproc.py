"""What the dev cluster's watch processes share (the fake DCGM exporter,
:mod:`.dcgm`; the CSI sidecars, :mod:`.csi`): their command line, their API client,
one reflector thread per kind into a store, and a small HTTP server on 127.0.0.1.

A store is any object with ``replace(kind, {key: obj})`` and ``update(kind, key, obj
or None)``.
"""

from __future__ import annotations

import argparse
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterable

from .layout import HOST

log = logging.getLogger("devcluster.watch")

RELIST_SECONDS = 1.0  # after a watch ends or fails


def process_parser(description: str) -> argparse.ArgumentParser:
    """The ``--kubeconfig`` and ``--port`` every dev-cluster watch process takes."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--port", type=int, required=True)
    return parser


def process_client(args: argparse.Namespace):
    """The API client of a watch process started with ``args``, logging set up."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    from kubernetes import config

    return config.new_client_from_config(config_file=args.kubeconfig)


def reflect(api_client, store: Any, kind: str, list_fn: Callable, key: Callable,
            stop: threading.Event) -> None:
    """List, then watch from that list's resourceVersion; list again when the watch
    ends or fails (the reflector pattern)."""
    from kubernetes import watch

    while not stop.is_set():
        try:
            listing = api_client.sanitize_for_serialization(list_fn())
            store.replace(kind, {key(o): o for o in listing.get("items") or []})
            version = listing["metadata"]["resourceVersion"]
            for event in watch.Watch().stream(list_fn, resource_version=version,
                                              timeout_seconds=300):
                obj = api_client.sanitize_for_serialization(event["object"])
                if event["type"] in ("ADDED", "MODIFIED"):
                    store.update(kind, key(obj), obj)
                elif event["type"] == "DELETED":
                    store.update(kind, key(obj), None)
                if stop.is_set():
                    return
        except Exception as e:  # noqa: BLE001 - keep watching whatever happened
            log.warning("%s watch: %s: %s; listing again", kind, type(e).__name__, e)
        stop.wait(RELIST_SECONDS)


def watch_all(api_client, store, watches: Iterable[tuple[str, Callable, Callable]],
              stop: threading.Event) -> None:
    """One reflector thread per (kind, list function, key) into ``store``."""
    for kind, list_fn, key in watches:
        threading.Thread(target=reflect, args=(api_client, store, kind, list_fn, key, stop),
                         daemon=True, name=f"watch-{kind}").start()


def serve(port: int, handler: type[BaseHTTPRequestHandler], stop: threading.Event) -> int:
    """Serve ``handler`` on ``port`` of 127.0.0.1 until killed; then stop the watches."""
    server = ThreadingHTTPServer((HOST, port), handler)
    try:
        server.serve_forever()
    finally:
        stop.set()
    return 0
