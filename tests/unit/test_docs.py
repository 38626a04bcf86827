"""The docs: a warning-free Sphinx build, a config reference that is generated and
current, and pages whose facts and commands match the code."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from jupyterhub_gpu.builders.deviceplugin import pool_labels
from jupyterhub_gpu.bundle import reference
from jupyterhub_gpu.bundle.cli import add_bundle_parsers
from jupyterhub_gpu.cli import build_parser

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"


def test_sphinx_build_is_warning_free(tmp_path):
    missing = [m for m in ("sphinx", "myst_parser") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed: pip install -e '.[docs]'")
    result = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q",
                             "-b", "html", str(DOCS), str(tmp_path / "html")],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    traits = (tmp_path / "html" / "reference" / "traits.html").read_text()
    assert "platform_file" in traits and "extra_resource_limits" in traits


def test_spec_reference_is_not_stale():
    assert (DOCS / "reference" / "spec.md").read_text() == reference.spec_reference(), (
        "docs/reference/spec.md is stale; regenerate it with: python -c \"from "
        "jupyterhub_gpu.bundle.reference import spec_reference; "
        "open('docs/reference/spec.md', 'w').write(spec_reference())\"")


def test_every_spec_section_is_described():
    from jupyterhub_gpu.spec.parse import FIELDS

    assert set(reference.SECTIONS) == set(FIELDS)


@pytest.mark.parametrize("section", list(reference.SECTIONS))
def test_the_reference_lists_each_field_as_its_dataclass_declares_it(section):
    """The rows of a section are its dataclass's fields, in their order, each with its
    declared type, default and description."""
    from jupyterhub_gpu.spec.fields import SCHEMA
    from jupyterhub_gpu.spec.keys import Key

    cls = SCHEMA[section][0]
    page = reference.spec_reference()
    title = f"## {reference.SECTIONS[section]}\n\n"
    table = page.split(title, 1)[1].split("\n\n", 1)[0].splitlines()[2:]
    declared = [f.metadata[Key] for f in dataclasses.fields(cls)]
    assert table == [f"| `{k.name}` | {k.kind} | {reference.default_text(section, k.name)} | "
                     f"{k.description.replace('|', '/')} |" for k in declared]


def test_device_plugin_page_matches_the_example_spec(platform):
    page = (DOCS / "gpu-operator.md").read_text()
    for pool in platform.gpu_pools:
        labels = pool_labels(pool)
        row = (f"| {pool.name} | {labels['nvidia.com/device-plugin.config']} | "
               f"{labels['nvidia.com/mig.config']} | {pool.resource_name} | "
               f"{pool.units_per_node} |")
        assert row in page


def _subcommands() -> set[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    if "check-bundle" not in sub.choices:  # until the main CLI wires them itself
        add_bundle_parsers(sub)
    return set(sub.choices)


def test_documented_commands_exist():
    known = _subcommands()
    pages = [*DOCS.glob("*.md"), REPO / "helm-values" / "values.yaml",
             REPO / "config" / "terraform" / "variables.tf"]
    command = re.compile(r"(?:`|^\s*(?:\$ |#\s+)?)jupyterhub-gpu ([a-z][a-z-]+)", re.M)
    used = {m.group(1) for page in pages for m in command.finditer(page.read_text())}
    assert used and used <= known, f"documented but not commands: {sorted(used - known)}"


def _helm_commands(text: str) -> list[dict]:
    """The admin guide's `helm install` / `helm upgrade` commands: release, chart,
    namespace, version and value files, continuation lines joined."""
    found = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            words = line.split()
            if words[:2] not in (["helm", "install"], ["helm", "upgrade"]):
                continue
            args = [w for w in words[2:] if w != "--install"]
            flags = {words[i]: words[i + 1] for i in range(2, len(words) - 1)
                     if words[i].startswith("-")}
            found.append({"release": args[0], "chart": args[1],
                          "namespace": flags.get("--namespace"), "version": flags.get("--version"),
                          "files": sorted(words[i + 1] for i in range(len(words) - 1)
                                          if words[i] in ("-f", "--set-file"))})
    return found


def test_the_upgrade_section_upgrades_each_release_as_it_was_installed():
    """Each `helm upgrade` of the admin guide's "Upgrading" section names a release the
    guide installs, with its chart, namespace and value files; and the guide tears the
    cluster down with Terraform."""
    guide = (DOCS / "admin-guide.md").read_text()
    install, upgrade = guide.split("\n## Upgrading\n")
    upgrade, teardown = upgrade.split("\n## Tearing down\n")
    installed = {c["release"]: c for c in _helm_commands(install)}
    upgrades = _helm_commands(upgrade)
    assert {c["release"] for c in upgrades} == set(installed) - {"jupyterhub"}
    for command in upgrades:
        first = installed[command["release"]]
        assert (command["chart"], command["namespace"], command["files"]) == (
            first["chart"], first["namespace"], first["files"]), command["release"]
        assert command["version"] == "<new-version>"
    assert "terraform -chdir=config/terraform destroy" in teardown
