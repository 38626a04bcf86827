"""Property: any user_options, however forged, yield exactly the profile (and so the
queue, priority and GPU resource) the user's groups allow, or a clear rejection.

Each property runs as many examples as the Hypothesis profile says: 1,000 in CI
(``tests/conftest.py``); :func:`test_ci_runs_a_thousand_forged_examples` checks that
neither overrides it."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from tornado import web

from jupyterhub_gpu.builders.pod import spawn_settings
from jupyterhub_gpu.spec.grant import OptionsRejected, UserRef, authorize
from jupyterhub_gpu.contract import PRIORITY_LABEL, PROFILE_LABEL, QUEUE_LABEL

from ..forged import expected_profile, junk

GROUPS = ["data-science", "ml-eng", "experimentation", "marketing", "admin", ""]
SLUGS = ["t4-shared", "a100-mig-3g", "a100-training", "a100-spot", "h100", "", "T4-SHARED"]
options = st.one_of(
    st.dictionaries(st.sampled_from(["profile", "image", "queue", "priority", "pool",
                                     "kueue.x-k8s.io/queue-name", "cpu_limit"]),
                    st.one_of(st.sampled_from(SLUGS), junk), max_size=3),
    st.fixed_dictionaries({"profile": st.sampled_from(SLUGS)}),
    junk,
)
groups = st.frozensets(st.sampled_from(GROUPS), max_size=3)
_expected = expected_profile


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
    settings_ = spawn_settings(platform, grant, "alice")
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

    @settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
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


def test_ci_runs_a_thousand_forged_examples():
    """In CI (profile ``ci``), both properties above run at least 1,000 examples: the
    profile says so and neither property sets its own count."""
    from hypothesis import settings as current

    assert current.get_profile("ci").max_examples >= 1000
    own = getattr(test_pure_authorization_never_escalates, "_hypothesis_internal_use_settings",
                  current.default)
    assert own.max_examples == current.default.max_examples
