"""config/notebook.Dockerfile, without a Docker engine: its COPY and RUN steps are
replayed in a fresh virtualenv standing in for the base image's ${CONDA_DIR}, and the
pod's preStop hook then runs there. The example spec, the Helm values and the admin
guide name the image it builds, at this package's version. (`docker build` itself
is not run by the tests.)"""

from __future__ import annotations

import tomllib
import json
import re
import shlex
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
import yaml

from jupyterhub_gpu import checkpoint

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "config" / "notebook.Dockerfile"
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
VERSION = PROJECT["version"]
IMAGE = f"jupyterhubgpu.azurecr.io/jupyterhub-gpu-notebook:{VERSION}"


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    logical, pending = [], ""
    for line in path.read_text().splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending += line.rstrip("\\").rstrip() + " " if line.endswith("\\") else line
        if not line.endswith("\\"):
            logical.append(pending.strip())
            pending = ""
    return [tuple(re.split(r"\s+", text, maxsplit=1)) for text in logical]


def expand(text: str, env: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}", lambda m: env[m.group(1)], text)


def copy_into(args: str, env: dict[str, str]) -> None:
    """COPY as Docker does it: a directory's contents, a file into a ``dir/``."""
    *sources, dest = [a for a in shlex.split(args) if not a.startswith("--")]
    target = Path(expand(dest, env))
    for source in map(REPO.joinpath, sources):
        if source.is_dir():
            shutil.copytree(source, target, dirs_exist_ok=True)
        else:
            into_dir = dest.endswith("/") or len(sources) > 1
            (target if into_dir else target.parent).mkdir(parents=True, exist_ok=True)
            shutil.copy(source, target / source.name if into_dir else target)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """A fresh venv with JupyterLab, as the base image has it, after the Dockerfile's
    steps (ARG, COPY, RUN) replayed into it."""
    root = tmp_path_factory.mktemp("notebook-image")
    conda_dir = root / "conda"
    subprocess.run([sys.executable, "-m", "venv", str(conda_dir)], check=True)
    # the base image's JupyterLab: the one these tests run with (CI: oldest and newest)
    subprocess.run([str(conda_dir / "bin" / "python"), "-m", "pip", "install", "-q",
                    "--disable-pip-version-check", f"jupyterlab=={version('jupyterlab')}"],
                   check=True, capture_output=True, timeout=600)
    env = {"CONDA_DIR": str(conda_dir), "NB_UID": "1000", "NB_GID": "100",
           "PATH": f"{conda_dir / 'bin'}:/usr/bin:/bin", "HOME": str(root)}
    for op, args in instructions(DOCKERFILE):
        if op == "ARG":
            name, _, value = args.partition("=")
            env[name] = str(root) + value  # absolute paths of the image, under root
        elif op == "COPY":
            copy_into(args, env)
        elif op == "RUN":
            done = subprocess.run(["sh", "-c", args], env=env, cwd=root,
                                  capture_output=True, text=True, timeout=600)
            assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return conda_dir


def test_the_dockerfile_starts_from_a_pinned_jupyter_stack_and_copies_what_pip_needs():
    steps = instructions(DOCKERFILE)
    base = next(args for op, args in steps if op == "FROM")
    assert base.startswith("quay.io/jupyter/") and ":" in base and not base.endswith(":latest")
    copied = {s for op, args in steps if op == "COPY"
              for s in shlex.split(args)[:-1] if not s.startswith("--")}
    assert copied == {"pyproject.toml", PROJECT["readme"], *PROJECT["license-files"],
                      "jupyterhub_gpu"}
    assert steps[-1] == ("USER", "${NB_UID}")


def test_the_image_gets_this_package_and_its_jupyter_config_files(built):
    python = built / "bin" / "python"
    version = subprocess.run([str(python), "-c", "from importlib.metadata import version; "
                              "print(version('jupyterhub-gpu'))"],
                             capture_output=True, text=True, check=True, cwd=built)
    assert version.stdout.strip() == VERSION
    etc = REPO / "jupyterhub_gpu" / "cull" / "etc"
    for installed, source in [
            ("etc/jupyter/jupyter_server_config.d/jupyterhub-gpu.json",
             "jupyter_server_config.d/jupyterhub-gpu.json"),
            ("share/jupyter/lab/settings/overrides.d/jupyterhub-gpu.json",
             "lab_settings_overrides.d/jupyterhub-gpu.json"),
            ("etc/ipython/ipython_kernel_config.json", "ipython/ipython_kernel_config.json")]:
        assert json.loads((built / installed).read_text()) == json.loads(
            (etc / source).read_text()), installed
    # the GPU status item: the prebuilt JupyterLab extension, every file of it
    from jupyterhub_gpu import datafiles

    labext = built / datafiles.LABEXTENSIONS / "jupyterhub-gpu-status"
    shipped = REPO / "jupyterhub_gpu" / "labext" / "labextension"
    assert sorted(p.relative_to(labext) for p in labext.rglob("*") if p.is_file()) == \
        sorted(p.relative_to(shipped) for p in shipped.rglob("*") if p.is_file())


def test_its_python_runs_the_prestop_hook_itself(built, tmp_path):
    log = tmp_path / "termination-log"
    home = tmp_path / "home"
    home.mkdir()
    hook = subprocess.run(list(checkpoint.prestop_command(str(log))), cwd=home,
                          env={"PATH": f"{built / 'bin'}:/usr/bin:/bin", "HOME": str(home),
                               "JUPYTERHUB_GPU_RUN_DIR": str(tmp_path / "run")},
                          capture_output=True, text=True, timeout=60)
    assert (hook.returncode, hook.stderr, log.exists()) == (0, "", False)


def test_the_example_spec_and_values_run_that_image(repo_root):
    """The spec names the registry once; the profiles and the generated values run the
    image from it (spec.images)."""
    from jupyterhub_gpu.spec.parse import load_platform

    platform = load_platform(repo_root / "config" / "platform.yaml")
    assert {p.image for p in platform.profiles} == {IMAGE}
    values = yaml.safe_load((repo_root / "helm-values" / "generated.yaml").read_text())
    image = values["singleuser"]["image"]
    assert f"{image['name']}:{image['tag']}" == IMAGE


def test_the_admin_guide_builds_and_pushes_that_image(repo_root):
    """Tagged with the version the guide's own command prints (run here)."""
    guide = (repo_root / "docs" / "admin-guide.md").read_text()
    name, tag = IMAGE.split("/", 1)[1].split(":")
    line = "VERSION=$(jupyterhub-gpu --version | cut -d' ' -f2)\n"
    assert line in guide
    script = line.replace("jupyterhub-gpu", f"{shlex.quote(sys.executable)} -m jupyterhub_gpu")
    printed = subprocess.run(["bash", "-c", script + 'printf %s "$VERSION"'],
                             capture_output=True, text=True, check=True).stdout
    assert printed == tag
    assert (f"az acr build --registry jupyterhubgpu --image {name}:$VERSION "
            f"--file config/notebook.Dockerfile ." in guide)
    assert "`docker build` is not run" in guide
