"""The names only the dev cluster, the demo and the replay use, defined once.

The product's wire names stand in :mod:`jupyterhub_gpu.contract`; this module holds
the ones no product code reads or writes: the dev cluster's annotations (kwok's
stand-ins for a kubelet and a DCGM exporter), the label its Karpenter provider sets,
and the demo's environment. ``tests/unit/test_contract.py`` fails when one of these
strings is written anywhere else in the package, and when the product's contract
imports this one (a hub loads no dev-cluster module).

Only constants, and no imports but the product contract's prefixes.
"""

from ..contract import ENV_PREFIX, PREFIX

# -- kwok and Karpenter's kwok provider (the dev cluster's nodes) ---------------------

#: the price of the offering a node was started from, as the kwok provider labels it
PRICE_LABEL = "eks-node-viewer/instance-price"
#: on a Job's pod template in the dev cluster: how long its pods run (a Go duration,
#: e.g. ``30s``) before they succeed, kwok alone playing their kubelet; without it the
#: demo's pod runner runs the container's command (:mod:`jupyterhub_gpu.devcluster.stages`)
RUN_FOR_ANNOTATION = PREFIX + "run-for"
#: on a Job's pod in the dev cluster: the exit code of the process the pod runner ran
#: for it, which kwok turns into the pod's phase and its container's exit code
EXIT_CODE_ANNOTATION = PREFIX + "exit-code"
#: on a GPU pod in the dev cluster: what its fake DCGM exporter reports for the pod's
#: GPUs, a JSON object of DCGM field name to value, e.g.
#: ``{"DCGM_FI_DEV_GPU_UTIL": 0, "DCGM_FI_DEV_FB_USED": 512}``
#: (:mod:`jupyterhub_gpu.devcluster.dcgm`); a pod without it has no series
FAKE_DCGM_ANNOTATION = PREFIX + "fake-dcgm"

# -- the demo's users ------------------------------------------------------------------

#: every demo user's password (the demo hub's DummyAuthenticator; README, "Try it")
DEMO_PASSWORD = "gpu-demo"
#: the demo's JupyterHub groups and their users; the example spec's teams name the groups
DEMO_GROUPS = {
    "data-science": ("alice", "dave"),
    "ml-eng": ("bob", "dave"),
    "experimentation": ("carol",),
    # a team lead (a spec's teams[].leadGroups names it): sees the team on the usage page
    "data-science-leads": ("erin",),
}
#: the demo hub's admin user
DEMO_ADMIN = "admin"
#: where the demo's JupyterHub listens, and its hub and proxy-API ports (README, "Try it")
DEMO_URL = "http://127.0.0.1:8000"
DEMO_HUB_PORT = 8081
DEMO_PROXY_API_PORT = 8001
#: how long the demo hub waits for a started server to answer (seconds)
DEMO_HTTP_TIMEOUT = 60

# -- the demo and the dev cluster's environment -----------------------------------------

ENV_CACHE = ENV_PREFIX + "CACHE"  # where the dev cluster's binaries are cached
ENV_DEMO_SPEC = ENV_PREFIX + "SPEC"
ENV_DEMO_CHP = ENV_PREFIX + "CHP"  # the configurable-http-proxy command
ENV_DEMO_URL = ENV_PREFIX + "DEMO_URL"
ENV_DEMO_HUB_PORT = ENV_PREFIX + "DEMO_HUB_PORT"
ENV_DEMO_PROXY_API_PORT = ENV_PREFIX + "DEMO_PROXY_API_PORT"
#: the demo hub's gpu-jobs, gpu-usage and gpu-kernels services listen on the hub's
#: port plus these
JOBS_PORT_ABOVE_HUB = 10
USAGE_PORT_ABOVE_HUB = 11
KERNELS_PORT_ABOVE_HUB = 13
ENV_DEMO_CULL_EVERY = ENV_PREFIX + "DEMO_CULL_EVERY"  # seconds between culler runs
#: the dev cluster's Prometheus: the culler's GPU-idle rule asks it
ENV_DEMO_PROMETHEUS_URL = ENV_PREFIX + "DEMO_PROMETHEUS_URL"
#: the API token of the hub service ``prometheus`` (``read:metrics``) it scrapes with
ENV_DEMO_METRICS_TOKEN = ENV_PREFIX + "DEMO_METRICS_TOKEN"
#: how long kwok "runs" the demo's training jobs (a Go duration; RUN_FOR_ANNOTATION)
ENV_DEMO_JOB_RUN_FOR = ENV_PREFIX + "DEMO_JOB_RUN_FOR"
#: the fake DCGM exporter's resources to map to pods besides ``nvidia.com/gpu`` and
#: ``nvidia.com/mig-*``, comma-separated: dcgm-exporter's own variable (its flag
#: ``--nvidia-resource-names``), e.g. ``nvidia.com/gpu.shared``; empty by default
ENV_DCGM_RESOURCE_NAMES = "NVIDIA_RESOURCE_NAMES"
#: on a pod in the dev cluster: set by the dev cluster's storage process (playing the
#: kubelet's volume manager) once every volume the pod mounts is attached to its node;
#: kwok starts a pod that mounts a claim only then (:mod:`jupyterhub_gpu.devcluster.storage`)
VOLUMES_ATTACHED_ANNOTATION = PREFIX + "volumes-attached"
