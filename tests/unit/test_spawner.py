"""GPUSpawner inside KubeSpawner: form, authorization before start, trait resets,
and the KubeSpawner behaviours it relies on."""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path
import logging
from importlib.metadata import entry_points

import pytest
from kubespawner import KubeSpawner
from kubespawner.spawner import PodReflector
from tornado import web
from traitlets.config import Config

from jupyterhub_gpu.spec.images import package_version
from jupyterhub_gpu import SpecError, configure_hub
from jupyterhub_gpu import checkpoint
from jupyterhub_gpu.watches.reflectors import RecordingPodReflector
from jupyterhub_gpu.hub.spawner import (PLATFORM_POLL_SECONDS, POD_REQUEST_RETRY_SECONDS,
                                        POD_REQUEST_TIMEOUT_SECONDS, GPUSpawner)

VERSION = package_version()  # the image tag: pyproject.toml's version, installed

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present",
                  "effect": "NoSchedule"}


def test_entry_point_registered():
    (ep,) = entry_points(group="jupyterhub.spawners", name="gpu")
    assert ep.load() is GPUSpawner


async def test_form_lists_only_allowed_profiles(make_spawner):
    form = await make_spawner(groups=["data-science"]).get_options_form()
    assert 'value="t4-shared"' in form and 'value="a100-mig-3g"' in form
    assert "a100-training" not in form and "a100-spot" not in form
    assert "1 &times; A100-80GB" in form
    assert "MIG slice 3g.40gb" in form and "40 GB GPU memory" in form
    assert "about $1.84 per hour" in form  # 3.673 per node-hour / 2 slices
    assert "time-sliced share (1 of 4)" in form and "16 GB (shared) GPU memory" in form
    assert 'id="profile-t4-shared" value="t4-shared"\n           checked' in form


async def test_form_marks_preemptible_and_preselects_last_choice(make_spawner):
    spawner = make_spawner(groups=["experimentation"])
    spawner.user_options = {"profile": "a100-spot"}
    form = await spawner.get_options_form()
    assert "(may be preempted)" in form
    assert 'value="a100-spot"\n           checked' in form


async def test_form_without_team_explains(make_spawner):
    form = await make_spawner(groups=["marketing"]).get_options_form()
    assert "No GPU profile is available to your account" in form
    assert 'name="profile"' not in form


async def test_form_post_parsed_like_kubespawner(make_spawner):
    spawner = make_spawner(groups=["ml-eng"])
    assert spawner.run_options_from_form({"profile": ["a100-spot"]}) == {"profile": "a100-spot"}


@pytest.mark.parametrize("formdata,message", [
    ({"profile": ["a100-training"]}, "The profile 'a100-training' is not available to you."),
    ({"profile": ["nope"]}, "The profile 'nope' does not exist."),
    ({"profile": ["t4-shared"], "profile-option-t4-shared--image": ["evil/miner"]},
     "Unexpected server options: image."),
])
async def test_forged_form_post_is_rejected_and_logged(make_spawner, caplog, formdata, message):
    spawner = make_spawner(user="mallory", groups=["data-science"])
    with caplog.at_level(logging.WARNING), pytest.raises(ValueError, match=message):
        spawner.run_options_from_form(formdata)
    assert any("Rejected GPU spawn options" in r.getMessage() and "mallory" in r.getMessage()
               for r in caplog.records)


async def test_rest_options_rejected_with_http_400(make_spawner):
    spawner = make_spawner(groups=["data-science"])
    with pytest.raises(web.HTTPError) as info:
        await spawner._run_apply_user_options({"profile": "a100-spot"})
    assert info.value.status_code == 400
    assert "The profile 'a100-spot' is not available to you." in info.value.log_message


async def test_refused_options_are_not_remembered_for_the_next_start(make_spawner):
    """JupyterHub stores a request's user_options before the hook refuses them; the
    spawner puts back its last grant (or the default), as the stored options."""
    from jupyterhub import orm

    spawner = make_spawner(groups=["data-science"])
    spawner.orm_spawner = orm.Spawner(name="")
    for forged in ({"profile": "a100-spot"}, {"profile": "t4-shared", "queue": "ml-eng"}):
        spawner.user_options = spawner.orm_spawner.user_options = dict(forged)  # as the hub
        with pytest.raises(web.HTTPError):
            await spawner._run_apply_user_options(forged)
        assert spawner.orm_spawner.user_options == spawner.user_options == {}
    await spawner._run_apply_user_options({"profile": "a100-mig-3g"})
    spawner.orm_spawner.user_options = {"profile": "a100-spot"}
    with pytest.raises(web.HTTPError):
        await spawner._run_apply_user_options({"profile": "a100-spot"})
    assert spawner.orm_spawner.user_options == {"profile": "a100-mig-3g"}


