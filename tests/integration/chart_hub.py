"""The hub deployed from the real z2jh 4.4.0 chart, the way an admin deploys it.

:func:`render` runs ``helm template`` on the reference chart
(jupyterhub/zero-to-jupyterhub-k8s 4.4.0, ``jupyterhub/``) with our values files in
the order the admin guide's ``helm upgrade --install`` passes them
(:func:`tests.z2jh_chart.install_order`, read from docs/admin-guide.md), the admin's
own last file (``~/jupyterhub-gpu-secrets.yaml`` there) being :func:`test_values`.
:func:`apply` puts every rendered object the hub needs into the dev cluster
(ServiceAccount, Roles and bindings, NetworkPolicies, Services, ConfigMaps, Secret,
PVC, PDBs, PriorityClasses: everything but the Deployments, whose pods kwok would not
run), beside the spec's ConfigMap the admin guide creates first.
:func:`start_container` then starts a Deployment's container as a process, the way
the kubelet would start it: the container's ``command``/``args`` (``$(VAR)``
expanded from its env), its ``env`` with every ``valueFrom`` resolved as the kubelet
does (``secretKeyRef`` read from the Secret in the API server, ``fieldRef`` from the
pod), the Service environment variables of the release namespace
(``enableServiceLinks``), the in-cluster config (``KUBERNETES_SERVICE_HOST``/
``_PORT``, the ServiceAccount's token, CA and namespace at
``/var/run/secrets/kubernetes.io/serviceaccount``), and every volume at its
``mountPath`` (``subPath`` too): the chart's ``jupyterhub_config.py`` and ``z2jh.py``,
the ConfigMap ``hub`` under ``/usr/local/etc/jupyterhub/config/``, the Secret ``hub``
(with the rendered ``values.yaml``) under ``.../secret/``, the spec's ConfigMap under
``/etc/jupyterhub-gpu``. The files are placed in a private mount namespace
(``unshare``, as :mod:`.hubpod` does for the demo hub), in a new root that shows the
host's tree without writing it (:func:`namespace_script`). :class:`ChartHub` starts the
proxy Deployment's container and every container of the hub Deployment so (the
``hub`` container, and ``hub.extraContainers``: the gpu-usage page, :func:`sidecar_env`);
:func:`serving` runs them for a test, from when the hub has logged that it runs (its
managed services started; the hub's REST API: :mod:`.chart_hubapi`);
:meth:`ChartHub.restart` kills a container and starts it again, as the kubelet
restarts a crashed one.

What differs from the pod on AKS, and why:

* The hub runs the packages of a Python environment here and this checkout's
  ``jupyterhub_gpu`` (first on ``PYTHONPATH``), as the test's user, without the
  image's ``tini`` entrypoint: by default this one's (the newest pins; pycurl, which
  the chart's config needs for its curl HTTP client, included), or, with
  ``python_bin``, another venv's, such as our hub image's (:mod:`.hub_image`: the
  z2jh hub image's pins from ``images/hub/requirements.txt`` plus what
  ``config/Dockerfile`` adds). Its managed services run the same Python. The proxy
  runs the dev cluster's configurable-http-proxy.
* There is no pod network and no cluster DNS. Every container port listens on a local
  port of the test's own (:mod:`.chart_network`; the proxy's ``--port``/``--api-port``
  arguments are rewritten, the hub gets ``--JupyterHub.hub_bind_url`` on its command
  line, which traitlets ranks above the config file), the Service environment variables
  name those ports on 127.0.0.1, and the Services' names (``hub``, ``proxy-api``,
  ``hub.<namespace>.svc.cluster.local``, ...) resolve to 127.0.0.1 through the
  namespace's own ``/etc/hosts``. Notebook servers, run by the dev cluster's pod
  runner outside that namespace, cannot resolve them: the hub's
  ``--JupyterHub.hub_connect_url`` is its local address. The hub's managed services
  on a port of the hub Service (``hub.service.extraPorts``: the gpu-jobs service's
  10101) listen on its local port too (the last values file's ``hub.extraConfig``
  entry moves their URLs there: :mod:`.chart_network`), so that two test runs on one
  machine do not collide. A URL a notebook is given for a Service
  (``JUPYTERHUB_GPU_JOBS_URL``) is reached here at :meth:`ChartHub.local_url`.
* Applied NetworkPolicies are stored but not enforced (the dev cluster has no CNI);
  the PVC ``hub-db-dir`` stays unbound (no pod uses it): ``/srv/jupyterhub`` is a
  directory of the test's.
* ``helm-values/auth-azuread.yaml`` is rendered in its place, but the last values file
  switches the authenticator to the chart's ``dummy``: Entra ID is not reachable here.
  That file also gives the tests a hub service with an API token (``hub.services``,
  ``hub.loadRoles``), as an admin's own values file may.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import functools
import os
import re
import secrets
import shlex
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import aiohttp
import pytest
import yaml

from jupyterhub_gpu.contract import (COMPONENT_LABEL, ENV_API_URL, ENV_SERVICE_URL,
                                     SINGLEUSER_COMPONENT)
from jupyterhub_gpu.devcluster import demo

from .. import z2jh_chart
from . import hub_rbac, hubpod
from .chart_hubapi import stop_all_servers
from .chart_network import (SERVICE_PORTS_CONFIG, PortMap, hosts_file, local_ports,
                            service_addresses, service_env)
from .conftest import STATE_DIR, wait_for

REPO = z2jh_chart.REPO
NAMESPACE = z2jh_chart.RELEASE_NAMESPACE
#: the kinds applied to the cluster: not the Deployments (kwok runs no containers)
APPLIED_KINDS = ("ServiceAccount", "Role", "RoleBinding", "ClusterRole",
                 "ClusterRoleBinding", "NetworkPolicy", "Service", "ConfigMap", "Secret",
                 "PersistentVolumeClaim", "PodDisruptionBudget", "PriorityClass")
SPEC_CONFIGMAP, SPEC_KEY = "jupyterhub-gpu-platform", "platform.yaml"  # admin guide, step 8
TEST_SERVICE = "chart-tests"
#: the images' WORKDIR (the hub's: ``images/hub/Dockerfile``), where a container
#: names no ``workingDir``
IMAGE_WORKDIRS = {"hub": "/srv/jupyterhub"}
#: a container's processes in a PID namespace of their own, as in a pod: when its main
#: process exits (the hub's ``SystemExit``), the kernel ends every process it left (the
#: hub's managed services), as the container runtime does
POD_PID_NAMESPACE = ("--pid", "--fork", "--kill-child")
STOP_SECONDS = 30
TEST_SCOPES = ["admin:users", "admin:servers", "admin:groups", "list:users", "read:users",
               "read:servers", "tokens"]  # tokens: a user's token for their services


def test_values(token: str, admin: dict | None = None) -> dict:
    """The last values file: the chart's dummy authenticator, the hub services' ports as
    served here (:data:`.chart_network.SERVICE_PORTS_CONFIG`), and a service whose API
    token ``token`` the tests drive the hub with, over ``admin`` (more of what an admin
    may put in their own values file)."""
    return z2jh_chart.coalesce(admin or {}, {"hub": {"config": {"JupyterHub": {"authenticator_class": "dummy"}},
                    "extraConfig": {"zz-chart-tests-service-ports": SERVICE_PORTS_CONFIG},
                    "services": {TEST_SERVICE: {"apiToken": token}},
                    "loadRoles": {TEST_SERVICE: {"scopes": TEST_SCOPES,
                                                 "services": [TEST_SERVICE]}}}})


def render(helm: Path | str, token: str, admin: dict | None = None) -> list[dict]:
    """The chart's objects, rendered in the install order, :func:`test_values` in the
    admin's own file's place (:func:`tests.z2jh_chart.helm_template`)."""
    return z2jh_chart.helm_template(helm, test_values(token, admin))


def find(objects: list[dict], kind: str, name: str) -> dict:
    (obj,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return obj


def apply(client, objects: list[dict], spec: Path) -> None:
    """The spec's ConfigMap (as the admin guide creates it), then the rendered objects."""
    client.apply({"apiVersion": "v1", "kind": "ConfigMap",
                  "metadata": {"name": SPEC_CONFIGMAP, "namespace": NAMESPACE},
                  "data": {SPEC_KEY: spec.read_text()}})
    for obj in objects:
        if obj["kind"] in APPLIED_KINDS:
            obj = copy.deepcopy(obj)
            if obj["kind"] not in ("ClusterRole", "ClusterRoleBinding", "PriorityClass"):
                obj["metadata"].setdefault("namespace", NAMESPACE)
            client.apply(obj)


