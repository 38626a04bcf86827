"""Build the dev-cluster control-plane binaries from the Go module proxy.

Every component is compiled with the ordinary ``go`` toolchain at a pinned
version inside a small generated wrapper module (``go.mod`` and, for etcd, a
``main.go``) under the cache. Each binary lands in a directory of its own keyed by
a hash of its pin, the Go version and the build recipe, so changing or adding one
pin rebuilds only that binary. The CRDs a component ships (Kueue's, Karpenter's)
are copied from its module next to its binary.  Nothing prebuilt is downloaded.
Before compiling, :func:`check_go` compares the local ``go`` with the ``go`` lines of
the pinned modules' go.mod files (:mod:`.gomod`), so that a too old Go stops the build
before its first binary, naming the modules that need more.

Run ``python -m jupyterhub_gpu.devcluster.build`` to build (a cold build takes
tens of minutes on two cores); ``--with=prometheus-operator`` adds an opt-in binary
(:data:`OPT_IN_PINS`).
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from types import MappingProxyType

from .contract import ENV_CACHE
from .gomod import GoMod, GoVersionError, parse_gomod, shortfall_message, shortfalls
from .layout import log_tail

__all__ = [
    "OPT_IN_PINS",
    "PINS",
    "BuildError",
    "Pin",
    "bin_dir",
    "binaries",
    "build",
    "cache_root",
    "check_go",
    "declared_go",
    "is_built",
    "opt_in_binary",
    "pin",
    "crd_dir",
    "kueue_crd_dir",
]

# Bump when the way binaries are built changes (ldflags, wrapper layout...).
RECIPE = "1"
GO_PARALLELISM = "2"
BUILD_LOG_LINES = 40  # of a failed build's log, in its error


class BuildError(RuntimeError):
    """The Go toolchain is unusable or a component failed to build."""


@dataclass(frozen=True)
class Pin:
    """One binary: the Go module it comes from and its main package."""

    module: str
    version: str
    package: str
    # Generate a main.go calling ``<package>.Main(os.Args)`` (etcd ships no
    # importable main package outside its own multi-module repository).
    wrap_main: bool = False
    # Directories of the module whose CRD YAMLs are copied next to the binary.
    crd_dirs: tuple[str, ...] = ()
    # Go build tags (``go build -tags``); part of the pin, so of the binary's cache key.
    tags: tuple[str, ...] = ()


# Kueue v0.17.0 requires k8s.io/* v0.35.3, so the control plane is 1.35.
K8S_VERSION = "v1.35.4"
PROMETHEUS_VERSION = "v0.316.0"
HELM_VERSION = "v4.3.2"
# Prometheus' service discoveries are plugins (upstream ``plugins/plugin_*.go``, each
# ``//go:build !remove_all_sd || enable_<name>_sd``); file, http and static ones are
# always in (``plugins/minimum.go``). The dev cluster's configs use file_sd and static
# targets (devcluster.prometheus) and, from the Prometheus Operator's config, the
# kubernetes one (devcluster.promoperator); the cloud ones (AWS, Azure, GCE...) and
# their SDKs were most of its cold build.
PROMETHEUS_TAGS = ("remove_all_sd", "enable_kubernetes_sd")
PINS: Mapping[str, Pin] = MappingProxyType(
    {
        "etcd": Pin("go.etcd.io/etcd/server/v3", "v3.6.16", "go.etcd.io/etcd/server/v3/etcdmain", True),
        "kube-apiserver": Pin("k8s.io/kubernetes", K8S_VERSION, "k8s.io/kubernetes/cmd/kube-apiserver"),
        "kube-controller-manager": Pin(
            "k8s.io/kubernetes", K8S_VERSION, "k8s.io/kubernetes/cmd/kube-controller-manager"
        ),
        "kube-scheduler": Pin("k8s.io/kubernetes", K8S_VERSION, "k8s.io/kubernetes/cmd/kube-scheduler"),
        "kwok": Pin("sigs.k8s.io/kwok", "v0.8.0", "sigs.k8s.io/kwok/cmd/kwok"),
        "kueue": Pin("sigs.k8s.io/kueue", "v0.17.0", "sigs.k8s.io/kueue/cmd/kueue",
                     crd_dirs=("config/components/crd/bases",)),
        # The newest Karpenter whose go.mod accepts Go 1.26.8 (v1.14.3 needs 1.26.10,
        # v1.15 k8s.io/* v0.36). Its kwok provider's binary is called `kwok` upstream.
        "karpenter-kwok": Pin("sigs.k8s.io/karpenter", "v1.14.1", "sigs.k8s.io/karpenter/kwok",
                              crd_dirs=("kwok/charts/crds", "kwok/apis/crds")),
        # Prometheus v3.x is published as module version v0.3XX.0 (v0.316.0 = 3.16.0).
        # Built without the `builtinassets` tag: no web UI, the HTTP API is all we need.
        # PROMETHEUS_TAGS: of the service discoveries, only those the dev cluster uses.
        "prometheus": Pin("github.com/prometheus/prometheus", PROMETHEUS_VERSION,
                          "github.com/prometheus/prometheus/cmd/prometheus", tags=PROMETHEUS_TAGS),
        "promtool": Pin("github.com/prometheus/prometheus", PROMETHEUS_VERSION,
                        "github.com/prometheus/prometheus/cmd/promtool", tags=PROMETHEUS_TAGS),
        # Not cluster components: the NetworkPolicy evaluator of the truth-table test
        # (tests/integration/test_network_policies.py) and Helm, which renders the z2jh
        # chart for it.
        "cyclonus": Pin("github.com/mattfenwick/cyclonus", "v0.5.6",
                        "github.com/mattfenwick/cyclonus/cmd/cyclonus"),
        "helm": Pin("helm.sh/helm/v4", HELM_VERSION, "helm.sh/helm/v4/cmd/helm"),
    }
)
# The newest version the Go module proxy serves (v0.85.0 was the only one listed).
PROMETHEUS_OPERATOR_VERSION = "v0.85.0"
#: Built only when asked (``devcluster build --with NAME``), not by a plain ``build``
#: nor counted by :func:`is_built`: the Prometheus Operator's cold build is too long
#: for CI's budget (README, build table), and only its own cluster test needs it.
OPT_IN_PINS: Mapping[str, Pin] = MappingProxyType(
    {
        # Its Prometheus-side CRDs are applied by the test (devcluster.promoperator).
        "prometheus-operator": Pin(
            "github.com/prometheus-operator/prometheus-operator", PROMETHEUS_OPERATOR_VERSION,
            "github.com/prometheus-operator/prometheus-operator/cmd/operator",
            crd_dirs=("example/prometheus-operator-crd",)),
    }
)


def pin(name: str) -> Pin:
    """The pin of a default or an opt-in binary."""
    return PINS[name] if name in PINS else OPT_IN_PINS[name]


def cache_root() -> Path:
    """``$JUPYTERHUB_GPU_CACHE``, else ``$XDG_CACHE_HOME/jupyterhub-gpu``, else ``~/.cache/jupyterhub-gpu``."""
    override = os.environ.get(ENV_CACHE)
    if override:
        return Path(override).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "jupyterhub-gpu"


def _go_exe() -> str:
    found = shutil.which("go")
    if found:
        return found
    if Path("/usr/local/go/bin/go").is_file():
        return "/usr/local/go/bin/go"
    raise BuildError("the `go` toolchain is needed to build the dev cluster but is neither on PATH "
                     "nor /usr/local/go/bin/go (the release needed: README, \"The two commands\")")


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    flags = [f for f in env.get("GOFLAGS", "").split() if not f.startswith(("-mod=", "-buildvcs"))]
    env["GOFLAGS"] = " ".join([*flags, "-mod=mod", "-buildvcs=false"])
    env["GOTOOLCHAIN"] = "local"
    env["CGO_ENABLED"] = "0"
    return env


def _run_go(args: list[str], cwd: Path) -> str:
    proc = subprocess.run(
        [_go_exe(), *args], cwd=cwd, env=_go_env(), capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise BuildError(f"`go {' '.join(args)}` failed:\n{proc.stderr.strip()}")
    return proc.stdout


@functools.lru_cache(maxsize=1)
def _go_version() -> str:
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    return _run_go(["env", "GOVERSION"], root).strip()


def _json_stream(text: str) -> list[dict]:
    """The JSON objects ``go list -json`` prints one after another."""
    decoder, objects, index = json.JSONDecoder(), [], 0
    while text[index:].strip():
        index += len(text[index:]) - len(text[index:].lstrip())
        entry, index = decoder.raw_decode(text, index)
        objects.append(entry)
    return objects


def _module(pin: Pin) -> str:
    return f"{pin.module}@{pin.version}"


def declared_go(pins: Mapping[str, Pin]) -> dict[str, GoMod]:
    """The go.mod of each pinned module (``path@version`` -> its go and toolchain lines):
    only the .mod files, fetched from GOPROXY by ``go list -m`` (or read from the module
    cache), before any module's source is downloaded."""
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    args = ["list", "-m", "-json", *sorted({_module(p) for p in pins.values()})]
    try:
        entries = {f"{e['Path']}@{e['Version']}": e["GoMod"] for e in _json_stream(_run_go(args, root))}
    except (ValueError, KeyError) as exc:
        raise BuildError(f"cannot read the output of `go {' '.join(args)}`: {exc}") from exc
    declared = {}
    for module, gomod in entries.items():
        try:
            declared[module] = parse_gomod(Path(gomod).read_text())
        except (OSError, GoVersionError) as exc:
            raise BuildError(f"the go.mod of {module} ({gomod}): {exc}") from exc
    return declared