async def test_a_spawner_never_granted_a_profile_polls_as_stopped_without_a_call(make_spawner):
    """JupyterHub polls a server whose request was refused before it stops it: with no
    grant and no profile in its state, nothing of it can exist (the unit tier's API
    address refuses connections: a watch started here would raise)."""
    spawner = make_spawner(groups=["data-science"])
    with pytest.raises(web.HTTPError):
        await spawner._run_apply_user_options({"profile": "a100-spot"})
    assert await spawner.poll() == 1
    assert spawner._get_reflector_key("pods") not in spawner.reflectors


async def test_start_with_forged_options_fails_before_any_api_call(make_spawner):
    spawner = make_spawner(groups=["data-science"])
    spawner.user_options = {"profile": "a100-spot"}
    # the placeholder API server is unreachable: any API call would raise a different error
    with pytest.raises(ValueError, match="The profile 'a100-spot' is not available to you."):
        await spawner.start()


@pytest.mark.parametrize("options", [{}, {"profile": None}])
async def test_default_profile_is_recorded_as_granted(make_spawner, options):
    """A REST start with no profile gets the default; its user_options (which
    JupyterHub reports, stores and the culler reads) name that profile."""
    spawner = make_spawner(groups=["ml-eng"])
    spawner.user_options = dict(options)
    await spawner._run_apply_user_options(spawner.user_options)
    assert spawner.user_options == {"profile": "t4-shared"}
    assert spawner.gpu_grant.profile.slug == "t4-shared"


async def test_profile_traits_reset_between_spawns(make_spawner):
    """kubespawner#546: the spawner object is reused; nothing leaks between profiles."""
    spawner = make_spawner(groups=["ml-eng"])
    await spawner._run_apply_user_options({"profile": "a100-spot"})
    assert spawner.volumes and spawner.extra_pod_config
    await spawner._run_apply_user_options({"profile": "t4-shared"})
    assert spawner.tolerations == [GPU_TOLERATION]
    assert spawner.volumes == [] and spawner.volume_mounts == []
    assert spawner.extra_pod_config == {}
    assert "CHECKPOINT_DIR" not in spawner.environment
    assert spawner.extra_resource_limits == {"nvidia.com/gpu": "1"}
    assert spawner.node_selector == {"kubernetes.azure.com/agentpool": "t4dev"}
    assert spawner.gpu_grant.profile.slug == "t4-shared"
    pod = await spawner.get_pod_manifest()
    assert [t.to_dict() for t in pod.spec.tolerations] == [
        {**GPU_TOLERATION, "toleration_seconds": None}]
    limits = pod.spec.containers[0].resources.limits
    # one GPU unit, and the t4 profile's cpu, not a100-spot's 20
    assert (limits["nvidia.com/gpu"], limits["cpu"]) == ("1", 1.75)
    assert [k for k in limits if k.startswith("nvidia.com/")] == ["nvidia.com/gpu"]


async def test_admin_config_is_the_base_profiles_merge_into(make_spawner):
    config = {"GPUSpawner": {
        "node_selector": {"zone": "westeurope-1"},
        "environment": {"ORG": "contoso", "JUPYTERHUB_GPU_TEAM": "admin-value"},
        "tolerations": [{"key": "team", "operator": "Exists"}],
        "image": "admin/default:1",
        "extra_labels": {"cost-center": "42"},
    }}
    spawner = make_spawner(groups=["ml-eng"], config=config)
    for slug in ("a100-spot", "t4-shared"):
        await spawner._run_apply_user_options({"profile": slug})
    assert spawner.node_selector == {"zone": "westeurope-1",
                                     "kubernetes.azure.com/agentpool": "t4dev"}
    assert spawner.environment["ORG"] == "contoso"
    assert spawner.environment["JUPYTERHUB_GPU_TEAM"] == "ml-eng"
    assert spawner.tolerations == [{"key": "team", "operator": "Exists"}, GPU_TOLERATION]
    assert spawner.image == f"jupyterhubgpu.azurecr.io/jupyterhub-gpu-notebook:{VERSION}"
    assert spawner.extra_labels["cost-center"] == "42"
    assert spawner.namespace == "jhub-ml-eng"
    assert spawner.dns_name.endswith(".jhub-ml-eng.svc.cluster.local")