def _expand(arg: str, env: dict[str, str]) -> str:
    """The kubelet's ``$(VAR)`` expansion in a command or argument."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m[1], m[0]), arg)


def _rewrite_port(arg: str, ports: PortMap) -> str:
    """``--flag=<container port>`` with the port's local one (the proxy's listen flags)."""
    m = re.fullmatch(r"(--[a-z-]*port=)(\d+)", arg)
    return f"{m[1]}{ports.local(int(m[2]))}" if m else arg


@dataclass
class Pod:
    """One Deployment's pod, played here: its namespace's name, its volumes' files."""

    deployment: dict
    client: object  # the admin client: what the kubelet reads (Secrets, ConfigMaps)
    workdir: Path
    sa_dir: Path
    name: str = field(default="")

    def __post_init__(self):
        self.name = f"{self.deployment['metadata']['name']}-chart-test"
        self.spec = self.deployment["spec"]["template"]["spec"]

    def _read(self, kind: str, name: str) -> dict:
        obj = self.client.get("v1", kind, name, NAMESPACE)
        assert obj is not None, f"{kind} {NAMESPACE}/{name} is not in the cluster"
        return obj

    def env(self, container: dict) -> dict[str, str]:
        """The container's ``env``, each ``valueFrom`` resolved as the kubelet does."""
        out = {}
        for item in container.get("env", []):
            source = item.get("valueFrom")
            if source is None:
                out[item["name"]] = _expand(str(item.get("value", "")), out)
            elif "secretKeyRef" in source:
                ref = source["secretKeyRef"]
                data = self._read("Secret", ref["name"])["data"]
                out[item["name"]] = base64.b64decode(data[ref["key"]]).decode()
            elif "fieldRef" in source:
                out[item["name"]] = {"metadata.namespace": NAMESPACE,
                                     "metadata.name": self.name}[source["fieldRef"]["fieldPath"]]
            else:
                raise NotImplementedError(f"valueFrom {source} is not resolved here")
        return out

    def volume_dir(self, volume: dict) -> Path:
        """The files of one pod volume, written as the kubelet would mount them."""
        path = self.workdir / "volumes" / volume["name"]
        if path.exists():
            return path
        path.mkdir(parents=True)
        if "configMap" in volume:
            for key, text in self._read("ConfigMap", volume["configMap"]["name"])["data"].items():
                (path / key).write_text(text)
        elif "secret" in volume:
            for key, b64 in self._read("Secret", volume["secret"]["secretName"])["data"].items():
                (path / key).write_bytes(base64.b64decode(b64))
        elif not {"emptyDir", "persistentVolumeClaim"} & volume.keys():
            raise NotImplementedError(f"volume {volume['name']} is not made here")
        return path

    def mounts(self, container: dict) -> list[tuple[Path, Path]]:
        """(source on the host, mount path) for every volume mount, and the token."""
        volumes = {v["name"]: v for v in self.spec.get("volumes", [])}
        out = []
        for m in container.get("volumeMounts", []):
            source = self.volume_dir(volumes[m["name"]])
            out.append((source / m["subPath"] if m.get("subPath") else source,
                        Path(m["mountPath"])))
        if self.spec.get("automountServiceAccountToken", True) and hubpod.SA_DIR not in {
                target for _, target in out}:
            out.append((self.sa_dir, hubpod.SA_DIR))
        return out


