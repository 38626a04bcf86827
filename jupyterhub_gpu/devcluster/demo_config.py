"""JupyterHub config of the local demo (``jupyterhub-gpu demo``); not for production.

Reads JUPYTERHUB_GPU_SPEC (the platform spec), KUBECONFIG (the dev cluster's),
JUPYTERHUB_GPU_CHP (the configurable-http-proxy command) and, optionally,
JUPYTERHUB_GPU_DEMO_PROMETHEUS_URL and JUPYTERHUB_GPU_DEMO_METRICS_TOKEN (the dev
cluster's Prometheus, and the token it scrapes /hub/metrics with),
JUPYTERHUB_GPU_DEMO_CULL_EVERY (seconds between culler runs) and
JUPYTERHUB_GPU_DEMO_JOB_RUN_FOR (how long kwok runs a training job's pods, default 60s)
from the environment.
"""

import os

from jupyterhub_gpu import configure_hub
from jupyterhub_gpu.contract import READ_METRICS_SCOPE
from jupyterhub_gpu.devcluster.contract import (DEMO_ADMIN, DEMO_GROUPS, DEMO_HTTP_TIMEOUT,
                                                DEMO_HUB_PORT, DEMO_PASSWORD,
                                                DEMO_PROXY_API_PORT, DEMO_URL,
                                                ENV_DEMO_CHP, ENV_DEMO_CULL_EVERY,
                                                ENV_DEMO_HUB_PORT, ENV_DEMO_JOB_RUN_FOR,
                                                ENV_DEMO_METRICS_TOKEN, ENV_DEMO_PROMETHEUS_URL,
                                                ENV_DEMO_PROXY_API_PORT, ENV_DEMO_SPEC,
                                                ENV_DEMO_URL, JOBS_PORT_ABOVE_HUB,
                                                KERNELS_PORT_ABOVE_HUB, RUN_FOR_ANNOTATION,
                                                USAGE_PORT_ABOVE_HUB)

c = get_config()  # noqa: F821 - provided by JupyterHub when it loads this file

configure_hub(c, os.environ[ENV_DEMO_SPEC])

# The GPU-aware idle culler, as in the Helm values; its GPU-idle rule asks the dev
# cluster's Prometheus (JUPYTERHUB_GPU_DEMO_PROMETHEUS_URL; without it: activity rules
# only, with a warning in its log). Like every service below, it reads the spec's path
# from what configure_hub recorded.
from jupyterhub_gpu.cull.service import add_culler_service  # noqa: E402

CULL_EVERY = int(os.environ.get(ENV_DEMO_CULL_EVERY, "60"))  # tests: short
add_culler_service(c, timeout_seconds=8 * 3600, cull_every_seconds=CULL_EVERY,
                   prometheus_url=os.environ.get(ENV_DEMO_PROMETHEUS_URL))

# The dev cluster's Prometheus scrapes /hub/metrics with this service's token, as z2jh
# users scrape a hub that keeps authenticate_prometheus on.
if os.environ.get(ENV_DEMO_METRICS_TOKEN):
    c.JupyterHub.services.append({"name": "prometheus",
                                  "api_token": os.environ[ENV_DEMO_METRICS_TOKEN]})
    c.JupyterHub.load_roles.append({"name": "prometheus", "scopes": [READ_METRICS_SCOPE],
                                    "services": ["prometheus"]})

# As the Helm values do (hub.allowNamedServers): a CPU server beside a GPU server.
c.JupyterHub.allow_named_servers = True

c.JupyterHub.bind_url = os.environ.get(ENV_DEMO_URL, DEMO_URL)
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = int(os.environ.get(ENV_DEMO_HUB_PORT, DEMO_HUB_PORT))

# Training jobs from a notebook (`jupyterhub-gpu job submit ...`): the gpu-jobs service,
# on the hub's port + 10. kwok has no kubelet to run a script: a job's pods "run" for
# JUPYTERHUB_GPU_DEMO_JOB_RUN_FOR (the dev cluster's run-for annotation), then succeed.
from jupyterhub_gpu.jobs.config import add_jobs_service  # noqa: E402

add_jobs_service(c, url=f"http://127.0.0.1:{c.JupyterHub.hub_port + JOBS_PORT_ABOVE_HUB}",
                 job_annotations={RUN_FOR_ANNOTATION: os.environ.get(ENV_DEMO_JOB_RUN_FOR, "60s")})

# GPU kernels (docs/kernels.md): the gpu-kernels service, on the hub's port + 13, creates
# a GPU kernel's pod in the user's team namespace for their running server.
from jupyterhub_gpu.kernels.config import add_kernels_service  # noqa: E402

add_kernels_service(c, url=f"http://127.0.0.1:{c.JupyterHub.hub_port + KERNELS_PORT_ABOVE_HUB}")

# The usage page (GPU-hours, costs, queue waits...) on the hub's port + 11, under
# /services/gpu-usage/; its utilization of billed GPU-hours comes from the dev cluster's
# Prometheus (without JUPYTERHUB_GPU_DEMO_PROMETHEUS_URL it says "no GPU telemetry").
from jupyterhub_gpu.usage.service import add_usage_service  # noqa: E402

c.UsagePage.prometheus_url = os.environ.get(ENV_DEMO_PROMETHEUS_URL, "")
add_usage_service(c, url=f"http://127.0.0.1:{c.JupyterHub.hub_port + USAGE_PORT_ABOVE_HUB}")
c.ConfigurableHTTPProxy.command = [os.environ[ENV_DEMO_CHP]]
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{}".format(
    os.environ.get(ENV_DEMO_PROXY_API_PORT, DEMO_PROXY_API_PORT))

# Demo users: log in with any of these names and the demo password.
c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = DEMO_PASSWORD
c.JupyterHub.load_groups = {g: {"users": list(users)} for g, users in DEMO_GROUPS.items()}
c.Authenticator.allowed_users = {u for users in DEMO_GROUPS.values() for u in users}
c.Authenticator.admin_users = {DEMO_ADMIN}
c.Authenticator.allowed_users.add(DEMO_ADMIN)

# kwok pods start at once; the pod runner then starts jupyterhub-singleuser
c.GPUSpawner.http_timeout = DEMO_HTTP_TIMEOUT
c.GPUSpawner.start_timeout = 600