def check_go(pins: Mapping[str, Pin] = PINS) -> str:
    """Return the Go version (e.g. ``go1.26.8``); raise BuildError if go is missing or
    older than a go line of the pinned modules' go.mod files, naming each such module."""
    version = _go_version()
    built_from = {_module(p): tuple(n for n, q in pins.items() if _module(q) == _module(p))
                  for p in pins.values()}
    try:
        short = shortfalls(version, declared_go(pins), built_from)
    except GoVersionError as exc:
        raise BuildError(f"cannot compare `go env GOVERSION` with the pins' go.mod: {exc}") from exc
    if short:
        raise BuildError(shortfall_message(version, short))
    return version


def bin_dir(name: str) -> Path:
    """Directory of one binary, keyed by its pin, the Go version and the build recipe."""
    fields = asdict(pin(name))
    if not fields["tags"]:
        del fields["tags"]  # so that binaries built before pins had tags keep their key
    key = json.dumps([RECIPE, _go_version(), fields], sort_keys=True)
    return cache_root() / "bin" / f"{name}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


def binaries() -> dict[str, Path]:
    """Expected path of every binary (whether built or not)."""
    return {name: bin_dir(name) / name for name in PINS}


def crd_dir(name: str) -> Path:
    """Directory holding the CRD manifests copied from the module of binary ``name``."""
    return bin_dir(name) / "crds"


