"""The live platform spec: one source per file, shared by every spawner of the hub
(as KubeSpawner shares its reflectors), and read the same way by the culler.

z2jh mounts the spec from a ConfigMap. The kubelet updates such a volume atomically:
it writes the new content into a fresh directory and swaps the ``..data`` symlink
that ``platform.yaml`` points through, so the path stays while the file it resolves
to changes (and its mtime need not). :meth:`SpecSource.current` therefore looks at the
device, inode, size and mtime of the file the path resolves to on each call (one
``stat``, which follows the symlinks; the new file is written before the swap, so its
inode differs from the old one's), reads the file when any of them changed, and
parses it only when its content hash is new.

A broken edit never fails a spawn: the source keeps the last good spec, logs the
edit's errors (all of them, as ``jupyterhub-gpu validate`` lists them), counts it in
``jupyterhub_gpu_spec_reload_errors_total`` and sets ``jupyterhub_gpu_spec_ok`` to 0
until a good edit. Only the first load may fail (:func:`jupyterhub_gpu.configure_hub`
then stops the hub at start-up).
"""

from __future__ import annotations

import hashlib
import logging
import os
import weakref

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge

from .parse import SpecError, parse_platform_text
from .model import Platform

LOGGER_NAME = "jupyterhub_gpu.spec.model"


class SpecMetrics:
    """The spec source's metrics, one set per Prometheus registry (the hub serves its
    default registry on ``/hub/metrics``, the culler the one of its ``CullMetrics``)."""

    _by_registry: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def __init__(self, registry: CollectorRegistry):
        self.reload_errors = Counter(
            "jupyterhub_gpu_spec_reload_errors", "Edits of the GPU platform spec file that "
            "did not parse (the last good spec stays in use)", registry=registry)
        self.ok = Gauge(
            "jupyterhub_gpu_spec_ok", "1 while the GPU platform spec file is the spec in "
            "use; 0 while a broken edit is ignored", registry=registry)

    @classmethod
    def of(cls, registry: CollectorRegistry = REGISTRY) -> "SpecMetrics":
        if registry not in cls._by_registry:
            cls._by_registry[registry] = cls(registry)
        return cls._by_registry[registry]


class SpecSource:
    """A spec file, parsed again when it changes; a broken edit keeps the last good.

    ``SpecSource(path)`` loads the file now and raises :class:`SpecError` if it is
    bad. :meth:`shared` gives the hub's one source per file.
    """

    _shared: dict[str, "SpecSource"] = {}

    def __init__(self, path: str | os.PathLike, log: logging.Logger | None = None,
                 metrics: SpecMetrics | None = None):
        self.path = os.path.abspath(path)
        self.log = log or logging.getLogger(LOGGER_NAME)
        self.metrics = metrics or SpecMetrics.of()
        self._platform: Platform | None = None
        self._digest: bytes | None = None
        self._seen = self._signature()
        self._reload()  # the first load: a bad spec raises

    @classmethod
    def shared(cls, path: str | os.PathLike, log: logging.Logger | None = None) -> "SpecSource":
        """The source of ``path`` for this process, made (and loaded) on first use; a
        bad first load raises and is tried again by the next call. ``log``: where its
        reloads are logged (the hub's log, as spawners pass it)."""
        key = os.path.abspath(path)
        if key not in cls._shared:
            cls._shared[key] = cls(key, log)
        elif log is not None:
            cls._shared[key].log = log
        return cls._shared[key]

    def current(self) -> Platform:
        """The spec now: the file's, or the last good one while the file is broken."""
        seen = self._signature()
        if seen != self._seen:
            self._seen = seen
            try:
                self._reload()
            except SpecError as e:
                self.metrics.reload_errors.inc()
                self.metrics.ok.set(0)
                self.log.error("Keeping the last good GPU platform spec: %s", e)
        return self._platform

    def _signature(self) -> tuple:
        """What changes when the file does, also when a symlink swap replaces it (the
        file ``stat`` reaches through the symlinks is another: another inode)."""
        try:
            st = os.stat(self.path)
        except OSError as e:
            return (e.strerror,)
        return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns

    def _reload(self) -> None:
        """Parse the file if its content is new; :class:`SpecError` if it is bad."""
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except OSError as e:
            self._digest = None  # whatever is there next is new
            raise SpecError([f"cannot read the file: {e.strerror}"], self.path) from e
        digest = hashlib.sha256(data).digest()
        if digest == self._digest:  # the same content again (e.g. only touched)
            return
        self._digest = digest
        platform = parse_platform_text(data, self.path)
        if self._platform is not None:
            self.log.info("Reloaded the GPU platform spec %s (%d profiles): new spawns "
                          "use it", self.path, len(platform.profiles))
        self._platform = platform
        self.metrics.ok.set(1)


class FixedSpec:
    """A spec given inline (``c.GPUSpawner.platform_spec``): it never changes."""

    def __init__(self, platform: Platform):
        self._platform = platform

    def current(self) -> Platform:
        return self._platform
