"""GPUSpawner: KubeSpawner whose profiles come from the GPU platform spec.

All decisions are made by pure code (:mod:`jupyterhub_gpu.builders.pod`); this class
only wires them into KubeSpawner's life cycle:

* the form lists the profiles the user's groups allow (``options_form``);
* a form post or REST ``user_options`` is authorized before ``start()`` is called,
  so a forged or stale request never reaches the Kubernetes API;
* applying a profile first restores every trait an earlier profile set
  (the spawner object is reused across spawns, kubespawner#546).

Without a platform spec, GPUSpawner is exactly KubeSpawner.
"""

from __future__ import annotations

import asyncio
import copy
import os
import sys
from dataclasses import asdict
from datetime import datetime, timezone
from typing import Any

from kubespawner import KubeSpawner
from kubespawner.clients import shared_client
from tornado import web
from traitlets import Dict, Instance, Unicode, default, validate

from . import metrics
from .builders.pod import (Grant, OptionsRejected, SpawnSettings, UserRef, authorize,
                           merge_traits, spawn_settings)
from .cull.notice import deadline_env
from .form import render_form
from .kueue import status as kstatus
from .kueue.lifecycle import QueueWatch, SpawnRefused, wanted
from .kueue.messages import stop_notice
from .kueue.reflectors import RecordingPodReflector, WorkloadReflector
from .kueue.visibility import PendingWorkloads
from .parse import load_platform, parse_platform
from .contract import (COMPONENT_LABEL, PROFILE_LABEL, QUEUE_LABEL, STATE_PROFILE,
                       STATE_STOP_NOTICE)
from .resume import KUBE_ENV
from .spec import Platform

_cache: dict[tuple[str, float], Platform] = {}

# with a spec, poll() tells a preempted or evicted server within seconds, not 30
PLATFORM_POLL_SECONDS = 10


def load_platform_cached(path: str) -> Platform:
    """Parse ``path`` once per process (again only when the file changes)."""
    key = (os.path.abspath(path), os.stat(path).st_mtime)
    if key not in _cache:
        _cache[key] = load_platform(path)
    return _cache[key]


def _apply_user_options(spawner: "GPUSpawner", user_options: dict) -> None:
    """JupyterHub's ``apply_user_options`` hook (runs before ``start()``)."""
    try:
        spawner.apply_profile(user_options)
    except OptionsRejected as e:
        raise web.HTTPError(400, str(e), reason=str(e)) from None


