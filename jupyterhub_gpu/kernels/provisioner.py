"""The kernel provisioner of GPU kernels: Jupyter's side of docs/kernels.md, "The
protocol".

A kernelspec names it (``metadata.kernel_provisioner.provisioner_name``:
:data:`~jupyterhub_gpu.contract.KERNEL_PROVISIONER_NAME`, the entry point in the group
``jupyter_client.kernel_provisioners``) with the GPU profile in its config
(:mod:`jupyterhub_gpu.kernels.specs` writes one per GPU profile the user may use).
Jupyter's kernel manager then calls it as it calls the local provisioner, so Jupyter
Server's kernel API, and every front end on it, works unchanged:

* :meth:`~GPUKernelProvisioner.launch_kernel` makes a key pair for this launch, waits
  for the kernel's report on the server's one response port
  (:class:`~jupyterhub_gpu.kernels.response.ResponseListener`, shared by every launch
  of the process), asks the ``gpu-kernels`` service for the kernel's pod with the
  server's own API token, follows the pod through the queue until it runs, and takes
  the report only from the pod's address; the connection information is the pod's
  address, the fixed ports and the key the kernel made
  (:meth:`~jupyterhub_gpu.kernels.connect.Connection.info`);
* while it waits, it keeps where the pod is (the service's words: queued, at which
  place; a machine starting; ...) in this server's record of its GPU kernels
  (:data:`jupyterhub_gpu.kernels.states.STATES`), which the GPU status item shows;
* :meth:`~GPUKernelProvisioner.poll` and ``wait`` ask the service for the pod's phase.
  A pod the platform takes back (being deleted with the service saying why: a
  preemption, an eviction, its node going away; or gone without this server deleting
  it) is noted in the record at once; once it is gone (its kernel's checkpoint
  callbacks ran on its SIGTERM meanwhile, undisturbed), the kernel is handed to the
  server to shut down, not restart
  (:meth:`~jupyterhub_gpu.kernels.states.KernelStates.end`), and until that shutdown
  begins the poll says it lives, so that Jupyter's restarter does not queue a new pod;
* ``kill``, ``terminate`` and a SIGTERM or SIGKILL delete the pod (saying so to the
  service when the server released the kernel idle: :attr:`GPUKernelProvisioner.idle_release`,
  for the usage ledger); an interrupt is a message on the control channel (the
  kernelspec's ``interrupt_mode``), which the kernel manager sends itself;
* ``cleanup`` deletes the pod, if still there; for a restart it waits until the pod is
  gone, since the new pod of the same kernel id has the same name.

The provisioner holds no Kubernetes credentials: only the server's JupyterHub token
(``JUPYTERHUB_API_TOKEN``), the service's URL (``JUPYTERHUB_GPU_KERNELS_URL``) and the
server pod's own address (``JUPYTERHUB_GPU_POD_IP``, from the Downward API), all of
which :func:`jupyterhub_gpu.kernels.config.add_kernels_service` gives every server.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from datetime import datetime, timezone
from typing import Any, Callable

from jupyter_client.provisioning.provisioner_base import KernelProvisionerBase
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest
from traitlets import Float, Integer, Unicode, default

from ..contract import (ENV_API_TOKEN, ENV_KERNELS_URL, ENV_POD_IP, KERNEL_IDLE_RELEASE,
                        KERNEL_RESPONSE_PORT, KERNEL_STOP_QUERY, KERNELS_API_PATH,
                        KERNELS_PORT, KERNELS_SERVICE_NAME, POD_IP_FIELD)
from ..logtext import shown
from .connect import ServerKey
from .response import Received, ResponseListener
from .states import STATES

#: the pod phases in which the kernel has ended, and the exit code each stands for
ENDED = {"Succeeded": 0, "Failed": 1}
#: the longest an HTTP call to the service may take (seconds)
REQUEST_TIMEOUT = 30.0
#: how long a restart waits for the old pod to go (its grace period, and the API's)
RESTART_WAIT_SECONDS = 60.0
#: how long after its start the service may not know the kernel's pod yet (its watch)
UNSEEN_GRACE_SECONDS = 30.0
#: how long a deletion the service did not answer (the hub restarting, the service
#: with it) is tried again in the background, in seconds; the first wait before
#: another try (doubling, at most :data:`DELETE_RETRY_MAX_WAIT`)
DELETE_RETRY_SECONDS = 600.0
DELETE_RETRY_FIRST_WAIT = 2.0
DELETE_RETRY_MAX_WAIT = 60.0


def _forget_retry(kernel_id: str) -> Callable[[asyncio.Task], None]:
    def forget(task: asyncio.Task) -> None:
        if _retrying.get(kernel_id) is task:
            del _retrying[kernel_id]
    return forget


class KernelStartFailed(RuntimeError):
    """A GPU kernel that did not start, in words for the notebook."""


_listeners: dict[tuple[str, int], ResponseListener] = {}
#: the deletions being tried again, by kernel id (held here, so none is collected)
_retrying: dict[str, asyncio.Task] = {}
_listeners_lock: asyncio.Lock | None = None


async def shared_listener(host: str, port: int) -> ResponseListener:
    """The process's response listener on ``host:port``, started on first use."""
    global _listeners_lock
    if _listeners_lock is None:
        _listeners_lock = asyncio.Lock()
    async with _listeners_lock:
        listener = _listeners.get((host, port))
        if listener is None:
            listener = ResponseListener(host, port)
            await listener.start()
            _listeners[(host, port)] = listener
        return listener


