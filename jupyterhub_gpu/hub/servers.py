"""Named servers: how many GPU servers one user may run at once.

The hub allows named servers (z2jh ``hub.allowNamedServers``), so a user can run a CPU
server beside a GPU one, each with its own profile. The spec's ``gpuServersPerUser``
caps the servers of GPU profiles. The count comes from the hub's own state -- the
user's other spawners, running or with a start or stop pending -- never from the
Kubernetes API, and a request over the cap is refused while it is authorized, before
anything is created.

Pure: :func:`other_server` and :func:`check_gpu_servers` take what the spawner read
from the hub.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from ..spec.grant import Grant, OptionsRejected, UserRef, authorize
from ..spec.model import Platform


@dataclass(frozen=True)
class OtherServer:
    """Another server of the same user, as the hub knows it."""

    name: str  # "" for the default server
    profile: str | None  # the profile it runs (or is starting), if one of the spec's
    gpu: bool  # it holds (or waits for) a GPU


def other_server(platform: Platform, user: UserRef, name: str, grant: Grant | None,
                 user_options: Any, state_profile: str | None) -> OtherServer:
    """A server of ``user`` as its other servers see it: by the profile it was granted
    for its current options, else the one its state (a restarted hub) or its
    ``user_options`` (a start not yet authorized; none: the default) name. A profile
    gone from the spec counts as a GPU one: it may hold a GPU."""
    if grant is None:
        options = user_options if isinstance(user_options, Mapping) else {}
        slug = state_profile or options.get("profile")
        try:
            grant = authorize(platform, user, {"profile": slug})
        except OptionsRejected:
            return OtherServer(name, slug, isinstance(slug, str))
    return OtherServer(name, grant.profile.slug, grant.pool.has_gpu)


def server_label(name: str) -> str:
    return name or "your default server"


def check_gpu_servers(platform: Platform, grant: Grant, others: Iterable[OtherServer],
                      cpu_offered: bool) -> None:
    """Raise :class:`OptionsRejected` when ``grant`` is a GPU profile and the user's
    other active servers already hold ``gpuServersPerUser`` GPU servers.
    ``cpu_offered``: the user may start a CPU profile (the message suggests one)."""
    if not grant.pool.has_gpu:
        return
    limit = platform.gpu_servers_per_user
    running = sorted(o.name for o in others if o.gpu)
    if len(running) < limit:
        return
    names = ", ".join(server_label(n) for n in running)
    alternative = " or pick a CPU profile" if cpu_offered else ""
    if limit == 0:
        message = "GPU servers are switched off on this hub" + (
            "; pick a CPU profile." if cpu_offered else ".")
    elif len(running) == 1:
        message = (f"You already have a GPU server running ({names}); stop it "
                   f"first{alternative}.")
    else:
        message = (f"You already have {len(running)} GPU servers running ({names}), the "
                   f"most one user may run; stop one first{alternative}.")
    raise OptionsRejected(message, f"asked for GPU profile {grant.profile.slug!r} with "
                                   f"{len(running)} GPU server(s) active ({names}); "
                                   f"gpuServersPerUser is {limit}")
