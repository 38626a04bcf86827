"""Every cost besides the pools' node-hours, read from the bundle's own files, and
the spot-at-on-demand bound."""

from __future__ import annotations

import shutil
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from jupyterhub_gpu.replay import prices
from jupyterhub_gpu.replay.costs import (HELM_VALUES, TEAM_NAMESPACES, TERRAFORM_VARIABLES,
                                         platform_fixed, read_bundle, spot_at_on_demand,
                                         vm_fixed)
from jupyterhub_gpu.replay.figures import NodeLifetime

REPO = Path(__file__).resolve().parents[2]
WEEK = 7 * 24


def test_the_bundle_provisions_one_system_node_a_home_share_each_and_team_checkpoints(
        platform):
    bundle = read_bundle(REPO, platform)
    assert (bundle.system_vm_size, bundle.system_nodes) == ("Standard_D4s_v5", 1)
    assert bundle.home_gib == 100
    assert bundle.checkpoint_gib == (100, 100, 100)  # one PVC per team namespace


def test_the_fixed_costs_of_a_week(platform):
    lines = {c.what: c.amount for c in platform_fixed(read_bundle(REPO, platform), 20, WEEK)}
    assert lines["AKS tier"] == pytest.approx(WEEK * 0.10)
    assert lines["system pool"] == pytest.approx(WEEK * 0.192)
    assert lines["home shares"] == pytest.approx(20 * 100 * 0.16 * WEEK / 730)
    assert lines["checkpoint shares"] == pytest.approx(300 * 0.06 * WEEK / 730)
    # the page's "about 49 a week" for the tier and the system pool
    assert lines["AKS tier"] + lines["system pool"] == pytest.approx(49.06, abs=0.01)


def test_a_bigger_system_pool_in_terraform_costs_more(platform, tmp_path):
    for name in (TERRAFORM_VARIABLES, HELM_VALUES, TEAM_NAMESPACES):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / name, tmp_path / name)
    tf = tmp_path / TERRAFORM_VARIABLES
    text = tf.read_text()
    start = text.index('variable "system_min_count"')
    tf.write_text(text[:start] + text[start:].replace("default     = 1", "default     = 3", 1))
    bundle = read_bundle(tmp_path, platform)
    assert bundle.system_nodes == 3
    system = next(c for c in platform_fixed(bundle, 5, 10) if c.what == "system pool")
    assert system.amount == pytest.approx(3 * 10 * 0.192)


def test_a_vm_size_without_a_price_is_named():
    with pytest.raises(KeyError, match="no price for VM size 'Standard_X'"):
        prices.vm_price("Standard_X")


def test_every_price_says_where_and_when_and_whether_it_is_an_assumption():
    for price in prices.ALL:
        assert price.region and price.date and price.source
    assert "an assumption" in prices.MONITORING_NODES.note
    assert "not re-checked" in prices.AKS_STANDARD_TIER.note


def test_the_vms_pay_for_their_os_disks_all_week():
    (disk,) = vm_fixed(20, WEEK)
    assert disk.amount == pytest.approx(20 * 19.71 * WEEK / 730)


def test_spot_at_on_demand_prices_a_spot_node_as_the_same_vm_on_demand(platform):
    start = datetime.fromisoformat("2026-01-05T00:00:00Z")
    nodes = [NodeLifetime("a100spot", "n1", start, start + timedelta(hours=2)),
             NodeLifetime("t4dev", "n2", start, start + timedelta(hours=1))]
    end = start + timedelta(days=7)
    assert spot_at_on_demand(platform, nodes, end) == pytest.approx(
        2 * platform.pool("a100").price_per_node_hour + platform.pool("t4dev").price_per_node_hour)