class GPUKernelProvisioner(KernelProvisionerBase):
    """A kernel in a pod of a GPU profile, made by the ``gpu-kernels`` hub service."""

    profile = Unicode(
        "", config=True,
        help="The GPU profile the kernel runs in (its slug in the platform spec), as "
             "the kernelspec's provisioner config names it, e.g. ``t4-shared``.")
    service_url = Unicode(
        config=True,
        help=f"The {KERNELS_SERVICE_NAME} service's URL, its prefix included, e.g. "
             f"``http://hub.jupyterhub.svc.cluster.local:{KERNELS_PORT}/services/"
             f"{KERNELS_SERVICE_NAME}/`` (default: ${ENV_KERNELS_URL}, which the hub sets "
             "in every server).")
    server_ip = Unicode(
        config=True,
        help="This server pod's address, where the kernel sends its connection back, "
             f"e.g. ``10.244.1.10`` (default: ${ENV_POD_IP}, the Downward API's "
             f"{POD_IP_FIELD}).")
    response_port = Integer(
        KERNEL_RESPONSE_PORT, config=True,
        help=f"The server's port for kernels' reports, e.g. {KERNEL_RESPONSE_PORT} (the "
             "kernel's NetworkPolicies open this one).")
    launch_timeout = Float(
        3600.0, config=True,
        help="Seconds a start may wait for the kernel (the queue, a machine's start, "
             "the image's pull), e.g. 1800; then the pod is deleted and the start fails.")
    poll_interval = Float(
        1.0, config=True,
        help="Seconds between two questions to the service about the pod, e.g. 2.")

    @default("service_url")
    def _service_url_default(self) -> str:
        return os.environ.get(ENV_KERNELS_URL, "")

    @default("server_ip")
    def _server_ip_default(self) -> str:
        return os.environ.get(ENV_POD_IP, "")

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self.pod: dict | None = None  # the service's view of the kernel's pod
        self.pid: int | None = None
        #: the server releases this kernel, idle (:func:`.server_ext.release_idle`):
        #: its pod's deletion says so
        self.idle_release = False
        #: when the kernel last became ready (its pod running, the kernel reporting), in
        #: UTC; None while it is queued or starting: its idle clock starts no earlier
        self.ready_at: datetime | None = None
        self._polled: tuple[float, int | None] = (0.0, None)
        self._deleted = False  # this server asked for the pod's deletion
        self._taken = False  # the platform is taking the pod back, or took it
        self._ending = False  # taken back and gone: the server shuts the kernel down

    # -- the service -------------------------------------------------------------------

    def _url(self, kernel: bool = True) -> str:
        if not self.service_url:
            raise KernelStartFailed(f"No GPU kernels here: {ENV_KERNELS_URL} is not set.")
        base = self.service_url.rstrip("/") + "/" + KERNELS_API_PATH
        return f"{base}/{self.kernel_id}" if kernel else base

    async def _call(self, method: str, body: dict | None = None, kernel: bool = True,
                    query: str = "") -> tuple[int, dict]:
        """(status, answer) of one call with the server's token."""
        request = HTTPRequest(
            self._url(kernel) + query, method=method, request_timeout=REQUEST_TIMEOUT,
            headers={"Authorization": f"token {os.environ.get(ENV_API_TOKEN, '')}",
                     "Content-Type": "application/json"},
            body=json.dumps(body) if body is not None else None)
        try:
            response = await AsyncHTTPClient().fetch(request, raise_error=False)
        except (OSError, HTTPClientError) as e:
            raise KernelStartFailed(f"The GPU kernels service did not answer: {e}") from e
        try:
            answer = json.loads(response.body or b"{}")
        except ValueError:
            answer = {}
        return response.code, answer if isinstance(answer, dict) else {}

    async def _view(self) -> dict | None:
        """The pod as the service sees it now, or None once it is gone."""
        status, answer = await self._call("GET")
        if status == 404:
            return None
        if status != 200:
            raise KernelStartFailed(answer.get("error") or f"HTTP {status}")
        return answer

    async def _delete(self) -> None:
        """Ask the service to delete the pod. If it does not answer, the deletion is
        tried again in the background (:data:`DELETE_RETRY_SECONDS`), so that a
        kernel shut down while the hub restarts does not keep its GPU until its server
        stops (the service then deletes the pod of a server gone)."""
        self._deleted = True
        query = (f"?{KERNEL_STOP_QUERY}={KERNEL_IDLE_RELEASE}" if self.idle_release else "")
        try:
            status, answer = await self._call("DELETE", query=query)
        except KernelStartFailed as e:
            if self.kernel_id not in _retrying:
                self.log.warning("Deleting GPU kernel %s: %s; trying again for %d s",
                                 self.kernel_id, e, DELETE_RETRY_SECONDS)
                task = asyncio.ensure_future(self._delete_later(query))
                _retrying[self.kernel_id] = task
                task.add_done_callback(_forget_retry(self.kernel_id))
            return
        self._deleted_said(status, answer)

    def _deleted_said(self, status: int, answer: dict) -> None:
        if status not in (200, 404):
            self.log.warning("Deleting GPU kernel %s: HTTP %s %s", self.kernel_id, status,
                             answer.get("error", ""))

    async def _delete_later(self, query: str) -> None:
        wait, deadline = DELETE_RETRY_FIRST_WAIT, time.monotonic() + DELETE_RETRY_SECONDS
        while time.monotonic() + wait <= deadline:
            await asyncio.sleep(wait)
            try:
                status, answer = await self._call("DELETE", query=query)
            except KernelStartFailed:
                wait = min(wait * 2, DELETE_RETRY_MAX_WAIT)
                continue
            self.log.info("GPU kernel %s: its pod's deletion was asked again: HTTP %s",
                          self.kernel_id, status)
            self._deleted_said(status, answer)
            return
        self.log.error("GPU kernel %s: the GPU kernels service did not answer for %d s; "
                       "its pod goes once this server stops", self.kernel_id,
                       DELETE_RETRY_SECONDS)

    async def _settle_deletion(self) -> None:
        """Before a start of a kernel id whose pod's deletion is still being tried
        again: ask now (the start needs the service anyway), and wait for the pod to
        go, so that no late deletion ends the new pod."""
        task = _retrying.pop(self.kernel_id, None)
        if task is None:
            return
        task.cancel()
        status, answer = await self._call("DELETE")
        self._deleted_said(status, answer)
        if not await self._gone(RESTART_WAIT_SECONDS):
            raise KernelStartFailed("The kernel's earlier pod is still being deleted.")

    async def _gone(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if await self._view() is None:
                return True
            await asyncio.sleep(self.poll_interval)
        return False

    # -- launch ------------------------------------------------------------------------

    async def pre_launch(self, **kwargs: Any) -> dict[str, Any]:
        """No local command: the kernel's pod runs the launcher. ``cmd`` is the
        kernelspec's own, which the kernel manager only logs."""
        if not self.profile:
            raise KernelStartFailed("This kernelspec names no GPU profile.")
        kwargs = await super().pre_launch(**kwargs)
        kwargs["cmd"] = list(self.kernel_spec.argv)
        return kwargs

    async def launch_kernel(self, cmd: list[str], **kwargs: Any) -> dict[str, Any]:
        if not self.server_ip:
            raise KernelStartFailed(f"This server does not know its address ({ENV_POD_IP}).")
        await self._settle_deletion()
        listener = await shared_listener(self.server_ip, self.response_port)
        STATES.launching(self.kernel_id, self.kernel_spec.display_name)
        self._deleted = self._taken = self._ending = False
        self.ready_at = None
        key = ServerKey()
        report = listener.expect(self.kernel_id, key)
        body = {"profile": self.profile, "kernel_id": self.kernel_id,
                "response_address": f"{self.server_ip}:{listener.port}",
                "public_key": key.public_key}
        try:
            status, answer = await self._call("POST", body, kernel=False)
            if status != 201:
                raise KernelStartFailed(answer.get("error") or f"HTTP {status}")
            self.pod = answer
            self.log.info("GPU kernel %s of profile %s: pod %s/%s", self.kernel_id,
                          self.profile, answer.get("namespace"), answer.get("name"))
            received = await asyncio.wait_for(self._report(listener, key, report),
                                              self.launch_timeout)
        except BaseException:
            listener.forget(self.kernel_id)
            STATES.ended(self.kernel_id)  # the start's error says it
            if self.pod is not None:
                await self._delete()
                self.pod = None
            raise
        STATES.ready(self.kernel_id)
        self.ready_at = datetime.now(timezone.utc)
        self.pid = received.connection.pid
        info = received.connection.info(received.address)
        # the key as the kernel manager holds its own (bytes), which it compares with
        self.connection_info = {**info, "key": info["key"].encode()}
        return self.connection_info

    async def _report(self, listener: ResponseListener, key: ServerKey,
                      report: asyncio.Future[Received]) -> Received:
        """The kernel's report, once its pod runs and the report came from the pod's
        address (one from elsewhere is dropped and the launch waits on)."""
        phase, created = None, time.monotonic()
        while True:
            pod = await self._view()
            if pod is None and time.monotonic() - created < UNSEEN_GRACE_SECONDS:
                pass  # the service's watch has not shown the new pod yet
            elif pod is None or pod.get("phase") in ENDED or pod.get("phase") == "Deleting":
                raise KernelStartFailed(f"The GPU kernel's pod ended before it started "
                                        f"({(pod or {}).get('phase', 'deleted')}).")
            else:
                self.pod = pod
                STATES.starting(self.kernel_id, pod.get("stage"))
            pod = self.pod
            if pod.get("phase") != phase:
                phase = pod.get("phase")
                self.log.info("GPU kernel %s: %s", self.kernel_id, phase)
            if report.done() and pod.get("address"):
                received = report.result()
                if received.address == pod["address"]:
                    return received
                self.log.warning("GPU kernel %s: a report from %s, not from its pod (%s), "
                                 "was dropped", self.kernel_id, received.address,
                                 pod["address"])
                report = listener.expect(self.kernel_id, key)
            try:
                await asyncio.wait_for(asyncio.shield(report), self.poll_interval)
            except asyncio.TimeoutError:
                pass

    # -- the running kernel -----------------------------------------------------------

    @property
    def has_process(self) -> bool:
        return self.pod is not None

    async def poll(self) -> int | None:
        """None while the pod is queued, starting, running or going; its exit code
        once it has ended or is gone, except while the server shuts down a kernel the
        platform took back (see the module's docstring) and has not begun yet. Asked
        at most every ``poll_interval``."""
        if self.pod is None:
            return 0
        at, last = self._polled
        if time.monotonic() - at < self.poll_interval:
            return last
        try:
            pod = await self._view()
        except KernelStartFailed as e:
            # the service is restarting or unreachable: as a kubelet keeps its pods
            # while the API server is away, the kernel is what it was last seen as,
            # not ended (Jupyter's restarter would start a new pod every poll)
            self.log.warning("GPU kernel %s: cannot ask about its pod (%s); taking it "
                             "as it was", self.kernel_id, shown(str(e)))
            self._polled = (time.monotonic(), last)
            return last
        code = 0 if pod is None else ENDED.get(pod.get("phase") or "")
        stopped = (pod or {}).get("stopped")
        if not self._deleted and (pod is None or (isinstance(stopped, dict)
                                                  and pod.get("phase") == "Deleting")):
            self._taken_back(stopped.get("words") if isinstance(stopped, dict) else None)
        if self._taken and code is not None and not self._ending:
            self._ending = STATES.end(self.kernel_id)
        if self._ending and not getattr(self.parent, "shutting_down", True):
            code = None
        self._polled = (time.monotonic(), code)
        return code

    def _taken_back(self, how: str | None) -> None:
        """The platform is taking the pod back, or took it: say so, once (``how``: the
        service's words; None: it was gone before anyone saw why)."""
        if self._taken:
            return
        self._taken = True
        self.log.warning("GPU kernel %s: its pod is taken back (%s)", self.kernel_id,
                         shown(how or "gone"))
        STATES.stopped(self.kernel_id, how)

    async def wait(self) -> int | None:
        while True:
            code = await self.poll()
            if code is not None:
                return code
            await asyncio.sleep(self.poll_interval)

    async def send_signal(self, signum: int) -> None:
        """SIGTERM and SIGKILL delete the pod (its kernel gets SIGTERM, then SIGKILL
        after the grace period, from the kubelet); 0 only asks whether it lives. An
        interrupt never comes here (``interrupt_mode: message``)."""
        if signum in (signal.SIGTERM, signal.SIGKILL):
            await self._delete()
        elif signum != 0:
            self.log.warning("GPU kernel %s: signal %s cannot reach a kernel in a pod",
                             self.kernel_id, signum)

    async def kill(self, restart: bool = False) -> None:
        await self._delete()

    async def terminate(self, restart: bool = False) -> None:
        await self._delete()

    async def cleanup(self, restart: bool = False) -> None:
        """Delete the pod if it is still there; for a restart, wait until it is gone
        (the new pod has the same kernel id, so the same name)."""
        listener = _listeners.get((self.server_ip, self.response_port))
        if listener is not None:
            listener.forget(self.kernel_id)
        if self.pod is not None:
            await self._delete()
            if restart and not await self._gone(RESTART_WAIT_SECONDS):
                self.log.warning("GPU kernel %s: its pod is still being deleted",
                                 self.kernel_id)
        if not restart:
            STATES.ended(self.kernel_id)
        self.pod, self.pid, self._polled = None, None, (0.0, None)
        self.idle_release, self.ready_at = False, None
        self._taken = self._ending = False

    def get_stable_start_time(self, recommended: float = 10.0) -> float:
        return max(recommended, self.launch_timeout)

    async def get_provisioner_info(self) -> dict[str, Any]:
        info = await super().get_provisioner_info()
        info.update(pod=self.pod, pid=self.pid, profile=self.profile)
        return info

    async def load_provisioner_info(self, provisioner_info: dict) -> None:
        await super().load_provisioner_info(provisioner_info)
        self.pod, self.pid = provisioner_info.get("pod"), provisioner_info.get("pid")
        self.profile = provisioner_info.get("profile") or self.profile
        if self.pod is not None:  # a running kernel, met again: its idle clock starts now
            self.ready_at = datetime.now(timezone.utc)
