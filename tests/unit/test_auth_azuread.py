"""Entra ID tokens with group object IDs (groupMembershipClaims=SecurityGroup) give
the right profiles: the real AzureAdOAuthenticator, configured from the Helm values
the way the z2jh chart's hub config applies them, turns a fabricated ID token into
JupyterHub groups, which GPUSpawner then authorizes."""

from __future__ import annotations

import logging

import jwt
import pytest
import yaml
from oauthenticator.azuread import AzureAdOAuthenticator
from traitlets.config import Config

from jupyterhub_gpu import SpecError, parse_platform
from jupyterhub_gpu.hub.auth import GroupNames

INSTALL_ORDER = ["values.yaml", "generated.yaml", "auth-azuread.yaml"]
SPEC_IN_HUB = "/etc/jupyterhub-gpu/platform.yaml"  # where values.yaml mounts the spec
UNRELATED = "9f8e7d6c-5b4a-4321-8fed-cba987654321"  # some other Entra group


def hub_config(repo_root, spec_path, with_extra_config=True) -> Config:
    """``c`` after the chart's steps: each ``hub.config`` section updates ``c[section]``
    (values files in install order), then the auth values' ``hub.extraConfig``
    snippets run in key order (the spec's path is the test's)."""
    c = Config()
    for name in INSTALL_ORDER:
        hub = yaml.safe_load((repo_root / "helm-values" / name).read_text()).get("hub", {})
        for section, traits in (hub.get("config") or {}).items():
            c[section].update(traits)
        if name == "auth-azuread.yaml" and with_extra_config:
            for _, snippet in sorted((hub.get("extraConfig") or {}).items()):
                exec(snippet.replace(SPEC_IN_HUB, str(spec_path)), {"c": c})
    return c


def id_token(groups: list[str] | None, client_id: str, user: str = "alice@contoso.com",
             **claims) -> dict:
    """What Entra ID's token endpoint answers, with an ID token carrying ``groups``."""
    body = {"aud": client_id, "iss": "https://login.microsoftonline.com/tenant/v2.0",
            "preferred_username": user, "name": user.split("@")[0].title(), **claims}
    if groups is not None:
        body["groups"] = groups
    return {"access_token": "access", "token_type": "Bearer", "refresh_token": "refresh",
            "id_token": jwt.encode(body, "a-key-nobody-verifies-here-0123456789", algorithm="HS256")}


async def login(config: Config, groups: list[str] | None, **claims) -> tuple[dict, bool]:
    authenticator = AzureAdOAuthenticator(config=config)
    model = await authenticator._token_to_auth_model(
        id_token(groups, authenticator.client_id, **claims))
    return model, await authenticator.check_allowed(model["name"], model)


@pytest.fixture
def ids(platform):
    return dict(platform.group_ids)


async def test_ids_in_the_token_become_the_spec_group_names_and_profiles(
        repo_root, example_spec_path, ids, make_spawner):
    config = hub_config(repo_root, example_spec_path)
    model, allowed = await login(config, [ids["data-science"], UNRELATED])
    assert allowed and model["name"] == "alice@contoso.com"
    assert model["groups"] == sorted(["data-science", UNRELATED])
    spawner = make_spawner(user=model["name"], groups=model["groups"])
    form = await spawner.get_options_form()
    assert 'value="t4-shared"' in form and 'value="a100-mig-3g"' in form
    assert "a100-training" not in form
    with pytest.raises(ValueError, match="not available to you"):
        spawner.run_options_from_form({"profile": ["a100-training"]})

    model, allowed = await login(config, [ids["ml-eng"].upper()], user="bob@contoso.com")
    spawner = make_spawner(user=model["name"], groups=model["groups"])
    assert allowed and model["groups"] == ["ml-eng"]
    assert spawner.apply_profile({"profile": "a100-training"}).team.name == "ml-eng"


async def test_a_user_in_no_team_group_may_not_log_in(repo_root, example_spec_path):
    config = hub_config(repo_root, example_spec_path)
    model, allowed = await login(config, [UNRELATED], user="eve@contoso.com")
    assert model["groups"] == [UNRELATED] and not allowed


async def test_without_the_group_names_ids_match_no_team(repo_root, example_spec_path, ids):
    """What the chart's values gave before: the IDs are the group names, and the
    generated allowed_groups (the spec's names) let no one in."""
    config = hub_config(repo_root, example_spec_path, with_extra_config=False)
    model, allowed = await login(config, [ids["data-science"]])
    assert model["groups"] == [ids["data-science"]] and not allowed


async def test_a_token_without_groups_claim_gives_no_groups_and_says_why(caplog):
    names = GroupNames({"data-science": "00000000-0000-0000-0000-00000000d5d5"})
    with caplog.at_level(logging.WARNING):
        groups = names({"user": {"preferred_username": "carol@contoso.com",
                                 "_claim_names": {"groups": "src1"}}})
    assert groups == []
    assert any("carol@contoso.com has no 'groups' claim (group overage" in r.getMessage()
               for r in caplog.records)


def test_group_ids_are_checked(example_spec):
    example_spec["groupIds"] = {"data-science": "not-an-id", "ml-eng": UNRELATED,
                                "extra": UNRELATED.upper()}
    with pytest.raises(SpecError) as info:
        parse_platform(example_spec)
    assert info.value.errors == [
        "groupIds: data-science: 'not-an-id' is not an object ID "
        "(like 2f1c8a3e-5b7d-4e9f-8a1b-0c2d3e4f5a6b)",
        f"groupIds: extra: object ID {UNRELATED.upper()} is also 'ml-eng'",
        "team 'experimentation': groups: 'experimentation' has no object ID in groupIds, "
        "so no token can carry it; known: data-science, extra, ml-eng",
        "team 'data-science': leadGroups: 'data-science-leads' has no object ID in "
        "groupIds, so no token can carry it; known: data-science, extra, ml-eng",
        "profile 'a100-spot': allowedGroups: 'experimentation' has no object ID in "
        "groupIds, so no token can carry it; known: data-science, extra, ml-eng",
    ]


def test_without_group_ids_the_groups_are_used_as_they_come(example_spec):
    del example_spec["groupIds"]
    platform = parse_platform(example_spec)
    assert dict(platform.group_ids) == {}
    assert platform.team_for({"ml-eng"}).name == "ml-eng"
