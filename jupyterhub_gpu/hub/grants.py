"""Whether a server's user may have the profile a request asks for.

:class:`ProfileRequests` is a collaborator :class:`jupyterhub_gpu.hub.spawner.GPUSpawner`
holds (``profile_requests``): it authorizes a request for the user's groups
(:func:`jupyterhub_gpu.spec.grant.authorize`) and against the GPU servers the user's
other servers hold (:mod:`.servers`), from the hub's own spawner objects (no API
call: each other server's ``profile_requests`` tells what it holds), and logs a
refusal for the admin.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

from ..spec.grant import Grant, OptionsRejected, UserRef, authorize
from ..spec.model import Platform
from .servers import OtherServer, check_gpu_servers, other_server


def user_ref(user: Any) -> UserRef:
    """A JupyterHub user as the spec's grants see it: its name and groups."""
    return UserRef(user.name, frozenset(g.name for g in user.groups))


class ProfileRequests:
    """Authorizes the requests of one server. ``user()`` is its JupyterHub user,
    ``this`` its spawner (left out of the user's other servers); a refusal is logged
    naming the server ``who()``. ``held()`` is what the server holds, as its
    :func:`~.servers.other_server` needs it: the grant of its current options (None
    when it has none, or it was granted other options), its ``user_options``, and the
    profile its state names (after a hub restart)."""

    def __init__(self, *, user: Callable[[], Any], this: Any, log: Any,
                 who: Callable[[], str],
                 held: Callable[[], tuple[Grant | None, Any, str | None]]):
        self.user, self.this, self.log, self.who, self.held = user, this, log, who, held

    def authorize(self, user_options: Any, platform: Platform) -> Grant:
        """The grant for ``user_options``, or :class:`OptionsRejected` (logged): also
        when it is a GPU profile and the user's other servers hold as many GPU servers
        as the spec allows."""
        ref = user_ref(self.user())
        try:
            grant = authorize(platform, ref, user_options)
            cpu_offered = not all(map(platform.uses_gpu, platform.profiles_for(ref.groups)))
            check_gpu_servers(platform, grant, self._other_servers(platform), cpu_offered)
            return grant
        except OptionsRejected as e:
            self.log.warning("Rejected GPU spawn options for %s: %s", self.who(),
                             e.log_detail)
            raise

    def authorized(self, options: Any, platform: Callable[[], Platform]) -> Any:
        """``options`` once authorized by the spec ``platform()`` is then: a forged or
        stale choice shows its error on the form, and nothing is created."""
        if inspect.isawaitable(options):  # an admin's async options_from_form
            async def later() -> Any:
                return self.authorized(await options, platform)
            return later()
        self.authorize(options, platform())
        return options

    def as_other_server(self, platform: Platform, name: str) -> OtherServer:
        """This server (named ``name``) as another server of its user sees it."""
        return other_server(platform, user_ref(self.user()), name, *self.held())

    def _other_servers(self, platform: Platform) -> list[OtherServer]:
        """The user's other servers that are running or starting or stopping, as each
        tells it (a GPUSpawner's ``profile_requests``)."""
        spawners = getattr(self.user(), "spawners", None) or {}
        return [_other(other, platform, name) for name, other in list(spawners.items())
                if other is not self.this and other.active]


def _other(spawner: Any, platform: Platform, name: str) -> OtherServer:
    requests = getattr(spawner, "profile_requests", None)
    if isinstance(requests, ProfileRequests):
        return requests.as_other_server(platform, name)
    return OtherServer(name, None, False)  # not a GPUSpawner: holds no GPU of ours