def resolved(target: Path) -> Path:
    """``target`` with the symlinks of its existing part resolved
    (``/var/run/secrets/...`` is ``/run/secrets/...`` where ``/var/run`` links there)."""
    head = target
    while not head.exists():
        head = head.parent
    return head.resolve() / target.relative_to(head)


def _shadowed(targets: list[Path]) -> list[Path]:
    """The nearest existing directory above each mount path that does not exist here,
    shallowest first: the new root has a tmpfs there, so the path can be made."""
    roots = set()
    for target in map(resolved, targets):
        if not target.exists():
            parent = target.parent
            while not parent.exists():
                parent = parent.parent
            roots.add(parent)
    return sorted(roots - {Path("/")}, key=lambda r: len(r.parts))


def _mirror(directory: Path, into: Path) -> list[str]:
    """Shell lines that show every entry of ``directory`` in the tmpfs ``into``:
    directories and files bind-mounted (live, not copied), symlinks made again."""
    q, lines = shlex.quote, []
    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        source, there = q(entry.path), q(str(into / entry.name))
        if entry.is_symlink():
            lines.append(f"ln -s {q(os.readlink(entry.path))} {there}")
        elif entry.is_dir():
            lines.append(f"mkdir {there}; mount -n --rbind {source} {there}")
        else:
            lines.append(f"touch {there}; mount -n --bind {source} {there}")
    return lines


