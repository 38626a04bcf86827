"""Whether a server's user may have the profile a request asks for.

:class:`ProfileRequests` is a collaborator :class:`jupyterhub_gpu.hub.spawner.GPUSpawner`
holds: it authorizes a request for the user's groups
(:func:`jupyterhub_gpu.spec.grant.authorize`) and against the GPU servers the user's
other servers hold (:mod:`.servers`), from the hub's own spawner objects (no API
call), and logs a refusal for the admin.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

from ..spec.grant import Grant, OptionsRejected, UserRef, authorize
from ..spec.model import Platform
from .servers import OtherServer, check_gpu_servers


def user_ref(user: Any) -> UserRef:
    """A JupyterHub user as the spec's grants see it: its name and groups."""
    return UserRef(user.name, frozenset(g.name for g in user.groups))


class ProfileRequests:
    """Authorizes the requests of one server. ``user()`` is its JupyterHub user,
    ``this`` its spawner (left out of the user's other servers); a refusal is logged
    naming the server ``who()``."""

    def __init__(self, *, user: Callable[[], Any], this: Any, log: Any,
                 who: Callable[[], str]):
        self.user, self.this, self.log, self.who = user, this, log, who

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

    def _other_servers(self, platform: Platform) -> list[OtherServer]:
        """The user's other servers that are running or starting or stopping, as each
        sees itself (a GPUSpawner's ``as_other_server``)."""
        spawners = getattr(self.user(), "spawners", None) or {}
        return [other.as_other_server(platform, name) if hasattr(other, "as_other_server")
                else OtherServer(name, None, False)
                for name, other in list(spawners.items())
                if other is not self.this and other.active]
