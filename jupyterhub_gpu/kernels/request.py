"""A GPU kernel's start request checked before anything touches Kubernetes (pure).

The body of a start request (docs/kernels.md, "The protocol") is a JSON object of at
most :data:`MAX_BODY_BYTES` with exactly ``profile`` (a GPU profile's slug),
``kernel_id``, ``response_address`` and ``public_key``: what the kernel's pod is told
(:class:`~jupyterhub_gpu.builders.kernel.Launch`). Everything else is the platform's:
the namespace is the user's team's, the image, resources, pool, queue and priority are
the profile's, and a request that names one of them is refused. The profile must be a
GPU profile the user's groups may use, and the user must be under the spec's
``gpuKernelsPerUser``. The response address must be the caller's own server, on the
port kernels answer to (:func:`check_response_address`, once the service has found
that server's pod).

A refusal is a :class:`KernelRefused`: words for the caller, a detail for the log
(user input in it bounded and escaped, :func:`jupyterhub_gpu.logtext.shown`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from ..builders.kernel import Launch, check_launch
from ..contract import KERNEL_RESPONSE_PORT
from ..logtext import shown
from ..refusals import Refused
from ..spec.grant import Grant, UserRef, authorize
from ..spec.model import Platform, Profile

FIELDS = ("profile", "kernel_id", "response_address", "public_key")
#: fields a forged request might carry, and why each is not the user's to choose
CHOSEN_BY_THE_PLATFORM = {
    "namespace": "the namespace is your team's",
    "image": "the image is the profile's",
    "pool": "the pool is the profile's",
    "priority": "the priority is the profile's",
    "resources": "the resources are the profile's",
}
#: the most bytes of a request body: the four fields, the public key the largest
MAX_BODY_BYTES = 16 * 1024
#: how much of an unknown profile's name a refusal quotes back
MAX_SHOWN_PROFILE = 100


class KernelRefused(Refused):
    """A kernel start request that may not run (:class:`jupyterhub_gpu.refusals.Refused`)."""


@dataclass(frozen=True)
class KernelStart:
    """A checked request: the grant the kernel runs under and what its pod is told."""

    grant: Grant
    launch: Launch


def read_body(raw: bytes) -> Any:
    """The request's JSON, or a refusal: 413 over :data:`MAX_BODY_BYTES`, 400 if it is
    no JSON."""
    if len(raw) > MAX_BODY_BYTES:
        raise KernelRefused(f"A kernel request may have at most {MAX_BODY_BYTES} bytes.",
                            f"body of {len(raw)} bytes", status=413)
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:  # JSONDecodeError is a ValueError
        raise KernelRefused("The request must be JSON.", f"body is no JSON: {e}") from e


def requested_profile(body: Any) -> Any:
    """The profile a request body names, if it names one (any input: unchecked)."""
    return body.get(FIELDS[0]) if isinstance(body, Mapping) else None


def gpu_profiles_for(platform: Platform, groups: Iterable[str]) -> tuple[Profile, ...]:
    """The GPU profiles a user in ``groups`` may start kernels of (their CPU profiles
    have none)."""
    return tuple(p for p in platform.profiles_for(frozenset(groups)) if platform.uses_gpu(p))


def _fields(body: Any) -> Mapping[str, Any]:
    if not isinstance(body, Mapping):
        raise KernelRefused(f"The request must be a JSON object with {', '.join(FIELDS)}.",
                            f"body is a {type(body).__name__}")
    chosen = sorted(set(body) & set(CHOSEN_BY_THE_PLATFORM))
    if chosen:
        why = "; ".join(CHOSEN_BY_THE_PLATFORM[k] for k in chosen)
        raise KernelRefused(f"A kernel request may not set {', '.join(chosen)}: {why}.",
                            f"forged field(s) {chosen}")
    extra = sorted(map(str, set(body) - set(FIELDS)))
    missing = [k for k in FIELDS if k not in body]
    if extra or missing:
        raise KernelRefused(f"A kernel request has exactly {', '.join(FIELDS)}"
                            + (f"; unknown: {', '.join(map(repr, extra))}" if extra else "")
                            + (f"; missing: {', '.join(missing)}" if missing else "") + ".",
                            f"extra field(s) {extra}, missing {missing}")
    return body


def _grant(platform: Platform, user: UserRef, slug: Any) -> Grant:
    if platform.team_for(user.groups) is None:
        raise KernelRefused("You are in no team of this hub, so you may start no GPU kernel.",
                            f"no team for groups {sorted(user.groups)}", status=403)
    allowed = gpu_profiles_for(platform, user.groups)
    yours = ", ".join(p.slug for p in allowed) or "none"
    profile = platform.profile(slug) if isinstance(slug, str) else None
    named = repr(shown(slug, MAX_SHOWN_PROFILE))  # any input: bounded and escaped
    if profile is None:
        raise KernelRefused(f"Unknown profile {named}; your GPU profiles: {yours}.",
                            f"unknown profile {named}")
    if not platform.uses_gpu(profile):
        raise KernelRefused(f"Profile {named} has no GPU, so it has no GPU kernel; your GPU "
                            f"profiles: {yours}.", f"CPU profile {named}")
    if profile not in allowed:
        raise KernelRefused(f"You may not use profile {named}; your GPU profiles: {yours}.",
                            f"profile {named} not allowed for groups {sorted(user.groups)}",
                            status=403)
    return authorize(platform, user, {"profile": profile.slug})


def _launch(fields: Mapping[str, Any]) -> Launch:
    values = {k: fields[k] for k in FIELDS[1:]}
    for name, value in values.items():
        if not isinstance(value, str):
            raise KernelRefused(f"'{name}' must be a string.",
                                f"{name} is a {type(value).__name__}")
    launch = Launch(**values)
    try:
        check_launch(launch)
    except ValueError as e:
        raise KernelRefused(f"Invalid {e}.", f"invalid launch: {shown(e)}") from e
    return launch


def _cap(platform: Platform, active_kernels: int) -> None:
    limit = platform.gpu_kernels_per_user
    if limit == 0:
        raise KernelRefused("GPU kernels are switched off on this hub; start a GPU server "
                            "instead.", "gpuKernelsPerUser is 0", status=403)
    if active_kernels >= limit:
        raise KernelRefused(
            f"You have {active_kernels} GPU kernel(s) running or queued, the most one user "
            f"may have at once ({limit}); shut one down first (Kernel menu, Shut Down "
            "Kernel).", f"over the limit: {active_kernels} active of {limit}", status=409)


def check_start(platform: Platform, user: UserRef, body: Any,
                active_kernels: int) -> KernelStart:
    """The start request ``body`` of ``user``, who has ``active_kernels`` GPU kernels
    running or queued, or :class:`KernelRefused` saying why not."""
    fields = _fields(body)
    grant = _grant(platform, user, fields["profile"])
    launch = _launch(fields)
    _cap(platform, active_kernels)
    return KernelStart(grant, launch)


def check_response_address(launch: Launch, server_ip: str) -> None:
    """The response address must be the caller's own server (its pod's address
    ``server_ip``) on :data:`~jupyterhub_gpu.contract.KERNEL_RESPONSE_PORT`: a kernel
    sends its connection information nowhere else."""
    host, _, port = launch.response_address.rpartition(":")
    if host.strip("[]") != server_ip or port != str(KERNEL_RESPONSE_PORT):
        raise KernelRefused(
            f"The response address must be your server's, {server_ip}:{KERNEL_RESPONSE_PORT}.",
            f"response address {shown(launch.response_address)} is not the server's "
            f"{server_ip}", status=403)
