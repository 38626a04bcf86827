"""The hub service ``gpu-kernels``: users' GPU kernels' pods, through JupyterHub's auth
(docs/kernels.md).

Its API, under the service's prefix (``/services/gpu-kernels/``), answers JSON:

* ``GET api/kernels``: the caller's kernels, each with its pod's phase and address,
  where it is in its start (``stage``) and whether the platform is taking it back
  (``stopped``), in the spawn page's words (:mod:`jupyterhub_gpu.kernels.progress`);
* ``POST api/kernels`` with ``{"profile": ..., "kernel_id": ..., "response_address":
  ..., "public_key": ...}``: start one (:mod:`jupyterhub_gpu.kernels.request` checks it
  before any Kubernetes call): the kernel's pod
  (:func:`jupyterhub_gpu.builders.kernel.build_kernel_pod`) in the caller's team
  namespace, belonging to the caller's running server whose address the response
  address names, and its two NetworkPolicies; answers the kernel as ``GET`` does;
* ``GET api/kernels/<kernel id>``: one kernel; ``DELETE api/kernels/<kernel id>``:
  delete its pod (its policies go with it); with ``?stop-reason=idle-release``,
  because its server released it idle (the usage ledger's stop reason; without it,
  its user's);
* ``GET api/kernelspecs``: ``{"kernelspecs": {name: kernel.json}}``, one per GPU
  profile the caller may start kernels of (:mod:`jupyterhub_gpu.kernels.specs`; none
  when ``gpuKernelsPerUser`` is 0), which their server lists beside its own;
* ``GET metrics``: its kernels' Prometheus metrics (:mod:`jupyterhub_gpu.kernels.metrics`),
  in the text format, to a caller with ``read:metrics`` (the hub's scope for
  ``/hub/metrics``), not JSON.

Beside its API, the service lets a fallback profile's kernel start once Kueue admits
it: it records the admitted pool on the pod and lifts the pool gate, as the hub does
for a server; and it deletes a kernel's pod whose server is gone, so that a server
stopped or culled without shutting its kernels down leaves no GPU held
(:func:`keep_tending`). Given the usage ledger's URL, it records every kernel there
(:class:`jupyterhub_gpu.usage.kernels.KernelRecorder`): from its watches, and at once
when it creates or deletes one; and it counts them in its metrics
(:mod:`jupyterhub_gpu.kernels.metrics`).

A caller is a JupyterHub user with the scope ``access:services!service=gpu-kernels``,
known as :mod:`jupyterhub_gpu.serviceauth` says (a server's API token, or OAuth in
the browser with XSRF for writes); a caller sees and touches only their own kernels.
Kubernetes is reached with the hub's ServiceAccount (:mod:`jupyterhub_gpu.kernels.cluster`).

Run as a managed service by :func:`jupyterhub_gpu.kernels.config.add_kernels_service`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import secrets
import time
from urllib.parse import urlparse

from jupyterhub.services.auth import HubOAuth
from jupyterhub.utils import url_path_join
from prometheus_client import REGISTRY, CollectorRegistry
from tornado import web

from ..builders.job import DEFAULT_HOME_MOUNT_PATH, home_of, identity_of
from ..builders.kernel import KernelRequest, Launch, Owner, build_kernel_pod, kernel_name, \
    kernel_policies
from ..contract import (ENV_KERNELS_BIND, ENV_PLATFORM_FILE, ENV_SERVICE_PREFIX,
                        ENV_SERVICE_URL, ENV_USAGE_DB_URL, KERNEL_IDLE_RELEASE,
                        KERNEL_STOP_QUERY, KERNELS_ACCESS_SCOPE, KERNELS_API_PATH,
                        KERNELS_SERVICE_NAME, KERNELSPECS_API_PATH, PROFILE_LABEL,
                        SERVICE_METRICS_PATH, USERNAME_KEY)
from ..ledger.store import Ledger, StopReason
from ..logtext import shown
from ..serviceauth import BODY_HARD_LIMIT, MetricsHandler, OAuthCallback, ServiceAPI
from ..spec.grant import UserRef
from ..spec.source import SpecSource
from ..kueue import status as st
from ..usage.kernels import KernelRecorder
from . import cluster, progress
from .cluster import active, kernel_id
from .metrics import KernelMetrics
from .request import (KernelRefused, KernelStart, check_response_address, check_start,
                      gpu_profiles_for, read_body, requested_profile)
from .specs import user_kernelspecs

log = logging.getLogger("jupyterhub_gpu.kernels")
#: a kernel's id in a path, as Jupyter makes them (a UUID)
KERNEL_ID = r"([0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12})"
#: seconds between two passes that record a fallback profile's kernel's admitted pool
POOL_EVERY = 1.0
#: what ``DELETE api/kernels/<id>?stop-reason=...`` may say, as the usage ledger's reason
STOP_REASONS = {None: StopReason.USER, KERNEL_IDLE_RELEASE: StopReason.IDLE_RELEASE}
#: how long a pod this service created counts against its user's cap while the pod
#: watch has not shown it (the watch normally shows it within a second)
UNSEEN_FOR = 600.0


class Kernels:
    """The service's state: the live spec, the watches, a lock per user (so two
    starts at once cannot both pass the cap), the pods this service created that
    the watch has not shown yet (so a lagging watch cannot let a user past the cap),
    and its metrics, in ``registry`` (made before the watches start: they count from
    them)."""

    def __init__(self, platform_file: str, watches: cluster.Watches,
                 home_path: str = DEFAULT_HOME_MOUNT_PATH, usage: KernelRecorder | None = None,
                 registry: CollectorRegistry = REGISTRY):
        self.source, self.watches, self.usage = SpecSource.shared(platform_file), watches, usage
        self.metrics, self.registry = KernelMetrics(watches, self.source.current, registry), registry
        self.home_path = home_path  # where notebooks mount the home volume
        self._locks: dict[str, asyncio.Lock] = {}
        self._unseen: dict[str, dict[str, float]] = {}  # user -> {ns/name: created at}

    @property
    def platform(self):
        return self.source.current()

    def lock(self, user: str) -> asyncio.Lock:
        return self._locks.setdefault(user, asyncio.Lock())

    async def deleting(self, pod: dict, reason: StopReason) -> None:
        """This service is about to delete ``pod`` for ``reason``: the usage ledger
        records the stop now (no sweep says otherwise), the metrics count it so."""
        self.metrics.deleting(pod, reason)
        if self.usage is not None:
            await self.usage.deleting(pod, reason)

    def created(self, user: str, pod: dict) -> None:
        """Count ``pod``, just created for ``user``, until the watch shows it."""
        meta = pod["metadata"]
        self._unseen.setdefault(user, {})[f"{meta['namespace']}/{meta['name']}"] = \
            time.monotonic()

    def active_count(self, user: str) -> int:
        """What the cap counts: the user's active kernel pods in the watch, and those
        created here that it does not hold yet (forgotten once it does, or after
        :data:`UNSEEN_FOR` seconds: a pod deleted before the watch saw it)."""
        unseen, now = self._unseen.get(user, {}), time.monotonic()
        for key, at in list(unseen.items()):
            reflector = self.watches.pods.get(key.partition("/")[0])
            if now - at > UNSEEN_FOR or (reflector is not None and key in reflector.resources):
                del unseen[key]
        if not unseen:
            self._unseen.pop(user, None)
        return sum(map(active, self.watches.kernels_of(user))) + len(unseen)

    def view(self, pod: dict) -> dict:
        """A kernel as the API answers it: :func:`view`, with where it is in its start
        and whether the platform is taking it back, from the watches."""
        ns, platform = pod["metadata"]["namespace"], self.platform
        workload = st.workload_for(pod, self.watches.workloads_in(ns))
        team = next((t for t in platform.teams if t.namespace == ns), None)
        cohort = [w for n in (platform.cohort_namespaces(team) if team else ())
                  for w in self.watches.workloads_in(n)]
        return {**view(pod),
                "stage": progress.stage(platform, pod, workload, self.watches.workloads_in(ns),
                                        self.watches.events_of(ns, pod["metadata"]["name"])),
                "stopped": progress.stopped(platform, pod, workload, cohort)}


def view(pod: dict) -> dict:
    """A kernel as the API answers it, from its pod alone."""
    meta, status = pod["metadata"], pod.get("status") or {}
    return {"id": kernel_id(pod), "name": meta["name"], "namespace": meta["namespace"],
            "profile": (meta.get("labels") or {}).get(PROFILE_LABEL),
            "created": meta.get("creationTimestamp"),
            "phase": "Deleting" if meta.get("deletionTimestamp") else status.get("phase"),
            "address": status.get("podIP")}


class _API(ServiceAPI):
    service_words = "The kernels service"
    access_scope = KERNELS_ACCESS_SCOPE
    owned = "kernels"

    @property
    def kernels(self) -> Kernels:
        return self.state

    def own_kernel(self, kid: str) -> dict:
        pod = self.kernels.watches.kernel(self.caller().name, kid)
        if pod is None:
            raise web.HTTPError(404, f"You have no kernel {kid!r}.")
        return pod


class KernelsHandler(_API):
    """``GET`` and ``POST api/kernels``."""

    @web.authenticated
    async def get(self) -> None:
        pods = self.kernels.watches.kernels_of(self.caller().name)
        self.answer({"kernels": [self.kernels.view(p) for p in pods]})

    @web.authenticated
    async def post(self) -> None:
        user, body, metrics = self.caller(), None, self.kernels.metrics
        async with self.kernels.lock(user.name):
            try:
                body = read_body(self.request.body)
                start = check_start(self.kernels.platform, user, body,
                                    self.kernels.active_count(user.name))
                if self.kernels.watches.kernel(user.name, start.launch.kernel_id) is not None:
                    raise KernelRefused(f"You already have kernel {start.launch.kernel_id}.",
                                        f"kernel {start.launch.kernel_id} exists", status=409)
                pod = await self._create(user, start, self._server(user, start.launch))
            except KernelRefused as e:
                metrics.refused(requested_profile(body))
                log.warning("Refused kernel of user %s: %s", shown(user.name),
                            shown(e.log_detail))
                raise web.HTTPError(e.status, "%s", e.user_message) from None
            except Exception:  # its pod or policies could not be made
                metrics.failed(requested_profile(body))
                raise
        self.answer(self.kernels.view(pod), 201)

    def _server(self, user: UserRef, launch: Launch) -> dict:
        """The caller's running server the kernel belongs to: the one at the response
        address; refused if they run none, or none there."""
        servers = self.kernels.watches.running_servers(user.name)
        if not servers:
            raise KernelRefused("Start your server first: a GPU kernel belongs to one of "
                                "your running servers.", "no running server", status=409)
        host = launch.response_address.rpartition(":")[0].strip("[]")
        server = next((p for p in servers if p["status"]["podIP"] == host), servers[0])
        check_response_address(launch, server["status"]["podIP"])
        return server

    async def _create(self, user: UserRef, start: KernelStart, server: dict) -> dict:
        owner_ = Owner.of(server)
        req = KernelRequest(kernel_name(owner_.user_slug or user.name, start.launch.kernel_id),
                            user.name, owner_, start.grant, start.launch,
                            home_of(server, self.kernels.home_path), identity_of(server))
        pod = build_kernel_pod(self.kernels.platform, req)
        pod["metadata"]["annotations"] = {USERNAME_KEY: user.name}
        created = await cluster.create(
            pod, kernel_policies(req),
            undo=lambda made: self.kernels.deleting(made, StopReason.FAILURE))
        self.kernels.created(user.name, created)
        await self.kernels.watches.seen(req.grant.team.namespace, req.name)
        log.info("User %s started kernel %s/%s (%s) for server %s", shown(user.name),
                 req.grant.team.namespace, req.name, start.grant.profile.slug,
                 shown(server["metadata"]["name"]))
        pod = self.kernels.watches.kernel(user.name, start.launch.kernel_id) or created
        if self.kernels.usage is not None:
            await self.kernels.usage.created(pod)
        return pod


class KernelHandler(_API):
    """``GET`` and ``DELETE api/kernels/<kernel id>``."""

    @web.authenticated
    async def get(self, kid: str) -> None:
        self.answer(self.kernels.view(self.own_kernel(kid)))

    @web.authenticated
    async def delete(self, kid: str) -> None:
        said = self.get_query_argument(KERNEL_STOP_QUERY, None)
        if said not in STOP_REASONS:
            raise web.HTTPError(400, f"A kernel's deletion gives no {KERNEL_STOP_QUERY}, "
                                f"or {KERNEL_STOP_QUERY}={KERNEL_IDLE_RELEASE}.")
        pod = self.own_kernel(kid)
        await self.kernels.deleting(pod, STOP_REASONS[said])  # before the pod goes
        await cluster.delete(pod)
        log.info("User %s deleted kernel %s/%s (%s)", shown(self.caller().name),
                 pod["metadata"]["namespace"], pod["metadata"]["name"], STOP_REASONS[said])
        self.answer({**view(pod), "phase": "Deleting"})


class KernelSpecsHandler(_API):
    """``GET api/kernelspecs``: the caller's GPU kernelspecs."""

    @web.authenticated
    async def get(self) -> None:
        platform, user = self.kernels.platform, self.caller()
        profiles = gpu_profiles_for(platform, user.groups) if platform.gpu_kernels_per_user else ()
        self.answer({"kernelspecs": user_kernelspecs(platform, profiles)})


