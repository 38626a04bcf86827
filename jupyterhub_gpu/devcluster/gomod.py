"""Which Go the pinned modules need (pure: go.mod text and version strings in).

Every binary is built inside a wrapper module that requires its pinned module
(:mod:`.build`), with ``GOTOOLCHAIN=local``: the local ``go`` must be at least the
``go`` line of the pinned module's go.mod, or ``go build`` stops with "requires go >=
...". The ``toolchain`` line is not a requirement: it only names the toolchain the
module's own authors prefer when it is the main module, and a dependency's is ignored
(etcd server v3.6.16 says ``toolchain go1.26.10`` and builds with Go 1.26.8).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

# The Go reference (go.dev/ref/mod, "go directive"): a go.mod without one is read as go 1.16.
DEFAULT_GO = "1.16"
_GO_LINE = re.compile(r"^go[ \t]+(\S+)[ \t]*(?://.*)?$", re.M)
_TOOLCHAIN_LINE = re.compile(r"^toolchain[ \t]+(\S+)[ \t]*(?://.*)?$", re.M)
_VERSION = re.compile(r"^(?:go)?(\d+)\.(\d+)(?:\.(\d+))?(?:(rc|beta)(\d+))?$")


class GoVersionError(ValueError):
    """A version string that is not a Go release's."""


@dataclass(frozen=True)
class GoMod:
    """The two lines of a go.mod that name a Go version."""

    go: str
    toolchain: str | None = None


@dataclass(frozen=True)
class Shortfall:
    """A module whose go.mod declares a newer Go than the one found."""

    module: str  # path@version
    needs: str  # its go line
    binaries: tuple[str, ...]  # the binaries built from it


def parse_gomod(text: str) -> GoMod:
    """The ``go`` and ``toolchain`` lines of a go.mod (``go`` defaults to 1.16)."""
    go = _GO_LINE.search(text)
    toolchain = _TOOLCHAIN_LINE.search(text)
    if go:
        version_key(go.group(1))
    return GoMod(go.group(1) if go else DEFAULT_GO, toolchain.group(1) if toolchain else None)


def version_key(version: str) -> tuple[int, ...]:
    """Order of Go versions: ``1.26`` (the language, before any release) < ``1.26rc1`` <
    ``1.26.0`` < ``1.26.6``; ``go1.26.8`` (as ``go env GOVERSION`` prints) is 1.26.8.
    A devel build (``devel go1.27-abcdef``) is taken at its base version."""
    text = version.strip()
    if text.startswith("devel "):
        text = text.split()[1].split("-")[0]
    match = _VERSION.match(text.split()[0] if text else "")
    if not match:
        raise GoVersionError(f"not a Go version: {version!r}")
    major, minor, patch, pre, pre_n = match.groups()
    if patch is not None:
        return int(major), int(minor), 2, int(patch), 0
    if pre is not None:
        return int(major), int(minor), 1, 0 if pre == "beta" else 1, int(pre_n)
    return int(major), int(minor), 0, 0, 0


def shortfalls(found: str, declared: Mapping[str, GoMod],
               binaries: Mapping[str, tuple[str, ...]]) -> list[Shortfall]:
    """The modules (``path@version`` -> its go.mod) whose go line is newer than
    ``found``, the highest first."""
    have = version_key(found)
    short = [Shortfall(module, mod.go, binaries.get(module, ()))
             for module, mod in declared.items() if version_key(mod.go) > have]
    return sorted(short, key=lambda s: (version_key(s.needs), s.module), reverse=True)


def highest(declared: Mapping[str, GoMod]) -> str:
    """The newest go line among the modules: the oldest Go that builds them all."""
    return max((mod.go for mod in declared.values()), key=version_key)


def shortfall_message(found: str, short: list[Shortfall]) -> str:
    """What to tell an admin whose Go is too old, naming each module that needs more."""
    def named(s: Shortfall) -> str:
        return f"{s.module} ({', '.join(s.binaries)})" if s.binaries else s.module

    lines = [f"{named(s)} declares go {s.needs} in its go.mod" for s in short]
    return (f"Go >= {short[0].needs} is needed to build the dev cluster; found {found}:\n  "
            + "\n  ".join(lines)
            + "\n(the build runs with GOTOOLCHAIN=local: install that Go release or newer)")