class GPUSpawner(KubeSpawner):
    gpu_grant: Grant | None = None  # the profile grant of the current/last spawn
    gpu_stop_notice: dict | None = None  # why the platform stopped the last server
    _gpu_base_traits: dict[str, Any] | None = None  # admin values, before any profile
    _applied_options: Any = None  # the user_options the traits were last set from
    _queue_watch: QueueWatch | None = None

    platform_file = Unicode(
        "",
        help="""Path of the GPU platform spec (YAML).

        Example::

            c.GPUSpawner.platform_file = "/etc/jupyterhub-gpu/platform.yaml"

        Use :func:`jupyterhub_gpu.configure_hub` in ``jupyterhub_config.py`` to have a
        bad spec stop the hub at start-up instead of failing each spawn.
        """,
    ).tag(config=True)

    platform_spec = Dict(
        {},
        help="""The GPU platform spec inline, as the YAML file would load.

        Example::

            c.GPUSpawner.platform_spec = yaml.safe_load(open("platform.yaml"))

        Takes precedence over ``platform_file``. Empty: use ``platform_file``.
        """,
    ).tag(config=True)

    platform = Instance(
        Platform,
        allow_none=True,
        help="""The parsed spec; None when neither platform_spec nor platform_file is
        set, and GPUSpawner then behaves exactly like KubeSpawner.""",
    )

    @default("platform")
    def _platform_default(self) -> Platform | None:
        if self.platform_spec:
            return parse_platform(self.platform_spec, "c.GPUSpawner.platform_spec")
        if self.platform_file:
            return load_platform_cached(self.platform_file)
        return None

    @validate("platform_file")
    def _validate_platform_file(self, proposal: dict) -> str:
        path = proposal["value"]
        if path and not os.path.isfile(path):
            raise ValueError(f"c.GPUSpawner.platform_file: no such file: {path}")
        return path

    @default("poll_interval")
    def _poll_interval_default(self) -> int:
        if self.platform is None:  # KubeSpawner's own default
            return KubeSpawner.class_traits()["poll_interval"].default_value
        return PLATFORM_POLL_SECONDS

    @default("options_form")
    def _options_form_default(self) -> Any:
        if self.platform is None:
            return super()._options_form_default()
        return lambda spawner: render_form(
            spawner.platform, spawner.user_ref.groups, spawner.user_options.get("profile"),
            (spawner.gpu_stop_notice or {}).get("message"))

    @default("options_from_form")
    def _options_from_form_default(self) -> Any:
        if self.platform is None:
            return super()._options_from_form_default()
        return self._gpu_options_from_form

    @default("apply_user_options")
    def _apply_user_options_default(self) -> Any:
        return None if self.platform is None else _apply_user_options

    @property
    def user_ref(self) -> UserRef:
        return UserRef(self.user.name, frozenset(g.name for g in self.user.groups))

    def _gpu_options_from_form(self, formdata: dict) -> dict:
        options = self._options_from_form(formdata)
        self.authorize(options)  # show a clear error on the form, create nothing
        return options

    def authorize(self, user_options: Any) -> Grant:
        """The grant for ``user_options``, or :class:`OptionsRejected` (logged)."""
        try:
            return authorize(self.platform, self.user_ref, user_options)
        except OptionsRejected as e:
            self.log.warning("Rejected GPU spawn options for %s: %s",
                             self._log_name, e.log_detail)
            raise

    def apply_profile(self, user_options: Any) -> Grant:
        """Authorize ``user_options``, reset what an earlier profile set, apply."""
        grant = self.authorize(user_options)
        if self._gpu_base_traits is None:
            self._gpu_base_traits = {name: copy.deepcopy(getattr(self, name))
                                     for name in SpawnSettings.trait_names()}
        traits = merge_traits(self._gpu_base_traits, spawn_settings(self.platform, grant))
        for name, value in traits.items():
            setattr(self, name, value)
        self.dns_name = self.dns_name_template.format(namespace=self.namespace,
                                                      name=self.pod_name)
        # JupyterHub reads start_timeout after apply_user_options: a queued server
        # may wait its profile's queue patience, then start within startTimeout
        self.start_timeout = (grant.profile.queue_patience_seconds
                              + grant.profile.start_timeout_seconds)
        self.gpu_grant = grant
        self._record_granted(grant)
        self.log.info("Applying GPU profile %r (queue %s/%s, priority %s) for %s",
                      grant.profile.slug, grant.team.namespace, grant.team.local_queue,
                      grant.priority.name, self._log_name)
        return grant

    def _record_granted(self, grant: Grant) -> None:
        """Record the profile granted, not what was asked (``{}`` or ``{"profile":
        null}`` mean the default): JupyterHub reports these ``user_options``, stores
        them (``orm_spawner``, committed after ``start()`` is called) for the next
        start, and the culler reads the profile from them."""
        granted = {"profile": grant.profile.slug}
        if self.user_options != granted:
            self.user_options = granted
            if getattr(self, "orm_spawner", None) is not None:
                self.orm_spawner.user_options = copy.deepcopy(granted)
        self._applied_options = copy.deepcopy(granted)

    async def load_user_options(self) -> None:
        if self.platform is None:
            return await super().load_user_options()
        if self.profile_list:
            self.log.warning("profile_list is ignored: profiles come from the GPU spec")
        try:
            self._profile_for_start()
        except OptionsRejected as e:
            raise ValueError(str(e)) from None

    def _profile_for_start(self) -> Grant:
        """The grant of this spawn. JupyterHub's apply_user_options hook has normally
        applied it already; applying again would undo a pre_spawn_hook's changes."""
        if self.gpu_grant is None or self._applied_options != self.user_options:
            return self.apply_profile(self.user_options)
        return self.gpu_grant

    # -- shared watches ---------------------------------------------------------

    async def _start_watching_pods(self, replace: bool = False):
        if self.platform is None:
            return await super()._start_watching_pods(replace=replace)
        return await self._start_reflector(
            kind="pods", reflector_class=RecordingPodReflector,
            labels={COMPONENT_LABEL: self.component_label},
            omit_namespace=self.enable_user_namespaces, replace=replace)

    async def _start_watching_workloads(self):
        return await self._start_reflector(kind="workloads",
                                           reflector_class=WorkloadReflector)

    def _shared(self, kind: str):
        return self.__class__.reflectors.get(self._get_reflector_key(kind))

    def _my_pod(self) -> dict | None:
        pods = self._shared("pods")
        return pods.resources.get(f"{self.namespace}/{self.pod_name}") if pods else None

    def _namespace_workloads(self) -> list[dict]:
        workloads = self._shared("workloads")
        return list(workloads.resources.values()) if workloads else []

    # -- start, progress, poll ----------------------------------------------------

    async def _start(self):
        if self.platform is None:
            return await super()._start()
        grant = self._profile_for_start()  # sets the namespace, if the hook did not
        self.gpu_stop_notice = None
        await self._start_watching_workloads()
        pending = PendingWorkloads.shared(self.namespace, grant.team.local_queue)
        watch = self._queue_watch = QueueWatch(
            wanted(grant), grant.profile.queue_patience_seconds, pod=self._my_pod,
            workloads=self._namespace_workloads, events=lambda: self.events,
            visible_position=pending.position)
        start = asyncio.ensure_future(super()._start())
        guard = asyncio.ensure_future(watch.guard(
            lambda: self._refresh_positions(pending, watch)))
        try:
            await asyncio.wait([start, guard], return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:  # the hub cancelled the spawn (the user stopped it)
            start.cancel()
            metrics.SPAWNS.labels(grant.profile.slug, "cancelled").inc()
            raise
        finally:
            guard.cancel()
        return await self._finish_start(grant, start, guard)

    async def _refresh_positions(self, pending: PendingWorkloads, watch: QueueWatch) -> None:
        """Ask Kueue's visibility API (shared, rate-limited) while we are queued."""
        if watch.stage.key == "queued":
            try:
                await pending.refresh_if_stale(shared_client("CustomObjectsApi"))
            except Exception as e:  # noqa: BLE001 - the watch still gives a position
                self.log.warning("Kueue visibility API failed: %s", e)

    async def _finish_start(self, grant: Grant, start: asyncio.Future,
                            guard: asyncio.Future) -> Any:
        slug = grant.profile.slug
        refused = guard.done() and not guard.cancelled() and guard.exception()
        if refused and not isinstance(refused, SpawnRefused):
            self.log.error("Queue watch of %s failed (%r); the spawn goes on without it",
                           self._log_name, refused)
        if isinstance(refused, SpawnRefused):
            start.cancel()
            self.log.warning("Spawn of %s refused: %s", self._log_name, refused)
            metrics.SPAWNS.labels(slug, refused.outcome).inc()
            await self.stop(now=True)  # withdraws the pod and so its Workload
            raise refused
        try:
            url = await start
        except BaseException:
            metrics.SPAWNS.labels(slug, "failed").inc()
            raise
        self._queue_watch.observe()  # the last word: started (and the wait it took)
        waited = self._queue_watch.waited
        if waited is not None:
            metrics.QUEUE_WAIT.labels(slug, grant.team.local_queue).observe(waited)
        metrics.SPAWNS.labels(slug, "started").inc()
        return url

    async def _make_create_pod_request(self, pod, request_timeout):
        """Adopt our own pod left queued by a hub that died, keeping its place in the
        queue (and its API token, which JupyterHub then re-registers); else create."""
        existing = self._my_pod() if self.platform is not None else None
        token = existing and kstatus.adoptable_token(existing, pod.metadata.labels or {})
        if token:
            self.api_token = token
            self.log.info("Adopting the existing pod %s/%s of %s (keeps its queue place)",
                          self.namespace, self.pod_name, self._log_name)
            return True
        return await super()._make_create_pod_request(pod, request_timeout)

    async def progress(self):
        if self.platform is None:
            async for event in super().progress():
                yield event
            return
        last = None
        while True:
            watch, future = self._queue_watch, self._start_future
            finished = future is not None and future.done()
            if watch is not None and (watch.stage.key, watch.stage.message) != last:
                last = (watch.stage.key, watch.stage.message)
                yield {"progress": watch.stage.progress, "message": watch.stage.message}
            if finished:
                return
            await asyncio.sleep(1)

    async def stop(self, now: bool = False) -> None:
        if self.platform is None:
            return await super().stop(now=now)
        try:
            await super().stop(now=now)
        except Exception:
            # JupyterHub drops a failed stop without a word and forgets the server, so
            # the pod (and its GPU) would stay with nothing in the log to say why
            self.log.exception("Stopping %s failed; its pod %s/%s may still be running",
                               self._log_name, self.namespace, self.pod_name)
            raise

    async def poll(self):
        if self.platform is None:
            return await super().poll()
        await self._start_watching_pods()
        key = f"{self.namespace}/{self.pod_name}"
        pods = self._shared("pods")
        uid = getattr(self, "pod_id", None)  # KubeSpawner sets it once a start succeeded
        pod = pods.resources.get(key) or pods.graveyard.get(key, uid)
        if pod is not None and self._notice_platform_stop(pod):
            return 1
        return await super().poll()

    def _workload_of(self, pod: dict) -> dict | None:
        """The pod's Workload, live or (just deleted) from the graveyard."""
        reflector = self._shared("workloads")
        if reflector is None:
            return None
        candidates = [*reflector.resources.values(), *reflector.graveyard.buried()]
        return kstatus.workload_for(pod, candidates)

    def _notice_platform_stop(self, pod: dict) -> bool:
        """Record why the platform stopped our server, if it did."""
        uid = getattr(self, "pod_id", None)
        if uid and pod["metadata"].get("uid") != uid:
            return False
        labels = pod["metadata"].get("labels") or {}
        slug = labels.get(PROFILE_LABEL, "")
        profile = self.platform.profile(slug)
        storage = self.platform.checkpoint_storage
        kept = storage.mount_path if storage and profile and profile.checkpoint.enabled else None
        notice = stop_notice(pod, self._workload_of(pod), labels.get(QUEUE_LABEL, ""),
                             datetime.now(timezone.utc), kept)
        if notice is None:
            return False
        if self.gpu_stop_notice is None:
            self.gpu_stop_notice = asdict(notice)
            metrics.STOPS_BY_PLATFORM.labels(slug or "unknown", notice.reason).inc()
            self.log.warning("Server %s stopped by the platform (%s): %s",
                             self._log_name, notice.reason, notice.message)
            settings = getattr(self.user, "settings", None) or {}
            metrics.emit_platform_stop(
                settings.get("eventlog"), username=self.user.name, servername=self.name,
                profile=slug, reason=notice.reason, message=notice.message, at=notice.at)
        return True

    # -- state --------------------------------------------------------------------

    def get_env(self) -> dict:
        env = super().get_env()
        started = getattr(getattr(self, "orm_spawner", None), "started", None)
        if self.gpu_grant is not None and started is not None:
            # the hub set `started` before start(): the max-age deadline counts the queue
            env.update(deadline_env(self.gpu_grant.profile, started))
        return env

    def get_state(self) -> dict:
        state = super().get_state()
        if self.gpu_stop_notice:
            state[STATE_STOP_NOTICE] = self.gpu_stop_notice
        if self.gpu_grant is not None:  # the culler reads it (admin:server_state)
            state[STATE_PROFILE] = self.gpu_grant.profile.slug
        return state

    def clear_state(self) -> None:
        super().clear_state()
        self._applied_options = None  # the next spawn applies its profile afresh

    def load_state(self, state: dict) -> None:
        super().load_state(state)
        self.gpu_stop_notice = state.get(STATE_STOP_NOTICE)


RESUME_SERVICE = "gpu-resume"


def _add_resume_service(c: Any, platform_file: str) -> None:
    # a managed service gets few of the hub's variables (PATH, LANG...): pass these
    env = {k: os.environ[k] for k in KUBE_ENV if k in os.environ}
    service = {"name": RESUME_SERVICE, "environment": env,
               "command": [sys.executable, "-m", "jupyterhub_gpu.resume",
                           "--spec", os.path.abspath(platform_file)]}
    role = {"name": RESUME_SERVICE, "services": [RESUME_SERVICE],
            "scopes": ["list:users", "read:servers", "servers"]}
    c.JupyterHub.services = [*c.JupyterHub.get("services", []), service]
    c.JupyterHub.load_roles = [*c.JupyterHub.get("load_roles", []), role]


def configure_hub(c: Any, platform_file: str, resume: bool = True) -> Platform:
    """Wire GPUSpawner into a ``jupyterhub_config.py`` and validate the spec now.

    Example::

        from jupyterhub_gpu import configure_hub
        configure_hub(c, "/etc/jupyterhub-gpu/platform.yaml")

    A bad spec raises :class:`~jupyterhub_gpu.parse.SpecError` listing every error,
    which stops the hub at start-up. With ``resume`` (the default) it also adds the
    hub service ``gpu-resume`` (:mod:`jupyterhub_gpu.resume`), which restarts the
    spawns that were queued when the hub last stopped, keeping their queue place.
    """
    platform = load_platform_cached(platform_file)
    c.JupyterHub.spawner_class = GPUSpawner
    c.GPUSpawner.platform_file = platform_file
    if resume:
        _add_resume_service(c, platform_file)
    return platform