async def test_without_a_spec_it_is_kubespawner(make_spawner):
    profile_list = [
        {"display_name": "Small", "slug": "small", "default": True,
         "kubespawner_override": {"cpu_limit": 1.0}},
        {"display_name": "Big", "slug": "big", "kubespawner_override": {"cpu_limit": 8.0}},
    ]
    spawner = make_spawner(spec=False, config={"KubeSpawner": {"profile_list": profile_list}})
    assert spawner.platform is None and spawner.apply_user_options is None
    form = await spawner.get_options_form()
    assert 'value="big"' in form and "Choose a GPU profile" not in form
    spawner.user_options = spawner.run_options_from_form({"profile": ["big"]})
    await spawner.load_user_options()
    assert spawner.cpu_limit == 8.0


def _same_value(kube: KubeSpawner, gpu: GPUSpawner, name: str) -> bool:
    ours, theirs = getattr(gpu, name), getattr(kube, name)
    if inspect.ismethod(ours) and inspect.ismethod(theirs):  # each bound to its spawner
        return ours.__func__ is theirs.__func__ and (ours.__self__, theirs.__self__) == (gpu, kube)
    return ours == theirs


async def test_without_a_spec_every_kubespawner_setting_keeps_its_default(make_spawner):
    gpu = make_spawner(spec=False)
    kube = KubeSpawner(user=gpu.user, hub=gpu.hub, config=Config())
    names = sorted(KubeSpawner.class_traits(config=True))
    assert "poll_interval" in names and "profile_list" in names
    differ = {name: (getattr(kube, name), getattr(gpu, name))
              for name in names if not _same_value(kube, gpu, name)}
    assert differ == {}, "KubeSpawner's value, then GPUSpawner's"


async def test_with_a_spec_poll_notices_platform_stops_within_seconds(make_spawner, repo_root):
    assert make_spawner().poll_interval == PLATFORM_POLL_SECONDS
    assert PLATFORM_POLL_SECONDS < KubeSpawner.class_traits()["poll_interval"].default_value
    readme = (repo_root / "README.md").read_text()
    assert f"stopped at the next poll (every {PLATFORM_POLL_SECONDS} s)" in readme


async def test_with_a_spec_a_pod_create_may_wait_out_kueues_webhook(make_spawner):
    """The API server gives an admission webhook without ``timeoutSeconds`` (Kueue's
    have none) 10 s; KubeSpawner gives up on a create after 3."""
    spawner, kube = make_spawner(), KubeSpawner.class_traits()
    assert spawner.k8s_api_request_timeout == POD_REQUEST_TIMEOUT_SECONDS > 10
    assert kube["k8s_api_request_timeout"].default_value < 10
    assert spawner.k8s_api_request_retry_timeout == POD_REQUEST_RETRY_SECONDS
    assert POD_REQUEST_RETRY_SECONDS >= 2 * POD_REQUEST_TIMEOUT_SECONDS
    assert make_spawner(spec=False).k8s_api_request_timeout == kube[
        "k8s_api_request_timeout"].default_value


async def test_an_admins_pod_request_timeout_wins(make_spawner):
    spawner = make_spawner(config={"GPUSpawner": {"k8s_api_request_timeout": 7}})
    assert spawner.k8s_api_request_timeout == 7


async def test_the_pod_watcher_is_kubespawners_without_a_spec(make_spawner, monkeypatch):
    """The reflector each spawner would start (the unit tier has no API server)."""
    started = []

    async def start_reflector(self, kind, reflector_class, replace=False, **kwargs):
        started.append((kind, reflector_class, replace, kwargs))

    monkeypatch.setattr(KubeSpawner, "_start_reflector", start_reflector)
    plain = make_spawner(spec=False)
    await KubeSpawner(user=plain.user, hub=plain.hub, config=Config())._start_watching_pods()
    await plain._start_watching_pods()
    await make_spawner()._start_watching_pods()
    kube, without_spec, with_spec = started
    assert kube[1] is PodReflector and without_spec == kube
    assert with_spec[1] is RecordingPodReflector  # remembers deleted pods for stop notices
    assert (with_spec[0], with_spec[3]) == (kube[0], kube[3])


async def test_inline_spec_takes_precedence(make_spawner, example_spec):
    example_spec["profiles"] = example_spec["profiles"][:1]
    spawner = make_spawner(spec=False, config={"GPUSpawner": {"platform_spec": example_spec}})
    assert [p.slug for p in spawner.platform.profiles] == ["t4-shared"]


