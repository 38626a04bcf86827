"""Without a platform spec, GPUSpawner is exactly KubeSpawner.

Each override of a KubeSpawner method or trait default is marked :func:`spec_only` or
:func:`spec_default`, the one place that decides: with a spec, ours runs; without one,
KubeSpawner's own method or default. :class:`ExistingFile` is the trait of the spec's
path.
"""

from __future__ import annotations

import functools
import os
from typing import Any, Callable

from kubespawner import KubeSpawner
from traitlets import Unicode, default


def spec_only(method: Callable) -> Callable:
    """Override ``method`` only when there is a spec; without one, KubeSpawner's
    method of the same name runs."""
    name = method.__name__

    @functools.wraps(method)
    def with_or_without_spec(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self.spec_source is None:
            return getattr(KubeSpawner, name)(self, *args, **kwargs)
        return method(self, *args, **kwargs)

    return with_or_without_spec


def spec_default(trait: str) -> Callable:
    """``@default(trait)`` when there is a spec; without one, KubeSpawner's default."""
    def decorate(method: Callable) -> Any:
        @functools.wraps(method)
        def with_or_without_spec(self: Any) -> Any:
            if self.spec_source is None:
                kube = getattr(KubeSpawner, f"_{trait}_default", None)
                return kube(self) if kube else KubeSpawner.class_traits()[trait].default()
            return method(self)

        return default(trait)(with_or_without_spec)

    return decorate


class ExistingFile(Unicode):
    """A path that must name an existing file ("" for none): a wrong path in the
    config fails at start-up, naming the setting."""

    def validate(self, obj: Any, value: Any) -> str:
        path = super().validate(obj, value)
        if path and not os.path.isfile(path):
            raise ValueError(f"c.{type(obj).__name__}.{self.name}: no such file: {path}")
        return path