def namespace_script(mounts: list[tuple[Path, Path]], hosts: Path, new_root: Path) -> str:
    """The shell that builds the pod's file tree in the private mount namespace, then
    runs ``"$2" "$3" ...`` there in directory ``"$1"``. The tree is a new root (a tmpfs
    at ``new_root``, entered with ``chroot``) that shows the host's directories, with a
    tmpfs of its own over each directory a mount path must be made in: nothing of the
    host's is written, and nothing the host changes meanwhile (``/etc/hosts``, ``/run``)
    is copied or cached."""
    q = shlex.quote
    mounts = [*mounts, (hosts, Path("/etc/hosts"))]
    new_root.mkdir(parents=True, exist_ok=True)
    tmpfs = "mount -n -t tmpfs -o mode=755 tmpfs"
    lines = ["set -e", f"{tmpfs} {q(str(new_root))}", *_mirror(Path("/"), new_root)]
    for root in _shadowed([target for _, target in mounts]):
        inside = new_root / root.relative_to("/")
        lines += [f"{tmpfs} {q(str(inside))}", *_mirror(root, inside)]
    for source, target in sorted(mounts, key=lambda m: len(m[1].parts)):
        inside = q(str(new_root / resolved(target).relative_to("/")))
        make = f"mkdir -p {inside}" if source.is_dir() else (
            f"mkdir -p \"$(dirname {inside})\"; [ -e {inside} ] || touch {inside}")
        lines.append(f"{make}; mount -n --bind {q(str(source))} {inside}")
    return "; ".join(lines) + (f"; exec chroot {q(str(new_root))} sh -c "
                               + q('cd "$1"; shift; exec "$@"') + ' sh "$@"')


async def start_container(pod: Pod, container_name: str, env: dict[str, str],
                          extra_args: list[str], ports: PortMap,
                          log: Path) -> asyncio.subprocess.Process:
    """Run one container of ``pod`` as a process in its own mount namespace, in its
    ``workingDir`` (else its image's: :data:`IMAGE_WORKDIRS`)."""
    (container,) = [c for c in pod.spec["containers"] if c["name"] == container_name]
    env = {**env, **pod.env(container)}
    argv = [_rewrite_port(_expand(a, env), ports)
            for a in [*container.get("command", []), *container.get("args", [])]]
    hosts = pod.workdir / "hosts"
    script = namespace_script(pod.mounts(container), hosts, pod.workdir / "root")
    cwd = container.get("workingDir") or IMAGE_WORKDIRS.get(container_name, "/")
    with open(log, "ab") as out:
        return await asyncio.create_subprocess_exec(
            *hubpod.unshare_command(), *POD_PID_NAMESPACE, "sh", "-c", script, "sh", cwd, *argv,
            *extra_args,
            stdout=out, stderr=out, env=env, start_new_session=True,
            preexec_fn=demo.interruptible)


def base_env(api_server: str, python_bin: Path | None = None) -> dict[str, str]:
    """What every container here starts with: the programs and packages of the Python
    environment whose ``bin`` is ``python_bin`` (default: this one's), this checkout's
    ``jupyterhub_gpu`` first on the path, and the in-cluster config's API server address."""
    server = urlparse(api_server)
    path = os.pathsep.join([str(python_bin or Path(sys.executable).parent),
                            str(demo.chp_command().parent), os.environ.get("PATH", "")])
    python_path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return {"PATH": path, "PYTHONPATH": python_path,
            "HOME": os.environ.get("HOME", "/root"), "LANG": "C.UTF-8",
            "KUBERNETES_SERVICE_HOST": server.hostname,
            "KUBERNETES_SERVICE_PORT": str(server.port)}


