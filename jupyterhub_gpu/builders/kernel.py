"""A GPU kernel's pod and its NetworkPolicies: pure, no I/O (docs/kernels.md).

A GPU kernel is a Jupyter kernel of a GPU profile that a user's (CPU) server runs in
a pod of its own, which the hub's ``gpu-kernels`` service creates on the user's
behalf: the notebook holds no Kubernetes credentials. :func:`build_kernel_pod` makes
that pod from the KubeSpawner settings a server of the same grant gets
(:func:`jupyterhub_gpu.builders.pod.spawn_settings`): the same GPU resource,
placement (a fallback profile's scheduling gate included), Kueue queue and priority
labels, team namespace, image, profile environment and checkpoint directory, the same
preStop hook and grace period, Pod Security ``restricted``, no ServiceAccount token.
Like a job's pod (:mod:`jupyterhub_gpu.builders.job`), it mounts the user's home at
the path their server mounts it and runs as their server's user and groups.

What differs from a server's pod: its labels (:data:`KERNEL_COMPONENT`, the kernel's
id and its owning server), its command (the kernel launcher, told the kernel's id,
where to send its connection information and the key to encrypt it with), its fixed
ports (:data:`KERNEL_PORTS`), ``restartPolicy: Never`` (a kernel that died lost its
variables: Jupyter starts a new one, which is a new pod), no Kubernetes service
variables, and its idle timeout, the profile's ``kernelIdleTimeout``, in
:data:`ENV_IDLE_TIMEOUT` where a server has its own.

:func:`kernel_policies` gives each kernel the two NetworkPolicies that let its owning
server, and only that, reach the kernel's ports, and let the kernel send its
connection information back to that server. The team namespace's standing policy for
kernel pods (:func:`jupyterhub_gpu.bundle.namespaces.kernels_policy`) gives them the
egress a server has and no ingress.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any, Mapping

from ..contract import (COMPONENT_LABEL, ENV_GPU_IDLE_THRESHOLD, ENV_GPU_IDLE_WINDOW,
                        ENV_IDLE_TIMEOUT, ENV_MAX_AGE, ENV_POD_IP, KERNEL_COMPONENT,
                        KERNEL_ID_LABEL, KERNEL_RESPONSE_FLAG,
                        KERNEL_PORTS, KERNEL_RESPONSE_PORT, KERNEL_SERVER_LABEL,
                        NETWORKING_API_VERSION, POD_IP_FIELD, SERVERNAME_KEY,
                        SINGLEUSER_COMPONENT,
                        USERNAME_KEY)
from ..spec.grant import Grant
from ..spec.model import Platform
from ..spec.quantities import format_cpu, format_memory
from .job import Home, Identity, home_volume, plain, security_context
from .pod import spawn_settings

CONTAINER = "kernel"
#: the module the kernel's container runs: the kernel launcher (docs/kernels.md, "The
#: protocol"), given the arguments :func:`launch_command` names
LAUNCHER_MODULE = "jupyterhub_gpu.kernels.launcher"
PYTHON = "python"
#: the server's cull rules, which a kernel's pod does not follow (its own is
#: ``kernelIdleTimeout``; a running cell is never idle, whatever the GPU does)
SERVER_ONLY_ENV = (ENV_MAX_AGE, ENV_GPU_IDLE_THRESHOLD, ENV_GPU_IDLE_WINDOW)
#: a pod name's most characters (a DNS label)
MAX_NAME = 63
_KERNEL_ID = re.compile(r"[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}")
_RESPONSE_ADDRESS = re.compile(r"(\d{1,3}(\.\d{1,3}){3}|\[[0-9a-fA-F:]+\]):(\d{1,5})")


@dataclass(frozen=True)
class Owner:
    """The server a kernel belongs to, by the labels KubeSpawner gives its pod."""

    user_slug: str  # its hub.jupyter.org/username
    server_slug: str  # its hub.jupyter.org/servername

    @classmethod
    def of(cls, pod: Mapping[str, Any]) -> "Owner":
        """The owner that the server pod ``pod`` is."""
        labels = (pod.get("metadata") or {}).get("labels") or {}
        return cls(labels.get(USERNAME_KEY, ""), labels.get(SERVERNAME_KEY, ""))

    @property
    def server_labels(self) -> dict[str, str]:
        """What selects the owning server's pod, and no other pod."""
        return {COMPONENT_LABEL: SINGLEUSER_COMPONENT, USERNAME_KEY: self.user_slug,
                SERVERNAME_KEY: self.server_slug}


