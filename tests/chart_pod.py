"""Print, as JSON, the notebook pod GPUSpawner creates under the hub config of the
z2jh 4.4.0 chart (:mod:`tests.z2jh_chart`, with the chart's common labels) built
from our Helm values::

    python -m tests.chart_pod SPEC USER GROUP PROFILE

A process of its own, with no ``KUBECONFIG``: KubeSpawner loads a kubeconfig when
it is constructed, and the cluster tier's ``KUBECONFIG`` names one that exists only
while that tier's cluster runs. No request is sent (:mod:`jupyterhub_gpu.hub.render`).
"""

from __future__ import annotations

import asyncio
import json
import sys

from jupyterhub_gpu.hub.render import render_pod
from tests import z2jh_chart


def chart_config():
    """``c`` as the chart's hub config leaves it for our values, for KubeSpawner."""
    values = z2jh_chart.helm_values()
    config = z2jh_chart.kubespawner_config(values)
    config.KubeSpawner.common_labels = z2jh_chart.common_labels(values)
    return config


def main(argv: list[str]) -> int:
    spec, user, group, profile = argv
    pod = asyncio.run(render_pod(spec, user, [group], profile, config=chart_config()))
    json.dump(pod, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
