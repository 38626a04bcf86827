"""Cross-field checks of a parsed platform: references, counts and sizes that only
make sense together. Pure; returns messages naming the item and the field."""

from __future__ import annotations

from collections import Counter
from typing import Iterator

from .allocatable import node_resources, share_of_node
from ..contract import (ACCELERATOR_LABEL, GPU_RESOURCE, MAX_TOTAL_UNREADY_PERCENTAGE,
                        MIG_STRATEGY_MIXED, OK_TOTAL_UNREADY_COUNT)
from .fallback import order_conflicts
from .quantities import format_cpu, format_memory
from .sharing import modes_where
from .model import AKS_BOTH_AUTOSCALERS_FEATURE, AnyProfile, Autoscaler, Platform, Pool, Team

AZURE_SPOT_NOTICE_SECONDS = 30


def _duplicates(kind: str, names: list[str]) -> Iterator[str]:
    for name, count in Counter(names).items():
        if count > 1:
            yield f"{kind} {name!r}: defined {count} times; names must be unique"


def _team_refs(platform: Platform, pools: set[str] | None) -> Iterator[str]:
    if pools is None:  # the spec's pools are no list: which exist is unknown
        return
    for team in platform.teams:
        for field, counts in (("quota", team.quota), ("borrowingLimit", team.borrowing_limit),
                              ("lendingLimit", team.lending_limit)):
            for pool in counts:
                if pool not in pools:
                    yield (f"team {team.name!r}: {field}: unknown pool {pool!r}; "
                           f"valid: {', '.join(sorted(pools)) or 'none defined'}")


def _units(profile: AnyProfile, pool: Pool) -> Iterator[str]:
    label = f"{profile.kind} {profile.slug!r}: gpus"
    if pool.sharing.shared and profile.units > 1:
        yield (f"{label}: {profile.units} shares of pool {pool.name!r} ({pool.sharing.mode}) "
               f"cannot be requested; the device plugin fails pods that ask for more than "
               f"1 {pool.resource_name}; use 1")
    elif profile.units > pool.units_per_node:
        yield (f"{label}: {profile.units} exceeds the {pool.units_per_node} "
               f"{pool.unit_name}(s) one node of pool {pool.name!r} has")


def _node_auto_provisioning(pool: Pool) -> Iterator[str]:
    """What AKS Node Auto Provisioning cannot do for a pool: offer other ``nvidia.com/gpu``
    than the VM's own GPUs (see :attr:`~jupyterhub_gpu.spec.sharing.SharingMode.vm_resource`),
    or keep nodes when no notebook needs them."""
    if not pool.node_auto_provisioning:
        return
    mode = pool.sharing.mode
    if mode.gpu and not mode.vm_resource:  # a CPU-only pool asks for cpu and memory only
        yield (f"pool {pool.name!r}: autoscaler: {pool.autoscaler} cannot scale a {mode} "
               f"pool: its Karpenter expects a new node to offer the VM's own GPUs as "
               f"{GPU_RESOURCE}, {pool.gpus_per_node} here (it neither partitions MIG nor "
               f"shares a GPU), but a node of this pool offers "
               f"{_plural(pool.units_per_node, pool.unit_name)} as {GPU_RESOURCE}; use it "
               f"only for {modes_where(lambda m: m.vm_resource)} pools or CPU-only ones, or "
               f"autoscaler: {Autoscaler.CLUSTER_AUTOSCALER}")
    if pool.min_nodes:
        yield (f"pool {pool.name!r}: minNodes: {pool.min_nodes}, but a Karpenter NodePool "
               f"has no minimum size, so autoscaler: {pool.autoscaler} keeps no node "
               f"waiting; use 0, or autoscaler: {Autoscaler.CLUSTER_AUTOSCALER}")