@dataclass
class ChartHub:
    """The proxy and the hub of the rendered chart, running; driven by API token."""

    url: str
    api: str
    token: str
    hub_log: Path
    values: dict  # the rendered values, as the hub reads them (the Secret's values.yaml)
    sa_dir: Path  # the ServiceAccount token, CA and namespace the containers mount
    objects: list  # every object the chart rendered
    addresses: dict[str, int] = field(default_factory=dict)  # service_addresses
    processes: list = field(default_factory=list)
    #: how each of ``processes`` was started, by container name (:meth:`restart`)
    starts: dict = field(default_factory=dict)

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"token {self.token}"}

    def local_url(self, url: str) -> str:
        """Where a pod's request to ``url``, a URL of a Service of the chart, goes here."""
        parts = urlparse(url)
        return parts._replace(netloc=f"127.0.0.1:{self.addresses[parts.netloc]}").geturl()

    def tail(self, chars: int = 4000) -> str:
        """The end of the hub's log, for an assertion's message."""
        return self.hub_log.read_text(errors="replace")[-chars:]

    def running(self) -> bool:
        return all(p.returncode is None for p in self.processes)

    async def restart(self, container: str) -> None:
        """SIGKILL ``container``'s processes (its main one and every child: a crashed
        or OOM-killed container) and start it again with the same volumes, as the
        kubelet does under ``restartPolicy: Always`` (the hub's ``/srv/jupyterhub``,
        its database, stays)."""
        index, start = self.starts[container]
        process = self.processes[index]
        if process.returncode is None:
            os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
        self.processes[index] = await start()

    async def stop(self) -> list[str]:
        """SIGTERM, as the kubelet stops a container; SIGKILL after STOP_SECONDS (the hub
        pod's ``terminationGracePeriodSeconds``: Kubernetes' default; the proxy's is 60).
        The containers that needed the SIGKILL."""
        names = {index: name for name, (index, _) in self.starts.items()}
        killed = []
        for index, process in reversed(list(enumerate(self.processes))):
            if process.returncode is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    await asyncio.wait_for(process.wait(), STOP_SECONDS)
                except asyncio.TimeoutError:
                    killed.append(names[index])
                    os.killpg(process.pid, signal.SIGKILL)
                    await process.wait()
        return killed


async def start_chart_hub(cluster: dict, spec: Path, workdir: Path,
                          admin: dict | None = None, python_bin: Path | None = None) -> ChartHub:
    """Render (``admin``: more values of the admin's own file), apply and start the
    chart's proxy and hub (``python_bin``: the ``bin`` directory of the Python
    environment the hub and its managed services run, e.g. the hub image's,
    :mod:`.hub_image`; default: this one's)."""
    from jupyterhub_gpu.devcluster import build

    reason = hubpod.can_unshare()
    if reason:
        pytest.skip(f"cannot make a private mount namespace for the hub pod: {reason}")
    demo.ensure_chp(progress=lambda m: None)
    token = secrets.token_hex(32)
    objects = render(build.binaries()["helm"], token, admin)
    client, paths = hub_rbac.admin_client(STATE_DIR)
    apply(client, objects, spec)
    sa = hub_rbac.HUB
    sa_dir = hubpod.service_account_dir(workdir / "serviceaccount",
                                        hub_rbac.request_token(client, sa),
                                        paths.ca_crt.read_bytes(), sa)
    ports = local_ports(objects)
    env = {**base_env(cluster["server"], python_bin), **service_env(objects, ports)}
    hub_url = f"http://127.0.0.1:{ports.local(8081)}"
    chart = ChartHub(url=f"http://127.0.0.1:{ports.local(8000)}",
                     api=f"{hub_url}/hub/api", token=token, hub_log=workdir / "hub.log",
                     values=yaml.safe_load(base64.b64decode(
                         find(objects, "Secret", "hub")["data"]["values.yaml"])),
                     sa_dir=sa_dir, objects=objects,
                     addresses=service_addresses(objects, ports))
    pods = {}
    for name in ("proxy", "hub"):
        pods[name] = Pod(find(objects, "Deployment", name), client, workdir / name, sa_dir)
        (workdir / name).mkdir(parents=True, exist_ok=True)
        (workdir / name / "hosts").write_text(hosts_file(objects))
    containers = [("proxy", "chp", [], env),
                  ("hub", "hub", [f"--JupyterHub.hub_bind_url={hub_url}",
                                  f"--JupyterHub.hub_connect_url={hub_url}"], env)]
    containers += [("hub", c["name"], [], {**env, **sidecar_env(c, ports, hub_url)})
                   for c in pods["hub"].spec["containers"] if c["name"] != "hub"]
    for name, container, extra, container_env in containers:
        start = functools.partial(start_container, pods[name], container, container_env,
                                  extra, ports, workdir / f"{container}.log")
        chart.starts[container] = (len(chart.processes), start)
        chart.processes.append(await start())
    return chart


