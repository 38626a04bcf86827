"""A user's training job as a Kueue-queued ``batch/v1`` Job: pure, no I/O.

:func:`build_job` turns a :class:`JobRequest` into the Job (and, for a job of several
pods, the headless Service of their rendezvous); :func:`peer_policy` gives such a job
the NetworkPolicy that lets its pods reach each other. The Job runs in the user's team
namespace, on the team's LocalQueue with the job profile's WorkloadPriorityClass, so
Kueue queues, admits and preempts it like a notebook of that team; it gets the
user's home and checkpoint volumes as their notebook pod has them, and the pool's
GPU resource, selector and tolerations from the same pieces as the notebook pod
(:mod:`jupyterhub_gpu.builders.pod`).

Its pod runs as the notebook's user and groups (:func:`identity_of`) under Pod
Security's ``restricted`` level, as the notebook does: not as root, no privilege
escalation, no capabilities, the runtime's default seccomp profile.

A disruption -- spot eviction, Kueue preemption, a node going away: the pod
condition ``DisruptionTarget`` -- starts the pod again without using up a retry
(``podFailurePolicy`` action ``Ignore``); a crash, a non-zero exit, counts against
``backoffLimit`` (the profile's ``retries``), except exit codes 126 and 127 (the
shell could not run the command: not executable, not found), which fail the Job at
once, since no retry can fix them. ``maxRunTime`` bounds all of it
(``activeDeadlineSeconds``).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Any, Mapping, NamedTuple

from ..contract import (BATCH_API_VERSION, COMPONENT_LABEL, DISRUPTION_TARGET, ENV_MASTER_ADDR,
                        ENV_MASTER_PORT, ENV_NODE_RANK, ENV_RANK, ENV_WORLD_SIZE,
                        JOB_COMPLETION_INDEX_ANNOTATION, JOB_COMPONENT, JOB_NAME_LABEL,
                        JOB_PROFILE_LABEL, NETWORKING_API_VERSION, PRIORITY_LABEL,
                        QUEUE_LABEL, TEAM_LABEL, USERNAME_KEY)
from ..spec.quantities import format_cpu, format_memory
from ..spec.model import CheckpointStorage, JobProfile, Platform, Pool, Priority, Team
from .pod import RESTRICTED_CONTAINER, RESTRICTED_POD, checkpoint_parts, placement

HOME_VOLUME = "home"
#: where the z2jh chart mounts the home volume by default (its
#: ``singleuser.storage.homeMountPath``)
DEFAULT_HOME_MOUNT_PATH = "/home/jovyan"
CONTAINER = "job"
#: the rendezvous port of rank 0 (PyTorch's default)
RENDEZVOUS_PORT = 29500
#: exit codes of a shell that could not run the command: retrying cannot help
UNRUNNABLE_EXIT_CODES = (126, 127)

POD_FAILURE_POLICY: Mapping[str, Any] = {"rules": (
    {"action": "Ignore", "onPodConditions": ({"type": DISRUPTION_TARGET},)},
    {"action": "FailJob", "onExitCodes": {"operator": "In", "values": UNRUNNABLE_EXIT_CODES}},
    {"action": "Count", "onExitCodes": {"operator": "NotIn", "values": (0,)}},
)}
"""Rules apply in order, the first match wins: a disrupted pod's exit code (it may be
killed with one) never counts."""


@dataclass(frozen=True)
class Home:
    """The user's home volume as their notebook pod mounts it (:func:`home_of`)."""

    claim_name: str
    mount_path: str
    sub_path: str = ""
    read_only: bool = False  # the mount's readOnly
    claim_read_only: bool = False  # the volume's persistentVolumeClaim.readOnly


@dataclass(frozen=True)
class Identity:
    """The user and groups the notebook's container runs as (:func:`identity_of`);
    None: not set on the notebook pod."""

    uid: int | None = None
    gid: int | None = None
    fs_group: int | None = None
    supplemental_groups: tuple[int, ...] = ()


@dataclass(frozen=True)
class JobGrant:
    """A job profile a user may submit, resolved for their team."""

    profile: JobProfile
    team: Team
    priority: Priority
    pools: tuple[Pool, ...]  # the preferred first

    @classmethod
    def of(cls, platform: Platform, profile: JobProfile, team: Team) -> "JobGrant":
        return cls(profile, team, platform.priority(profile.priority),
                   platform.pools_of(profile))


@dataclass(frozen=True)
class JobRequest:
    """Everything a Job is built from."""

    name: str  # the Job's name: a DNS label, unique in the namespace
    #: the user's name as KubeSpawner expands ``{username}`` for their notebook (its
    #: ``slug_scheme``): their directory on the checkpoint PVC, and a label value
    user_slug: str
    #: the JupyterHub user's name: their directory on the checkpoint PVC is
    #: :func:`~jupyterhub_gpu.builders.pod.user_dir` of it, as their notebook's
    username: str
    grant: JobGrant
    image: str  # the user's running server's, or the spec's
    command: tuple[str, ...]
    home: Home | None = None
    #: the working directory, relative to the home's mount ("": the mount itself):
    #: the script's directory, so that the command runs where the user's code is
    working_dir: str = ""
    checkpoint_storage: CheckpointStorage | None = None
    identity: Identity = Identity()


