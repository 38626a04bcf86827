"""The hub service ``gpu-usage``: the usage page and its CSV, behind the hub's OAuth.

Under the service's prefix (``/services/gpu-usage/``):

* ``GET ./``: the page (figures as inline-SVG charts and tables);
* ``GET ./usage.csv``: the same numbers as CSV (``figure,name,measure,value``).

Both take ``days`` (the period up to now, 1 to 366), ``team`` and ``user`` (narrow to
one team or user), each at most once; any other query is answered 400 with the reason
(:meth:`.access.Query.parse`). Who sees what: :mod:`.access` (admins everything, a
team's ``leadGroups`` their team, everyone their own); a narrowing outside that (a
lead's too, to a user with no usage in their teams) is answered 403 and shows nothing. The viewer's name, admin flag and groups come from the hub
(``GET /hub/api/user``, which every token may call about its owner).

Two ways to run it (:func:`add_usage_service`):

* a managed service: the hub starts it as a process in its own container;
* ``sidecar=True``: a container of its own beside the hub's in the hub pod
  (``hub.extraContainers``, as helm-values/values.yaml does), registered with the hub
  as an external service. The usage page needs no Kubernetes access, and a process in
  the hub's container can read the hub ServiceAccount's token file; the sidecar's
  container covers that path with an empty volume, so the ServiceAccount admission
  plugin mounts no token into it.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import os
import secrets
import signal
import sys
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlparse

from jupyterhub.services.auth import (HubOAuth, HubOAuthCallbackHandler, HubOAuthenticated,
                                      UserNotAllowed)
from jupyterhub.utils import url_path_join
from tornado import web

from ..contract import USAGE_PORT
from ..contract import (ENV_BASE_URL, ENV_CLIENT_ID, ENV_OAUTH_CALLBACK_URL,
                        ENV_PLATFORM_FILE, ENV_PROMETHEUS_URL, ENV_SERVICE_NAME,
                        ENV_SERVICE_PREFIX, ENV_SERVICE_URL, ENV_USAGE_BIND, ENV_USAGE_DAYS,
                        ENV_USAGE_DB_URL, USAGE_ACCESS_SCOPE, USAGE_CSV_PATH,
                        USAGE_SERVICE_NAME)
from ..services import add_service, spec_path, with_user_scope
from ..logtext import error_words
from ..spec.source import SpecSource
from . import figures as fg
from . import telemetry
from . import queries
from .access import BadQuery, NotVisible, Query, Selection, Viewer
from .config import DEFAULT_DAYS, MAX_DAYS, UsageLedger, UsagePage, default_url
from ..ledger.store import Ledger
from .page import Report, max_ages, report_of, spot_pools, to_csv, to_html

log = logging.getLogger("jupyterhub_gpu.usage")


class Usage:
    """The service's state: the live spec, the ledger, where telemetry comes from."""

    def __init__(self, platform_file: str, ledger: Ledger, prometheus_url: str | None,
                 default_days: int):
        self.source, self.ledger = SpecSource.shared(platform_file), ledger
        self.prometheus_url, self.default_days = prometheus_url, default_days

    async def report(self, model: dict, selection: Selection, days: int) -> Report:
        """What ``model``'s user may see of ``selection`` (raises NotVisible)."""
        platform = self.source.current()
        viewer = Viewer.of(model, platform)
        selection.check(viewer)
        window = fg.Window.last_days(days, datetime.now(timezone.utc))
        found = await self.ledger.read(functools.partial(
            queries.compute, viewer=viewer, selection=selection, window=window,
            spot_pools=spot_pools(platform), max_ages=max_ages(platform)))
        namespaces = tuple(sorted({t.namespace for t in platform.teams
                                   if t.name in found.teams_with_rows}))
        telemetry_ = (await telemetry.fetch(self.prometheus_url, namespaces,
                                            int((window.end - window.start).total_seconds()),
                                            window.end)
                      if namespaces else telemetry.Telemetry({}, "no GPU usage to measure"))
        return report_of(found, viewer, selection, window, days, platform, telemetry_)


