"""Long-lived shared watches that resume where they stopped, as client-go's reflectors do.

KubeSpawner's reflectors end each watch after ``timeout_seconds`` (10 s) and then list
every object again before the next one: a full LIST of the namespace six times a
minute per watch, however quiet the cluster. :class:`ResumesWatch` is a mixin for such
a reflector that keeps its first listing, then:

* asks the API server for a watch of a randomized 5 to 10 minutes
  (:data:`WATCH_SECONDS`, client-go's range), with bookmarks, so that the last
  resourceVersion seen stays current even when nothing changes;
* when the server ends the watch at its timeout, watches again *from that
  resourceVersion*, with no LIST;
* lists again only when the resourceVersion is too old (``410 Gone``, on the watch
  request or as an ERROR event in the stream) or the watch fails (a reset connection,
  an API server restart), backing off on repeated errors and giving up, as
  KubeSpawner's reflectors do, after about a minute of them (``on_failure`` is called).

What the reflector holds (``resources``, keyed ``namespace/name``) is what KubeSpawner's
reflectors hold, so everything that reads them is unchanged.

Each such watch holds one HTTP connection for as long as it runs, so the watches have
a client of their own (:func:`watch_api_client`) whose connections are not limited.
KubeSpawner's shared clients (one per API class) take at most
``connection_pool_maxsize`` connections, 100 by default in kubernetes_asyncio
(``client/configuration.py``, its aiohttp connector's ``limit`` in ``client/rest.py``):
with 50 team namespaces the pod and event watches alone would take all 100 of
``CoreV1Api``'s, and every request after them (a pod's create, its delete) and every
later namespace's watch would wait for a connection that never comes.
"""

from __future__ import annotations

import asyncio
import random
from functools import partial
from typing import Any

from kubernetes_asyncio import watch
from kubernetes_asyncio.client import ApiClient, Configuration
from kubernetes_asyncio.client.exceptions import ApiException
from kubespawner.clients import shared_client

#: the server-side timeout of one watch request, drawn at random between these (seconds)
WATCH_SECONDS = (300, 600)
#: the first delay before listing again after an error; doubled per failure in a row
FIRST_DELAY = 0.1
#: the delay past which the watch gives up (as KubeSpawner's reflectors do)
GIVE_UP_DELAY = 30.0
#: KubeSpawner's log line when a reflector gives up (the cluster tests look for it)
GAVE_UP = "Watching resources never recovered, giving up"


class Gone(Exception):
    """The watch's resourceVersion is too old: list again."""


#: the watches' own client of each event loop
_WATCH_CLIENTS: dict[asyncio.AbstractEventLoop, ApiClient] = {}


def watch_api_client() -> ApiClient:
    """The API client of every watch on this event loop: the global configuration
    (KubeSpawner's ``load_config`` has set it before any reflector is made), with no
    limit on its connections (aiohttp's ``limit=0``): one per open watch, a number
    bounded by the watched namespaces, never by the hub's requests."""
    loop = asyncio.get_running_loop()
    client = _WATCH_CLIENTS.get(loop)
    if client is None or loop.is_closed():
        config = Configuration.get_default_copy()
        config.connection_pool_maxsize = 0
        for old in [k for k in _WATCH_CLIENTS if k.is_closed()]:
            del _WATCH_CLIENTS[old]
        client = _WATCH_CLIENTS[loop] = ApiClient(configuration=config)
    return client


def watch_seconds() -> int:
    return random.randint(*WATCH_SECONDS)


def apply_event(resources: dict, event: dict) -> str | None:
    """Store one watch event in ``resources``; the resourceVersion it carries."""
    obj = event["raw_object"]
    meta = obj.get("metadata") or {}
    if event["type"] != "BOOKMARK":
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        if event["type"] == "DELETED":
            resources.pop(key, None)
        else:
            resources[key] = obj
    return meta.get("resourceVersion")


class ResumesWatch:
    """Mixin for a KubeSpawner ``ResourceReflector`` (put it first among the bases)."""

    _listed_version: str | None = None

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        # KubeSpawner's shared client of the same API class, on the watches' own client
        self.api = shared_client(self.api_group_name, api_client=watch_api_client())

    async def _list_and_update(self, resource_version=None):
        version = await super()._list_and_update(resource_version)
        self._listed_version = version
        return version

    async def _watch_and_update(self):
        self.log.info("watching for %s in %s (resuming watches of up to %d s)", self.kind,
                      "all namespaces" if self.omit_namespace else self.namespace,
                      WATCH_SECONDS[1])
        version, delay = self._listed_version, FIRST_DELAY
        while not self._stopping:
            try:
                if version is None:
                    version = await self._list_and_update("0")
                version = await self._watch_from(version)
                delay = FIRST_DELAY
            except asyncio.CancelledError:
                if self._stopping:  # stop(): it cancels the task, then awaits it
                    break
                raise
            except Gone:
                self.log.info("%s watch: resourceVersion %s is gone, listing again",
                              self.kind, version)
                version = None
            except Exception:
                version, delay = None, delay * 2
                if delay > GIVE_UP_DELAY:
                    self.log.exception(GAVE_UP)
                    if self.on_failure:
                        self.on_failure()
                    return
                self.log.exception("Error watching %s, listing again in %ss", self.kind,
                                   delay)
                await asyncio.sleep(delay)
        self.log.info("%s watcher stopped", self.kind)

    def _watch_args(self, version: str) -> dict[str, Any]:
        seconds = watch_seconds()
        args = dict(label_selector=self.label_selector, field_selector=self.field_selector,
                    resource_version=version, allow_watch_bookmarks=True,
                    timeout_seconds=seconds,
                    _request_timeout=seconds + (self.request_timeout or 60))
        if not self.omit_namespace:
            args["namespace"] = self.namespace
        return args

    async def _watch_from(self, version: str) -> str:
        """One watch request from ``version`` until the server ends it; the last
        resourceVersion seen. Raises :class:`Gone` on 410."""
        w = watch.Watch()
        method = partial(getattr(self.api, self.list_method_name), _preload_content=False)
        try:
            async with w.stream(method, **self._watch_args(version)) as stream:
                async for event in stream:
                    version = apply_event(self.resources, event) or version
                    if self._stopping:
                        break
        except ApiException as e:
            if e.status == 410:
                raise Gone() from e
            raise
        finally:
            w.stop()
            await w.close()
        return version
