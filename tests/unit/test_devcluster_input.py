"""The dev cluster's answers to bad input, without starting a cluster."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap

import pytest

from jupyterhub_gpu.devcluster.layout import Ports


def test_port_in_use_names_the_port_its_use_and_the_holder():
    from jupyterhub_gpu.devcluster.cluster import DevClusterError, _check_ports

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        ports = Ports(**{**Ports().as_dict(), "apiserver": port})
        with pytest.raises(DevClusterError) as info:
            _check_ports(ports)
    message = str(info.value)
    assert f"port {port} on 127.0.0.1 (for " in message
    assert "kube-apiserver" in message
    assert f"is in use by pid {os.getpid()} (" in message
    assert "devcluster down" in message


def test_too_old_go_is_refused_with_the_version_needed(tmp_path):
    """A `go` that reports 1.20 (a real executable first on PATH) is refused."""
    fake = tmp_path / "go"
    fake.write_text("#!/bin/sh\necho go1.20.14\n")
    fake.chmod(0o755)
    code = textwrap.dedent("""
        from jupyterhub_gpu.devcluster import build
        try:
            build.check_go()
        except build.BuildError as e:
            print(e)
    """)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "HOME": str(tmp_path),
           "XDG_CACHE_HOME": str(tmp_path / "cache")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == ("Go >= 1.26 is needed to build the dev cluster (kwok/etcd "
                                  "require it); found go1.20.14"), out.stderr
