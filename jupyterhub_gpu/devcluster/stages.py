"""kwok Stage objects: how fake nodes and the pods bound to them change state.

kwok 0.8 ships no built-in behaviour; without Stages nodes never become Ready and
pods stay Pending. These are our own stages for the lifecycle the dev cluster needs:

* ``node-initialize``: a new fake node becomes Ready with addresses and node info,
  keeping the capacity the node was created with (``builders.nodes.fake_node``), and
  gets the annotation a kubelet registers its node with by default
  (``--enable-controller-attach-detach``: the attach-detach controller attaches the
  node's volumes; kubernetes ``pkg/kubelet/kubelet_node_status.go``).
* ``node-heartbeat``: a Ready node refreshes its condition heartbeats every 20-25 s.
* ``pod-ready``: a pending pod bound to a fake node gets a pod IP and runs, if it
  mounts no claim; ``pod-ready-volumes``: one that does, once the dev cluster's CSI
  sidecars marked it with :data:`~jupyterhub_gpu.devcluster.contract.VOLUMES_ATTACHED_ANNOTATION`
  (every volume bound and, for Azure Disk, attached to its node: the kubelet starts no
  container before; :mod:`.storage`). Until then it stays Pending.
* ``pod-complete``: a running pod owned by a Job with the
  :data:`~jupyterhub_gpu.devcluster.contract.RUN_FOR_ANNOTATION` succeeds after the duration it
  gives (a Go duration such as ``30s``, set on the Job's pod template).
* ``pod-exit``: a running pod whose process the demo's pod runner ran ends as that
  process did: the runner writes its exit code in
  :data:`~jupyterhub_gpu.devcluster.contract.EXIT_CODE_ANNOTATION`, and the pod becomes
  Succeeded (0) or Failed, its container terminated with that exit code. A Job's pod
  without run-for and without the runner (no demo hub) runs until it is deleted, as
  notebooks do.
* ``pod-delete``: a pod being deleted goes away (kwok deletes it with grace 0; the
  object then disappears once Kueue has removed its finalizer).

The status templates are Go templates rendered by kwok; ``Now``, ``NodeIP``,
``NodeIPsWith``, ``PodIPsWith``, ``Quote`` and ``YAML`` are kwok template functions.
"""

from __future__ import annotations

from .contract import EXIT_CODE_ANNOTATION, RUN_FOR_ANNOTATION, VOLUMES_ATTACHED_ANNOTATION
from .storage import CONTROLLER_MANAGED_ATTACH

API_VERSION = "kwok.x-k8s.io/v1alpha1"
NODE_REF = {"apiGroup": "v1", "kind": "Node"}
POD_REF = {"apiGroup": "v1", "kind": "Pod"}
READY_STATUS = '.status.conditions.[] | select( .type == "Ready" ) | .status'

_NODE_CONDITIONS = (
    ("Ready", "True", "KubeletReady", "kwok fake kubelet is ready"),
    ("MemoryPressure", "False", "KubeletHasSufficientMemory", "no memory pressure"),
    ("DiskPressure", "False", "KubeletHasNoDiskPressure", "no disk pressure"),
    ("PIDPressure", "False", "KubeletHasSufficientPID", "no PID pressure"),
    ("NetworkUnavailable", "False", "RouteCreated", "fake network is up"),
)


def _expr(key: str, operator: str, *values: str) -> dict:
    expr = {"key": key, "operator": operator}
    if values:
        expr["values"] = list(values)
    return expr


def _stage(name: str, ref: dict, selector: list[dict], next_: dict, **spec) -> dict:
    return {"apiVersion": API_VERSION, "kind": "Stage", "metadata": {"name": name},
            "spec": {"resourceRef": dict(ref), "selector": {"matchExpressions": selector},
                     **spec, "next": next_}}


