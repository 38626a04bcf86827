"""Property: any user_options, however forged, yield exactly the profile (and so the
queue, priority and GPU resource) the user's groups allow, or a clear rejection."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from tornado import web

from jupyterhub_gpu.builders.pod import OptionsRejected, UserRef, authorize, spawn_settings
from jupyterhub_gpu.contract import PRIORITY_LABEL, PROFILE_LABEL, QUEUE_LABEL

GROUPS = ["data-science", "ml-eng", "experimentation", "marketing", "admin", ""]
SLUGS = ["t4-shared", "a100-mig-3g", "a100-training", "a100-spot", "h100", "", "T4-SHARED"]
junk = st.one_of(st.none(), st.integers(), st.text(max_size=8), st.lists(st.text(max_size=4)),
                 st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=2))
options = st.one_of(
    st.dictionaries(st.sampled_from(["profile", "image", "queue", "priority", "pool",
                                     "kueue.x-k8s.io/queue-name", "cpu_limit"]),
                    st.one_of(st.sampled_from(SLUGS), junk), max_size=3),
    st.fixed_dictionaries({"profile": st.sampled_from(SLUGS)}),
    junk,
)
groups = st.frozensets(st.sampled_from(GROUPS), max_size=3)


def _allowed(platform, user_groups):
    """The oracle, written independently of the code under test: the slugs a user may
    start, in spec order."""
    if not any(set(t.groups) & user_groups for t in platform.teams):
        return []
    return [p.slug for p in platform.profiles
            if not p.allowed_groups or set(p.allowed_groups) & user_groups]


def _expected(platform, user_groups, opts):
    """The profile the user gets for ``opts``, or None when they must be rejected.
    Only ``profile`` may be sent; none (or null) means the default profile."""
    allowed = _allowed(platform, user_groups)
    if not isinstance(opts, dict) or set(opts) - {"profile"} or not allowed:
        return None
    slug = opts.get("profile")
    if slug is None:
        defaults = [s for s in allowed if platform.profile(s).default]
        return (defaults or allowed)[0]
    return slug if slug in allowed else None


def _team(platform, user_groups):
    return next(t for t in platform.teams if set(t.groups) & user_groups)


@given(user_groups=groups, opts=options)
@example(user_groups=frozenset({"ml-eng"}), opts={"profile": "a100-spot"})
@example(user_groups=frozenset({"data-science"}), opts={})
def test_pure_authorization_never_escalates(platform, user_groups, opts):
    """Exactly what the oracle allows is granted: no more, and no less."""
    expected = _expected(platform, user_groups, opts)
    try:
        grant = authorize(platform, UserRef("u", user_groups), opts)
    except OptionsRejected:
        assert expected is None, f"{opts!r} must give {expected!r} to {set(user_groups)}"
        return
    team = _team(platform, user_groups)
    assert grant.profile.slug == expected
    assert grant.team == team
    settings_ = spawn_settings(platform, grant)
    assert settings_.extra_labels[QUEUE_LABEL] == team.local_queue
    assert settings_.extra_labels[PRIORITY_LABEL] == grant.profile.priority
    assert settings_.namespace == team.namespace
    assert set(settings_.extra_resource_limits) == {platform.pool(grant.profile.pool).resource_name}


def test_reused_spawner_never_escalates(platform, make_spawner):
    """The same spawner object serves a stream of forged requests (as a hub reuses it),
    and every pod it would create matches what the user may have."""
    loop = asyncio.new_event_loop()

    async def make():
        return make_spawner(user="mallory", groups=["experimentation"])

    spawner = loop.run_until_complete(make())
    user_groups = frozenset({"experimentation"})
    accepted: set[str] = set()

    @settings(max_examples=60, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(opts=options)
    @example(opts={"profile": "a100-spot"})
    @example(opts={"profile": "t4-shared"})
    @example(opts={"%": ""})  # tornado escapes '%' in an HTTPError's log_message
    def check(opts):
        expected = _expected(platform, user_groups, opts)
        try:
            loop.run_until_complete(spawner._run_apply_user_options(opts))
        except web.HTTPError as e:  # how the hub answers a rejected request
            assert e.status_code == 400 and expected is None, (opts, expected)
            # the authorization's own words: not a crash the hub turned into a 400
            with pytest.raises(OptionsRejected) as why:
                authorize(platform, UserRef("mallory", user_groups), opts)
            assert e.reason == str(why.value)  # log_message has any '%' doubled
            return
        pod = loop.run_until_complete(spawner.get_pod_manifest())
        labels = pod.metadata.labels
        assert labels[PROFILE_LABEL] == expected
        assert labels[QUEUE_LABEL] == "experimentation"
        profile = platform.profile(labels[PROFILE_LABEL])
        assert labels[PRIORITY_LABEL] == profile.priority
        limits = pod.spec.containers[0].resources.limits
        gpu = {k for k in limits if k.startswith("nvidia.com/")}
        assert gpu == {platform.pool(profile.pool).resource_name}
        assert spawner.namespace == "jhub-experimentation"
        accepted.add(labels[PROFILE_LABEL])

    try:
        check()
        assert accepted == {"t4-shared", "a100-spot"}, "the allowed profiles were started"
    finally:  # stop the client-closing task KubeSpawner's shared client started
        tasks = asyncio.all_tasks(loop)
        for task in tasks:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        loop.close()
