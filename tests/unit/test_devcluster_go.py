"""The Go the dev cluster's build needs: read from the pinned modules' go.mod files
(jupyterhub_gpu.devcluster.gomod, build.check_go), checked before any binary is built."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from jupyterhub_gpu.devcluster.gomod import (GoMod, GoVersionError, highest, parse_gomod,
                                             shortfall_message, shortfalls, version_key)

ROOT = Path(__file__).resolve().parents[2]
# The shape of a module's go.mod: the go and toolchain lines between the module path and
# its requirements (etcd's server module has both, Karpenter's only the go line).
GOMOD = """\
module example.invalid/server/v3

go 1.26.0 // the language version

toolchain go1.26.10

require (
\tgithub.com/coreos/go-semver v0.3.1
\tgolang.org/x/net v0.47.0 // indirect
)

replace example.invalid/api/v3 => ../api
"""


def _real_go() -> str:
    found = shutil.which("go") or (Path("/usr/local/go/bin/go").is_file() and "/usr/local/go/bin/go")
    if not found:
        pytest.skip("no `go` on PATH: this test reads the pinned modules' go.mod files")
    return found


def test_the_go_and_toolchain_lines_are_read():
    assert parse_gomod(GOMOD) == GoMod("1.26.0", "go1.26.10")
    assert parse_gomod(GOMOD.replace("toolchain go1.26.10\n", "")) == GoMod("1.26.0", None)


def test_a_gomod_without_a_go_line_is_go_1_16():
    """As the Go reference says of a missing go directive."""
    assert parse_gomod("module example.invalid/old\n\nrequire golang.org/x/net v0.1.0\n").go == "1.16"


def test_a_go_line_that_is_not_a_version_is_refused():
    with pytest.raises(GoVersionError, match="not a Go version: '1.x'"):
        parse_gomod("module example.invalid/m\n\ngo 1.x\n")


@pytest.mark.parametrize("older, newer", [
    ("1.26", "1.26rc1"), ("1.26rc1", "1.26rc2"), ("1.26beta1", "1.26rc1"), ("1.26rc2", "1.26.0"),
    ("1.26.0", "1.26.6"), ("1.26.6", "go1.26.7"), ("go1.26.9", "1.26.10"), ("1.9.2", "1.10"),
    ("1.26.10", "1.27"),
])
def test_go_versions_are_ordered_as_go_orders_them(older, newer):
    assert version_key(older) < version_key(newer)


def test_goversion_forms_of_go_env_are_read():
    assert version_key("go1.26.8") == version_key("1.26.8")
    assert version_key("go1.26.8 X:nocoverageredesign") == version_key("1.26.8")
    assert version_key("devel go1.27-abcdef Tue Jan 1 00:00:00 2026") == version_key("1.27")


def test_only_modules_declaring_a_newer_go_fall_short_the_highest_first():
    declared = {"a@v1": GoMod("1.26.0", "go1.26.10"), "b@v2": GoMod("1.26.7"),
                "c@v3": GoMod("1.26.6"), "d@v4": GoMod("1.22.0", "go1.22.5")}
    short = shortfalls("go1.26.5", declared, {"b@v2": ("prometheus", "promtool")})
    assert [(s.module, s.needs, s.binaries) for s in short] == [
        ("b@v2", "1.26.7", ("prometheus", "promtool")), ("c@v3", "1.26.6", ())]
    assert shortfalls("go1.26.7", declared, {}) == [], "a toolchain line is no requirement"
    assert highest(declared) == "1.26.7"
    assert shortfall_message("go1.26.5", short) == (
        "Go >= 1.26.7 is needed to build the dev cluster; found go1.26.5:\n"
        "  b@v2 (prometheus, promtool) declares go 1.26.7 in its go.mod\n"
        "  c@v3 declares go 1.26.6 in its go.mod\n"
        "(the build runs with GOTOOLCHAIN=local: install that Go release or newer)")


def _go_lines_as_go_reads_them(go: str, pins) -> dict[str, str]:
    """``path@version`` -> the go line, as ``go list -m -json`` reports it (GoVersion)."""
    modules = sorted({f"{p.module}@{p.version}" for p in pins.values()})
    out = subprocess.run([go, "list", "-m", "-json", *modules], capture_output=True, text=True,
                         check=True, cwd=ROOT, env={**os.environ, "GOTOOLCHAIN": "local"})
    entries = json.loads("[" + re.sub(r"}\s*{", "},{", out.stdout) + "]")
    return {f"{e['Path']}@{e['Version']}": e["GoVersion"] for e in entries}


def test_the_pins_go_lines_are_read_from_their_real_gomod_files():
    """Every pinned module's go.mod (fetched from the module proxy), read as Go reads it."""
    from jupyterhub_gpu.devcluster import build

    pins = {**build.PINS, **build.OPT_IN_PINS}
    declared = build.declared_go(pins)
    assert {module: mod.go for module, mod in declared.items()} == \
        _go_lines_as_go_reads_them(_real_go(), pins)


