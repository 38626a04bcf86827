"""Who calls a request-taking hub service (``gpu-jobs``, ``gpu-kernels``), through
JupyterHub's auth: one handler base, so both answer exactly the same callers.

A caller is a JupyterHub user with the service's ``access:services!service=<name>``
scope: their API token (``Authorization: token ...``: the ``jupyterhub-gpu job``
command, a server's kernel provisioner), or OAuth in the browser. A request with a
token is answered as the token's owner or refused, never as the browser's cookie sent
with it; a browser's write needs the XSRF token a page view of the service set
(JupyterHub's rules). Their groups come with the token owner's model (``GET
/hub/api/user`` always includes them), so the service itself needs no hub scope. The
service answers 503 until its watches of the cluster are ready, and JSON always,
errors included.

A service's Prometheus metrics (:class:`MetricsHandler`) are read as the hub's
``/hub/metrics`` are: by a caller whose token has the ``read:metrics`` scope (the
token of the hub service ``prometheus`` that scrapes the hub), known the same way.
"""

from __future__ import annotations

import json
from typing import Any

from jupyterhub.services.auth import (HubOAuth, HubOAuthCallbackHandler, HubOAuthenticated,
                                      UserNotAllowed)
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from tornado import web

from .contract import READ_METRICS_SCOPE
from .logtext import error_words, shown
from .spec.grant import UserRef

#: beyond this, Tornado drops the connection without reading the body (the proxy then
#: answers 503); up to it, a body over the service's own limit is read and gets a 413
#: that names that limit. Not streamed: a request rejected before its body is read (an
#: unknown token, say) would leave the proxy's kept-alive connection broken for the next
BODY_HARD_LIMIT = 32 * 2**20


class ServiceAPI(HubOAuthenticated, web.RequestHandler):
    """A handler of the service's API. A subclass names its service in words
    (``service_words``), the scope a caller needs (``access_scope``) and what users
    own there (``owned``); ``state`` is the service's, with its ``watches``."""

    service_words = "The service"
    access_scope = ""
    owned = "things"
    needs_watches = True  # answers 503 until the service's watches are ready

    def initialize(self, state: Any, hub_auth: HubOAuth) -> None:
        self.state, self.hub_auth = state, hub_auth

    async def prepare(self) -> None:
        # who calls, asked of the hub without blocking the other requests (the
        # synchronous get_current_user would)
        if self.needs_watches and not self.state.watches.ready:
            raise web.HTTPError(503, f"{self.service_words} cannot read the cluster yet; try "
                                "again in a minute (its log says why).")
        model = await self.hub_auth.get_user(self, sync=False)
        # HubAuth tries the header's token first and, when the hub does not know it,
        # the OAuth cookie (XSRF-checked for writes, jupyterhub/services/auth.py
        # HubAuth._get_user, HubOAuth._get_user_cookie). A request that brings a token
        # is answered as that token's owner or not at all: never as the browser's.
        if (self.request.headers.get("Authorization")
                and not getattr(self, "_token_authenticated", False)):
            raise web.HTTPError(403, "The hub does not know this token (expired or revoked?).")
        try:
            self.current_user = self.check_hub_user(model) if model else None
        except UserNotAllowed:
            raise web.HTTPError(403, "%s lacks the scope %s (ask your JupyterHub admin).",
                                shown(model.get("name")), self.access_scope) from None
        if (model and self.request.method == "GET"
                and not getattr(self, "_token_authenticated", False)):
            # a browser's page view: its XSRF cookie, for the writes that follow
            # (JupyterHub sets it only on navigation requests)
            self.xsrf_token  # noqa: B018 - the property sets the cookie

    def caller(self) -> UserRef:
        model = self.current_user
        if model.get("kind", "user") != "user":
            raise web.HTTPError(403, f"Only users have {self.owned}.")
        return UserRef(model["name"], frozenset(model.get("groups") or ()))

    def answer(self, data: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(data))

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        error = kwargs.get("exc_info", (None, None))[1]
        message = error_words(error, self._reason)
        self.answer({"error": message, "status": status_code}, status_code)


class MetricsHandler(ServiceAPI):
    """``GET <prefix>metrics``: ``registry`` in Prometheus' text format, to a caller
    with ``read:metrics`` (their token; a caller without one, or whose token lacks the
    scope, gets 403, as from ``/hub/metrics``). Answered while the watches start too:
    the families whose numbers they give are absent until then."""

    service_words = "The service's metrics"
    access_scope = READ_METRICS_SCOPE
    hub_scopes = frozenset({READ_METRICS_SCOPE})  # not the service's access scope
    needs_watches = False

    def initialize(self, registry: CollectorRegistry, hub_auth: HubOAuth) -> None:
        super().initialize(None, hub_auth)
        self.registry = registry

    async def get(self) -> None:
        if self.current_user is None:
            raise web.HTTPError(403, f"Reading these metrics needs a token with the scope "
                                f"{READ_METRICS_SCOPE}.")
        self.set_header("Content-Type", CONTENT_TYPE_LATEST)
        self.finish(generate_latest(self.registry))


class OAuthCallback(HubOAuthCallbackHandler):
    """Where the hub's OAuth returns a browser to the service."""

    def initialize(self, hub_auth: HubOAuth) -> None:
        self.hub_auth = hub_auth
