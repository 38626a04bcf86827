"""Pure builders for running Kueue's manager out of cluster against the dev cluster.

Kueue is written to run in a pod behind a Service. Here it runs as a local process
with its webhook server on 127.0.0.1, so:

* the webhook configurations are upstream's (``config/components/webhook``), kept
  to the webhooks of the integrations that run (pods and batch Jobs) and of
  ``kueue.x-k8s.io``,
  with ``clientConfig.service`` replaced by ``url: https://127.0.0.1:<port><path>``;
* the CRDs upstream serves through a conversion webhook get one at the same URL;
* internal cert management stays *on* but is fed our own certs: with it off, Kueue
  0.17 insists on reading metrics certs from the absolute path
  ``/etc/kueue/metrics/certs`` and exits without them. With it on, Kueue's cert
  rotator accepts the pre-created Secret (our webhook CA named ``kueue-ca`` and a
  serving cert valid for both the in-cluster service name and 127.0.0.1), only
  re-injects the same CA bundle, and reads the files we place in ``certDir``;
  metrics then use a self-signed in-memory cert;
* the visibility API server is turned off (feature gate ``VisibilityOnDemand``):
  it writes its certs under the absolute path ``/visibility``, and an APIService
  can only point at a Service, never at a loopback URL.
"""

from __future__ import annotations

import base64
import copy
from typing import Iterable, Mapping

import yaml

from ..bundle.kueueconfig import kueue_configuration
from ..bundle.servicemonitors import KUEUE_NAMESPACE
from ..contract import KUEUE_API_VERSION as API_VERSION
from ..contract import BATCH_GROUP, KUEUE_GROUP
from ..spec.model import Platform
from .layout import HOST, Ports

NAMESPACE = KUEUE_NAMESPACE  # as the admin guide installs Kueue
SERVICE_NAME = "kueue-webhook-service"
SECRET_NAME = "kueue-webhook-server-cert"
WEBHOOK_CONFIG_PREFIX = "kueue"  # Kueue's rotator derives "<prefix>-mutating-..." names
PROBE_FLAVOR = "jupyterhub-gpu-devcluster-probe"


def service_dns() -> str:
    """The name Kueue's cert rotator checks its serving cert against."""
    return f"{SERVICE_NAME}.{NAMESPACE}.svc"


def webhook_base_url(ports: Ports) -> str:
    return f"https://{HOST}:{ports.kueue_webhook}"


def dev_overlay(ports: Ports, cert_dir: str) -> dict:
    """Every field in which the dev cluster's Kueue differs from the shipped
    Configuration (:func:`~jupyterhub_gpu.bundle.kueueconfig.kueue_configuration`):
    only where a local process differs from a pod behind a Service.

    * ``namespace``: a pod reads it from its ServiceAccount; a local process has none;
    * ``health``, ``metrics``, ``webhook``: loopback addresses and the dev cluster's
      ports; the webhook certs in the state dir;
    * ``leaderElection``: one Kueue, no lease to wait for;
    * ``internalCertManagement``: fed the certs ``up`` made (see the module docstring);
    * ``featureGates``: no visibility API server (it needs a Service).

    What Kueue manages and how it admits and preempts (:data:`~jupyterhub_gpu.bundle.kueueconfig.POLICY_KEYS`) is never
    here: the dev cluster runs the shipped policy.
    """
    return {
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"{HOST}:{ports.kueue_health}"},
        "metrics": {"bindAddress": f"{HOST}:{ports.kueue_metrics}"},
        "webhook": {"host": HOST, "port": ports.kueue_webhook, "certDir": cert_dir},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": True, "webhookServiceName": SERVICE_NAME,
                                   "webhookSecretName": SECRET_NAME},
        "featureGates": {"VisibilityOnDemand": False},
    }


