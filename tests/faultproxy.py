"""A fault-injecting HTTPS proxy on loopback, between the hub and the real kube-apiserver.

The hub's kubeconfig points at the proxy (:meth:`FaultProxy.kubeconfig`: the hub's own,
with only the server address changed). The proxy terminates TLS with a serving
certificate issued from the dev cluster's CA (the one the kubeconfig already trusts)
and forwards every request to the real API server with the caller's headers, bearer
token included: the API server sees the hub's ServiceAccount, so the hub's RBAC still
applies. The proxy holds no credential of its own.

It records every request (:attr:`FaultProxy.log`: LIST, WATCH or the HTTP method, the
collection it names, the answer's status) and injects faults into the watches of one
collection, the way load balancers and API servers cut them:

- :meth:`FaultProxy.reset`: the live watch connections are reset (the client's socket
  is aborted mid-stream);
- :meth:`FaultProxy.gone_event`: each live watch gets an ``ERROR`` event with a ``410
  Gone`` Status, then its end, as an API server ends a watch whose resourceVersion is
  too old;
- :meth:`FaultProxy.gone_next_watch`: the next watch request is answered ``HTTP 410``
  with that Status.

While the API server is down (connection refused), each request's connection is
dropped, as a load balancer without a backend does.
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import aiohttp
import yaml
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from jupyterhub_gpu.devcluster import pki

#: what a request names: (resource, namespace); namespace None for a cluster-wide one
Key = tuple[str, "str | None"]
GONE = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "too old resource version (injected by the fault proxy)",
        "reason": "Expired", "code": 410}
_HOP = {"host", "connection", "keep-alive", "transfer-encoding", "content-length",
        "accept-encoding", "upgrade", "proxy-connection", "te", "trailer"}


def collection(path: str) -> Key | None:
    """The collection a request path names (``/api/v1/namespaces/ns/pods`` ->
    ``("pods", "ns")``, ``/api/v1/nodes`` -> ``("nodes", None)``); None for one object
    or a subresource."""
    parts = path.strip("/").split("/")
    if parts[0] == "api":
        rest = parts[2:]
    elif parts[0] == "apis":
        rest = parts[3:]
    else:
        return None
    if len(rest) == 3 and rest[0] == "namespaces":
        return rest[2], rest[1]
    if len(rest) == 1:
        return rest[0], None
    return None


@dataclass
class Request:
    """One request the proxy saw: ``verb`` LIST, WATCH, or the HTTP method."""

    verb: str
    key: Key | None
    path: str
    at: float = field(default_factory=time.monotonic)
    status: int | None = None  # None while under way; 0: the API server was unreachable
    client: int | None = None  # the pid of the process that sent it, if it is tracked


@dataclass(eq=False)
class _Watch:
    key: Key
    client: int | None
    transport: asyncio.Transport
    fault: asyncio.Future


class FaultProxy:
    """Start with ``await FaultProxy.start(cluster_server, pki_dir, workdir)``."""

    def __init__(self, upstream: str, client_ssl: ssl.SSLContext):
        self.upstream = upstream.rstrip("/")
        self.log: list[Request] = []
        self.url = ""
        self._client_ssl = client_ssl
        self._watches: set[_Watch] = set()
        self._gone_next: set[tuple[Key, int | None]] = set()
        self._family: tuple[float, list[int]] = (0.0, [])
        self._session: aiohttp.ClientSession | None = None
        self._runner: web.AppRunner | None = None
        self.root_pid: int | None = None  # requests from it and its children get a pid

    @classmethod
    async def start(cls, upstream: str, pki_dir: Path, workdir: Path) -> "FaultProxy":
        paths = pki.PkiPaths(pki_dir)
        proxy = cls(upstream, ssl.create_default_context(cafile=str(paths.ca_crt)))
        await proxy._serve(_serving_context(paths, workdir))
        return proxy

    async def _serve(self, server_ssl: ssl.SSLContext) -> None:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=self._client_ssl),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=5), auto_decompress=False)
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=server_ssl)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"https://127.0.0.1:{port}"

    async def close(self) -> None:
        for w in list(self._watches):
            w.transport.abort()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    def kubeconfig(self, of: Path, target: Path) -> Path:
        """``of`` (a kubeconfig of the dev cluster) with its server replaced by the proxy."""
        config = yaml.safe_load(of.read_text())
        for cluster in config["clusters"]:
            cluster["cluster"]["server"] = self.url
        target.write_text(yaml.safe_dump(config, sort_keys=False))
        target.chmod(0o600)
        return target

    # -- faults -----------------------------------------------------------------------

    def live_watches(self, key: Key) -> int:
        return sum(1 for w in self._watches if w.key == key)

    def watchers(self, key: Key) -> set[int | None]:
        """The pids of the processes watching ``key`` now."""
        return {w.client for w in self._watches if w.key == key}

    def reset(self, key: Key) -> int:
        """Reset the live watch connections of ``key``; how many there were."""
        return self._fault(key, "reset")

    def gone_event(self, key: Key) -> int:
        """Send each live watch of ``key`` a 410 ERROR event and end it; how many."""
        return self._fault(key, "gone")

    def gone_next_watch(self, key: Key) -> int:
        """Answer the next watch request of ``key`` of each process watching it now with
        HTTP 410; how many processes."""
        armed = {(key, client) for client in self.watchers(key)}
        self._gone_next |= armed
        return len(armed)

    def _fault(self, key: Key, what: str) -> int:
        hit = [w for w in self._watches if w.key == key and not w.fault.done()]
        for w in hit:
            w.fault.set_result(what)
        return len(hit)

    # -- what it saw --------------------------------------------------------------------

    def requests(self, key: Key, since: float = 0.0, client: int | None = None) -> list[Request]:
        """The requests for ``key`` from ``since`` on (of the ``client`` pid, if given)."""
        return [r for r in self.log if r.key == key and r.at >= since
                and (client is None or r.client == client)]

    def _client(self, request: web.Request) -> int | None:
        peer = request.transport.get_extra_info("peername") if request.transport else None
        if self.root_pid is None or not peer:
            return None
        if time.monotonic() - self._family[0] > 5:  # the hub starts its services
            self._family = (time.monotonic(), _family(self.root_pid))
        return socket_owner(peer[1], self.url.rsplit(":", 1)[1], self._family[1])

    # -- forwarding ---------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        key = collection(request.path)
        watch = request.query.get("watch", "").lower() in ("true", "1")
        verb = "WATCH" if watch else ("LIST" if key and request.method == "GET"
                                      else request.method)
        seen = Request(verb, key, request.path_qs, client=self._client(request))
        self.log.append(seen)
        if watch and (key, seen.client) in self._gone_next:
            self._gone_next.discard((key, seen.client))
            seen.status = 410
            return web.json_response(GONE, status=410)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        try:
            upstream = await self._session.request(
                request.method, self.upstream + request.path_qs, headers=headers,
                data=await request.read() if request.can_read_body else None)
        except (aiohttp.ClientError, OSError):
            seen.status = 0  # the API server is down: drop the connection
            request.transport.abort()
            return web.Response(status=502)
        seen.status = upstream.status
        async with upstream:
            if watch and upstream.status == 200:
                return await self._pump(request, upstream, key, seen.client)
            body = await upstream.read()
            return web.Response(status=upstream.status, body=body,
                                headers=_answer_headers(upstream))

    async def _pump(self, request: web.Request, upstream: aiohttp.ClientResponse,
                    key: Key, client: int | None) -> web.StreamResponse:
        """Copy a watch stream line by line until it ends or a fault cuts it."""
        answer = web.StreamResponse(status=200, headers=_answer_headers(upstream))
        await answer.prepare(request)
        live = _Watch(key, client, request.transport,
                      asyncio.get_running_loop().create_future())
        self._watches.add(live)
        try:
            while True:
                line = asyncio.ensure_future(upstream.content.readline())
                line.add_done_callback(_retrieved)
                await asyncio.wait({line, live.fault}, return_when=asyncio.FIRST_COMPLETED)
                if live.fault.done():
                    line.cancel()
                    break
                if not line.result():
                    return answer  # the API server ended it (its timeout, or it stopped)
                await answer.write(line.result())
            if live.fault.result() == "reset":
                request.transport.abort()
                return answer
            await answer.write(json.dumps({"type": "ERROR", "object": GONE}).encode() + b"\n")
            await answer.write_eof()
            return answer
        except (aiohttp.ClientError, ConnectionError, asyncio.CancelledError):
            request.transport.abort() if request.transport else None
            raise
        finally:
            self._watches.discard(live)


def _family(root: int) -> list[int]:
    """``root`` and every process below it."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    found, todo = [root], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def socket_owner(port: int, server_port: str, candidates: list[int]) -> int | None:
    """The pid among ``candidates`` whose TCP socket on local ``port`` is connected to
    ``server_port`` (from /proc: the client of one proxied connection)."""
    inode = None
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if (int(fields[1].rsplit(":", 1)[1], 16) == port
                    and int(fields[2].rsplit(":", 1)[1], 16) == int(server_port)):
                inode = fields[9]
    if inode is None:
        return None
    link = f"socket:[{inode}]"
    for pid in candidates:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == link:
                    return pid
            except OSError:
                continue
    return None


def _retrieved(future: asyncio.Future) -> None:
    """Mark a read's outcome as seen (a fault may have overtaken it)."""
    if not future.cancelled():
        future.exception()


def _answer_headers(upstream: aiohttp.ClientResponse) -> dict[str, str]:
    return {k: v for k, v in upstream.headers.items() if k.lower() not in _HOP}


def _serving_context(paths: pki.PkiPaths, workdir: Path) -> ssl.SSLContext:
    """A TLS context with a serving cert for 127.0.0.1 issued by the cluster's CA."""
    ca = SimpleNamespace(
        cert=x509.load_pem_x509_certificate(paths.ca_crt.read_bytes()),
        key=serialization.load_pem_private_key(paths.ca_key.read_bytes(), password=None))
    issued = pki.issue(ca, "jupyterhub-gpu-fault-proxy", dns=("localhost",),
                       ips=(pki.LOOPBACK,))
    crt, key = workdir / "faultproxy.crt", workdir / "faultproxy.key"
    crt.write_bytes(pki.cert_pem(issued.cert))
    key.write_bytes(pki.key_pem(issued.key))
    key.chmod(0o600)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(crt, key)
    return context
