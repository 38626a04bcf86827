"""Named servers: the cap on GPU servers per user, from the hub's own spawners, checked
while the options are authorized (before any Kubernetes API call)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from tornado import web
from traitlets.config import Config

from jupyterhub_gpu.spec.grant import OptionsRejected, UserRef, authorize
from jupyterhub_gpu.contract import ENV_LAST_STOP_NOTICE, STATE_PROFILE
from jupyterhub_gpu.spec.parse import SpecError, parse_platform
from jupyterhub_gpu.hub.render import OfflineHub, _Group
from jupyterhub_gpu.hub.servers import OtherServer, check_gpu_servers
from jupyterhub_gpu.hub.spawner import GPUSpawner

ALICE = UserRef("alice", frozenset({"data-science"}))
REFUSED = ("You already have a GPU server running (gpu-a); stop it first or pick a CPU "
           "profile.")


def _grant(platform, slug):
    return authorize(platform, ALICE, {"profile": slug})


def test_the_spec_caps_gpu_servers_at_one_by_default(platform, example_spec):
    assert platform.gpu_servers_per_user == 1
    example_spec["gpuServersPerUser"] = -1
    with pytest.raises(SpecError) as e:
        parse_platform(example_spec)
    assert e.value.errors == ["spec: gpuServersPerUser: must be an integer >= 0, got -1"]


def test_a_second_gpu_server_is_refused_naming_the_first(platform):
    gpu_a = OtherServer("gpu-a", "t4-shared", True)
    with pytest.raises(OptionsRejected) as e:
        check_gpu_servers(platform, _grant(platform, "a100-mig-3g"), [gpu_a], True)
    assert str(e.value) == REFUSED
    assert e.value.log_detail == ("asked for GPU profile 'a100-mig-3g' with 1 GPU server(s) "
                                  "active (gpu-a); gpuServersPerUser is 1")


def test_cpu_servers_neither_count_nor_are_capped(platform):
    cpu = OtherServer("cpu", "cpu", False)
    check_gpu_servers(platform, _grant(platform, "t4-shared"), [cpu, cpu], True)
    check_gpu_servers(platform, _grant(platform, "cpu"),
                      [OtherServer("gpu-a", "t4-shared", True)], True)


def test_the_cap_is_the_spec_s(platform, example_spec):
    example_spec["gpuServersPerUser"] = 2
    two = parse_platform(example_spec)
    grant = _grant(two, "t4-shared")
    first, second = OtherServer("", "t4-shared", True), OtherServer("b", "a100-mig-3g", True)
    check_gpu_servers(two, grant, [first], True)
    with pytest.raises(OptionsRejected, match=r"^You already have 2 GPU servers running "
                       r"\(your default server, b\), the most one user may run; stop one "
                       r"first or pick a CPU profile\.$"):
        check_gpu_servers(two, grant, [first, second], True)
    example_spec["gpuServersPerUser"] = 0
    off = parse_platform(example_spec)
    with pytest.raises(OptionsRejected, match="^GPU servers are switched off on this hub; "
                                              "pick a CPU profile.$"):
        check_gpu_servers(off, _grant(off, "t4-shared"), [], True)


def test_no_cpu_profile_is_suggested_to_who_has_none(platform):
    with pytest.raises(OptionsRejected) as e:
        check_gpu_servers(platform, _grant(platform, "t4-shared"),
                          [OtherServer("gpu-a", "t4-shared", True)], cpu_offered=False)
    assert str(e.value) == "You already have a GPU server running (gpu-a); stop it first."


# -- GPUSpawner: the count from the user's other spawners ---------------------------


@dataclass
class HubUser:
    """A JupyterHub user with its spawners by server name (``User.spawners``)."""

    name: str
    groups: list
    id: int = 1
    spawners: dict = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"/user/{self.name}/"


@pytest.fixture
def user(offline_kubeconfig, example_spec_path):
    alice = HubUser("alice", [_Group("data-science")])
    config = Config()
    config.GPUSpawner.platform_file = str(example_spec_path)

    def server(name: str) -> GPUSpawner:
        spawner = GPUSpawner(user=alice, hub=OfflineHub(), config=config)
        alice.spawners[name] = spawner
        return spawner

    alice.server = server
    return alice


def _running(spawner: GPUSpawner, slug: str) -> None:
    spawner.apply_profile({"profile": slug})
    spawner._spawn_pending = True  # a start in flight counts as much as a running server


async def test_a_named_gpu_server_beside_a_gpu_server_is_refused_before_start(user):
    _running(user.server("gpu-a"), "t4-shared")
    gpu_b = user.server("gpu-b")
    with pytest.raises(OptionsRejected, match=r"^You already have a GPU server running "
                       r"\(gpu-a\); stop it first or pick a CPU profile\.$"):
        gpu_b.run_options_from_form({"profile": ["a100-mig-3g"]})
    with pytest.raises(web.HTTPError) as e:  # the REST API's user_options
        await gpu_b._run_apply_user_options({"profile": "a100-mig-3g"})
    assert e.value.status_code == 400 and e.value.reason == REFUSED
    assert gpu_b.gpu_grant is None, "nothing was applied"
    with pytest.raises(web.HTTPError):  # {} is the default profile, a GPU one
        await gpu_b._run_apply_user_options({})
    cpu = user.server("cpu")
    await cpu._run_apply_user_options({"profile": "cpu"})
    assert cpu.gpu_grant.profile.slug == "cpu" and cpu.extra_resource_limits == {}


async def test_a_stopped_server_frees_the_cap_and_a_cpu_server_takes_none(user):
    gpu_a = user.server("gpu-a")
    _running(gpu_a, "t4-shared")
    _running(user.server("cpu"), "cpu")
    gpu_a._spawn_pending = False  # stopped: neither pending nor with a server
    await user.server("gpu-b")._run_apply_user_options({"profile": "a100-mig-3g"})


async def test_after_a_hub_restart_the_state_says_which_profile_runs(user):
    """A restarted hub has loaded each server's state, and granted nothing yet."""
    restored = user.server("gpu-a")
    restored.load_state({STATE_PROFILE: "a100-mig-3g"})
    restored._spawn_pending = True
    seen = restored.profile_requests.as_other_server(restored.platform, "gpu-a")
    assert seen == OtherServer(
        "gpu-a", "a100-mig-3g", True)
    with pytest.raises(web.HTTPError):
        await user.server("")._run_apply_user_options({"profile": "t4-shared"})
    restored.load_state({STATE_PROFILE: "cpu"})
    await user.server("")._run_apply_user_options({"profile": "t4-shared"})


