"""``check-bundle`` on the Prometheus URL of the z2jh Helm values.

The culler's GPU-idle rule and the usage page (``hub.extraEnv``, the ``gpu-usage``
container's ``env``) and the JupyterLab status item (``singleuser.extraEnv``) read
``JUPYTERHUB_GPU_PROMETHEUS_URL``. Each one that is set must reach the Prometheus the
admin guide installs: kube-prometheus-stack's Service ``<fullname>-prometheus`` in the
release's namespace, on its port (:func:`~.monitoring.prometheus_url`), or the URL the
admin gives instead (``check-bundle --prometheus-url``). A URL that does not silently
turns GPU-idle culling and the GPU figures off. Leaving the variable out is allowed
(culling on activity alone, as the values' comment says).
"""

from __future__ import annotations

from typing import Any, Iterator
from urllib.parse import urlsplit

from ..contract import ENV_PROMETHEUS_URL, USAGE_SERVICE_NAME
from .checkhelm import Values, get, merge_values, source
from .diff import MISSING, Drift
from .monitoring import KPS_NAMESPACE, KPS_RELEASE

#: the suffixes under which the cluster's DNS answers for ``<service>.<namespace>``
#: (the shorter forms through the pod's search domains)
_SERVICE_SUFFIXES = (".svc.cluster.local", ".svc")
WHY_KPS = (f"kube-prometheus-stack, installed as release {KPS_RELEASE} in namespace "
           f"{KPS_NAMESPACE} (docs/admin-guide.md, step 6), serves its Prometheus there")
WHY_GIVEN = "the Prometheus URL given to check-bundle"


def _env(env: Any, name: str) -> Any:
    """The value of ``name`` in a z2jh ``extraEnv`` (a mapping of names to values or
    to EnvVar bodies) or a container's ``env`` (a list of EnvVars); MISSING if unset,
    None if it comes from elsewhere (``valueFrom``)."""
    if isinstance(env, dict):
        value = env.get(name, MISSING)
    elif isinstance(env, list):
        value = next((e for e in env if isinstance(e, dict) and e.get("name") == name), MISSING)
    else:
        return MISSING
    if isinstance(value, dict):
        return value.get("value") if "valueFrom" not in value else None
    return value


def _place(url: str) -> tuple | None:
    """What a URL reaches: scheme, host (a Service's DNS name without the suffixes
    the cluster's DNS completes), port, path; None if it is no URL."""
    try:
        parts = urlsplit(url)
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:
        return None
    host = parts.hostname or ""
    for suffix in _SERVICE_SUFFIXES:
        if host.endswith(suffix):
            host = host.removesuffix(suffix)
            break
    return parts.scheme, host, port, parts.path.rstrip("/"), parts.query


def same_prometheus(url: Any, expected: str) -> bool:
    """``url`` reaches what ``expected`` does, in any form of a Service's DNS name."""
    return isinstance(url, str) and _place(url) is not None and _place(url) == _place(expected)


def check_prometheus_urls(files: Values, expected: str, given: bool = False) -> list[Drift]:
    """Every Prometheus URL of the values files (merged as Helm merges them) that does
    not reach ``expected`` (the admin guide's Prometheus, or the URL the admin gave:
    ``given``)."""
    return list(_url_drifts(files, merge_values(files), expected,
                            WHY_GIVEN if given else WHY_KPS))


def _readers(values: dict) -> Iterator[tuple[str, Any, str]]:
    """(values path, its environment, who reads the URL from it)."""
    yield "hub.extraEnv", get(values, "hub.extraEnv", {}), "the culler's GPU-idle rule"
    for i, container in enumerate(get(values, "hub.extraContainers", []) or []):
        if isinstance(container, dict) and container.get("name") == USAGE_SERVICE_NAME:
            yield f"hub.extraContainers[{i}].env", container.get("env"), "the usage page"
    yield "singleuser.extraEnv", get(values, "singleuser.extraEnv", {}), "the JupyterLab status item"


def _url_drifts(files: Values, values: dict, expected: str, why: str) -> Iterator[Drift]:
    for path, env, reader in _readers(values):
        url = _env(env, ENV_PROMETHEUS_URL)
        if url is MISSING or url is None or same_prometheus(url, expected):
            continue
        yield Drift(source(files, path.split("[")[0]), "z2jh values",
                    f"{path}.{ENV_PROMETHEUS_URL}", expected, url,
                    f"{why}; elsewhere {reader} goes without GPU data")