class JobManifests(NamedTuple):
    job: dict
    service: dict | None  # a multi-pod job's headless Service


def _notebook_container(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    """The notebook's container: KubeSpawner's first (``extra_containers`` follow)."""
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    return containers[0]


def home_of(pod: Mapping[str, Any], home_path: str = DEFAULT_HOME_MOUNT_PATH) -> Home | None:
    """The home volume of a notebook pod: the claim its notebook container mounts at
    ``home_path`` (the chart's ``singleuser.storage.homeMountPath``), whichever
    other claims it mounts and in whatever order, with the mount's and the claim's
    ``readOnly``. None if no claim is mounted there."""
    claims = {v.get("name"): v["persistentVolumeClaim"]
              for v in (pod.get("spec") or {}).get("volumes") or []
              if v.get("persistentVolumeClaim")}
    wanted = home_path.rstrip("/") or "/"
    for mount in _notebook_container(pod).get("volumeMounts") or []:
        claim = claims.get(mount.get("name"))
        if claim is not None and (mount.get("mountPath") or "").rstrip("/") == wanted:
            return Home(claim["claimName"], mount["mountPath"], mount.get("subPath") or "",
                        read_only=bool(mount.get("readOnly")),
                        claim_read_only=bool(claim.get("readOnly")))
    return None


def identity_of(pod: Mapping[str, Any]) -> Identity:
    """Who the notebook's container runs as: its ``runAsUser`` and ``runAsGroup``
    (the container's, else the pod's, as the kubelet resolves them), the pod's
    ``fsGroup`` and ``supplementalGroups``."""
    pod_context = (pod.get("spec") or {}).get("securityContext") or {}
    context = {**pod_context, **(_notebook_container(pod).get("securityContext") or {})}
    return Identity(context.get("runAsUser"), context.get("runAsGroup"),
                    pod_context.get("fsGroup"),
                    tuple(pod_context.get("supplementalGroups") or ()))


def security_context(identity: Identity) -> dict:
    """The pod's of a job or a GPU kernel: the notebook's identity under
    :data:`RESTRICTED_POD`."""
    context: dict[str, Any] = plain(RESTRICTED_POD)
    for key, value in (("runAsUser", identity.uid), ("runAsGroup", identity.gid),
                       ("fsGroup", identity.fs_group)):
        if value is not None:
            context[key] = value
    if identity.supplemental_groups:
        context["supplementalGroups"] = list(identity.supplemental_groups)
    return context


def _volumes(req: JobRequest) -> tuple[list[dict], list[dict], dict[str, str]]:
    """(volumes, mounts, environment): the home and the checkpoint directory."""
    volumes, mounts, env = checkpoint_parts(req.checkpoint_storage,
                                            req.grant.profile.checkpoint, req.username)
    home_volume(req.home, volumes, mounts)
    return volumes, mounts, env


def home_volume(home: Home | None, volumes: list[dict], mounts: list[dict]) -> None:
    """Put the user's home, as their notebook mounts it, first into ``volumes`` and
    ``mounts`` (nothing without one)."""
    if home is not None:
        claim: dict[str, Any] = {"claimName": home.claim_name}
        if home.claim_read_only:
            claim["readOnly"] = True
        volumes.insert(0, {"name": HOME_VOLUME, "persistentVolumeClaim": claim})
        mount: dict[str, Any] = {"name": HOME_VOLUME, "mountPath": home.mount_path}
        if home.sub_path:
            mount["subPath"] = home.sub_path
        if home.read_only:
            mount["readOnly"] = True
        mounts.insert(0, mount)


def _rendezvous(req: JobRequest) -> list[dict]:
    """PyTorch DDP's ``env://`` variables: rank 0's pod (hostname ``<job>-0`` under the
    headless Service's subdomain) and this pod's rank, its completion index."""
    index = {"valueFrom": {"fieldRef": {
        "fieldPath": f"metadata.annotations['{JOB_COMPLETION_INDEX_ANNOTATION}']"}}}
    return [{"name": ENV_MASTER_ADDR, "value": f"{req.name}-0.{req.name}"},
            {"name": ENV_MASTER_PORT, "value": str(RENDEZVOUS_PORT)},
            {"name": ENV_WORLD_SIZE, "value": str(req.grant.profile.pods)},
            {"name": ENV_RANK, **index}, {"name": ENV_NODE_RANK, **index}]


def _container(req: JobRequest, mounts: list[dict], env: dict[str, str]) -> dict:
    profile, pool = req.grant.profile, req.grant.pools[0]
    resources = {"cpu": format_cpu(profile.cpu), "memory": format_memory(profile.memory_bytes),
                 **pool.gpu_resources(profile.units)}  # one GPU resource on every pool
    variables = [{"name": k, "value": v} for k, v in env.items()]
    if profile.pods > 1:
        variables += _rendezvous(req)
    container = {"name": CONTAINER, "image": req.image, "command": list(req.command),
                 "env": variables, "volumeMounts": mounts,
                 "resources": {"requests": resources, "limits": dict(resources)},
                 "securityContext": plain(RESTRICTED_CONTAINER)}
    if req.home is not None:
        container["workingDir"] = (posixpath.join(req.home.mount_path, req.working_dir)
                                   if req.working_dir else req.home.mount_path)
    return container


def labels(req: JobRequest) -> dict[str, str]:
    """The labels of the Job's pods (the Job has them too, and Kueue's)."""
    return {JOB_PROFILE_LABEL: req.grant.profile.slug, TEAM_LABEL: req.grant.team.name,
            USERNAME_KEY: req.user_slug, COMPONENT_LABEL: JOB_COMPONENT}


def _pod_spec(req: JobRequest) -> dict:
    profile = req.grant.profile
    volumes, mounts, env = _volumes(req)
    selector, tolerations, affinity = placement(req.grant.pools)
    spec: dict[str, Any] = {"restartPolicy": "Never",  # podFailurePolicy requires it
                            "automountServiceAccountToken": False,
                            "securityContext": security_context(req.identity),
                            "containers": [_container(req, mounts, env)],
                            "volumes": volumes, "nodeSelector": selector,
                            "tolerations": tolerations}
    if affinity:
        spec["affinity"] = {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": affinity}}}
    if profile.checkpoint.enabled:
        spec["terminationGracePeriodSeconds"] = profile.checkpoint.grace_period_seconds
    if profile.pods > 1:
        spec["subdomain"] = req.name
    return spec


def _service(req: JobRequest) -> dict:
    """The headless Service that gives each pod of the job a DNS name."""
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": req.name, "namespace": req.grant.team.namespace,
                         "labels": labels(req)},
            "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                     "selector": {JOB_NAME_LABEL: req.name},
                     "ports": [{"name": "rendezvous", "port": RENDEZVOUS_PORT}]}}


