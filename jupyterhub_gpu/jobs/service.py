"""The hub service ``gpu-jobs``: users' training jobs, through JupyterHub's auth.

Its API, under the service's prefix (``/services/gpu-jobs/``), answers JSON:

* ``GET api/jobs``: the caller's jobs, each with its status in words;
* ``POST api/jobs`` with ``{"profile": ..., "script": ..., "args": [...]}``: submit
  (:mod:`jupyterhub_gpu.jobs.request` checks it before any Kubernetes call);
* ``GET api/jobs/<name>``: one job; ``DELETE api/jobs/<name>``: cancel it;
* ``GET api/jobs/<name>/logs``: its first pod's log, as plain text, followed while it
  runs (503 where the cluster serves no logs).

A caller is a JupyterHub user with the scope ``access:services!service=gpu-jobs``:
their API token (``Authorization: token ...``, what the ``jupyterhub-gpu job`` command
sends), or OAuth in the browser. Their groups come with the token owner's model
(``GET /hub/api/user`` always includes them), so the service itself needs no hub scope.
Kubernetes is reached with the hub's ServiceAccount (:mod:`jupyterhub_gpu.jobs.cluster`).

Run as a managed service by :func:`jupyterhub_gpu.jobs.config.add_jobs_service`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import secrets
from typing import Any
from urllib.parse import urlparse

from jupyterhub.services.auth import (HubOAuth, HubOAuthCallbackHandler, HubOAuthenticated,
                                      UserNotAllowed)
from jupyterhub.utils import url_path_join
from tornado import web

from ..builders.job import build_job, peer_policy
from ..builders.pod import UserRef
from ..contract import (ENV_JOBS_BIND, ENV_PLATFORM_FILE, ENV_SERVICE_PREFIX, ENV_SERVICE_URL,
                        JOB_PROFILE_LABEL, JOBS_ACCESS_SCOPE, JOBS_API_PATH, JOBS_SERVICE_NAME,
                        ENV_USAGE_DB_URL, USERNAME_KEY)
from ..kueue import status as st
from ..specsource import SpecSource
from ..usage.jobs import JobRecorder
from ..usage.ledger import Ledger
from . import cluster
from .request import JobRefused, check_submission, job_name, job_request
from .words import describe, preemptor

log = logging.getLogger("jupyterhub_gpu.jobs")
NAME = r"([a-z0-9][a-z0-9-]{0,62})"


class Jobs:
    """The service's state: the live spec, the watches, a lock per user (so two
    submits at once cannot both pass the limit)."""

    def __init__(self, platform_file: str, watches: cluster.Watches,
                 usage: JobRecorder | None = None):
        self.source, self.watches, self.usage = SpecSource.shared(platform_file), watches, usage
        self._locks: dict[str, asyncio.Lock] = {}

    @property
    def platform(self):
        return self.source.current()

    def lock(self, user: str) -> asyncio.Lock:
        return self._locks.setdefault(user, asyncio.Lock())

    async def view(self, job: dict) -> dict:
        """A job as the API answers it."""
        w = self.watches
        meta, workload = job["metadata"], w.workload_of(job)
        platform = self.platform
        position = taken_by = None
        if (workload is not None and not cluster.finished(job)
                and not st.is_true(workload, "QuotaReserved")):
            position = await w.position(workload)
            teams = {t.namespace: t.name for t in platform.teams}
            taken_by = preemptor(workload, w.every_workload(), teams)
        status = describe(platform, job, w.pods_of(job), workload, position, taken_by)
        container = job["spec"]["template"]["spec"]["containers"][0]
        return {"name": meta["name"], "namespace": meta["namespace"],
                "profile": (meta.get("labels") or {}).get(JOB_PROFILE_LABEL),
                "created": meta.get("creationTimestamp"), "state": status.state,
                "status": status.words, "command": container.get("command"),
                "image": container.get("image")}


class _API(HubOAuthenticated, web.RequestHandler):
    def initialize(self, jobs: Jobs, hub_auth: HubOAuth) -> None:
        self.jobs, self.hub_auth = jobs, hub_auth

    async def prepare(self) -> None:
        # who calls, asked of the hub without blocking the other requests (the
        # synchronous get_current_user would)
        if not self.jobs.watches.ready:
            raise web.HTTPError(503, "The jobs service cannot read the cluster yet; try "
                                "again in a minute (its log says why).")
        model = await self.hub_auth.get_user(self, sync=False)
        if model is None and self.request.headers.get("Authorization"):
            raise web.HTTPError(403, "The hub does not know this token (expired or revoked?).")
        try:
            self.current_user = self.check_hub_user(model) if model else None
        except UserNotAllowed:
            raise web.HTTPError(403, f"{model.get('name')} lacks the scope "
                                f"{JOBS_ACCESS_SCOPE} (ask your JupyterHub admin).") from None

    def check_xsrf_cookie(self) -> None:
        # a token in the Authorization header is no cookie a page could forge
        if not self.request.headers.get("Authorization"):
            super().check_xsrf_cookie()

    def caller(self) -> UserRef:
        model = self.current_user
        if model.get("kind", "user") != "user":
            raise web.HTTPError(403, "Only users have jobs.")
        return UserRef(model["name"], frozenset(model.get("groups") or ()))

    def answer(self, data: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(data))

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        error = kwargs.get("exc_info", (None, None))[1]
        message = getattr(error, "log_message", None) or self._reason
        self.answer({"error": message, "status": status_code}, status_code)

    def own_job(self, name: str) -> dict:
        job = self.jobs.watches.job(self.caller().name, name)
        if job is None:
            raise web.HTTPError(404, f"You have no job {name!r}.")
        return job


class JobsHandler(_API):
    """``GET`` and ``POST api/jobs``."""

    @web.authenticated
    async def get(self) -> None:
        jobs = self.jobs.watches.jobs_of(self.caller().name)
        self.answer({"jobs": [await self.jobs.view(j) for j in jobs]})

    @web.authenticated
    async def post(self) -> None:
        user = self.caller()
        try:
            body = json.loads(self.request.body or b"null")
        except ValueError:
            body = None
        async with self.jobs.lock(user.name):
            job = await self._submit(user, body)
        self.answer(await self.jobs.view(job), 201)

    async def _submit(self, user: UserRef, body: Any) -> dict:
        watches, platform = self.jobs.watches, self.jobs.platform
        try:
            submission = check_submission(platform, user, body,
                                          len(watches.active_jobs(user.name)))
            notebook = watches.notebook_of(user.name)
            if notebook is None:
                raise JobRefused("Start your server first: a job runs in your server's "
                                 "image with your home directory.", "no running server", 409)
        except JobRefused as e:
            log.warning("Refused job of user %s: %s", user.name, e.log_detail)
            raise web.HTTPError(e.status, e.user_message) from None
        slug = (notebook["metadata"].get("labels") or {}).get(USERNAME_KEY, user.name)
        req = job_request(submission, notebook, job_name(slug, secrets.token_hex(3)),
                          platform.checkpoint_storage)
        job, service = build_job(req)
        job["metadata"]["annotations"] = {USERNAME_KEY: user.name}
        job["spec"]["template"]["metadata"].setdefault("annotations", {}).update(
            self.settings["job_annotations"])
        created = await cluster.create(job, service, peer_policy(req))
        await watches.seen(req.grant.team.namespace, req.name)
        log.info("User %s submitted job %s/%s (%s): %s", user.name, req.grant.team.namespace,
                 req.name, submission.grant.profile.slug, " ".join(submission.command))
        job = watches.job(user.name, req.name) or created
        if self.jobs.usage is not None:
            await self.jobs.usage.submitted(job)
        return job


class JobHandler(_API):
    """``GET`` and ``DELETE api/jobs/<name>``."""

    @web.authenticated
    async def get(self, name: str) -> None:
        self.answer(await self.jobs.view(self.own_job(name)))

    @web.authenticated
    async def delete(self, name: str) -> None:
        job = self.own_job(name)
        await cluster.delete(job)
        if self.jobs.usage is not None:
            await self.jobs.usage.cancelled(job)
        log.info("User %s cancelled job %s/%s", self.caller().name,
                 job["metadata"]["namespace"], name)
        self.answer({"name": name, "state": "cancelling", "status": "cancelling"})


class LogsHandler(_API):
    """``GET api/jobs/<name>/logs``: plain text, streamed."""

    @web.authenticated
    async def get(self, name: str) -> None:
        pods = [p for p in self.jobs.watches.pods_of(self.own_job(name))
                if (p["spec"] or {}).get("nodeName")]
        if not pods:
            raise web.HTTPError(404, f"Job {name!r} has no pod on a node yet: there are no "
                                "logs until it runs.")
        self.set_header("Content-Type", "text/plain; charset=utf-8")
        try:
            async for chunk in cluster.log_chunks(pods[-1]):
                self.write(chunk)
                await self.flush()
        except cluster.NoLogs as e:
            raise web.HTTPError(503, f"The cluster serves no logs of pod "
                                f"{pods[-1]['metadata']['name']}: its node's kubelet did not "
                                f"answer ({e}).") from None
        self.finish()


class _Callback(HubOAuthCallbackHandler):
    def initialize(self, hub_auth: HubOAuth) -> None:
        self.hub_auth = hub_auth


def make_app(jobs: Jobs, prefix: str, job_annotations: dict[str, str],
             hub_auth: HubOAuth) -> web.Application:
    """The service's Tornado app: its API under ``prefix``, users known by ``hub_auth``
    (JupyterHub's, from the service's environment)."""
    api = url_path_join(prefix, JOBS_API_PATH)
    args = {"jobs": jobs, "hub_auth": hub_auth}
    return web.Application([
        (url_path_join(prefix, "oauth_callback"), _Callback, {"hub_auth": hub_auth}),
        (api, JobsHandler, args),
        (url_path_join(api, NAME), JobHandler, args),
        (url_path_join(api, NAME, "logs"), LogsHandler, args),
    ], cookie_secret=secrets.token_bytes(32), job_annotations=job_annotations)


def _annotation(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog=f"{JOBS_SERVICE_NAME} service")
    parser.add_argument("--spec", default=os.environ.get(ENV_PLATFORM_FILE),
                        help="the platform spec (default: $%(default)s)")
    parser.add_argument("--usage-db-url", default=os.environ.get(ENV_USAGE_DB_URL),
                        help="the usage ledger's SQLAlchemy URL (default: $%(default)s); "
                        "unset: no ledger")
    parser.add_argument("--job-annotation", type=_annotation, action="append", default=[],
                        metavar="KEY=VALUE", help="an annotation on every job's pods")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[%(levelname)s %(asctime)s %(name)s] "
                        "%(message)s")
    asyncio.run(_serve(args.spec, dict(args.job_annotation), args.usage_db_url))


async def _serve(platform_file: str, annotations: dict[str, str],
                 usage_db_url: str | None = None) -> None:
    platform = SpecSource.shared(platform_file).current()
    watches = cluster.Watches(t.namespace for t in platform.teams)
    url = urlparse(os.environ[ENV_SERVICE_URL])
    prefix = os.environ[ENV_SERVICE_PREFIX]
    recorder = usage_db_url and JobRecorder(Ledger(usage_db_url), watches,
                                            SpecSource.shared(platform_file).current)
    app = make_app(Jobs(platform_file, watches, recorder or None), prefix, annotations,
                   HubOAuth())
    # listen at once (the hub waits for its services at start-up), then watch
    app.listen(url.port or 80, os.environ.get(ENV_JOBS_BIND) or url.hostname)
    log.info("Serving %s on %s (prefix %s)", JOBS_SERVICE_NAME, url.geturl(), prefix)
    if recorder:
        recorder.start()
    await watches.keep_starting()
    await asyncio.Event().wait()


if __name__ == "__main__":
    main()