#: Why a pool of the cluster autoscaler must advertise ``nvidia.com/gpu``. AKS labels a
#: GPU node ``kubernetes.azure.com/accelerator`` (the Azure provider's ``GPULabel()``);
#: kubernetes/autoscaler's ``GpuCustomResourcesProcessor.FilterOutNodesWithUnreadyResources``
#: (cluster-autoscaler/processors/customresources/gpu_processor.go) counts a node with
#: that label and no allocatable ``nvidia.com/gpu`` as unready, however long it runs;
#: and when more than ``ok-total-unready-count`` (3) nodes and more than
#: ``max-total-unready-percentage`` (45%) of all are unready, ``IsClusterHealthy``
#: (cluster-autoscaler/clusterstate/clusterstate.go) is false and the autoscaler stops
#: every scale-up and scale-down (kubernetes/autoscaler#8095, Azure/AKS#5161).
UNREADY_GPU_NODE = (
    f"the cluster autoscaler counts a GPU node (AKS labels it {ACCELERATOR_LABEL}) "
    f"without allocatable {GPU_RESOURCE} as unready (GpuCustomResourcesProcessor), and "
    f"past {OK_TOTAL_UNREADY_COUNT} unready nodes and {MAX_TOTAL_UNREADY_PERCENTAGE}% of "
    f"the cluster it stops all scale-up and scale-down")


def _gpu_resource(pool: Pool) -> Iterator[str]:
    """A GPU pool of the cluster autoscaler must advertise ``nvidia.com/gpu``
    (:data:`UNREADY_GPU_NODE`)."""
    mode = pool.sharing.mode
    if pool.node_auto_provisioning or not mode.gpu or mode.advertises_gpu_resource:
        return
    offered = (f"{pool.resource_name} (the device plugin's MIG strategy {mode.mig_strategy})"
               if mode.mig_strategy == MIG_STRATEGY_MIXED else pool.resource_name)
    yield (f"pool {pool.name!r}: sharing: mode {mode}: its nodes would advertise "
           f"{offered}, not {GPU_RESOURCE}, and {UNREADY_GPU_NODE}; use a mode whose "
           f"nodes advertise {GPU_RESOURCE} "
           f"({modes_where(lambda m: m.gpu and m.advertises_gpu_resource)})")


def _plural(n: int, unit: str) -> str:
    return f"{n} {unit}" if n == 1 else f"{n} {unit}s"


def _cores(millis: float) -> str:
    return f"{millis / 1000:.3f}".rstrip("0").rstrip(".")


def _millis(millis: float) -> str:
    return format_cpu(millis / 1000)


def _bytes(n: float) -> str:
    return format_memory(int(n))


def _fit(profile: AnyProfile, pool: Pool) -> Iterator[str]:
    """A profile's servers must fill a node: every unit of it taken by this profile
    (its share, ``units / units_per_node``, of each resource) fits what the node has
    left once AKS's reservations and the pool's daemonsets are counted."""
    node = node_resources(pool)
    # a CPU-only pool's server holds no unit: it must fit one node
    units, per_node_units = (profile.units, pool.units_per_node) if profile.units else (1, 1)
    per_node = _plural(per_node_units, pool.unit_name) + " per node"
    if units > 1:
        per_node = f"({per_node} / {units} per server)"
    most_cpu, most_memory = share_of_node(node, units, per_node_units)
    checks = (  # field, request, left for notebooks, most per server, formats, breakdown
        ("cpu", round(profile.cpu * 1000), node.pods_cpu_millis, most_cpu, _millis, _cores,
         f"allocatable vCPU on {pool.vm_size} ({pool.cpus_per_node} vCPU − "
         f"{node.kube_reserved_cpu_millis}m kube-reserved − "
         f"{_millis(node.daemonset_cpu_millis)} daemonsetOverhead)"),
        ("memory", profile.memory_bytes, node.pods_memory, most_memory, _bytes, _bytes,
         f"allocatable on {pool.vm_size} ({_bytes(node.memory)} − "
         f"{_bytes(node.kube_reserved_memory)} kube-reserved − "
         f"{_bytes(node.eviction_memory)} eviction threshold − "
         f"{_bytes(node.daemonset_memory)} daemonsetOverhead)"),
    )
    for field, asked, left, most, each, total, breakdown in checks:
        if asked * per_node_units > left * units:
            yield (f"{profile.kind} {profile.slug!r} on pool {pool.name!r}: {field}: {per_node} × "
                   f"{field} {each(asked)} = {total(asked * per_node_units / units)}"
                   f" > {total(left)} {breakdown}; use {field}: {each(most)} or less")