async def test_bad_inline_spec_names_profile_and_field(make_spawner, example_spec):
    example_spec["profiles"][0]["gpus"] = 2
    spawner = make_spawner(spec=False, config={"GPUSpawner": {"platform_spec": example_spec}})
    with pytest.raises(SpecError, match="c.GPUSpawner.platform_spec has 1 error.*\n.*"
                       "profile 't4-shared': gpus: 2 shares"):
        spawner.platform


async def test_missing_platform_file_is_a_config_error(make_spawner, tmp_path):
    config = {"GPUSpawner": {"platform_file": str(tmp_path / "nope.yaml")}}
    with pytest.raises(ValueError, match="c.GPUSpawner.platform_file: no such file: .*nope"):
        make_spawner(spec=False, config=config)


def test_configure_hub_fails_at_start_up_on_a_bad_spec(tmp_path, example_spec_path):
    bad = tmp_path / "platform.yaml"
    bad.write_text(example_spec_path.read_text().replace("migProfile: 3g.40gb",
                                                         "migProfile: 3g.20gb"))
    with pytest.raises(SpecError, match="pool 'a100mig': sharing: migProfile: mig profile "
                       "'3g.20gb' does not exist on A100-80GB"):
        configure_hub(Config(), str(bad))
    c = Config()
    platform = configure_hub(c, str(example_spec_path))
    assert c.JupyterHub.spawner_class is GPUSpawner
    assert c.GPUSpawner.platform_file == str(example_spec_path)
    assert len(platform.profiles) == 5
    (service,) = c.JupyterHub.services
    assert service["name"] == "gpu-resume"
    assert service["command"][1:] == ["-m", "jupyterhub_gpu.hub.resume", "--spec",
                                      str(example_spec_path)]
    (role,) = c.JupyterHub.load_roles
    assert role == {"name": "gpu-resume", "services": ["gpu-resume"],
                    "scopes": ["list:users", "read:servers", "servers"]}
    bare = Config()
    configure_hub(bare, str(example_spec_path), resume=False)
    assert "services" not in bare.JupyterHub


async def test_env_and_state_carry_the_cull_rules(make_spawner):
    from datetime import datetime

    from jupyterhub import orm

    spawner = make_spawner(groups=["data-science"])
    await spawner._run_apply_user_options({"profile": "a100-mig-3g"})
    spawner.orm_spawner = orm.Spawner(name="", started=datetime(2026, 12, 2, 10, 0))
    env = spawner.get_env()
    assert env["JUPYTERHUB_GPU_IDLE_TIMEOUT"] == "1800"
    assert env["JUPYTERHUB_GPU_MAX_AGE"] == str(12 * 3600)
    assert env["JUPYTERHUB_GPU_MAX_AGE_DEADLINE"] == "2026-12-02T22:00:00+00:00"
    assert env["JUPYTERHUB_GPU_IDLE_GPU_THRESHOLD"] == "5"
    assert spawner.get_state()["gpu_profile"] == "a100-mig-3g"
    pod = await spawner.get_pod_manifest()
    assert pod.spec.containers[0].lifecycle.pre_stop == {"exec": {"command": list(
        checkpoint.PRESTOP_COMMAND)}}


async def test_a_stop_gives_a_checkpointing_profile_its_grace_period(make_spawner, platform):
    """KubeSpawner deletes the pod with ``delete_grace_period`` (default 1 s) on a cull
    or a user's stop; a checkpointing profile's preStop needs its whole grace."""
    spawner = make_spawner("dana", ("ml-eng",), config={"KubeSpawner": {"delete_grace_period": 7}})
    for profile in platform.profiles_for(frozenset({"ml-eng"})):
        spawner.apply_profile({"profile": profile.slug})
        if profile.checkpoint.enabled:
            grace = profile.checkpoint.grace_period_seconds
            assert spawner.extra_pod_config["terminationGracePeriodSeconds"] == grace
            assert spawner.delete_grace_period == grace, profile.slug
        else:
            assert spawner.delete_grace_period == 7, profile.slug  # the admin's value


def _listed_internals() -> list[tuple[str, str]]:
    import re

    from jupyterhub_gpu.hub import spawner as module

    return re.findall(r"^- ``(\w+)\.(\w+)``", module.__doc__, re.M)


def test_the_upstream_internals_listed_exist_in_the_installed_versions():
    """CI runs the unit tier against the oldest pins and the newest: each private
    attribute the package relies on must exist in both."""
    from jupyterhub.spawner import Spawner
    from kubespawner.reflector import ResourceReflector

    owners = {"KubeSpawner": KubeSpawner, "Spawner": Spawner,
              "ResourceReflector": ResourceReflector}
    listed = _listed_internals()
    assert ("KubeSpawner", "_start_reflector") in listed
    for owner, name in listed:
        cls = owners[owner]
        assert hasattr(cls, name) or f"self.{name} =" in inspect.getsource(cls), \
            f"{owner}.{name} is gone"


