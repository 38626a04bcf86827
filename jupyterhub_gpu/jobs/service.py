"""The hub service ``gpu-jobs``: users' training jobs, through JupyterHub's auth.

Its API, under the service's prefix (``/services/gpu-jobs/``), answers JSON:

* ``GET api/jobs``: the caller's jobs, each with its status in words;
* ``POST api/jobs`` with ``{"profile": ..., "script": ..., "args": [...]}``: submit
  (:mod:`jupyterhub_gpu.jobs.request` checks it before any Kubernetes call);
* ``GET api/jobs/<name>``: one job; ``DELETE api/jobs/<name>``: cancel it;
* ``GET api/jobs/<name>/logs``: its first pod's log, as plain text, followed while it
  runs, for at most :data:`MAX_LOG_BYTES` or :data:`MAX_LOG_SECONDS` (a last line says
  so); 503 where the cluster serves no logs.

A caller is a JupyterHub user with the scope ``access:services!service=gpu-jobs``,
known as :mod:`jupyterhub_gpu.serviceauth` says (their API token, what the
``jupyterhub-gpu job`` command sends, or OAuth in the browser with XSRF for writes).
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
import time
from typing import Any
from urllib.parse import urlparse

from jupyterhub.services.auth import HubOAuth
from jupyterhub.utils import url_path_join
from tornado import web

from ..builders.job import DEFAULT_HOME_MOUNT_PATH, build_job, peer_policy
from ..spec.grant import UserRef
from ..contract import (ENV_JOBS_BIND, ENV_PLATFORM_FILE, ENV_SERVICE_PREFIX, ENV_SERVICE_URL,
                        JOB_PROFILE_LABEL, JOBS_ACCESS_SCOPE, JOBS_API_PATH, JOBS_SERVICE_NAME,
                        ENV_USAGE_DB_URL, USERNAME_KEY)
from ..kueue import status as st
from ..spec.source import SpecSource
from ..usage.jobs import JobRecorder
from ..ledger.store import Ledger
from ..logtext import shown
from ..serviceauth import BODY_HARD_LIMIT, OAuthCallback, ServiceAPI
from . import cluster
from .cluster import owner
from .request import MAX_BODY_BYTES, JobRefused, check_submission, job_name, job_request
from .words import describe, preemptor

log = logging.getLogger("jupyterhub_gpu.jobs")
NAME = r"([a-z0-9][a-z0-9-]{0,62})"
#: how long a Job this service created counts against its user's limit while the
#: Job watch has not shown it (the watch normally shows it within a second)
UNSEEN_FOR = 600.0
#: a followed log stream ends after this many bytes or seconds, and says so
MAX_LOG_BYTES = 16 * 2**20
MAX_LOG_SECONDS = 3600.0


class Jobs:
    """The service's state: the live spec, the watches, a lock per user (so two
    submits at once cannot both pass the limit), and the Jobs this service created
    that the Job watch has not shown yet (so a lagging watch cannot let a user past
    the limit either)."""

    def __init__(self, platform_file: str, watches: cluster.Watches,
                 usage: JobRecorder | None = None, home_path: str = DEFAULT_HOME_MOUNT_PATH):
        self.source, self.watches, self.usage = SpecSource.shared(platform_file), watches, usage
        self.home_path = home_path  # where notebooks mount the home volume
        self._locks: dict[str, asyncio.Lock] = {}
        self._unseen: dict[str, dict[str, float]] = {}  # user -> {ns/name: created at}

    @property
    def platform(self):
        return self.source.current()

    def lock(self, user: str) -> asyncio.Lock:
        return self._locks.setdefault(user, asyncio.Lock())

    def created(self, user: str, job: dict) -> None:
        """Count ``job``, just created for ``user``, until the watch shows it."""
        meta = job["metadata"]
        self._unseen.setdefault(user, {})[f"{meta['namespace']}/{meta['name']}"] = \
            time.monotonic()

    def active_count(self, user: str) -> int:
        """What the limit counts: the user's active Jobs in the watch, and those created
        here that it does not hold yet (forgotten once it does, or after
        :data:`UNSEEN_FOR` seconds: a Job deleted before the watch saw it)."""
        unseen, now = self._unseen.get(user, {}), time.monotonic()
        for key, at in list(unseen.items()):
            namespace = key.partition("/")[0]
            reflector = self.watches.jobs.get(namespace)
            if now - at > UNSEEN_FOR or (reflector is not None
                                         and key in reflector.resources):
                del unseen[key]
        if not unseen:
            self._unseen.pop(user, None)
        return len(self.watches.active_jobs(user)) + len(unseen)

    async def view(self, job: dict) -> dict:
        """A job as the API answers it."""
        w = self.watches
        meta, workload = job["metadata"], w.workload_of(job)
        platform = self.platform
        position = taken_by = None
        if (workload is not None and not cluster.finished(job)
                and not st.is_true(workload, "QuotaReserved")):
            position = await w.position(workload)
            taken_by = preemptor(workload, w.every_workload(), w.words_for_own(owner(job)))
        status = describe(platform, job, w.pods_of(job), workload, position, taken_by)
        container = job["spec"]["template"]["spec"]["containers"][0]
        return {"name": meta["name"], "namespace": meta["namespace"],
                "profile": (meta.get("labels") or {}).get(JOB_PROFILE_LABEL),
                "created": meta.get("creationTimestamp"), "state": status.state,
                "status": status.words, "command": container.get("command"),
                "image": container.get("image")}


class _API(ServiceAPI):
    service_words = "The jobs service"
    access_scope = JOBS_ACCESS_SCOPE
    owned = "jobs"

    @property
    def jobs(self) -> Jobs:
        return self.state

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
        if len(self.request.body) > MAX_BODY_BYTES:
            raise web.HTTPError(413, f"A job request may have at most {MAX_BODY_BYTES} bytes.")
        try:
            body = json.loads(self.request.body or b"null")
        except (ValueError, RecursionError):  # not JSON, or nested too deep to read
            body = None
        async with self.jobs.lock(user.name):
            job = await self._submit(user, body)
        self.answer(await self.jobs.view(job), 201)

    async def _submit(self, user: UserRef, body: Any) -> dict:
        watches, platform = self.jobs.watches, self.jobs.platform
        try:
            submission = check_submission(platform, user, body,
                                          self.jobs.active_count(user.name))
            notebook = watches.notebook_of(user.name)
            if notebook is None:
                raise JobRefused("Start your server first: a job runs in your server's "
                                 "image with your home directory.", "no running server", 409)
        except JobRefused as e:
            log.warning("Refused job of user %s: %s", shown(user.name), shown(e.log_detail))
            raise web.HTTPError(e.status, "%s", e.user_message) from None
        slug = (notebook["metadata"].get("labels") or {}).get(USERNAME_KEY, user.name)
        req = job_request(submission, notebook, job_name(slug, secrets.token_hex(3)),
                          platform.checkpoint_storage, user.name, self.jobs.home_path)
        job, service = build_job(req)
        job["metadata"]["annotations"] = {USERNAME_KEY: user.name}
        job["spec"]["template"]["metadata"].setdefault("annotations", {}).update(
            self.settings["job_annotations"])
        created = await cluster.create(job, service, peer_policy(req))
        self.jobs.created(user.name, created)
        await watches.seen(req.grant.team.namespace, req.name)
        # the arguments may hold secrets: their number and size only
        log.info("User %s submitted job %s/%s (%s): python %s with %d argument(s) of %d "
                 "bytes", shown(user.name), req.grant.team.namespace, req.name,
                 submission.grant.profile.slug, shown(submission.script),
                 len(submission.args), sum(len(a.encode()) for a in submission.args))
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
        log.info("User %s cancelled job %s/%s", shown(self.caller().name),
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
        sent, stop = 0, asyncio.get_running_loop().time() + MAX_LOG_SECONDS
        chunks = cluster.log_chunks(pods[-1])
        try:
            async with asyncio.timeout_at(stop):
                async for chunk in chunks:
                    chunk = chunk[:MAX_LOG_BYTES - sent]
                    self.write(chunk)
                    await self.flush()
                    sent += len(chunk)
                    if sent >= MAX_LOG_BYTES:
                        break
        except cluster.NoLogs as e:
            raise web.HTTPError(503, f"The cluster serves no logs of pod "
                                f"{pods[-1]['metadata']['name']}: its node's kubelet did not "
                                f"answer ({e}).") from None
        except TimeoutError:
            pass
        finally:
            await chunks.aclose()
        cut = (f"{MAX_LOG_BYTES} bytes" if sent >= MAX_LOG_BYTES else
               f"{MAX_LOG_SECONDS:.0f} seconds"
               if asyncio.get_running_loop().time() >= stop else None)
        if cut:
            self.write(f"\n[{JOBS_SERVICE_NAME}: stopped following this log after {cut}, "
                       "the most one request follows; ask again for the log from its "
                       "start]\n")
        self.finish()


def make_app(jobs: Jobs, prefix: str, job_annotations: dict[str, str],
             hub_auth: HubOAuth) -> web.Application:
    """The service's Tornado app: its API under ``prefix``, users known by ``hub_auth``
    (JupyterHub's, from the service's environment)."""
    api = url_path_join(prefix, JOBS_API_PATH)
    args = {"state": jobs, "hub_auth": hub_auth}
    return web.Application([
        (url_path_join(prefix, "oauth_callback"), OAuthCallback, {"hub_auth": hub_auth}),
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
    parser.add_argument("--home-mount-path", default=DEFAULT_HOME_MOUNT_PATH,
                        help="where notebooks mount the home volume, the z2jh chart's "
                        "singleuser.storage.homeMountPath (default: %(default)s)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[%(levelname)s %(asctime)s %(name)s] "
                        "%(message)s")
    asyncio.run(_serve(args.spec, dict(args.job_annotation), args.usage_db_url,
                       args.home_mount_path))


async def _serve(platform_file: str, annotations: dict[str, str],
                 usage_db_url: str | None = None,
                 home_path: str = DEFAULT_HOME_MOUNT_PATH) -> None:
    platform = SpecSource.shared(platform_file).current()
    watches = cluster.Watches(t.namespace for t in platform.teams)
    url = urlparse(os.environ[ENV_SERVICE_URL])
    prefix = os.environ[ENV_SERVICE_PREFIX]
    recorder = usage_db_url and JobRecorder(Ledger(usage_db_url), watches,
                                            SpecSource.shared(platform_file).current)
    app = make_app(Jobs(platform_file, watches, recorder or None, home_path), prefix,
                   annotations, HubOAuth())
    # listen at once (the hub waits for its services at start-up), then watch
    app.listen(url.port or 80, os.environ.get(ENV_JOBS_BIND) or url.hostname,
               max_body_size=BODY_HARD_LIMIT)
    log.info("Serving %s on %s (prefix %s)", JOBS_SERVICE_NAME, url.geturl(), prefix)
    if recorder:
        recorder.start()
    await watches.keep_starting()
    await asyncio.Event().wait()


if __name__ == "__main__":
    main()
