"""GPUSpawner: KubeSpawner whose profiles come from the GPU platform spec.

All decisions are made by pure code (:mod:`jupyterhub_gpu.builders.pod`); this class
only wires them into KubeSpawner's life cycle:

* the form lists the profiles the user's groups allow (``options_form``);
* a form post or REST ``user_options`` is authorized before ``start()`` is called,
  so a forged or stale request never reaches the Kubernetes API;
* applying a profile first restores every trait an earlier profile set
  (the spawner object is reused across spawns, kubespawner#546).

Without a platform spec, GPUSpawner is exactly KubeSpawner.
"""

from __future__ import annotations

import copy
import os
from typing import Any

from kubespawner import KubeSpawner
from tornado import web
from traitlets import Dict, Instance, Unicode, default, validate

from .builders.pod import (Grant, OptionsRejected, SpawnSettings, UserRef, authorize,
                           merge_traits, spawn_settings)
from .form import render_form
from .parse import load_platform, parse_platform
from .spec import Platform

_cache: dict[tuple[str, float], Platform] = {}


def load_platform_cached(path: str) -> Platform:
    """Parse ``path`` once per process (again only when the file changes)."""
    key = (os.path.abspath(path), os.stat(path).st_mtime)
    if key not in _cache:
        _cache[key] = load_platform(path)
    return _cache[key]


def _apply_user_options(spawner: "GPUSpawner", user_options: dict) -> None:
    """JupyterHub's ``apply_user_options`` hook (runs before ``start()``)."""
    try:
        spawner.apply_profile(user_options)
    except OptionsRejected as e:
        raise web.HTTPError(400, str(e), reason=str(e)) from None


class GPUSpawner(KubeSpawner):
    gpu_grant: Grant | None = None  # the profile grant of the current/last spawn
    _gpu_base_traits: dict[str, Any] | None = None  # admin values, before any profile

    platform_file = Unicode(
        "",
        help="""Path of the GPU platform spec (YAML).

        Example::

            c.GPUSpawner.platform_file = "/etc/jupyterhub-gpu/platform.yaml"

        Use :func:`jupyterhub_gpu.configure_hub` in ``jupyterhub_config.py`` to have a
        bad spec stop the hub at start-up instead of failing each spawn.
        """,
    ).tag(config=True)

    platform_spec = Dict(
        {},
        help="""The GPU platform spec inline, as the YAML file would load.

        Example::

            c.GPUSpawner.platform_spec = yaml.safe_load(open("platform.yaml"))

        Takes precedence over ``platform_file``. Empty: use ``platform_file``.
        """,
    ).tag(config=True)

    platform = Instance(
        Platform,
        allow_none=True,
        help="""The parsed spec; None when neither platform_spec nor platform_file is
        set, and GPUSpawner then behaves exactly like KubeSpawner.""",
    )

    @default("platform")
    def _platform_default(self) -> Platform | None:
        if self.platform_spec:
            return parse_platform(self.platform_spec, "c.GPUSpawner.platform_spec")
        if self.platform_file:
            return load_platform_cached(self.platform_file)
        return None

    @validate("platform_file")
    def _validate_platform_file(self, proposal: dict) -> str:
        path = proposal["value"]
        if path and not os.path.isfile(path):
            raise ValueError(f"c.GPUSpawner.platform_file: no such file: {path}")
        return path

    @default("options_form")
    def _options_form_default(self) -> Any:
        if self.platform is None:
            return super()._options_form_default()
        return lambda spawner: render_form(
            spawner.platform, spawner.user_ref.groups, spawner.user_options.get("profile"))

    @default("options_from_form")
    def _options_from_form_default(self) -> Any:
        if self.platform is None:
            return super()._options_from_form_default()
        return self._gpu_options_from_form

    @default("apply_user_options")
    def _apply_user_options_default(self) -> Any:
        return None if self.platform is None else _apply_user_options

    @property
    def user_ref(self) -> UserRef:
        return UserRef(self.user.name, frozenset(g.name for g in self.user.groups))

    def _gpu_options_from_form(self, formdata: dict) -> dict:
        options = self._options_from_form(formdata)
        self.authorize(options)  # show a clear error on the form, create nothing
        return options

    def authorize(self, user_options: Any) -> Grant:
        """The grant for ``user_options``, or :class:`OptionsRejected` (logged)."""
        try:
            return authorize(self.platform, self.user_ref, user_options)
        except OptionsRejected as e:
            self.log.warning("Rejected GPU spawn options for %s: %s",
                             self._log_name, e.log_detail)
            raise

    def apply_profile(self, user_options: Any) -> Grant:
        """Authorize ``user_options``, reset what an earlier profile set, apply."""
        grant = self.authorize(user_options)
        if self._gpu_base_traits is None:
            self._gpu_base_traits = {name: copy.deepcopy(getattr(self, name))
                                     for name in SpawnSettings.trait_names()}
        traits = merge_traits(self._gpu_base_traits, spawn_settings(self.platform, grant))
        for name, value in traits.items():
            setattr(self, name, value)
        self.dns_name = self.dns_name_template.format(namespace=self.namespace,
                                                      name=self.pod_name)
        self.gpu_grant = grant
        self.log.info("Applying GPU profile %r (queue %s/%s, priority %s) for %s",
                      grant.profile.slug, grant.team.namespace, grant.team.local_queue,
                      grant.priority.name, self._log_name)
        return grant

    async def load_user_options(self) -> None:
        if self.platform is None:
            return await super().load_user_options()
        if self.profile_list:
            self.log.warning("profile_list is ignored: profiles come from the GPU spec")
        try:
            self.apply_profile(self.user_options)  # idempotent: resets first
        except OptionsRejected as e:
            raise ValueError(str(e)) from None


def configure_hub(c: Any, platform_file: str) -> Platform:
    """Wire GPUSpawner into a ``jupyterhub_config.py`` and validate the spec now.

    Example::

        from jupyterhub_gpu import configure_hub
        configure_hub(c, "/etc/jupyterhub-gpu/platform.yaml")

    A bad spec raises :class:`~jupyterhub_gpu.parse.SpecError` listing every error,
    which stops the hub at start-up.
    """
    platform = load_platform_cached(platform_file)
    c.JupyterHub.spawner_class = GPUSpawner
    c.GPUSpawner.platform_file = platform_file
    return platform
