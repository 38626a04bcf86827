"""Every cost of a week besides the node pools' node-hours, read from what the bundle
provisions (docs/replay.md, "Every cost"), and the spot-at-on-demand bound.

* the platform: the AKS tier, the system pool (its VM size and node count from
  ``config/terraform/variables.tf``) and the monitoring stack's nodes on it, a home
  share per person (``helm-values/values.yaml``: Azure Files premium, billed on its
  provisioned size) and the teams' checkpoint shares (``config/team-namespaces.yaml``);
* the VMs: each person's compute instance's OS disk, billed all week.

Prices are :mod:`.prices`'.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import yaml

from ..spec.model import Platform
from ..spec.quantities import parse_memory
from . import prices
from .figures import NodeLifetime

TERRAFORM_VARIABLES = "config/terraform/variables.tf"
HELM_VALUES = "helm-values/values.yaml"
TEAM_NAMESPACES = "config/team-namespaces.yaml"
GIB = 2**30


@dataclass(frozen=True)
class Bundle:
    """What the bundle provisions that costs money whether or not anyone works."""

    system_vm_size: str
    system_nodes: int
    home_gib: float  # each user's home share, provisioned
    checkpoint_gib: tuple[float, ...]  # each team's checkpoint share, requested


@dataclass(frozen=True)
class CostLine:
    what: str
    amount: float
    basis: str  # how it was worked out, with the price's note


def _terraform_default(text: str, name: str, path: str) -> str:
    block = re.search(r'variable\s+"' + re.escape(name) + r'"\s*\{(.*?)\n\}', text, re.S)
    value = block and re.search(r'^\s*default\s*=\s*"?([^"\n]+?)"?\s*$', block.group(1), re.M)
    if not value:
        raise ValueError(f"{path}: no default for variable {name!r}")
    return value.group(1)


def read_bundle(root: Path, platform: Platform) -> Bundle:
    """The bundle's fixed resources, from the files under ``root`` (a checkout)."""
    tf = (root / TERRAFORM_VARIABLES).read_text()
    storage = yaml.safe_load((root / HELM_VALUES).read_text())["singleuser"]["storage"]
    claim = platform.checkpoint_storage.claim_name if platform.checkpoint_storage else None
    checkpoints = tuple(
        parse_memory(d["spec"]["resources"]["requests"]["storage"]) / GIB
        for d in yaml.safe_load_all((root / TEAM_NAMESPACES).read_text())
        if d and d.get("kind") == "PersistentVolumeClaim" and d["metadata"]["name"] == claim)
    return Bundle(_terraform_default(tf, "system_vm_size", TERRAFORM_VARIABLES),
                  int(_terraform_default(tf, "system_min_count", TERRAFORM_VARIABLES)),
                  parse_memory(storage["capacity"]) / GIB, checkpoints)


def platform_fixed(bundle: Bundle, people: int, hours: float) -> tuple[CostLine, ...]:
    """The platform's costs over ``hours`` that no node pool's node-hours include."""
    p = prices
    vm = p.vm_price(bundle.system_vm_size)
    monitoring = int(p.MONITORING_NODES.amount)
    ckpt_gib = sum(bundle.checkpoint_gib) * p.CHECKPOINT_FILL.amount
    return (
        CostLine("AKS tier", hours * p.AKS_STANDARD_TIER.amount,
                 f"{hours:g} h x {p.AKS_STANDARD_TIER.amount} ({p.AKS_STANDARD_TIER.note})"),
        CostLine("system pool", hours * bundle.system_nodes * vm.amount,
                 f"{bundle.system_nodes} x {bundle.system_vm_size} (Terraform's "
                 f"system_min_count) x {hours:g} h x {vm.amount} ({vm.note})"),
        CostLine("monitoring stack's nodes", hours * monitoring * vm.amount,
                 f"{monitoring} more system node ({p.MONITORING_NODES.note})"),
        CostLine("home shares", people * bundle.home_gib * hours * p.per_hour(
            p.AZURE_FILES_PREMIUM), f"{people} people x {bundle.home_gib:g} GiB x "
                 f"{p.AZURE_FILES_PREMIUM.amount}/GiB-month ({p.AZURE_FILES_PREMIUM.note})"),
        CostLine("checkpoint shares", ckpt_gib * hours * p.per_hour(p.AZURE_FILES_STANDARD),
                 f"{len(bundle.checkpoint_gib)} teams' PVCs, {ckpt_gib:g} GiB in use "
                 f"({p.CHECKPOINT_FILL.note}) x {p.AZURE_FILES_STANDARD.amount}/GiB-month "
                 f"({p.AZURE_FILES_STANDARD.note})"),
    )


def vm_fixed(people: int, hours: float) -> tuple[CostLine, ...]:
    """The VM baseline's costs over ``hours`` besides its VMs' hours."""
    disk = prices.P10_DISK
    return (CostLine("compute instances' OS disks", people * hours * prices.per_hour(disk),
                     f"{people} x {disk.amount}/month ({disk.note})"),)


def spot_at_on_demand(platform: Platform, nodes: Iterable[NodeLifetime], until) -> float:
    """The cost of ``nodes`` with every spot pool priced as the on-demand pool of its
    VM size (a bound: no spot discount at all)."""
    total = 0.0
    for node in nodes:
        pool = platform.pool(node.pool)
        price = (vm_pool_of(platform, pool.name).price_per_node_hour if pool.spot
                 else pool.price_per_node_hour)
        end = min(node.end or until, until)
        total += max(0.0, (end - node.start).total_seconds() / 3600) * price
    return total


def vm_pool_of(platform: Platform, pool_name: str):
    """The on-demand pool of ``pool_name``'s VM size (itself if none is)."""
    pool = platform.pool(pool_name)
    same = [p for p in platform.pools if p.vm_size == pool.vm_size and not p.spot]
    return same[0] if same else pool