@dataclass(frozen=True)
class Launch:
    """What the kernel launcher is told: the kernel's id, the owning server's address
    that it sends its connection information to, and the server's public key it
    encrypts that with (docs/kernels.md, "The protocol")."""

    kernel_id: str
    response_address: str  # "<ip>:<port>" of the owning server's pod
    public_key: str  # base64, no newlines


@dataclass(frozen=True)
class KernelRequest:
    """Everything a GPU kernel's pod is built from."""

    name: str  # the pod's name: a DNS label, unique in the namespace (kernel_name)
    username: str  # the JupyterHub user's name: their checkpoint directory
    owner: Owner
    grant: Grant  # the GPU profile the kernel runs, resolved for the user's team
    launch: Launch
    home: Home | None = None  # as the owning server mounts it
    identity: Identity = Identity()  # as the owning server runs


def kernel_name(user_slug: str, kernel_id: str) -> str:
    """The pod's name: ``kernel-``, a readable part of the user's name and 12 hex
    digits of the kernel's id (48 bits: Jupyter's ids are random UUIDs)."""
    digits = kernel_id.replace("-", "").lower()[:12]
    stem = re.sub(r"[^a-z0-9-]+", "-", user_slug.lower()).strip("-")
    stem = stem[:MAX_NAME - len("kernel--") - len(digits)].strip("-")
    return f"kernel-{stem}-{digits}" if stem else f"kernel-{digits}"


def check_launch(launch: Launch) -> None:
    """A ValueError, naming the field, for a launch the pod must not be given: the
    values go into the pod's command, so each must be what it says it is."""
    if not _KERNEL_ID.fullmatch(launch.kernel_id):
        raise ValueError(f"kernel_id: {launch.kernel_id!r} is not a kernel id (a UUID)")
    match = _RESPONSE_ADDRESS.fullmatch(launch.response_address)
    if match is None or not 0 < int(match.group(3)) < 65536:
        raise ValueError(f"response_address: {launch.response_address!r} is not "
                         "<ip>:<port>")
    if not re.fullmatch(r"[A-Za-z0-9+/]{16,4096}={0,2}", launch.public_key):
        raise ValueError("public_key: not a base64 key (16 to 4096 characters)")


def launch_command(launch: Launch) -> list[str]:
    """The kernel container's command: the launcher with the kernel's id, the
    response address and the server's public key."""
    check_launch(launch)
    return [PYTHON, "-m", LAUNCHER_MODULE, "--kernel-id", launch.kernel_id,
            KERNEL_RESPONSE_FLAG, launch.response_address,
            "--public-key", launch.public_key]


def labels(req: KernelRequest) -> dict[str, str]:
    """The kernel pod's own labels (Kueue's queue and priority, the profile's and the
    team's come from the server's settings)."""
    return {COMPONENT_LABEL: KERNEL_COMPONENT, KERNEL_ID_LABEL: req.launch.kernel_id,
            USERNAME_KEY: req.owner.user_slug, KERNEL_SERVER_LABEL: req.owner.server_slug}


def _env(req: KernelRequest, environment: Mapping[str, Any]) -> list[dict]:
    """The server's environment for the grant, with the kernel's idle timeout in
    place of the server's cull rules."""
    env = {k: v for k, v in environment.items() if k not in SERVER_ONLY_ENV}
    env[ENV_IDLE_TIMEOUT] = str(req.grant.profile.kernel_idle_timeout_seconds)
    # where the launcher binds the kernel's ports: the pod's own address
    env[ENV_POD_IP] = {"valueFrom": {"fieldRef": {"fieldPath": POD_IP_FIELD}}}
    return [{"name": k, **(v if isinstance(v, Mapping) else {"value": v})}
            for k, v in env.items()]