def test_every_private_upstream_attribute_the_spawner_uses_is_listed(repo_root):
    """A private KubeSpawner/JupyterHub attribute that the hub's modules, or the
    classes GPUSpawner is made of, use or override must be in hub/spawner.py's
    docstring's list."""
    import re

    code = ""
    ours = {inspect.getsourcefile(cls) for cls in GPUSpawner.__mro__
            if cls.__module__.startswith("jupyterhub_gpu.")}
    ours |= {str(p) for p in (repo_root / "jupyterhub_gpu" / "hub").glob("*.py")}
    for path in sorted(ours):
        source = Path(path).read_text()
        code += source[source.index('"""', 3) + 3:]  # after the module docstring
    used = set(re.findall(r"(?:self|super\(\)|spawner)\.(_[a-z]\w*)", code))
    used |= set(re.findall(r"def (_[a-z]\w*)", code))  # overrides
    upstream = inspect.getsource(KubeSpawner)
    inherited = {name for name in used
                 if hasattr(KubeSpawner, name) or f"self.{name} =" in upstream}
    listed = {name for _, name in _listed_internals()}
    assert inherited - listed == set()
    assert {"_start_reflector", "_log_name", "_make_create_pod_request"} <= inherited


@pytest.mark.asyncio(loop_scope="function")  # see the refusing_api fixture
async def test_a_shared_watch_that_gave_up_is_started_again(make_spawner, refusing_api):
    """KubeSpawner keeps a namespace's reflector whose watch gave up (the API server
    was away for about a minute) and hands it, dead, to every spawn and poll; GPUSpawner
    starts it again. Here the new one cannot list (its API address refuses), so the
    poll says so instead of reading the dead watch's last state."""
    spawner = make_spawner(config=refusing_api)
    spawner.apply_profile({"profile": "t4-shared"})
    key = spawner._get_reflector_key("pods")
    dead = RecordingPodReflector(parent=spawner, namespace=spawner.namespace)
    dead.first_load_future.set_result(None)
    dead.watch_task = asyncio.create_task(asyncio.sleep(0))  # its watch loop returned
    await dead.watch_task
    spawner.reflectors[key] = dead
    try:
        with pytest.raises(Exception):  # the connection is refused
            await spawner._start_watching_pods()
        again = spawner.reflectors.get(key)
        assert again is not dead and again.first_load_future.exception() is not None
    finally:
        spawner.reflectors.pop(key, None)


def _own_methods(cls: type) -> list[str]:
    """What ``cls``'s body defines that runs: functions, properties, trait
    ``@default``/``@validate``/``@observe`` handlers."""
    from functools import cached_property

    from traitlets import EventHandler

    return [name for name, value in vars(cls).items()
            if inspect.isfunction(value)
            or isinstance(value, (property, cached_property, EventHandler))]


async def test_gpuspawner_is_kubespawner_and_collaborators_with_at_most_26_methods(make_spawner):
    """Issue #26: no mixins (the stops, the usage ledger and the shared watches are
    collaborators it holds, each handed callables, as QueuedStart is), and at most 25
    methods of its own; 26 since [aks] #28 item 2 (``delete_forever``: a deleted user's
    shared home is deleted in their team's namespace)."""
    from jupyterhub_gpu.hub.grants import ProfileRequests
    from jupyterhub_gpu.hub.stops import PlatformStops
    from jupyterhub_gpu.hub.watching import SpawnWatches
    from jupyterhub_gpu.usage.spawner import UsageRecording

    assert GPUSpawner.__bases__ == (KubeSpawner,)
    assert len(_own_methods(GPUSpawner)) <= 26, _own_methods(GPUSpawner)
    spawner = make_spawner()
    parts = {type(v) for v in vars(spawner).values()}
    assert {SpawnWatches, PlatformStops, UsageRecording, ProfileRequests} <= parts


def test_the_collaborators_read_no_private_state_of_the_spawner(repo_root):
    """They are handed callables; the one handed the spawner itself (the shared
    watches: it is the watches' traitlets parent) reads KubeSpawner's public
    attributes only."""
    import re

    for module in ("hub/stops.py", "hub/watching.py", "hub/grants.py", "usage/spawner.py"):
        source = (repo_root / "jupyterhub_gpu" / module).read_text()
        assert re.findall(r"spawner\._\w+", source) == [], module