def make_app(kernels: Kernels, prefix: str, hub_auth: HubOAuth) -> web.Application:
    """The service's Tornado app: its API under ``prefix``, users known by ``hub_auth``
    (JupyterHub's, from the service's environment)."""
    api = url_path_join(prefix, KERNELS_API_PATH)
    args = {"state": kernels, "hub_auth": hub_auth}
    return web.Application([
        (url_path_join(prefix, "oauth_callback"), OAuthCallback, {"hub_auth": hub_auth}),
        (api, KernelsHandler, args),
        (url_path_join(prefix, KERNELSPECS_API_PATH), KernelSpecsHandler, args),
        (url_path_join(api, KERNEL_ID), KernelHandler, args),
        (url_path_join(prefix, SERVICE_METRICS_PATH), MetricsHandler,
         {"registry": kernels.registry, "hub_auth": hub_auth}),
    ], cookie_secret=secrets.token_bytes(32))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog=f"{KERNELS_SERVICE_NAME} service")
    parser.add_argument("--spec", default=os.environ.get(ENV_PLATFORM_FILE),
                        help=f"the platform spec (default: ${ENV_PLATFORM_FILE})")
    parser.add_argument("--home-mount-path", default=DEFAULT_HOME_MOUNT_PATH,
                        help="where notebooks mount the home volume, the z2jh chart's "
                        "singleuser.storage.homeMountPath (default: %(default)s)")
    parser.add_argument("--usage-db-url", default=os.environ.get(ENV_USAGE_DB_URL),
                        help=f"the usage ledger's SQLAlchemy URL (default: "
                        f"${ENV_USAGE_DB_URL}); unset: no ledger")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[%(levelname)s %(asctime)s %(name)s] "
                        "%(message)s")
    asyncio.run(_serve(args.spec, args.home_mount_path, args.usage_db_url))