def peer_policy(req: JobRequest) -> dict | None:
    """The NetworkPolicy of a multi-pod job: its pods reach each other on every port
    and protocol, and nothing else gains anything (None for a one-pod job).

    Every port, not only the rendezvous port: after the ``env://`` rendezvous on
    :data:`RENDEZVOUS_PORT`, NCCL's bootstrap and Gloo listen on ports the kernel
    picks (NVIDIA/nccl ``src/bootstrap.cc``: ``createListenSocket`` binds the
    interface's address with no port) and each rank connects to the others' there.
    The pods of one job run one user's code: a port between them opens nothing the
    user could not reach anyway. Pods are matched by the Job's name, which the API
    server labels every pod of the Job with (:data:`JOB_NAME_LABEL`); the team's
    default deny and its jobs policy (:mod:`jupyterhub_gpu.bundle.namespaces`) keep
    everything else out. The hub creates it with the Service, owned by the Job."""
    if req.grant.profile.pods < 2:
        return None
    same_job = {"podSelector": {"matchLabels": {JOB_NAME_LABEL: req.name}}}
    return {"apiVersion": NETWORKING_API_VERSION, "kind": "NetworkPolicy",
            "metadata": {"name": req.name, "namespace": req.grant.team.namespace,
                         "labels": labels(req)},
            "spec": {"podSelector": same_job["podSelector"],
                     "policyTypes": ["Ingress", "Egress"],
                     "ingress": [{"from": [same_job]}], "egress": [{"to": [same_job]}]}}


def plain(value: Any) -> Any:
    """Tuples and read-only mappings as JSON's lists and dicts."""
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def build_job(req: JobRequest) -> JobManifests:
    """The Job for ``req`` (and the Service of a multi-pod one)."""
    profile, team = req.grant.profile, req.grant.team
    spec: dict[str, Any] = {
        "parallelism": profile.pods, "completions": profile.pods,
        "backoffLimit": profile.retries,
        "activeDeadlineSeconds": profile.max_run_seconds,
        "podFailurePolicy": plain(POD_FAILURE_POLICY),
        "template": {"metadata": {"labels": labels(req)}, "spec": _pod_spec(req)},
    }
    if profile.pods > 1:
        spec["completionMode"] = "Indexed"
    job = {"apiVersion": BATCH_API_VERSION, "kind": "Job",
           "metadata": {"name": req.name, "namespace": team.namespace,
                        "labels": {**labels(req), QUEUE_LABEL: team.local_queue,
                                   PRIORITY_LABEL: req.grant.priority.name}},
           "spec": spec}
    return JobManifests(job, _service(req) if profile.pods > 1 else None)