def build_kernel_pod(platform: Platform, req: KernelRequest) -> dict:
    """The pod of the GPU kernel ``req``: a server's pod of ``req.grant`` (see the
    module's docstring for what differs)."""
    if req.grant.profile.kernel_idle_timeout_seconds is None:
        raise ValueError(f"profile {req.grant.profile.slug!r} is on a CPU-only pool: it "
                         "has no GPU kernel")
    settings = spawn_settings(platform, req.grant, req.username)
    volumes, mounts = list(settings.volumes), list(settings.volume_mounts)
    home_volume(req.home, volumes, mounts)
    resources = {"cpu": format_cpu(settings.cpu_guarantee),
                 "memory": format_memory(settings.mem_guarantee),
                 **settings.extra_resource_guarantees}
    container = {
        "name": CONTAINER, "image": settings.image,
        "command": launch_command(req.launch), "env": _env(req, settings.environment),
        "ports": [{"name": name, "containerPort": port, "protocol": "TCP"}
                  for name, port in KERNEL_PORTS.items()],
        "resources": {"requests": resources, "limits": dict(resources)},
        "volumeMounts": mounts, "lifecycle": plain(settings.lifecycle_hooks),
        "securityContext": plain(settings.container_security_context),
    }
    if req.home is not None:
        container["workingDir"] = req.home.mount_path
    spec: dict[str, Any] = {
        "restartPolicy": "Never", "enableServiceLinks": False,
        "automountServiceAccountToken": settings.automount_service_account_token,
        "securityContext": security_context(req.identity),  # restricted, as the server's
        "containers": [container], "volumes": volumes,
        "nodeSelector": dict(settings.node_selector),
        "tolerations": plain(settings.tolerations),
        **plain(settings.extra_pod_config),
    }
    if settings.node_affinity_required:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                                             {"nodeSelectorTerms": plain(
                                                 settings.node_affinity_required)}}}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": req.name, "namespace": settings.namespace,
                         "labels": {**settings.extra_labels, **labels(req)}},
            "spec": spec}


def _policy(req: KernelRequest, name: str, selector: dict, ingress: list[dict],
            egress: list[dict], types: list[str]) -> dict:
    return {"apiVersion": NETWORKING_API_VERSION, "kind": "NetworkPolicy",
            "metadata": {"name": name, "namespace": req.grant.team.namespace,
                         "labels": labels(req)},
            "spec": {"podSelector": {"matchLabels": selector}, "policyTypes": types,
                     "ingress": ingress, "egress": egress}}


def policy_name(req: KernelRequest, side: str) -> str:
    """A policy's name: the pod's, and ``-<side>``, within a DNS label."""
    name = f"{req.name}-{side}"
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[:MAX_NAME - 9].rstrip('-')}-{digest}"


def kernel_policies(req: KernelRequest) -> tuple[dict, dict]:
    """The kernel's two NetworkPolicies, which the service creates with its pod:

    * on the kernel's pod (selected by its id and its owning server's labels: a kernel
      id is no secret, and another user who starts a kernel of the same id gets a pod
      that only their own policies select): ingress from its owning server's pod,
      on :data:`KERNEL_PORTS` only; egress to that pod on
      :data:`KERNEL_RESPONSE_PORT` (the connection information sent back);
    * on the owning server's pod: egress to this kernel's pod on
      :data:`KERNEL_PORTS` (a server's own egress reaches no private address), and
      ingress from it on :data:`KERNEL_RESPONSE_PORT`.

    Policies only add: another user's server, or another of this user's servers,
    reaches neither; the team's default deny keeps out everything else. The service
    makes the kernel's pod their owner, so that they go with it."""
    server = {"podSelector": {"matchLabels": req.owner.server_labels}}
    kernel_selector = labels(req)  # the id, and the owner: see above
    kernel = {"podSelector": {"matchLabels": kernel_selector}}
    response = [{"port": KERNEL_RESPONSE_PORT, "protocol": "TCP"}]
    ports = [{"port": port, "protocol": "TCP"} for port in KERNEL_PORTS.values()]
    both = ["Ingress", "Egress"]
    on_kernel = _policy(req, policy_name(req, "kernel"), kernel_selector,
                        [{"from": [server], "ports": ports}],
                        [{"to": [server], "ports": response}], both)
    on_server = _policy(req, policy_name(req, "server"), req.owner.server_labels,
                        [{"from": [kernel], "ports": response}],
                        [{"to": [kernel], "ports": plain(ports)}], both)
    return on_kernel, on_server