async def test_a_spawner_restarted_with_another_profile_counts_as_that_one(user):
    """A stale grant (the last start's) does not count once new options are asked."""
    gpu_a = user.server("gpu-a")
    _running(gpu_a, "t4-shared")
    gpu_a.user_options = {"profile": "cpu"}  # the hub set the next start's options
    seen = gpu_a.profile_requests.as_other_server(gpu_a.platform, "gpu-a")
    assert seen == OtherServer("gpu-a", "cpu", False)


# -- stop notices and culling, per server ---------------------------------------------


async def test_a_stop_notice_shows_on_its_own_server_only(user):
    """The notice is the spawner's state (kept per server by the hub): one for server
    "gpu" is on gpu's form, not on the default server's."""
    from .test_metrics_event import GONE_WITH_ITS_NODE

    gpu, default = user.server("gpu"), user.server("")
    assert gpu._stops.notice(GONE_WITH_ITS_NODE)
    state = gpu.get_state()
    assert state["gpu_stop_notice"]["message"].startswith("Your server was stopped because")
    restored = user.server("gpu")  # a restarted hub loads each server's own state
    restored.load_state(state)
    assert "gpu-stop-notice" in await restored.get_options_form()
    assert "gpu-stop-notice" not in await default.get_options_form()
    assert "gpu_stop_notice" not in default.get_state()


class NoCluster(Exception):
    """Where the start would first ask the cluster (its shared watches)."""


async def test_the_next_start_clears_the_notice_and_its_server_is_told(user, monkeypatch):
    """Starting again clears the notice from the state; the new server's environment
    carries it, for JupyterLab's status item; the other server's does not."""
    from kubespawner import KubeSpawner

    from .test_metrics_event import GONE_WITH_ITS_NODE

    async def no_cluster(self, **kwargs):
        raise NoCluster()

    monkeypatch.setattr(KubeSpawner, "_start_reflector", no_cluster)
    gpu, default = user.server("gpu"), user.server("")
    assert gpu._stops.notice(GONE_WITH_ITS_NODE)
    for spawner in (gpu, default):
        await spawner._run_apply_user_options({"profile": "t4-shared"})
        with pytest.raises(NoCluster):  # the start got as far as the cluster
            await spawner.start()
    assert "gpu_stop_notice" not in gpu.get_state()
    assert gpu.get_env()[ENV_LAST_STOP_NOTICE].startswith("Your server was stopped because")
    assert ENV_LAST_STOP_NOTICE not in default.get_env()


def test_culling_applies_each_servers_own_profile(platform):
    """Two servers of one user, both idle 40 minutes: the GPU one (idleTimeout 30m)
    is culled, the CPU one (cpuIdleTimeout 4h) is not."""
    from datetime import datetime, timedelta, timezone

    from jupyterhub_gpu.cull.policy import ServerView, policy_for, should_cull

    now = datetime(2025, 3, 4, 12, 0, tzinfo=timezone.utc)

    def server(name, slug):
        return {"name": name, "full_name": f"alice/{name}",
                "started": (now - timedelta(hours=2)).isoformat(),
                "last_activity": (now - timedelta(minutes=40)).isoformat(),
                "user_options": {"profile": slug}, "state": {STATE_PROFILE: slug}}

    decisions = {}
    for model in (server("", "t4-shared"), server("cpu", "cpu")):
        view = ServerView.from_model(model)
        decisions[view.full_name] = should_cull(policy_for(platform, view.profile, 8 * 3600),
                                                view, now).cull
    assert decisions == {"alice/": True, "alice/cpu": False}
