"""GPUSpawner: KubeSpawner whose profiles come from the GPU platform spec.

All decisions are made elsewhere -- the pod by pure code
(:mod:`jupyterhub_gpu.builders.pod`), the queue-aware start by
:mod:`jupyterhub_gpu.kueue.start`, the spec by the hub's shared live source
(:mod:`jupyterhub_gpu.spec.source`); this class wires them into KubeSpawner's life cycle:

* the form lists the profiles the user's groups allow (``options_form``);
* a form post or REST ``user_options`` is authorized before ``start()`` is called,
  so a forged or stale request never reaches the Kubernetes API;
* applying a profile first restores every trait an earlier profile set
  (the spawner object is reused across spawns, kubespawner#546); each spawn reads
  the spec as it is then, and a running server keeps the grant it started with;
* ``start()`` goes through the team's queue, ``poll()`` tells why the platform
  stopped a server; each session goes into the usage ledger.

Each of those is a collaborator the spawner holds, handed what it reads and does as
callables (as :class:`~jupyterhub_gpu.kueue.start.QueuedStart` is): the shared watches
(:class:`~jupyterhub_gpu.hub.watching.SpawnWatches`), the platform's stops
(:class:`~jupyterhub_gpu.hub.stops.PlatformStops`), the usage ledger
(:class:`~jupyterhub_gpu.usage.spawner.UsageRecording`) and the authorization of a
request (:class:`~jupyterhub_gpu.hub.grants.ProfileRequests`, which the user's other servers also
ask what this one holds).

Without a platform spec, GPUSpawner is exactly KubeSpawner (:mod:`jupyterhub_gpu.hub.withspec`).

Upstream internals the package relies on, checked against kubespawner 7.0.0 (the
oldest pin, ``.ci/oldest-constraints.txt``) and 7.1.0, and JupyterHub 5.3.0 and
6.1.1 (``tests/unit/test_spawner.py`` checks that each exists in the installed ones):

- ``KubeSpawner._start_reflector``: starts the shared Workload watch, and the pod
  watch that remembers deleted pods (:mod:`jupyterhub_gpu.watches.reflectors`);
  overridden to start again a shared watch that gave up, and to start KubeSpawner's
  event watch as one that resumes and keeps each pod's events apart.
- ``KubeSpawner._start_watching_pods``: overridden to start that pod watch.
- ``KubeSpawner._last_event``: the marker ``start()`` sets, after which a pod's
  events are this spawn's (the queue watch reads them from the event watch's per-pod
  index, :meth:`~jupyterhub_gpu.hub.watching.SpawnWatches.pod_events`).
- ``KubeSpawner._get_reflector_key``: the key of a shared watch in ``reflectors``;
  overridden by :func:`jupyterhub_gpu.watches.namespaces.reflector_key`, which gives
  KubeSpawner's key for any namespace (a unit test checks they agree) and one node
  watch for the whole cluster.
- ``KubeSpawner._make_create_pod_request``: overridden to adopt a pod left queued by
  a hub that died.
- ``KubeSpawner._options_form_default``: KubeSpawner's own form, without a spec
  (traitlets' ``_<trait>_default`` naming of dynamic defaults).
- ``KubeSpawner.pod_id``: the uid of the pod the last start created.
- ``Spawner._log_name``: how JupyterHub names a server in its log.
- ``Spawner.orm_spawner``: ``started`` (the max-age deadline counts from it) and
  ``user_options`` (where the granted profile is stored for the next start).
- ``Spawner._run_apply_user_options``: tests only, to do what the hub does before
  ``start()``.
- ``KubeSpawner.reflectors``: the shared watches, by ``_get_reflector_key``'s key;
  the availability API (:mod:`jupyterhub_gpu.hub.api`) and the stop notices start
  other team namespaces' pod and Workload watches there, under the key a spawner of
  that namespace uses (:class:`jupyterhub_gpu.watches.namespaces.NamespaceWatches`).
- ``ResourceReflector.first_load_future``: whether a watch's first listing is done
  or failed (the availability API and :mod:`jupyterhub_gpu.watches.poolnodes`).
- ``ResourceReflector.resources``: replaced on each full listing, set and popped
  per watch event (how the reflectors keep a graveyard of deleted objects).

Public API took the place of ``KubeSpawner._start`` and ``_start_future`` (GPUSpawner
overrides ``start()`` and keeps its own future), ``_options_from_form`` and
``_options_from_form_default`` (``run_options_from_form()`` and
``options_from_query()``) and traitlets' ``_trait_values`` (``trait_has_value()``).
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any, ClassVar

from kubernetes_asyncio.client import ApiException
from kubespawner import KubeSpawner
from tornado import web
from traitlets import Any as AnyTrait
from traitlets import Dict, Integer, default

from ..builders.pod import SpawnSettings, merge_traits, spawn_settings
from ..spec.boot import spawn_patience
from ..spec.grant import Grant, OptionsRejected
from ..cull.notice import deadline_env
from .form import render_form, user_profiles_url
from ..kueue import status as kstatus
from ..kueue.lifecycle import Outcome, SpawnRefused
from ..kueue.messages import Stage, submit_unavailable
from ..kueue.start import QueuedStart
from ..kueue.start import progress as queue_progress
from ..spec.parse import parse_platform
from ..contract import (ENV_LAST_STOP_NOTICE, QUEUE_LABEL, STATE_POD_UID, STATE_PROFILE,
                        STATE_STOP_NOTICE)
from .grants import ProfileRequests, user_ref
from .watching import SpawnWatches
from ..spec.model import Platform
from ..spec.source import FixedSpec, SpecSource
from .stops import PlatformStops, Server
from ..usage.spawner import UsageRecording, hub_recorder
from ..watches.namespaces import NamespaceWatches
from .withspec import ExistingFile, spec_default, spec_only

# with a spec, poll() tells a preempted or evicted server within seconds, not 30
PLATFORM_POLL_SECONDS = 10
# with a spec, a pod create may wait out Kueue's pod webhook (the API server's default
# webhook timeout is 10 s) instead of KubeSpawner's 3 s, in a retry budget of two tries
POD_REQUEST_TIMEOUT_SECONDS = 15
POD_REQUEST_RETRY_SECONDS = 60


def _store_options(spawner: "GPUSpawner", options: dict) -> None:
    """Set the ``user_options`` JupyterHub reports, and stores (``orm_spawner``,
    committed after ``start()`` is called) for the next start."""
    spawner.user_options = options
    if getattr(spawner, "orm_spawner", None) is not None:
        spawner.orm_spawner.user_options = copy.deepcopy(options)


def _apply_user_options(spawner: "GPUSpawner", user_options: dict) -> None:
    """JupyterHub's ``apply_user_options`` hook (runs before ``start()``). JupyterHub
    stores a start request's ``user_options`` for the next start before the hook
    refuses them: a refusal puts back the last granted profile (``{}``, the default,
    if this spawner has none), so that a later start without options is not refused
    again for what someone forged."""
    try:
        spawner.apply_profile(user_options)
    except OptionsRejected as e:
        grant = spawner.gpu_grant
        _store_options(spawner, {"profile": grant.profile.slug} if grant else {})
        raise web.HTTPError(400, str(e), reason=str(e)) from None


class GPUSpawner(KubeSpawner):
    #: starts the watches of namespaces no spawn has started (one for the hub, beside
    #: KubeSpawner's class-level ``reflectors``)
    namespace_watches: ClassVar[NamespaceWatches] = NamespaceWatches()

    gpu_grant: Grant | None = None  # the profile grant of the current/last spawn
    gpu_stop_notice: dict | None = None  # why the platform stopped the last server
    _last_stop_notice: dict | None = None  # that notice, for the next server's environment
    _grant_platform: Platform | None = None  # the spec gpu_grant came from
    _state_profile: str | None = None  # gpu_profile of the state loaded (hub restart)
    _state_pod_uid: str | None = None  # gpu_pod_uid of the state loaded (hub restart)
    _gpu_base_traits: dict[str, Any] | None = None  # admin values, before any profile
    _applied_options: Any = None  # the user_options the traits were last set from
    _queued: QueuedStart | None = None  # the current/last start through the queue
    _gpu_start: asyncio.Future | None = None  # what start() returned

    platform_file = ExistingFile(
        "",
        help="""Path of the GPU platform spec (YAML). The hub reads it again when it
        changes (e.g. a ConfigMap update): new spawns use the new spec, running
        servers keep theirs, and a broken edit is logged and ignored.

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

    node_lost_seconds = Integer(
        60,
        help="""Seconds a running server's node may stay NotReady (its kubelet silent or
        failing) before the hub reports the server stopped, tells its user why on the
        next page, and deletes its pod (at once: the node cannot take part). PVCs are
        kept. A node that recovers sooner keeps its servers.

        Example::

            c.GPUSpawner.node_lost_seconds = 120
        """,
    ).tag(config=True)

    spec_source = AnyTrait(
        allow_none=True,
        help="""Where the spec comes from: the hub's shared live source of
        ``platform_file`` (:class:`jupyterhub_gpu.spec.source.SpecSource`), or
        ``platform_spec``. None when neither is set: GPUSpawner is then KubeSpawner.""",
    )

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        granted = lambda: (self.gpu_grant, self._grant_platform)  # noqa: E731
        # public: the availability API reads the shared watches through them too
        kube_start = lambda **kw: super(GPUSpawner, self)._start_reflector(**kw)  # noqa: E731
        self.gpu_watches = SpawnWatches(self, kube_start=kube_start,
                                        shared=self.namespace_watches,
                                        spec_source=lambda: self.spec_source)
        # public: the user's other servers ask it what this one holds
        self.profile_requests = ProfileRequests(
            user=lambda: self.user, this=self, log=self.log, who=lambda: self._log_name,
            held=lambda: (self.gpu_grant if self._applied_options == self.user_options
                          else None, self.user_options, self._state_profile))
        self._usage = UsageRecording(
            recorder=lambda: hub_recorder(self, getattr(self.user, "db", None), self.log),
            pods=self.gpu_watches, granted=granted, platform=lambda: self.platform,
            queued=lambda: self._queued,
            starting=lambda: self._gpu_start is not None and not self._gpu_start.done(),
            orm=lambda: getattr(self, "orm_spawner", None),
            server=lambda: (self.user.name, self.name, self.namespace))
        def keep_notice(notice: dict) -> None:
            self.gpu_stop_notice = notice

        self._stops = PlatformStops(
            self.gpu_watches, granted=granted, platform=lambda: self.platform,
            pod_uid=lambda: getattr(self, "pod_id", None),
            node_lost_seconds=lambda: self.node_lost_seconds,
            delete_pod=lambda: self.api.delete_namespaced_pod(
                self.pod_name, self.namespace, grace_period_seconds=0),
            kept=lambda: self.gpu_stop_notice,
            keep=keep_notice,
            usage_stopped=self._usage.stopped_by_platform,
            server=lambda: Server(self._log_name, self.user.name, self.name,
                                  (getattr(self.user, "settings", None) or {}).get("eventlog")),
            log=self.log)

    @default("spec_source")
    def _spec_source_default(self) -> SpecSource | FixedSpec | None:
        if self.platform_spec:
            return FixedSpec(parse_platform(self.platform_spec, "c.GPUSpawner.platform_spec"))
        if self.platform_file:
            return SpecSource.shared(self.platform_file, self.log)
        return None

    @property
    def platform(self) -> Platform | None:
        """The spec now (while an edit is broken, the last good one); None without."""
        source = self.spec_source
        return None if source is None else source.current()

    @spec_default("poll_interval")
    def _platform_poll_interval(self) -> int:
        """So that the hub tells a preempted or evicted server within seconds."""
        return PLATFORM_POLL_SECONDS

    @spec_default("k8s_api_request_timeout")
    def _platform_request_timeout(self) -> int:
        """Every pod of a spec passes Kueue's pod webhook, which the API server gives
        10 s (Kueue sets no ``timeoutSeconds``) and which a burst of spawns slows past
        KubeSpawner's 3 s: the hub would give up, the create be cancelled (a 504 in
        the audit log) and tried again into the same congestion. Example:
        ``c.GPUSpawner.k8s_api_request_timeout = 20``."""
        return POD_REQUEST_TIMEOUT_SECONDS

    @spec_default("k8s_api_request_retry_timeout")
    def _platform_request_retry_timeout(self) -> int:
        """Room for two pod-create attempts of ``k8s_api_request_timeout`` each, with
        KubeSpawner's backoff between them. Example:
        ``c.GPUSpawner.k8s_api_request_retry_timeout = 120``."""
        return POD_REQUEST_RETRY_SECONDS

    @spec_default("options_form")
    def _platform_form(self) -> Any:
        return lambda spawner: render_form(
            spawner.platform, user_ref(spawner.user).groups,
            spawner.user_options.get("profile"),
            (spawner.gpu_stop_notice or {}).get("message"),
            user_profiles_url(spawner.hub.base_url, spawner.user.name))

    @spec_default("apply_user_options")
    def _platform_apply_user_options(self) -> Any:
        return _apply_user_options

    # -- authorization and profiles ---------------------------------------------

    @spec_only
    def run_options_from_form(self, form_data: dict) -> Any:
        return self.profile_requests.authorized(super().run_options_from_form(form_data),
                                         lambda: self.platform)

    @spec_only
    def options_from_query(self, query_data: dict) -> Any:
        return self.profile_requests.authorized(super().options_from_query(query_data),
                                         lambda: self.platform)

    def apply_profile(self, user_options: Any) -> Grant:
        """Authorize ``user_options`` (:class:`OptionsRejected` if refused), reset what
        an earlier profile set, apply. The profile granted is recorded, not what was
        asked (``{}`` or ``{"profile": null}`` mean the default): JupyterHub reports
        these ``user_options``, stores them for the next start, and the culler reads
        the profile from them."""
        platform = self.platform  # one spec for the whole spawn
        grant = self.profile_requests.authorize(user_options, platform)
        if self._gpu_base_traits is None:
            self._gpu_base_traits = {name: copy.deepcopy(getattr(self, name))
                                     for name in SpawnSettings.trait_names()}
        traits = merge_traits(self._gpu_base_traits,
                              spawn_settings(platform, grant, self.user.name))
        for name, value in traits.items():
            setattr(self, name, value)
        self.dns_name = self.dns_name_template.format(namespace=self.namespace,
                                                      name=self.pod_name)
        # JupyterHub reads start_timeout after apply_user_options: a queued server
        # may wait its profile's queue patience, then a new node, then startTimeout
        self.start_timeout = spawn_patience(platform, grant.profile)
        self.gpu_grant, self._grant_platform = grant, platform
        granted = {"profile": grant.profile.slug}
        if self.user_options != granted:
            _store_options(self, granted)
        self._applied_options = copy.deepcopy(granted)
        self.log.info("Applying GPU profile %r (queue %s/%s, priority %s) for %s",
                      grant.profile.slug, grant.team.namespace, grant.team.local_queue,
                      grant.priority.name, self._log_name)
        return grant

    @spec_only
    async def load_user_options(self) -> None:
        """The grant of this spawn. JupyterHub's apply_user_options hook has normally
        applied it already; applying again would undo a pre_spawn_hook's changes."""
        if self.profile_list:
            self.log.warning("profile_list is ignored: profiles come from the GPU spec")
        if self.gpu_grant is None or self._applied_options != self.user_options:
            try:
                self.apply_profile(self.user_options)
            except OptionsRejected as e:
                raise ValueError(str(e)) from None

    # -- start, progress, poll ----------------------------------------------------

    @spec_only
    def start(self) -> asyncio.Future:
        async def through_the_queue() -> Any:
            await self.load_user_options()  # sets the namespace, if the hook did not
            # the new start clears the last server's stop notice from the state; its
            # environment still carries it (ENV_LAST_STOP_NOTICE), for JupyterLab
            self._last_stop_notice, self.gpu_stop_notice = self.gpu_stop_notice, None
            await self.gpu_watches.workloads_watch()
            await self.gpu_watches.nodes(retry=True)
            grant = self.gpu_grant
            self._queued = QueuedStart(
                grant, self.namespace, pod=self.gpu_watches.my_pod,
                workloads=self.gpu_watches.workloads, log=self.log,
                events=lambda: self.gpu_watches.pod_events(since=self._last_event),
                workload_of=self.gpu_watches.live_workload_of,
                position=self.gpu_watches.queue_position,
                who=self._log_name, ours=self.gpu_watches.is_ours,
                deleted=self.gpu_watches.pod_was_deleted, on_outcome=self._usage.outcome)
            return await self._queued.run(super(GPUSpawner, self).start,
                                          lambda: self.stop(now=True))

        self._queued = None
        self._gpu_start = asyncio.ensure_future(through_the_queue())
        return self._gpu_start

    @property
    def queue_stage(self) -> Stage | None:
        """Where the current (or last) start is in the queue; None before one."""
        return self._queued.stage if self._queued is not None else None

    @spec_only
    def progress(self):
        return queue_progress(lambda: self._queued,
                              lambda: self._gpu_start is not None and self._gpu_start.done())

    @spec_only
    async def _make_create_pod_request(self, pod, request_timeout):
        """Adopt our own pod left queued by a hub that died, keeping its place in the
        queue (and its API token, which JupyterHub then re-registers); else create."""
        existing = self.gpu_watches.my_pod()
        token = existing and kstatus.adoptable_token(existing, pod.metadata.labels or {})
        if token:
            self.api_token = token
            self.log.info("Adopting the existing pod %s/%s of %s (keeps its queue place)",
                          self.namespace, self.pod_name, self._log_name)
            return True
        try:
            return await super()._make_create_pod_request(pod, request_timeout)
        except ApiException as e:
            if not kstatus.kueue_not_answering(e.status, e.body):
                raise
            queue = (pod.metadata.labels or {}).get(QUEUE_LABEL, "")
            self.log.warning("Kueue's pod webhooks do not answer: the pod of %s was not "
                             "created (%s)", self._log_name, e.reason)
            raise SpawnRefused(submit_unavailable(queue), Outcome.QUEUE_UNAVAILABLE) from None

    @spec_only
    async def stop(self, now: bool = False) -> None:
        await self._usage.stop_by_hub()
        try:
            await super().stop(now=now)
        except Exception:
            # JupyterHub drops a failed stop without a word and forgets the server, so
            # the pod (and its GPU) would stay with nothing in the log to say why
            self.log.exception("Stopping %s failed; its pod %s/%s may still be running",
                               self._log_name, self.namespace, self.pod_name)
            raise

    @spec_only
    async def poll(self):
        if self.gpu_grant is None and self._state_profile is None:
            # never granted a profile (a refused first request): no pod of ours can
            # exist, and its namespace is only KubeSpawner's default; no API call
            return 1
        await self.gpu_watches.nodes(retry=False)  # after a hub restart, with servers running
        await self.gpu_watches.cohort(self._stops.cohort_namespaces())
        await self._start_watching_pods()
        pod = self.gpu_watches.last_pod(getattr(self, "pod_id", None))  # set once started
        if pod is not None and await self._stops.stopped(pod):
            return 1
        status = await super().poll()
        self._usage.poll(pod, status)
        return status

    # -- the shared watches (KubeSpawner calls these) -------------------------------

    @spec_only
    async def _start_watching_pods(self, replace: bool = False):
        return await self.gpu_watches.pods(replace)


    @spec_only
    async def _start_reflector(self, kind: str, reflector_class: type, replace: bool = False,
                               **kwargs: Any):
        return await self.gpu_watches.start(kind, reflector_class, replace, **kwargs)

    def _get_reflector_key(self, kind: str) -> tuple:
        return self.gpu_watches.key(kind)

    # -- state --------------------------------------------------------------------

    def get_env(self) -> dict:
        env = super().get_env()
        started = getattr(getattr(self, "orm_spawner", None), "started", None)
        if self.gpu_grant is not None and started is not None:
            # the hub set `started` before start(): the max-age deadline counts the queue
            env.update(deadline_env(self.gpu_grant.profile, started))
        message = (self._last_stop_notice or {}).get("message")
        if self.gpu_grant is not None and message:
            env[ENV_LAST_STOP_NOTICE] = message
        return env

    def get_state(self) -> dict:
        state = super().get_state()
        if self.gpu_stop_notice:
            state[STATE_STOP_NOTICE] = self.gpu_stop_notice
        profile = self.gpu_grant.profile.slug if self.gpu_grant else self._state_profile
        if profile:  # the culler reads it (admin:server_state)
            state[STATE_PROFILE] = profile
        uid = getattr(self, "pod_id", None) or self._state_pod_uid
        if uid:  # the culler records why it culls in the usage ledger
            state[STATE_POD_UID] = uid
        return state

    def clear_state(self) -> None:
        super().clear_state()
        self._applied_options = None  # the next spawn applies its profile afresh
        self._state_profile = self._state_pod_uid = None

    @spec_only
    async def delete_forever(self) -> None:
        """KubeSpawner's, which JupyterHub calls for a named server it removes and for
        each of a user's servers when it deletes the user: only the default server's
        deletes the home claim (the values' ``claim-{username}`` names no server), in
        the spawner's namespace. A default server that never started has KubeSpawner's
        default namespace, no team's, while the user's named servers made the home in
        their team's: it deletes there (the team of the user's groups)."""
        platform = self.platform
        if not self.name and platform is not None and self.namespace not in {
                t.namespace for t in platform.teams}:
            team = platform.team_for(user_ref(self.user).groups)
            if team is not None:
                self.namespace = team.namespace
        await super().delete_forever()

    def load_state(self, state: dict) -> None:
        super().load_state(state)
        self.gpu_stop_notice = state.get(STATE_STOP_NOTICE)
        self._state_profile = state.get(STATE_PROFILE)
        self._state_pod_uid = state.get(STATE_POD_UID)
