"""The CI's short replay (issue #17): ten people's Monday morning (three hours of a
generated week on the cluster tier's spec: the sessions that start from 8 to 11, four
with cell executions in them, all still open when it ends) replayed 160 times faster against the real stack of the
session's cluster -- the demo hub with the real culler, the jobs service and the usage
ledger, Kueue, Karpenter, Prometheus and the fake DCGM exporter -- by
``jupyterhub_gpu.replay.run.replay``, as ``jupyterhub-gpu replay run`` does. It asserts only the accounting invariants (docs/replay.md): every session the
hub accepted ends in the ledger with a stop reason, billed node-hours are the nodes'
lifetimes and every session ran on a billed node, and no server's rows overlap. It
makes no timing assertion: what the compression does to waits is the full run's
report (docs/outcome.md)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from jupyterhub_gpu.devcluster.layout import Layout
from jupyterhub_gpu.replay.generate import GeneratorConfig, generate
from jupyterhub_gpu.replay.invariants import violations
from jupyterhub_gpu.replay.run import Stack, replay
from jupyterhub_gpu.replay.schedule import window
from jupyterhub_gpu.replay.trace import check_against
from jupyterhub_gpu.ledger.store import Kind

from .conftest import STATE_DIR
from .test_demo import PORTS, URL

FACTOR = 160  # 3 hours in 68 s
MORNING = (datetime(2026, 1, 5, 8, tzinfo=timezone.utc),
           datetime(2026, 1, 5, 11, tzinfo=timezone.utc))


@pytest.mark.slow
async def test_a_short_replay_keeps_the_accounting_invariants(
        cluster, cluster_platform, cluster_spec_path, hub_kubeconfig, tmp_path):
    trace = window(generate(cluster_platform, GeneratorConfig(team_size=10, seed=3)),
                   *MORNING)
    assert check_against(trace, cluster_platform) == []
    assert len(trace.sessions) >= 3, "the morning has work in it"
    stack = Stack(Layout(STATE_DIR), cluster["server"], hub_kubeconfig, URL, **PORTS)
    outcome = await replay(trace, cluster_spec_path, FACTOR, stack, tmp_path,
                           progress=lambda m: None)
    assert outcome.settled, f"the ledger or the pools did not settle; {tmp_path / 'hub.log'}"
    assert sum(outcome.requested.values()) >= 3, outcome.refused
    sessions = [r for r in outcome.rows if r.kind == Kind.SESSION]
    assert any(r.running_at for r in sessions), "some session got a server"
    assert outcome.nodes, "Karpenter started nodes for them"
    assert violations(cluster_platform, outcome) == []