def kueue_crd_dir() -> Path:
    return crd_dir("kueue")


def _crds_present(name: str) -> bool:
    directory = crd_dir(name)
    return not pin(name).crd_dirs or (directory.is_dir() and any(directory.glob("*.yaml")))


def is_built() -> bool:
    """True when every binary and every component's CRDs are in place."""
    try:
        paths = binaries()
    except BuildError:
        return False
    return (all(os.access(p, os.X_OK) for p in paths.values())
            and all(_crds_present(name) for name in PINS))


def _download(pin: Pin) -> dict[str, str]:
    """`go mod download -json` for the pin's module (go.mod path, source dir, info file)."""
    root = cache_root()
    return json.loads(_run_go(["mod", "download", "-json", f"{pin.module}@{pin.version}"], root))


def module_dir(name: str) -> Path:
    """The source of binary ``name``'s pinned module (charts, manifests), downloaded
    into Go's module cache if it is not there yet."""
    return Path(_download(pin(name))["Dir"])


def _staging_replaces(gomod: str, version: str) -> list[str]:
    """k8s.io/kubernetes replaces staging modules by ./staging paths; use their published v0.X.Y."""
    published = "v0." + version.removeprefix("v1.")
    staged = re.findall(r"^\s*(k8s\.io/[\w.-]+)\s+=>\s+\./staging/", gomod, flags=re.M)
    return [f"\t{module} => {module} {published}" for module in sorted(set(staged))]