def overlaid(base: Mapping, overlay: Mapping) -> dict:
    """``base`` with ``overlay`` laid over it: mappings merge key by key, any other
    value of ``overlay`` replaces ``base``'s."""
    out = copy.deepcopy(dict(base))
    for key, value in overlay.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = overlaid(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def configuration(platform: Platform, ports: Ports, cert_dir: str) -> dict:
    """The Configuration the dev cluster's Kueue runs: the one shipped for
    ``platform`` with :func:`dev_overlay` laid over it."""
    return overlaid(kueue_configuration(platform), dev_overlay(ports, cert_dir))


def _ours(webhook: Mapping) -> bool:
    """Webhooks on core pods, batch Jobs or Kueue's own objects (the ones Kueue serves
    here)."""
    groups = {g for rule in webhook.get("rules", []) for g in rule.get("apiGroups", [])}
    return bool(groups & {"", BATCH_GROUP, KUEUE_GROUP})


def _selectors(kustomization: Mapping) -> dict[str, dict]:
    """Upstream's per-webhook ``namespaceSelector`` patches, by webhook name."""
    found: dict[str, dict] = {}
    for patch in kustomization.get("patches", []) or []:
        body = patch.get("patch") if isinstance(patch, Mapping) else None
        doc = yaml.safe_load(body) if isinstance(body, str) else None
        for hook in (doc or {}).get("webhooks", []) or []:
            if "namespaceSelector" in hook:
                found[hook["name"]] = hook["namespaceSelector"]
    return found


def _rewrite(webhook: Mapping, base_url: str, ca_b64: str, selector: dict | None) -> dict:
    hook = copy.deepcopy(dict(webhook))
    path = hook["clientConfig"]["service"]["path"]
    hook["clientConfig"] = {"url": f"{base_url}{path}", "caBundle": ca_b64}
    if selector is not None:
        hook["namespaceSelector"] = copy.deepcopy(selector)
    return hook


def webhook_configurations(manifests: Iterable[Mapping], kustomization: Mapping,
                           base_url: str, ca_pem: bytes) -> list[dict]:
    """Upstream's Mutating/ValidatingWebhookConfigurations, pointed at ``base_url``."""
    ca_b64 = base64.b64encode(ca_pem).decode()
    selectors = _selectors(kustomization)
    out = []
    for doc in manifests:
        if not doc or doc.get("kind") not in ("MutatingWebhookConfiguration",
                                              "ValidatingWebhookConfiguration"):
            continue
        kind_word = "mutating" if doc["kind"].startswith("Mutating") else "validating"
        hooks = [_rewrite(h, base_url, ca_b64, selectors.get(h["name"]))
                 for h in doc.get("webhooks", []) if _ours(h)]
        out.append({"apiVersion": doc["apiVersion"], "kind": doc["kind"],
                    "metadata": {"name": f"{WEBHOOK_CONFIG_PREFIX}-{kind_word}-webhook-configuration"},
                    "webhooks": hooks})
    return out


def conversion_crds(crd_kustomization: Mapping) -> set[str]:
    """CRD plurals upstream patches with a conversion webhook (``webhook_in_<plural>``)."""
    names = set()
    for patch in crd_kustomization.get("patches", []) or []:
        path = patch.get("path", "") if isinstance(patch, Mapping) else ""
        stem = path.rsplit("/", 1)[-1]
        if stem.startswith("webhook_in_") and stem.endswith(".yaml"):
            names.add(stem[len("webhook_in_"):-len(".yaml")])
    return names


def with_conversion(crd: Mapping, plurals: set[str], base_url: str, ca_pem: bytes) -> dict:
    """``crd`` with upstream's conversion webhook (at ``base_url``/convert) if it has one."""
    out = copy.deepcopy(dict(crd))
    if out["spec"]["names"]["plural"] in plurals:
        out["spec"]["conversion"] = {"strategy": "Webhook", "webhook": {
            "clientConfig": {"url": f"{base_url}/convert",
                             "caBundle": base64.b64encode(ca_pem).decode()},
            "conversionReviewVersions": ["v1"]}}
    return out


def webhook_secret(ca_crt: bytes, ca_key: bytes, tls_crt: bytes, tls_key: bytes) -> dict:
    """The Secret Kueue's cert rotator reads (and keeps, since it is valid)."""
    data = {"ca.crt": ca_crt, "ca.key": ca_key, "tls.crt": tls_crt, "tls.key": tls_key}
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": SECRET_NAME, "namespace": NAMESPACE},
            "data": {k: base64.b64encode(v).decode() for k, v in data.items()}}


def namespace(name: str) -> dict:
    """A namespace Kueue does not manage (Kueue's own, the hub's)."""
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def probe_flavor() -> dict:
    """A ResourceFlavor created with dryRun=All: succeeds only once webhooks answer."""
    return {"apiVersion": API_VERSION, "kind": "ResourceFlavor",
            "metadata": {"name": PROBE_FLAVOR}, "spec": {}}