class _Handler(HubOAuthenticated, web.RequestHandler):
    def initialize(self, usage: Usage, hub_auth: HubOAuth) -> None:
        self.usage, self.hub_auth = usage, hub_auth

    async def prepare(self) -> None:
        # asked of the hub without blocking other requests (get_current_user would)
        model = await self.hub_auth.get_user(self, sync=False)
        try:
            self.current_user = self.check_hub_user(model) if model else None
        except UserNotAllowed:
            # a token without the page's scope (a server's own token, say): refused,
            # not a 500
            raise web.HTTPError(403, "This token lacks the scope %s.",
                                USAGE_ACCESS_SCOPE) from None

    async def _report(self) -> Report:
        try:
            query = Query.parse(self.request.query_arguments, self.usage.default_days,
                                MAX_DAYS)
            return await self.usage.report(self.current_user, query.selection, query.days)
        except BadQuery as e:
            raise web.HTTPError(400, "%s", e) from None
        except NotVisible as e:
            raise web.HTTPError(403, "%s", e) from None

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        error = kwargs.get("exc_info", (None, None))[1]
        message = error_words(error, self._reason)
        self.set_header("Content-Type", "text/plain; charset=utf-8")
        self.finish(f"{status_code}: {message}\n")


class PageHandler(_Handler):
    @web.authenticated
    async def get(self) -> None:
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.finish(to_html(await self._report(), USAGE_CSV_PATH))


class CsvHandler(_Handler):
    @web.authenticated
    async def get(self) -> None:
        self.set_header("Content-Type", "text/csv; charset=utf-8")
        self.set_header("Content-Disposition", f'attachment; filename="{USAGE_SERVICE_NAME}.csv"')
        self.finish(to_csv(await self._report()))


class _Callback(HubOAuthCallbackHandler):
    def initialize(self, hub_auth: HubOAuth) -> None:
        self.hub_auth = hub_auth


def make_app(usage: Usage, prefix: str, hub_auth: HubOAuth) -> web.Application:
    args = {"usage": usage, "hub_auth": hub_auth}
    return web.Application([
        (url_path_join(prefix, "oauth_callback"), _Callback, {"hub_auth": hub_auth}),
        (prefix, PageHandler, args),
        (url_path_join(prefix, USAGE_CSV_PATH), CsvHandler, args),
    ], cookie_secret=secrets.token_bytes(32))


def usage_service(platform_file: str, url: str, usage_db_url: str, *,
                  prometheus_url: str = "", default_days: int = DEFAULT_DAYS,
                  bind: str | None = None,
                  python: str = sys.executable) -> dict:
    """The ``c.JupyterHub.services`` entry: a managed service the hub starts, listening
    on ``url``'s port (on ``bind`` if given, else ``url``'s host)."""
    env = {ENV_PLATFORM_FILE: os.path.abspath(platform_file), ENV_USAGE_DB_URL: usage_db_url,
           ENV_USAGE_DAYS: str(default_days)}
    if prometheus_url:
        env[ENV_PROMETHEUS_URL] = prometheus_url
    if bind:
        env[ENV_USAGE_BIND] = bind
    return {"name": USAGE_SERVICE_NAME, "url": url, "environment": env,
            "oauth_no_confirm": True, "display": True,
            "command": [python, "-m", "jupyterhub_gpu.usage.service"]}


def sidecar_service(services: list[dict], url: str) -> list[dict]:
    """``services`` with the sidecar's entry completed: an external service at ``url``
    (no command: the hub starts nothing), whose token z2jh put there from
    ``hub.services.gpu-usage`` (the chart's Secret holds the same token for the sidecar)."""
    (entry, *more) = [s for s in services if s.get("name") == USAGE_SERVICE_NAME] or [None]
    if entry is None or more or not entry.get("api_token"):
        raise ValueError(f"the {USAGE_SERVICE_NAME} sidecar needs one service entry with its "
                         f"api_token before add_usage_service: z2jh makes it from "
                         f"`hub.services.{USAGE_SERVICE_NAME}: {{}}` in the Helm values")
    if entry.get("command"):
        raise ValueError(f"service {USAGE_SERVICE_NAME} has a command: it runs as a sidecar, "
                         f"the hub must not start it too")
    done = {**entry, "url": url, "oauth_no_confirm": True, "display": True}
    return [done if s is entry else s for s in services]


