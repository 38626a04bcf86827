"""The usage page's settings (``c.UsagePage``); the ledger's (``c.UsageLedger``) stand
in :mod:`jupyterhub_gpu.ledger.config` and are importable from here too."""

from __future__ import annotations

from traitlets import Int, TraitError, Unicode, validate
from traitlets.config import Configurable

from ..ledger.config import DEFAULT_FILE, UsageLedger, default_url

__all__ = ["DEFAULT_DAYS", "DEFAULT_FILE", "MAX_DAYS", "UsageLedger", "UsagePage", "default_url"]

#: the longest reporting period the usage page offers, in days
MAX_DAYS = 366
#: the period it shows unless the viewer picks one, in days
DEFAULT_DAYS = 30


class UsagePage(Configurable):
    """The ``gpu-usage`` service's settings (:func:`jupyterhub_gpu.usage.service.add_usage_service`
    reads them from the hub's config and passes them to the service)."""

    prometheus_url = Unicode(
        "",
        help="""Prometheus (HTTP API) with the DCGM exporter's metrics, for the page's
        "utilization of billed GPU-hours". Empty: the page says "no GPU telemetry".
        A user and password in the URL are sent as basic auth; the page and the log
        show only ``scheme://host[:port]/path``.

        Example::

            c.UsagePage.prometheus_url = "http://kube-prometheus-stack-prometheus.monitoring.svc.cluster.local:9090"
        """,
    ).tag(config=True)

    default_days = Int(
        DEFAULT_DAYS,
        help="""The reporting period the page shows unless the viewer picks another
        (``?days=N``, 1 to 366), in days up to now.

        Example::

            c.UsagePage.default_days = 7
        """,
    ).tag(config=True)

    @validate("default_days")
    def _check_days(self, proposal):
        if not 1 <= proposal["value"] <= MAX_DAYS:
            raise TraitError(f"UsagePage.default_days must be 1 to {MAX_DAYS}, "
                             f"got {proposal['value']}")
        return proposal["value"]
