"""JupyterHub config of the benchmark hubs (not for production); read from the
environment :mod:`benchmarks.hubs` sets:

- ``BENCH_SPAWNER``: ``gpu`` (GPUSpawner, ``configure_hub``), ``kube`` (plain
  KubeSpawner with the equivalent ``profile_list``, :mod:`benchmarks.baseline`) or
  ``instant`` (:class:`benchmarks.fakes.InstantSpawner`, for the culler);
- ``BENCH_SPEC``, ``BENCH_URL``, ``BENCH_HUB_PORT``, ``BENCH_TOKEN`` (the benchmark
  driver's admin service token), ``BENCH_OK_PORT`` (the answering server's port,
  where every single-user server "listens"), ``BENCH_PROFILE_LIST`` (``kube``: the
  ``profile_list`` as a JSON file); ``BENCH_POLL_INTERVAL``,
  ``BENCH_REQUEST_TIMEOUT``, ``BENCH_REQUEST_RETRY_TIMEOUT``: the same poll interval
  and API timeouts for both cluster hubs (GPUSpawner's defaults, which
  :mod:`benchmarks.hubs` reads from it so that this file imports nothing of ours into
  the baseline hub).
"""

import os

from benchmarks.fakes import ENV_OK_PORT

c = get_config()  # noqa: F821 - provided by JupyterHub when it loads this file

mode = os.environ["BENCH_SPAWNER"]
spec = os.environ["BENCH_SPEC"]
c.JupyterHub.proxy_class = "benchmarks.fakes.NullProxy"
c.JupyterHub.bind_url = os.environ["BENCH_URL"]
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = int(os.environ["BENCH_HUB_PORT"])
c.JupyterHub.authenticator_class = "dummy"
c.Authenticator.allow_all = True
c.JupyterHub.authenticate_prometheus = False
c.JupyterHub.concurrent_spawn_limit = 0  # the burst: no limit
# the cluster hubs stop their pods on the way out; the instant servers are nothing
c.JupyterHub.cleanup_servers = mode != "instant"
c.JupyterHub.services = [{"name": "bench", "api_token": os.environ["BENCH_TOKEN"]}]
c.JupyterHub.load_roles = [{"name": "bench", "services": ["bench"], "scopes": [
    "admin:users", "admin:servers", "admin:groups", "admin:server_state", "list:users",
    "read:users", "read:metrics"]}]

if mode == "instant":
    c.JupyterHub.spawner_class = "benchmarks.fakes.InstantSpawner"
    # 5,000 servers answer from one process on a loaded machine: give it time
    c.Spawner.http_timeout = 300
else:
    from benchmarks.baseline import chart_config

    c.merge(chart_config())
    c.KubeSpawner.port = int(os.environ[ENV_OK_PORT])
    c.KubeSpawner.http_timeout = 60
    # the same for both hubs (a subclass's own config would win: set on both names)
    for name in ("KubeSpawner", "GPUSpawner"):
        c[name].poll_interval = int(os.environ["BENCH_POLL_INTERVAL"])
        c[name].k8s_api_request_timeout = int(os.environ["BENCH_REQUEST_TIMEOUT"])
        c[name].k8s_api_request_retry_timeout = int(os.environ["BENCH_REQUEST_RETRY_TIMEOUT"])
    if mode == "gpu":
        from jupyterhub_gpu import configure_hub

        configure_hub(c, spec, resume=False)
        from jupyterhub_gpu.hub.spawner import GPUSpawner as spawner_class
    else:
        import json

        # written beforehand (benchmarks.hubs), as an admin's static profile_list is
        c.JupyterHub.spawner_class = "kubespawner.KubeSpawner"
        with open(os.environ["BENCH_PROFILE_LIST"]) as f:
            c.KubeSpawner.profile_list = json.load(f)
        from kubespawner import KubeSpawner as spawner_class

    # the cost of each poll(), into poll-cost.tsv in the hub's directory (benchmarks.pollcost)
    from benchmarks.pollcost import install as install_poll_timer

    install_poll_timer(spawner_class)

# the event-loop lag, sampled into loop-lag.tsv in the hub's directory (benchmarks.lag)
from benchmarks.lag import install  # noqa: E402

install()

# a census of the heap every $BENCH_CENSUS seconds, if set (benchmarks.census: the soak)
from benchmarks.census import install as install_census  # noqa: E402

install_census()