def _checkpoint(profile: AnyProfile, pools: list[Pool], platform: Platform,
                storage_given: bool) -> Iterator[str]:
    if not profile.checkpoint.enabled:
        return
    label = f"{profile.kind} {profile.slug!r}: checkpoint"
    if platform.checkpoint_storage is None and not storage_given:
        yield f"{label}: enabled, but the spec has no checkpointStorage"
    grace = profile.checkpoint.grace_period_seconds
    for pool in pools:
        if pool.spot and grace > AZURE_SPOT_NOTICE_SECONDS:
            yield (f"{label}: gracePeriod: {grace}s does not fit inside Azure's "
                   f"{AZURE_SPOT_NOTICE_SECONDS}s spot eviction notice on pool "
                   f"{pool.name!r}; use at most {AZURE_SPOT_NOTICE_SECONDS}s")


def _fallback_pools(profile: AnyProfile, pools: list[Pool]) -> Iterator[str]:
    """A fallback profile's pods request one kind of GPU unit: every pool must offer it,
    in the same sharing mode. Fallback is between GPU pools: a CPU-only profile asks
    for no GPU, so a CPU pool in the list is refused, whichever the others are."""
    if len(pools) < 2:
        return
    label = f"{profile.kind} {profile.slug!r}: pools"
    cpu_only = [p.name for p in pools if not p.has_gpu]
    if cpu_only:
        yield (f"{label}: {', '.join(map(repr, cpu_only))} "
               f"{'has' if len(cpu_only) == 1 else 'have'} no GPU (gpu: none); a fallback "
               f"profile moves between GPU pools of one kind, and a CPU-only profile runs "
               f"on one pool: use pool: <name>")
        return
    first = pools[0]
    for other in pools[1:]:
        if _unit_kind(other) != _unit_kind(first):
            yield (f"{label}: pool {other.name!r} offers {_unit_words(other)} but pool "
                   f"{first.name!r} offers {_unit_words(first)}; a profile's pod asks for "
                   f"one kind of GPU unit, so all its pools must offer the same one in the "
                   f"same sharing mode")


def _unit_kind(pool: Pool) -> tuple[str, str, str]:
    """What one unit a pod asks for is: its resource, mode and kind (a MIG slice's
    profile): every GPU pool advertises nvidia.com/gpu, so the resource alone does
    not tell a whole GPU from a share or a MIG slice."""
    return (pool.resource_name, pool.sharing.mode.name, pool.sharing.mode.message_unit(
        pool.sharing))


def _unit_words(pool: Pool) -> str:
    """``one MIG 3g.40gb slice per nvidia.com/gpu (mig)``."""
    return (f"one {pool.sharing.mode.message_unit(pool.sharing)} per {pool.resource_name} "
            f"({pool.sharing.mode})")


def _profile_refs(platform: Platform, declared: dict[str, set[str] | None]) -> Iterator[str]:
    pools = {p.name: p for p in platform.pools}
    priorities = {p.name for p in platform.priorities}
    for profile in platform.all_profiles:
        label = f"{profile.kind} {profile.slug!r}"
        if declared["priorities"] is not None and profile.priority not in (
                priorities | declared["priorities"]):
            yield (f"{label}: priority: unknown priority {profile.priority!r}; "
                   f"valid: {', '.join(sorted(priorities)) or 'none defined'}")
        field = "pools" if profile.fallback else "pool"
        for name in profile.pool_names if declared["pools"] is not None else ():
            if name not in pools and name not in declared["pools"]:
                yield (f"{label}: {field}: unknown pool {name!r}; "
                       f"valid: {', '.join(sorted(pools)) or 'none defined'}")
        known = [pools[n] for n in profile.pool_names if n in pools]
        if len(known) < len(profile.pool_names):
            continue
        mismatched = list(_fallback_pools(profile, known))
        yield from mismatched
        if mismatched:  # the checks of each pool would only repeat it
            continue
        for pool in known:
            yield from _units(profile, pool)
            yield from _fit(profile, pool)
        yield from _checkpoint(profile, known, platform,
                               storage_given=declared["checkpointStorage"] is None)
    yield from order_conflicts(platform.all_profiles, [p.name for p in platform.pools])


