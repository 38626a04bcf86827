"""What stands in for the pod network of the hub deployed from the z2jh chart
(:mod:`.chart_hub`): there is none here, so every container port a Service of the chart
targets listens on a local port of the test run's own (:func:`local_ports`), the
Service environment variables the kubelet gives a pod (``enableServiceLinks``) name
those ports on 127.0.0.1 (:func:`service_env`), the Services' DNS names resolve to
127.0.0.1 in the pods' ``/etc/hosts`` (:func:`hosts_file`), and a URL of a Service
maps to its local address (:func:`service_addresses`), as cluster DNS and kube-proxy
would route it.

The hub's managed services listen where their ``url`` says. Those on a port of the hub
Service (``hub.service.extraPorts`` in helm-values/values.yaml: the gpu-jobs service's
10101) are moved to its local port by :data:`SERVICE_PORTS_CONFIG`, a ``hub.extraConfig``
entry of the tests' own values file, so that two test runs on one machine do not
collide. On AKS the local and the Service's port are the same: the entry changes
nothing there.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .. import z2jh_chart
from .conftest import PORT_OFFSET
from .ports import CHART_LOCAL_SPAN, chart_local_port

NAMESPACE = z2jh_chart.RELEASE_NAMESPACE
#: the last ``hub.extraConfig`` entry (it sorts after the values' ``00-...``): a hub
#: service whose URL names a port of the hub Service listens on the local port the
#: kubelet's Service variables give that port (:func:`service_env`); on AKS they are equal
SERVICE_PORTS_CONFIG = """\
from urllib.parse import urlsplit

for _service in c.JupyterHub.services:
    _url = urlsplit(_service.get("url") or "")
    for _port in get_config("hub.service.extraPorts") or []:
        if (_url.hostname or "").split(".")[0] == get_name("hub") and _url.port == _port["port"]:
            _local = get_name_env("hub", "_SERVICE_PORT_" + _port["name"].upper().replace("-", "_"))
            _service["url"] = _url._replace(netloc=f"{_url.hostname}:{_local}").geturl()
"""


@dataclass(frozen=True)
class PortMap:
    """Container port -> the local port it listens on here (no pod network)."""

    ports: dict[int, int]

    def local(self, port: int) -> int:
        return self.ports.get(port, port)


def _container_port(deployment: dict, target) -> int:
    """A Service's ``targetPort`` (number or name) in ``deployment``'s containers."""
    if isinstance(target, int):
        return target
    return next(p["containerPort"] for c in deployment["spec"]["template"]["spec"]["containers"]
                for p in c.get("ports", []) if p.get("name") == target)


def service_env(objects: list[dict], ports: PortMap) -> dict[str, str]:
    """The Service variables the kubelet gives a pod of the namespace (enableServiceLinks),
    each Service on 127.0.0.1 at the local port of the container port it targets."""
    env = {}
    for svc, port, target in _targets(objects):
        prefix = svc["metadata"]["name"].upper().replace("-", "_")
        local = ports.local(target) if target is not None else port["port"]
        if port is svc["spec"]["ports"][0]:
            env[f"{prefix}_SERVICE_HOST"] = "127.0.0.1"
            env[f"{prefix}_SERVICE_PORT"] = str(local)
        if port.get("name"):
            env[f"{prefix}_SERVICE_PORT_{port['name'].upper().replace('-', '_')}"] = str(local)
    return env


def _dns_names(svc: dict) -> list[str]:
    name = svc["metadata"]["name"]
    return [name, f"{name}.{NAMESPACE}", f"{name}.{NAMESPACE}.svc",
            f"{name}.{NAMESPACE}.svc.cluster.local"]


def hosts_file(objects: list[dict]) -> str:
    """/etc/hosts of the pod's namespace: the host's, and every Service's DNS names."""
    names = [n for svc in objects if svc["kind"] == "Service" for n in _dns_names(svc)]
    return Path("/etc/hosts").read_text() + f"\n127.0.0.1 {' '.join(names)}\n"


def _targets(objects: list[dict]):
    """(Service, its port, the container port it targets, or None without a pod)."""
    deployments = [o for o in objects if o["kind"] == "Deployment"]
    for svc in (o for o in objects if o["kind"] == "Service"):
        selector = svc["spec"].get("selector") or {}
        target = next((d for d in deployments if selector.items()
                       <= d["spec"]["template"]["metadata"]["labels"].items()), None)
        for port in svc["spec"]["ports"]:
            yield svc, port, (_container_port(target, port.get("targetPort", port["port"]))
                              if target else None)


def local_ports(objects: list[dict]) -> PortMap:
    """Every container port a Service targets, on a port of this test run's own."""
    targets = {p for _, _, p in _targets(objects) if p is not None}
    assert all(p % 1000 < CHART_LOCAL_SPAN for p in targets), \
        f"a container port outside the run's span (tests/integration/ports.py): {targets}"
    ports = {p: chart_local_port(p, PORT_OFFSET) for p in targets}
    assert len(set(ports.values())) == len(ports), f"local ports collide: {ports}"
    return PortMap(ports)


def service_addresses(objects: list[dict], ports: PortMap) -> dict[str, int]:
    """``host:port`` of every Service's DNS names and ports -> the local port behind it."""
    return {f"{name}:{port['port']}": ports.local(target if target is not None else port["port"])
            for svc, port, target in _targets(objects) for name in _dns_names(svc)}
