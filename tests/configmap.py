"""A ConfigMap volume as the kubelet updates it, for tests of the live spec.

The kubelet's atomic writer (kubernetes/kubernetes, ``pkg/volume/util/atomic_writer.go``)
writes each new version of the data into a fresh ``..<timestamp>`` directory, makes a
``..data_tmp`` symlink to it and renames that over ``..data`` (one atomic step); each
key is a symlink ``<key> -> ..data/<key>``, made once; the previous timestamped
directory is then removed. Written from reading that code; none of it is copied.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_configmap(volume: Path, files: dict[str, str], mtime: float | None = None) -> None:
    """Project ``files`` (key -> content) into ``volume`` as the kubelet would;
    ``mtime``: give the new files this modification time."""
    volume.mkdir(parents=True, exist_ok=True)
    data = volume / "..data"
    previous = os.readlink(data) if data.is_symlink() else None
    version = Path(tempfile.mkdtemp(prefix="..2026_01_01_00_00_00.", dir=volume))
    for key, content in files.items():
        (version / key).write_text(content)
        if mtime is not None:
            os.utime(version / key, (mtime, mtime))
        if not (volume / key).is_symlink():
            (volume / key).symlink_to(f"..data/{key}")
    (volume / "..data_tmp").symlink_to(version.name)
    os.replace(volume / "..data_tmp", data)
    if previous:
        for old in (volume / previous).iterdir():
            old.unlink()
        (volume / previous).rmdir()