async def _serve(platform_file: str, home_path: str, usage_db_url: str | None = None) -> None:
    source = SpecSource.shared(platform_file)
    watches = cluster.Watches(t.namespace for t in source.current().teams)
    url = urlparse(os.environ[ENV_SERVICE_URL])
    prefix = os.environ[ENV_SERVICE_PREFIX]
    recorder = (KernelRecorder(Ledger(usage_db_url), watches, source.current)
                if usage_db_url else None)
    kernels = Kernels(platform_file, watches, home_path, recorder)
    app = make_app(kernels, prefix, HubOAuth())
    # listen at once (the hub waits for its services at start-up), then watch
    app.listen(url.port or 80, os.environ.get(ENV_KERNELS_BIND) or url.hostname,
               max_body_size=BODY_HARD_LIMIT)
    log.info("Serving %s on %s (prefix %s)", KERNELS_SERVICE_NAME, url.geturl(), prefix)
    if recorder is not None:
        recorder.start()
    await watches.keep_starting()
    await keep_tending(kernels)


async def keep_tending(kernels: Kernels) -> None:
    """:func:`tend`, every :data:`POOL_EVERY` seconds."""
    while True:
        await tend(kernels)
        await asyncio.sleep(POOL_EVERY)


async def tend(kernels: Kernels) -> None:
    """One pass over the watches (no request to the API server unless there is a pod
    to change): let fallback profiles' kernels start once Kueue admits them
    (:func:`jupyterhub_gpu.kernels.cluster.record_pools`), and delete the kernels
    whose server is gone (:func:`jupyterhub_gpu.kernels.cluster.delete_orphans`; in
    the usage ledger and the metrics, as their user's: their server stopped). A step
    that fails is logged; the next pass tries again."""
    def first(pod: dict):
        return kernels.deleting(pod, StopReason.USER)

    for step, what in ((cluster.record_pools(kernels.watches, kernels.platform),
                        "Recording kernels' pools"),
                       (cluster.delete_orphans(kernels.watches, first),
                        "Deleting kernels whose server is gone")):
        try:
            await step
        except Exception as e:  # noqa: BLE001 - the next pass tries again
            log.error("%s failed (%s); trying again", what, e)


if __name__ == "__main__":
    main()