def sidecar_env(container: dict, ports: PortMap, hub_url: str) -> dict[str, str]:
    """A sidecar of the hub's pod (``hub.extraContainers``: the gpu-usage page, an
    external service of the hub) reaches the hub's API at its default,
    ``127.0.0.1:8081``, and listens on its container port, both in the pod's network
    namespace; here both are on this run's local ports."""
    (port,) = [p["containerPort"] for p in container.get("ports", [])]
    return {ENV_API_URL: f"{hub_url}/hub/api",
            ENV_SERVICE_URL: f"http://0.0.0.0:{ports.local(port)}"}


async def _running(hub: ChartHub) -> bool:
    """The hub has started its managed services and the proxy's routes (it logs this
    last), or it has exited."""
    return not hub.running() or "JupyterHub is now running" in hub.tail(200_000)


async def _answers(http, hub: ChartHub) -> bool:
    return await demo.hub_answers(http, hub.url) or not hub.running()


@contextlib.asynccontextmanager
async def serving(cluster: dict, spec: Path, workdir: Path, admin: dict | None = None,
                  python_bin: Path | None = None):
    """The chart's hub running for ``spec`` (``admin``, ``python_bin``: see
    :func:`start_chart_hub`),
    and the dev cluster's pod runner (the stand-in kubelet of the notebook pods), with
    an aiohttp session: (hub, session).
    At the end every user's server is stopped (the chart's ``cleanup_servers`` is
    False: the hub leaves them running when it stops), then the processes."""
    from jupyterhub_gpu.devcluster.podrunner import PodRunner

    runner = asyncio.create_task(PodRunner(Path(cluster["kubeconfig"]), workdir).run())
    hub = await start_chart_hub(cluster, spec, workdir, admin, python_bin)
    try:
        async with aiohttp.ClientSession() as http:
            await wait_for(lambda: _answers(http, hub), timeout=120,
                           what=f"the chart's hub (log: {hub.hub_log})")
            await wait_for(lambda: _running(hub), timeout=120,
                           what=f"the chart's hub to start its services (log: {hub.hub_log})")
            assert hub.running(), hub.tail()
            try:
                yield hub, http
            finally:
                # a hub that is exiting (the consecutiveFailureLimit test's) may stop
                # answering before its process is gone: its servers are left to
                # delete_left_servers
                if hub.running() and await demo.hub_answers(http, hub.url):
                    await stop_all_servers(http, hub)
    finally:
        killed = await hub.stop()
        await asyncio.to_thread(delete_left_servers, cluster)
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
    # each container is its PID namespace's PID 1 here, as in its pod, where the kernel
    # drops a signal it has no handler for
    assert not killed, f"{killed} ignored SIGTERM and were killed after {STOP_SECONDS} s"


def delete_left_servers(cluster: dict, timeout: float = 120) -> None:
    """Delete the notebook pods the chart's hub left behind: a hub that exited (the
    ``consecutiveFailureLimit`` test's) stops none of its servers, and the next test
    module shares the cluster. They carry the chart's ``release`` label
    (``files/hub/jupyterhub_config.py``: ``c.KubeSpawner.common_labels``)."""
    from kubernetes import client, config

    core = client.CoreV1Api(config.new_client_from_config(config_file=cluster["kubeconfig"]))
    selector = f"release={z2jh_chart.RELEASE_NAME},{COMPONENT_LABEL}={SINGLEUSER_COMPONENT}"
    deadline = time.monotonic() + timeout
    while True:
        pods = core.list_pod_for_all_namespaces(label_selector=selector).items
        if not pods:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the chart hub's pods stay: {[p.metadata.name for p in pods]}")
        for pod in pods:
            if pod.metadata.deletion_timestamp is None:
                core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace,
                                           grace_period_seconds=0)
        time.sleep(1)
