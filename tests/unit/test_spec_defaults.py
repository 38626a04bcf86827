"""Each field of the spec is declared once, on its dataclass field (its key, reader,
default and description): the parser fills an absent field with its default and the
generated reference prints it."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jupyterhub_gpu.bundle import reference
from jupyterhub_gpu.spec.fields import KEYS
from jupyterhub_gpu.spec.images import notebook_image
from jupyterhub_gpu.spec.keys import key, keys_of
from jupyterhub_gpu.spec.parse import SCHEMA, field_default, parse_platform
from jupyterhub_gpu.spec.quantities import format_duration, parse_duration
from jupyterhub_gpu.spec.readers import read_str
from jupyterhub_gpu.spec.sharing import Parameter
from jupyterhub_gpu.spec.model import CHECKPOINT_OFF, REQUIRED, Checkpoint, Profile, default_of


def _minimal(example_spec: dict) -> dict:
    """The example spec with every optional field of its first team, priority and
    profile left out."""
    spec = {**example_spec, "checkpointStorage": None}
    spec["teams"] = [{k: example_spec["teams"][0][k]
                      for k in ("name", "groups", "namespace", "quota")}]
    spec["priorities"] = [{k: p[k] for k in ("name", "value")}
                          for p in example_spec["priorities"]]
    spec["profiles"] = [{k: example_spec["profiles"][0][k] for k in (
        "slug", "displayName", "pool", "cpu", "memory", "priority")}]
    spec["jobProfiles"] = [{k: example_spec["jobProfiles"][2][k] for k in (
        "slug", "displayName", "pool", "cpu", "memory", "priority")}]
    return spec


def test_every_field_of_a_sections_dataclass_is_a_spec_field():
    for section, (cls, keys) in SCHEMA.items():
        assert list(keys.values()) == [f.name for f in dataclasses.fields(cls)], section


def test_a_dataclass_field_declared_without_its_key_is_refused():
    @dataclasses.dataclass(frozen=True)
    class Half:
        named: str = key("named", "string", read_str, "Declared.")
        bare: str = ""

    with pytest.raises(TypeError, match="Half.bare is no spec field"):
        keys_of(Half)


def test_an_absent_field_gets_its_dataclass_default(example_spec):
    platform = parse_platform(_minimal(example_spec))
    parsed = {"team": platform.teams[0], "priority": platform.priorities[0],
              "profile": platform.profiles[0], "jobProfile": platform.job_profiles[0]}
    # defaults derived from the rest of the spec (their dataclass default is None)
    derived = {("profile", "image"): ":".join(notebook_image(platform.registry))}
    checked = 0
    for section, item in parsed.items():
        cls, keys = SCHEMA[section]
        for yaml_key, attr in keys.items():
            default = derived.get((section, yaml_key), default_of(cls, attr))
            if default is not REQUIRED:
                assert getattr(item, attr) == default, (section, yaml_key)
                checked += 1
    assert checked >= 20
    assert platform.checkpoint_storage is field_default("spec", "checkpointStorage") is None


def test_a_profile_without_a_checkpoint_block_has_none_and_a_block_turns_it_on(
        example_spec):
    """The example spec, the docs and the pod builder agree: checkpoints are off
    unless a profile has a ``checkpoint`` block, which is on unless it says not."""
    spec = {**_minimal(example_spec), "checkpointStorage": example_spec["checkpointStorage"]}
    profile = spec["profiles"][0]
    assert parse_platform(spec).profiles[0].checkpoint == CHECKPOINT_OFF
    assert default_of(Profile, "checkpoint").enabled is False
    profile["checkpoint"] = {}
    assert parse_platform(spec).profiles[0].checkpoint == Checkpoint()
    assert Checkpoint().enabled is True
    profile["checkpoint"] = {"gracePeriod": "20s"}
    assert parse_platform(spec).profiles[0].checkpoint == Checkpoint(True, 20)
    rows = reference.spec_reference()
    assert "| `checkpoint` | mapping | off |" in rows
    assert "| `enabled` | boolean | true |" in rows


def test_the_reference_prints_the_dataclass_defaults():
    assert reference.default_text("profile", "idleTimeout") == format_duration(
        default_of(Profile, "idle_timeout_seconds")) == "30m"
    assert reference.default_text("team", "cohort") == "`jupyterhub-gpu`"
    assert reference.default_text("profile", "gpus") == "1"
    assert reference.default_text("profile", "slug") == "required"
    assert reference.default_text("checkpoint", "gracePeriod") == "30s"


@pytest.mark.parametrize("where", sorted(
    (section, name) for section, keys in KEYS.items() for name, (_, spec) in keys.items()
    if spec.words is not None and not isinstance(spec.words, Parameter)))
def test_words_stand_only_for_a_default_that_is_no_plain_value(where):
    """A word in the reference never restates a number or name the dataclass holds
    (a sharing parameter's row names the modes that take it instead)."""
    value = field_default(*where)
    assert value is REQUIRED or value is None or not isinstance(value, (bool, int, float, str))
    assert value is REQUIRED or not value or dataclasses.is_dataclass(value)


@given(st.integers(min_value=1, max_value=10**7))
def test_a_formatted_duration_reads_back(seconds):
    assert parse_duration(format_duration(seconds)) == seconds


def test_the_parser_accepts_the_declared_keys_and_reads_them_with_the_declared_readers(
        example_spec):
    """An unknown key is refused naming the keys the dataclass declares; a declared
    key's value goes through the reader declared with it."""
    from jupyterhub_gpu.spec.model import Team
    from jupyterhub_gpu.spec.parse import SpecError

    example_spec["teams"][0]["colour"] = "red"
    example_spec["teams"][0]["cohort"] = "Not A Label"
    with pytest.raises(SpecError) as e:
        parse_platform(example_spec)
    name = example_spec["teams"][0]["name"]
    cohort = keys_of(Team)["cohort"][1]
    with pytest.raises(ValueError) as read:
        cohort.read("Not A Label")
    assert sorted(e.value.errors) == sorted([
        f"team {name!r}: colour: unknown field; allowed: {', '.join(keys_of(Team))}",
        f"team {name!r}: cohort: {read.value}"])