def _group_refs(platform: Platform, declared: set[str]) -> Iterator[str]:
    """With ``groupIds``, a group without an object ID could never match a token."""
    if not declared:
        return
    uses = [(f"team {t.name!r}: groups", t.groups) for t in platform.teams]
    uses += [(f"team {t.name!r}: leadGroups", t.lead_groups) for t in platform.teams]
    uses += [(f"{p.kind} {p.slug!r}: allowedGroups", p.allowed_groups)
             for p in platform.all_profiles]
    for label, groups in uses:
        for group in groups:
            if group not in declared:
                yield (f"{label}: {group!r} has no object ID in groupIds, so no token "
                       f"can carry it; known: {', '.join(sorted(declared))}")


#: The sections every spec has, each with at least one item.
REQUIRED_SECTIONS = ("pools", "teams", "priorities", "profiles")


def check_platform(platform: Platform, declared: dict[str, set[str] | None]) -> list[str]:
    """All cross-field problems of ``platform`` (empty when it is consistent).
    ``declared``: the names each section declares, valid or not, None when it is
    unreadable (:func:`jupyterhub_gpu.spec.parse.parse_platform`)."""
    errors: list[str] = []
    for kind in REQUIRED_SECTIONS:  # each a field of Platform of the same name
        if not getattr(platform, kind) and declared[kind] == set():
            errors.append(f"{kind}: at least one is required")
    errors += _duplicates("pool", [p.name for p in platform.pools])
    errors += _duplicates("team", [t.name for t in platform.teams])
    errors += _duplicates("priority", [p.name for p in platform.priorities])
    errors += _duplicates("profile", [p.slug for p in platform.profiles])
    errors += _duplicates("job profile", [p.slug for p in platform.job_profiles])
    errors += _group_refs(platform, declared.get("groupIds", set()))
    errors += _team_refs(platform, None if declared["pools"] is None else
                         {p.name for p in platform.pools} | declared["pools"])
    errors += _profile_refs(platform, declared)
    errors += (e for pool in platform.pools for e in _node_auto_provisioning(pool))
    errors += (e for pool in platform.pools for e in _gpu_resource(pool))
    defaults = [p.slug for p in platform.profiles if p.default]
    if len(defaults) > 1:
        errors.append(f"profiles: default: only one profile may be the default, got "
                      f"{', '.join(defaults)}")
    return errors


def _usable(platform: Platform, team: Team, pool: str) -> list[str]:
    """Slugs of the profiles on ``pool`` that some member of ``team`` may start."""
    return [p.slug for p in platform.all_profiles if pool in p.pool_names
            and (not p.allowed_groups or set(p.allowed_groups) & set(team.groups))]


def _both_autoscalers(platform: Platform) -> list[str]:
    by = {a: [p.name for p in platform.pools if p.autoscaler is a] for a in Autoscaler}
    if not all(by.values()):
        return []
    pools = "; ".join(f"{', '.join(names)}: {a}" for a, names in by.items())
    return [f"pools: autoscaler: {pools}: AKS runs Node Auto Provisioning beside the cluster "
            f"autoscaler only in a subscription with the feature "
            f"Microsoft.ContainerService/{AKS_BOTH_AUTOSCALERS_FEATURE} registered "
            f"(see the Terraform docs, Node Auto Provisioning)"]


def check_warnings(platform: Platform) -> list[str]:
    """What is valid but may not be meant: quota on a pool the team cannot use; both
    of AKS's autoscalers in one cluster."""
    warnings = _both_autoscalers(platform)
    pools = {p.name: p for p in platform.pools}
    for team in platform.teams:
        for name, units in team.quota.items():
            if units == 0 or name not in pools or _usable(platform, team, name):
                continue
            on_pool = [p.slug for p in platform.all_profiles if name in p.pool_names]
            why = (f"none of its profiles ({', '.join(on_pool)}) allows the team's groups "
                   f"({', '.join(team.groups)})" if on_pool else "no profile uses that pool")
            warnings.append(
                f"team {team.name!r}: quota: {_plural(units, pools[name].unit_name)} of pool "
                f"{name!r}, but {why}; the team's users cannot use this quota, it can only "
                f"be lent to the cohort")
    return warnings