def add_usage_service(c: Any, platform_file: str | None = None, url: str | None = None, *,
                      bind: str | None = None, sidecar: bool = False) -> None:
    """Add the service at ``url`` (required) and every user's access to it to config
    ``c``: managed (settings: ``c.UsagePage``, ``c.UsageLedger``; the spec's path
    ``platform_file``, by default the one ``configure_hub`` recorded), or with
    ``sidecar`` the entry of the sidecar (:func:`sidecar_service`; its settings, the
    spec's path among them, are its container's, so ``c.UsagePage`` is refused there)."""
    if not url:
        raise TypeError("add_usage_service needs url=, where the proxy reaches the service")
    if sidecar:
        if c.get("UsagePage"):
            raise ValueError(f"c.UsagePage does not reach the {USAGE_SERVICE_NAME} sidecar: "
                             f"set ${ENV_PROMETHEUS_URL} or ${ENV_USAGE_DAYS} in its container")
        c.JupyterHub.services = sidecar_service(list(c.JupyterHub.get("services", [])), url)
    else:
        page = UsagePage(config=c)
        add_service(c, usage_service(
            spec_path(c, platform_file, "add_usage_service"), url, UsageLedger(config=c).db_url,
            prometheus_url=page.prometheus_url, default_days=page.default_days, bind=bind))
    c.JupyterHub.load_roles = with_user_scope(c.JupyterHub.get("load_roles", []), USAGE_ACCESS_SCOPE)


def sidecar_environment(base_url: str = "/") -> dict[str, str]:
    """What the hub gives a managed service, for the sidecar (unless its container sets
    them): its name, its OAuth client and callback, its prefix, where it listens (every
    address of the pod, :data:`~jupyterhub_gpu.contract.USAGE_PORT`). The hub's
    API is JupyterHub's default, ``http://127.0.0.1:8081/hub/api``: the same pod."""
    prefix = url_path_join(base_url, "services", USAGE_SERVICE_NAME) + "/"
    return {ENV_SERVICE_NAME: USAGE_SERVICE_NAME,
            ENV_CLIENT_ID: f"service-{USAGE_SERVICE_NAME}",  # JupyterHub's for a service
            ENV_SERVICE_PREFIX: prefix,
            ENV_OAUTH_CALLBACK_URL: url_path_join(prefix, "oauth_callback"),
            ENV_SERVICE_URL: f"http://0.0.0.0:{USAGE_PORT}"}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog=f"{USAGE_SERVICE_NAME} service")
    parser.add_argument("--spec", default=os.environ.get(ENV_PLATFORM_FILE))
    parser.add_argument("--usage-db-url", default=os.environ.get(ENV_USAGE_DB_URL))
    parser.add_argument("--prometheus-url", default=os.environ.get(ENV_PROMETHEUS_URL))
    parser.add_argument("--days", type=int,
                        default=int(os.environ.get(ENV_USAGE_DAYS, DEFAULT_DAYS)))
    parser.add_argument("--sidecar", action="store_true",
                        help="run beside the hub in its pod, as an external service: what "
                        "the hub gives a managed service defaults to the service's own, "
                        "and the ledger to the SQLite file in the working directory")
    args = parser.parse_args(argv)
    if args.sidecar:
        for key, value in sidecar_environment(os.environ.get(ENV_BASE_URL) or "/").items():
            os.environ.setdefault(key, value)
        args.usage_db_url = args.usage_db_url or default_url()
    if not args.spec or not args.usage_db_url:
        parser.error(f"needs the spec and the ledger (${ENV_PLATFORM_FILE}, "
                     f"${ENV_USAGE_DB_URL})")
    logging.basicConfig(level=logging.INFO, format="[%(levelname)s %(asctime)s %(name)s] "
                        "%(message)s")
    asyncio.run(_serve(Usage(args.spec, Ledger(args.usage_db_url), args.prometheus_url,
                             args.days)))


async def _serve(usage: Usage) -> None:
    url = urlparse(os.environ[ENV_SERVICE_URL])
    prefix = os.environ[ENV_SERVICE_PREFIX]
    server = make_app(usage, prefix, HubOAuth()).listen(
        url.port or 80, os.environ.get(ENV_USAGE_BIND) or url.hostname)
    log.info("Serving %s on %s (prefix %s)", USAGE_SERVICE_NAME, url.geturl(), prefix)
    await stopped()
    server.stop()
    log.info("Stopped %s", USAGE_SERVICE_NAME)


async def stopped() -> None:
    """Return on SIGTERM or SIGINT. As the sidecar, this process is its container's
    PID 1 (its ``command`` replaces the image's ``tini`` entrypoint), and the kernel
    drops a signal PID 1 has no handler for: without one, the kubelet's SIGTERM would
    be ignored and every stop of the hub's pod (a rollout: the chart's hub Deployment
    is ``Recreate``) would wait ``terminationGracePeriodSeconds`` (30 s) for SIGKILL."""
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    await stop.wait()


if __name__ == "__main__":
    main()