def _wrapper_gomod(name: str, pin: Pin, upstream_gomod: str) -> str:
    lines = [
        "// Generated by jupyterhub_gpu.devcluster.build; do not edit.",
        f"module devcluster.invalid/{name if pin.wrap_main else pin.module.replace('/', '_')}",
        "",
        f"go {parse_gomod(upstream_gomod).go}",
        "",
        f"require {pin.module} {pin.version}",
    ]
    replaces = _staging_replaces(upstream_gomod, pin.version) if pin.module == "k8s.io/kubernetes" else []
    if replaces:
        lines += ["", "replace (", *replaces, ")"]
    return "\n".join(lines) + "\n"


def _prepare_wrapper(name: str, pin: Pin, info: Mapping[str, str]) -> Path:
    """Write the wrapper module (one per module@version) and return its directory."""
    slug = pin.module.replace("/", "_")
    wrapper = cache_root() / "build" / (f"{name}@{pin.version}" if pin.wrap_main else f"{slug}@{pin.version}")
    wrapper.mkdir(parents=True, exist_ok=True)
    gomod = wrapper / "go.mod"
    if not gomod.exists():
        gomod.write_text(_wrapper_gomod(name, pin, Path(info["GoMod"]).read_text()))
    if pin.wrap_main:
        alias = pin.package.rsplit("/", 1)[-1]
        (wrapper / "main.go").write_text(
            "// Generated by jupyterhub_gpu.devcluster.build; do not edit.\npackage main\n\n"
            f'import (\n\t"os"\n\n\t{alias} "{pin.package}"\n)\n\n'
            f"func main() {{ {alias}.Main(os.Args) }}\n"
        )
    return wrapper


def _stamps(pin: Pin, build_date: str) -> dict[str, str]:
    """`-X` variables that make `--version` and /version report the pinned release."""
    if pin.module == "k8s.io/kubernetes":
        major, minor = pin.version.removeprefix("v").split(".")[:2]
        values = {
            "gitVersion": pin.version,
            "gitMajor": major,
            "gitMinor": minor,
            "gitCommit": "",
            "gitTreeState": "clean",
            "buildDate": build_date,
        }
        pkgs = ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")
        return {f"{pkg}.{key}": val for pkg in pkgs for key, val in values.items()}
    if pin.module == "sigs.k8s.io/kueue":
        pkg = "sigs.k8s.io/kueue/pkg/version"
        return {f"{pkg}.GitVersion": pin.version, f"{pkg}.GitCommit": "", f"{pkg}.BuildDate": build_date}
    if pin.module == "helm.sh/helm/v4":
        return {"helm.sh/helm/v4/internal/version.version": pin.version}
    if pin.module == "sigs.k8s.io/karpenter":
        return {"sigs.k8s.io/karpenter/pkg/operator.Version": pin.version}
    if pin.module == "github.com/prometheus-operator/prometheus-operator":
        pkg = "github.com/prometheus/common/version"
        return {f"{pkg}.Version": pin.version.removeprefix("v"), f"{pkg}.BuildDate": build_date}
    return {}


def _build_date(info: Mapping[str, str]) -> str:
    """Release time of the module (reproducible), as the upstream build scripts format it."""
    raw = json.loads(Path(info["Info"]).read_text()).get("Time", "1970-01-01T00:00:00Z")
    return raw[:19] + "Z"