def test_the_readme_names_the_go_the_pins_need():
    """README's Go version (its requirements, "Go X+", and the build's paragraph) is the
    newest go line of the default pins' real go.mod files."""
    from jupyterhub_gpu.devcluster import build

    needed = max(_go_lines_as_go_reads_them(_real_go(), build.PINS).values(), key=version_key)
    readme = (ROOT / "README.md").read_text()
    assert re.findall(r"\bGo (\d+\.\d+(?:\.\d+)?)\+", readme) == [needed]
    assert set(re.findall(r"\bGo (\d+\.\d+(?:\.\d+)?)", readme)) == {needed}


def test_a_too_old_go_is_refused_naming_the_modules_before_anything_is_built(tmp_path):
    """A `go` that reports 1.26.0 (a real executable first on PATH, passing every other
    command to the real go) is refused by `build()`, naming each pinned module whose
    go.mod needs more, having asked go for nothing but its version and the go.mod files."""
    from jupyterhub_gpu.devcluster import build

    real = _real_go()
    needing = {module: go for module, go in _go_lines_as_go_reads_them(real, build.PINS).items()
               if version_key(go) > version_key("1.26.0")}
    assert needing, "the pins need more than Go 1.26.0 (Karpenter v1.14.1 declares go 1.26.6)"
    calls = tmp_path / "calls"
    fake = tmp_path / "bin" / "go"
    fake.parent.mkdir()
    fake.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        echo "$*" >> {calls}
        if [ "$*" = "env GOVERSION" ]; then echo go1.26.0; exit 0; fi
        exec {real} "$@"
    """))
    fake.chmod(0o755)
    code = textwrap.dedent("""
        from jupyterhub_gpu.devcluster import build
        try:
            build.build(progress=lambda line: print("progress:", line))
        except build.BuildError as e:
            print(e)
    """)
    gopath = subprocess.run([real, "env", "GOPATH"], capture_output=True, text=True, check=True)
    env = {"PATH": f"{fake.parent}:/usr/bin:/bin", "HOME": str(tmp_path),
           "XDG_CACHE_HOME": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT),
           "GOPATH": gopath.stdout.strip()}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    first, *named, last = out.stdout.splitlines()
    newest = max(needing.values(), key=version_key)
    assert first == f"Go >= {newest} is needed to build the dev cluster; found go1.26.0:", \
        out.stdout + out.stderr
    assert {line.split()[0]: line.split()[-4] for line in named} == needing
    assert last == "(the build runs with GOTOOLCHAIN=local: install that Go release or newer)"
    assert [line.split()[:3] for line in calls.read_text().splitlines()] == [
        ["env", "GOVERSION"], ["list", "-m", "-json"]], "no module downloaded, nothing built"
    assert not (tmp_path / "cache" / "jupyterhub-gpu" / "bin").exists()