def _conditions_template() -> str:
    lines = ["{{ $now := Now }}",
             "{{ $since := or .metadata.creationTimestamp $now }}",
             "conditions:"]
    for kind, status, reason, message in _NODE_CONDITIONS:
        lines += [f"- type: {kind}", f'  status: "{status}"', f"  reason: {reason}",
                  f'  message: "{message}"', "  lastHeartbeatTime: {{ $now | Quote }}",
                  "  lastTransitionTime: {{ $since | Quote }}"]
    return "\n".join(lines) + "\n"


_NODE_INIT_REST = """\
addresses:
- type: InternalIP
  address: {{ NodeIP | Quote }}
- type: Hostname
  address: {{ .metadata.name | Quote }}
{{ with .status.capacity }}
capacity:
{{ YAML . 1 }}
{{ end }}
{{ with .status.allocatable }}
allocatable:
{{ YAML . 1 }}
{{ end }}
nodeInfo:
  architecture: amd64
  operatingSystem: linux
  kubeletVersion: fake
  kubeProxyVersion: fake
  containerRuntimeVersion: fake
  kernelVersion: fake
  osImage: kwok fake node
  machineID: ""
  systemUUID: ""
  bootID: ""
phase: Running
"""

_RUNNING = ("running:", "  startedAt: {{ $now | Quote }}")
_COMPLETED = ("terminated:", "  exitCode: 0", "  reason: Completed",
              "  startedAt: {{ $now | Quote }}", "  finishedAt: {{ $now | Quote }}")


def _statuses(field: str, containers: str, state: tuple[str, ...], ready: bool,
              started: bool | None) -> str:
    """A pod status's ``field`` (container statuses): one entry per container of
    ``.spec.<containers>``, every one in ``state``."""
    flag = {True: "true", False: "false"}
    lines = [f"{field}:", f"{{{{ range .spec.{containers} }}}}",
             "- name: {{ .name | Quote }}", "  image: {{ .image | Quote }}",
             f"  ready: {flag[ready]}",
             *([f"  started: {flag[started]}"] if started is not None else []),
             "  restartCount: 0", "  state:", *(f"    {line}" for line in state),
             "{{ end }}"]
    return "\n".join(lines) + "\n"


_POD_READY = """\
{{ $now := Now }}
conditions:
{{ range list "PodScheduled" "Initialized" "ContainersReady" "Ready" }}
- type: {{ . }}
  status: "True"
  lastTransitionTime: {{ $now | Quote }}
{{ end }}
{{ range .spec.readinessGates }}
- type: {{ .conditionType | Quote }}
  status: "True"
  lastTransitionTime: {{ $now | Quote }}
{{ end }}
""" + _statuses("containerStatuses", "containers", _RUNNING, True, True) + _statuses(
    "initContainerStatuses", "initContainers", _COMPLETED, True, None) + """\
{{ with NodeIPsWith .spec.nodeName }}
hostIP: {{ index . 0 | Quote }}
hostIPs:
{{ range . }}
- ip: {{ . | Quote }}
{{ end }}
{{ end }}
{{ with PodIPsWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) ( or .metadata.name "" ) ( or .metadata.namespace "" ) }}
podIP: {{ index . 0 | Quote }}
podIPs:
{{ range . }}
- ip: {{ . | Quote }}
{{ end }}
{{ end }}
phase: Running
startTime: {{ $now | Quote }}
"""

_POD_COMPLETE = ("{{ $now := Now }}\n"
                 + _statuses("containerStatuses", "containers", _COMPLETED, False, False)
                 + "phase: Succeeded\n")

_EXITED = ("terminated:", "  exitCode: {{ $code }}",
           '  reason: {{ if eq $code "0" }}Completed{{ else }}Error{{ end }}',
           "  startedAt: {{ $now | Quote }}", "  finishedAt: {{ $now | Quote }}")
