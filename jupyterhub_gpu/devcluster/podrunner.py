"""The demo's stand-in kubelet for notebook pods and training Jobs' pods.

kwok marks pods Running but runs no containers. For every running single-user pod,
the runner starts a real ``jupyterhub-singleuser`` (with JupyterLab) with that pod's environment,
listening on the pod's IP (kwok hands out loopback pod IPs in the dev cluster) and
port, which is where KubeSpawner tells the hub to look. When the pod is being deleted
the runner does what a kubelet does: it runs the container's preStop exec hook (with
the server's environment), then sends SIGTERM, then SIGKILL once the pod's grace
period is over.

The servers run from this Python environment, as if it were the notebook image: the
package's data files (the Jupyter Server extensions' config, JupyterLab's settings, the
prebuilt GPU status extension), which pip installs into the image but not into an
editable install, are copied into a prefix of the runner's own
(:func:`jupyterhub_gpu.datafiles.lay_out`) that the servers' Jupyter paths point at.

A training Job's pod without kwok's run-for annotation, and a GPU kernel's pod (its
kernel launcher, on the pod's IP), gets its container's command
run as a real process (:mod:`jupyterhub_gpu.devcluster.jobprocess`: its volumes as
directories of the runner's), and its exit code written back on the pod
(:data:`~jupyterhub_gpu.devcluster.contract.EXIT_CODE_ANNOTATION`), which kwok turns into the
pod's result.

One watch over all namespaces serves every pod.

The processes run this Python, with the runner's ``PYTHONPATH`` if it has one (a
checkout run without installing it): the image is this environment as the runner sees
it, so a test run from a branch runs that branch's code in its pods.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import datafiles
from ..contract import (COMPONENT_LABEL, ENV_RUN_DIR, ENV_SERVICE_URL, POD_IP_FIELD, SINGLEUSER_COMPONENT, USERNAME_KEY)
from .contract import EXIT_CODE_ANNOTATION
from .jobprocess import RUN_COMPONENTS, JobProcess, job_process, result_annotation
from .procs import describe

#: the pods the runner plays the kubelet of: notebooks (KubeSpawner's default
#: component), training Jobs' pods and GPU kernels' pods
SELECTOR = f"{COMPONENT_LABEL} in ({','.join((SINGLEUSER_COMPONENT, *RUN_COMPONENTS))})"
MAX_GRACE_SECONDS = 30
log = logging.getLogger("jupyterhub_gpu.podrunner")


@dataclass(frozen=True)
class ServerProcess:
    """What to run for one pod (pure data, built from the pod manifest)."""

    key: str  # namespace/name/uid
    user: str
    url: str
    env: dict[str, str]
    grace_seconds: int
    prestop: tuple[str, ...] = ()  # the container's preStop exec command, if any


def _container_port(container: dict) -> int:
    ports = container.get("ports") or [{}]
    return int(ports[0].get("containerPort", 8888))


_FIELD = re.compile(r"^metadata\.(annotations|labels)\['([^']+)'\]$")


def _env_value(entry: dict, meta: dict, status: dict | None = None) -> str | None:
    """An env entry's value as the kubelet resolves it when it starts the container:
    a plain ``value``, or a Downward API ``fieldRef`` to an annotation, a label or the
    pod's address."""
    if "value" in entry:
        return entry["value"]
    path = ((entry.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath", "")
    if path == POD_IP_FIELD:
        return (status or {}).get("podIP")
    found = _FIELD.match(path)
    return (meta.get(found.group(1)) or {}).get(found.group(2), "") if found else None


def pod_env(pod: dict) -> dict[str, str]:
    """The first container's environment as the kubelet resolves it."""
    meta, container = pod["metadata"], pod["spec"]["containers"][0]
    values = {e["name"]: _env_value(e, meta, pod.get("status")) for e in container.get("env", [])}
    return {name: value for name, value in values.items() if value is not None}


def server_process(pod: dict) -> ServerProcess | None:
    """The process a running pod needs, or None when it should have none."""
    meta, spec, status = pod["metadata"], pod["spec"], pod.get("status") or {}
    labels = meta.get("labels") or {}
    if labels.get(COMPONENT_LABEL, SINGLEUSER_COMPONENT) != SINGLEUSER_COMPONENT:
        return None
    if meta.get("deletionTimestamp") or status.get("phase") != "Running":
        return None
    ip = status.get("podIP")
    if not ip:
        return None
    container = spec["containers"][0]
    url = f"http://{ip}:{_container_port(container)}/"
    env = pod_env(pod)
    env[ENV_SERVICE_URL] = url  # listen on the pod IP only
    grace = min(int(spec.get("terminationGracePeriodSeconds", 30)), MAX_GRACE_SECONDS)
    user = meta.get("annotations", {}).get(USERNAME_KEY, meta["name"])
    key = f"{meta['namespace']}/{meta['name']}/{meta['uid']}"
    hook = ((container.get("lifecycle") or {}).get("preStop") or {}).get("exec") or {}
    return ServerProcess(key, user, url, env, grace, tuple(hook.get("command") or ()))


def home_of(workdir: Path, user: str) -> Path:
    """A notebook server's home (``$HOME`` and its root directory) under the runner's
    workdir, as a user's home volume is in the pod."""
    return workdir / "home" / user


def _python_path() -> dict[str, str]:
    """The runner's ``PYTHONPATH``, for the processes it runs (the image's code)."""
    return {"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {}


def _kill(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:  # gone already
        pass


async def _terminate(proc: asyncio.subprocess.Process, grace: float) -> None:
    """SIGTERM to the process group, SIGKILL if it is still there after ``grace``."""
    if proc.returncode is not None:
        return
    _kill(proc.pid, signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), grace)
    except asyncio.TimeoutError:
        log.warning("%s did not stop within %.0f s of SIGTERM: SIGKILL", describe(proc.pid),
                    grace)
        _kill(proc.pid, signal.SIGKILL)
        await proc.wait()


class PodRunner:
    """Keeps one ``jupyterhub-singleuser`` per running single-user pod, and one
    process per running Job pod it runs."""

    def __init__(self, kubeconfig: Path, workdir: Path):
        self.kubeconfig, self.workdir = kubeconfig, workdir
        self.procs: dict[str, asyncio.subprocess.Process] = {}
        # what each process was started for
        self.running: dict[str, ServerProcess | JobProcess] = {}
        self._image: Path | None = None
        self._v1: Any = None  # the CoreV1Api of run(), to report a Job process's exit
        self._waiters: set[asyncio.Task] = set()
        self._exited: set[str] = set()  # Job pods whose process ended by itself
        self._ending: set[asyncio.Task] = set()  # processes being stopped

    @property
    def image(self) -> Path:
        """The package's data files laid out as the image has them (once per runner)."""
        if self._image is None:
            self._image = datafiles.lay_out(self.workdir / "image")
        return self._image

    def _environment(self, want: ServerProcess) -> dict[str, str]:
        """The container's environment, as the image and the pod spec give it."""
        home = home_of(self.workdir, want.user)
        bin_dir = Path(sys.executable).parent
        image = self.image
        return {"PATH": f"{bin_dir}:{os.environ.get('PATH', '')}", "HOME": str(home),
                **_python_path(),
                "LANG": "C.UTF-8", "JUPYTER_CONFIG_PATH": str(image / "etc" / "jupyter"),
                "JUPYTER_PATH": str(image / "share" / "jupyter"),
                # a run dir of its own, as a container's /tmp is
                ENV_RUN_DIR: str(self.workdir / "run" / want.key.replace("/", "_")),
                **want.env}

    def _log_file(self, key: str) -> Path:
        logs = self.workdir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        return logs / f"{key.replace('/', '_')}.log"

    async def _start(self, want: ServerProcess) -> None:
        home = home_of(self.workdir, want.user)
        home.mkdir(parents=True, exist_ok=True)
        bin_dir = Path(sys.executable).parent
        env = self._environment(want)
        settings = self.image / "share" / "jupyter" / "lab" / "settings"
        argv = [str(bin_dir / "jupyterhub-singleuser"), f"--ServerApp.root_dir={home}",
                f"--LabApp.app_settings_dir={settings}"]
        if os.geteuid() == 0:  # containers run as jovyan; here we may be root (CI is)
            argv.append("--allow-root")
        with open(self._log_file(want.key), "ab") as out:
            proc = await asyncio.create_subprocess_exec(
                *argv, env=env, cwd=home, stdout=out, stderr=out, start_new_session=True)
        self.procs[want.key] = proc
        self.running[want.key] = want
        log.info("started jupyterhub-singleuser for %s at %s (pid %s)", want.key, want.url,
                 proc.pid)

    def _job_environment(self, want: JobProcess) -> dict[str, str]:
        """A Job container's environment: this Python as the image's, then the pod's."""
        bin_dir = Path(sys.executable).parent
        return {"PATH": f"{bin_dir}:{os.environ.get('PATH', '')}", "LANG": "C.UTF-8",
                **_python_path(), **want.env}

    async def _start_job(self, want: JobProcess) -> None:
        for mount in want.mounts:
            (self.workdir / mount.host_dir).mkdir(parents=True, exist_ok=True)
        cwd = self.workdir / want.cwd
        cwd.mkdir(parents=True, exist_ok=True)
        with open(self._log_file(want.key), "ab") as out:
            proc = await asyncio.create_subprocess_exec(
                *want.argv, env=self._job_environment(want), cwd=cwd, stdout=out,
                stderr=out, start_new_session=True)
        self.procs[want.key] = proc
        self.running[want.key] = want
        waiter = asyncio.create_task(self._report_exit(want.key, proc))
        self._waiters.add(waiter)
        waiter.add_done_callback(self._waiters.discard)
        log.info("started %s for Job pod %s (pid %s)", want.argv[:1], want.key, proc.pid)

    async def _report_exit(self, key: str, proc: asyncio.subprocess.Process) -> None:
        """Once the process ends by itself, its exit code on the pod (for kwok)."""
        code = await proc.wait()
        if self.procs.get(key) is not proc:
            return  # stopped by us: the pod is going anyway
        self._exited.add(key)
        self.procs.pop(key, None)
        self.running.pop(key, None)
        namespace, name, _ = key.split("/")
        patch = {"metadata": {"annotations": {EXIT_CODE_ANNOTATION: result_annotation(code)}}}
        log.info("the process of Job pod %s exited %s", key, code)
        if self._v1 is not None:
            try:
                await self._v1.patch_namespaced_pod(name, namespace, patch)
            except Exception as e:  # gone meanwhile
                log.warning("could not record the exit of %s: %s", key, e)

    async def _prestop(self, want: ServerProcess, grace: float) -> None:
        """The preStop exec hook, as the kubelet runs it: in the container (here, with
        its environment and home), within the grace period, its failure only logged."""
        home = home_of(self.workdir, want.user)
        with open(self._log_file(want.key), "ab") as out:
            hook = await asyncio.create_subprocess_exec(
                *want.prestop, env=self._environment(want), cwd=home, stdout=out, stderr=out,
                start_new_session=True)
            try:
                code = await asyncio.wait_for(hook.wait(), grace)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                _kill(hook.pid, signal.SIGKILL)
                await hook.wait()
                raise
        if code:
            log.warning("the preStop hook of %s exited %s", want.key, code)

    async def _stop(self, key: str, grace: int = MAX_GRACE_SECONDS) -> None:
        """preStop hook, SIGTERM, SIGKILL after the grace period. The stop runs as a task
        of its own: when the runner is cancelled meanwhile (the demo stopping), the
        server still goes, within the same grace, while :meth:`run` stops the others."""
        proc, want = self.procs.pop(key, None), self.running.pop(key, None)
        if proc is None:
            return
        ending = asyncio.create_task(self._end(key, proc, want, grace))
        self._ending.add(ending)
        ending.add_done_callback(self._ending.discard)
        await asyncio.shield(ending)

    async def _end(self, key: str, proc: asyncio.subprocess.Process,
                   want: ServerProcess | JobProcess | None, grace: int) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        try:
            if (proc.returncode is None and isinstance(want, ServerProcess)
                    and want.prestop):
                await self._prestop(want, grace)
        except asyncio.TimeoutError:
            log.warning("the preStop hook of %s ran out of its grace period", key)
        finally:
            await _terminate(proc, max(1.0, deadline - loop.time()))
        log.info("stopped the process of %s", key)

    def _wanted(self, pod: dict) -> ServerProcess | JobProcess | None:
        labels = pod["metadata"].get("labels") or {}
        if labels.get(COMPONENT_LABEL) in RUN_COMPONENTS:
            if (pod["metadata"].get("annotations") or {}).get(EXIT_CODE_ANNOTATION):
                return None  # it ran: kwok ends the pod
            return job_process(pod, pod_env(pod), str(self.workdir))
        return server_process(pod)

    async def handle(self, event_type: str, pod: dict) -> None:
        want = self._wanted(pod) if event_type != "DELETED" else None
        meta = pod["metadata"]
        key = f"{meta['namespace']}/{meta['name']}/{meta['uid']}"
        if isinstance(want, JobProcess) and key not in self.procs:
            if key not in self._exited:  # a pod's process runs once (restartPolicy Never)
                await self._start_job(want)
        elif want is not None and key not in self.procs:
            await self._start(want)
        elif want is None and key in self.procs:
            grace = int(pod["spec"].get("terminationGracePeriodSeconds", 30))
            await self._stop(key, min(grace, MAX_GRACE_SECONDS))

    async def run(self) -> None:
        """Watch the pods until cancelled; stop every process on the way out."""
        import aiohttp
        from kubernetes_asyncio import client, config, watch

        api = await config.new_client_from_config(config_file=str(self.kubeconfig))
        v1 = self._v1 = client.CoreV1Api(api)
        try:
            while True:
                try:
                    await self._watch_once(v1, watch.Watch())
                except client.ApiException as e:  # e.g. 410 Gone: list again
                    log.warning("pod watch ended (%s); listing again", e.status)
                    await asyncio.sleep(1)
                except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as e:
                    # the API server restarts or is down: a kubelet keeps its pods
                    # running and lists again once it is back
                    log.warning("pod watch lost the API server (%r); listing again", e)
                    await asyncio.sleep(1)
        finally:
            await self.stop_all()
            self._v1 = None
            await api.close()

    async def stop_all(self) -> None:
        """Stop every process at once, those already being stopped included: the runner
        is gone within one grace period (at most :data:`MAX_GRACE_SECONDS`)."""
        await asyncio.gather(*(self._stop(k) for k in list(self.procs)), *self._ending,
                             return_exceptions=True)
        await asyncio.gather(*self._waiters, return_exceptions=True)

    async def _watch_once(self, v1: Any, w: Any) -> None:
        listing = await v1.list_pod_for_all_namespaces(label_selector=SELECTOR)
        raw = v1.api_client.sanitize_for_serialization(listing)
        for pod in raw["items"]:
            await self.handle("ADDED", pod)
        seen = {f"{p['metadata']['namespace']}/{p['metadata']['name']}/{p['metadata']['uid']}"
                for p in raw["items"]}
        for key in set(self.procs) - seen:
            await self._stop(key)
        async for event in w.stream(v1.list_pod_for_all_namespaces,
                                    label_selector=SELECTOR,
                                    resource_version=raw["metadata"]["resourceVersion"],
                                    timeout_seconds=300):
            await self.handle(event["type"], event["raw_object"])