def _go_build(name: str, pin: Pin, wrapper: Path, info: Mapping[str, str]) -> Path:
    """Compile one binary into a temporary file, then rename it into place atomically."""
    target = bin_dir(name) / name
    partial = target.with_name(f".{name}.partial-{os.getpid()}")
    ldflags = " ".join(["-s", "-w", *(f"-X {k}={v}" for k, v in _stamps(pin, _build_date(info)).items())])
    package = "." if pin.wrap_main else pin.package
    tags = ["-tags", ",".join(pin.tags)] if pin.tags else []
    cmd = [_go_exe(), "build", "-p", GO_PARALLELISM, "-trimpath", *tags, "-ldflags", ldflags,
           "-o", str(partial), package]
    log = cache_root() / "build-logs" / f"{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        out.write(f"$ {' '.join(cmd)}\n(cwd {wrapper})\n")
        out.flush()
        proc = subprocess.run(cmd, cwd=wrapper, env=_go_env(), stdout=out, stderr=subprocess.STDOUT, check=False)
    if proc.returncode != 0 or not partial.is_file():
        partial.unlink(missing_ok=True)
        raise BuildError(f"building {name} {pin.version} failed (log: {log}):\n"
                         f"{log_tail(log, BUILD_LOG_LINES)}")
    os.replace(partial, target)
    return target


def _install_crds(name: str, pin: Pin, info: Mapping[str, str]) -> Path:
    """Copy the CRD YAMLs of the pin's module next to its binary (swap in atomically)."""
    sources = [Path(info["Dir"]) / sub for sub in pin.crd_dirs]
    files = sorted(f for source in sources for f in source.glob("*.yaml"))
    if not files:
        raise BuildError(f"no CRDs found for {name} under {', '.join(map(str, sources))}")
    dest = crd_dir(name)
    staging = dest.with_name(f".crds.partial-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for file in files:
        shutil.copyfile(file, staging / file.name)
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(staging, dest)
    return dest


def _build_one(step: str, name: str, pin: Pin, force: bool, progress: Callable[[str], None]) -> None:
    target = bin_dir(name) / name
    target.parent.mkdir(parents=True, exist_ok=True)
    needs_crds = bool(pin.crd_dirs) and (force or not _crds_present(name))
    if target.is_file() and not force and not needs_crds:
        progress(f"{step} {name} {pin.version} already built")
        return
    info = _download(pin)
    if force or not target.is_file():
        progress(f"{step} building {name} {pin.version} (cold builds take several minutes)…")
        started = time.monotonic()
        _go_build(name, pin, _prepare_wrapper(name, pin, info), info)
        progress(f"{step} {name} done in {time.monotonic() - started:.0f}s")
    if needs_crds:
        progress(f"{step} {name} CRDs copied to {_install_crds(name, pin, info)}")


def opt_in_binary(name: str) -> Path:
    """Expected path of an opt-in binary (whether built or not)."""
    return bin_dir(name) / name


def build(progress: Callable[[str], None] = print, force: bool = False,
          opt_in: tuple[str, ...] = ()) -> dict[str, Path]:
    """Build every missing binary (all of them with force=True), and the opt-in ones
    named (e.g. ``("prometheus-operator",)``); return their paths."""
    unknown = sorted(set(opt_in) - set(OPT_IN_PINS))
    if unknown:
        raise BuildError(f"no opt-in binary {', '.join(unknown)}; "
                         f"there are: {', '.join(OPT_IN_PINS)}")
    wanted = {**PINS, **{name: OPT_IN_PINS[name] for name in opt_in}}
    # Only the go.mod of a binary to compile counts (nothing is fetched when all are built).
    to_compile = {name: p for name, p in wanted.items() if force or not (bin_dir(name) / name).is_file()}
    version = check_go(to_compile) if to_compile else _go_version()
    progress(f"building dev-cluster binaries with {version} into {cache_root() / 'bin'}")
    with (cache_root() / "build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if force:
            shutil.rmtree(cache_root() / "build", ignore_errors=True)
        for index, (name, pin_) in enumerate(wanted.items(), start=1):
            _build_one(f"[{index}/{len(wanted)}]", name, pin_, force, progress)
    return {**binaries(), **{name: opt_in_binary(name) for name in opt_in}}


def main() -> int:
    force = "--force" in sys.argv[1:]
    opt_in = tuple(a.removeprefix("--with=") for a in sys.argv[1:] if a.startswith("--with="))
    try:
        paths = build(force=force, opt_in=opt_in)
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for name, path in paths.items():
        print(f"{name}: {path}")
        if pin(name).crd_dirs:
            print(f"{name} CRDs: {crd_dir(name)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