_POD_EXIT = ("{{ $now := Now }}\n"
             f'{{{{ $code := index .metadata.annotations "{EXIT_CODE_ANNOTATION}" }}}}\n'
             + _statuses("containerStatuses", "containers", _EXITED, False, False)
             + '{{ if eq $code "0" }}phase: Succeeded{{ else }}phase: Failed{{ end }}\n')


def node_initialize() -> dict:
    """kwok's ``patches`` (its status template cannot change metadata): the kubelet's
    annotation first, then the status."""
    registered = f'annotations:\n  {CONTROLLER_MANAGED_ATTACH}: "true"\n'
    return _stage("node-initialize", NODE_REF,
                  [_expr(READY_STATUS, "NotIn", "True")],
                  {"patches": [
                      {"root": "metadata", "template": registered, "type": "merge"},
                      {"subresource": "status", "root": "status",
                       "template": _conditions_template() + _NODE_INIT_REST}]})


def node_heartbeat(every_ms: int = 20000, jitter_ms: int = 25000) -> dict:
    return _stage("node-heartbeat", NODE_REF,
                  [_expr(".status.phase", "In", "Running"),
                   _expr(READY_STATUS, "In", "True")],
                  {"statusTemplate": _conditions_template()},
                  delay={"durationMilliseconds": every_ms,
                         "jitterDurationMilliseconds": jitter_ms},
                  immediateNextStage=True)


_CLAIMS = ".spec.volumes.[].persistentVolumeClaim"


def _pod_ready(name: str, volumes: dict) -> dict:
    return _stage(name, POD_REF,
                  [_expr(".metadata.deletionTimestamp", "DoesNotExist"),
                   _expr(".status.phase", "In", "Pending"),
                   _expr(READY_STATUS, "NotIn", "True"), volumes],
                  {"statusTemplate": _POD_READY})


def pod_ready() -> dict:
    """A pod that mounts no claim runs at once."""
    return _pod_ready("pod-ready", _expr(_CLAIMS, "DoesNotExist"))


def pod_ready_volumes() -> dict:
    """A pod that mounts a claim runs once its volumes are attached to its node."""
    attached = f'.metadata.annotations["{VOLUMES_ATTACHED_ANNOTATION}"]'
    return _pod_ready("pod-ready-volumes", _expr(attached, "Exists"))


def pod_complete() -> dict:
    """A Job's running pod succeeds after its run-for annotation's duration: kwok
    reads a string delay as a Go duration (kwok v0.8.0, ``pkg/utils/lifecycle``). The pod's
    deletion in the meantime (preemption, a node going away) is another stage's."""
    run_for = f'.metadata.annotations["{RUN_FOR_ANNOTATION}"]'
    return _stage("pod-complete", POD_REF,
                  [_expr(".metadata.deletionTimestamp", "DoesNotExist"),
                   _expr(".status.phase", "In", "Running"),
                   _expr(".metadata.ownerReferences.[].kind", "In", "Job"),
                   _expr(run_for, "Exists")],
                  {"statusTemplate": _POD_COMPLETE},
                  delay={"durationMilliseconds": 0,
                         "durationFrom": {"jq": {"expression": run_for}}})


def pod_exit() -> dict:
    """A running pod ends as the process the pod runner ran for it did."""
    return _stage("pod-exit", POD_REF,
                  [_expr(".metadata.deletionTimestamp", "DoesNotExist"),
                   _expr(".status.phase", "In", "Running"),
                   _expr(f'.metadata.annotations["{EXIT_CODE_ANNOTATION}"]', "Exists")],
                  {"statusTemplate": _POD_EXIT})


def pod_delete() -> dict:
    return _stage("pod-delete", POD_REF,
                  [_expr(".metadata.deletionTimestamp", "Exists")],
                  {"delete": True})


def stages() -> list[dict]:
    """Every stage the dev cluster's kwok runs, as kwok ``--config`` documents."""
    return [node_initialize(), node_heartbeat(), pod_ready(), pod_ready_volumes(),
            pod_complete(), pod_exit(), pod_delete()]
