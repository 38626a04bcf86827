"""The table of both worlds, and the plot: machines per pool over time, and the
cumulative cost (matplotlib, from the ``replay`` extra, imported only to plot)."""

from __future__ import annotations

from datetime import datetime
from typing import Iterable, Sequence

from ..spec.model import Platform
from .figures import Figures, NodeLifetime, percentile

#: a column's cell for a figure it does not have (yet)
MISSING = "-"
#: the platform column's title in `replay baseline`, where nothing was replayed
PLATFORM_NOT_REPLAYED = "jupyterhub-gpu (see replay run)"


def _seconds(value: float | None) -> str:
    if value is None:
        return MISSING
    return f"{value:.0f} s" if value < 120 else f"{value / 60:.1f} min"


def _rows(platform: Platform, columns: Sequence[Figures | None]) -> list[tuple[str, list[str]]]:
    def each(func) -> list[str]:
        return [MISSING if f is None else func(f) for f in columns]

    rows = [
        ("GPU node-hours", each(lambda f: f"{f.gpu_node_hours:.1f}")),
        ("cost (spec prices, all nodes)", each(lambda f: f"{f.cost:,.2f}")),
        ("GPU-hours of work done", each(lambda f: f"{f.used_gpu_hours:.1f}")),
        ("utilization of billed GPU-hours", each(
            lambda f: MISSING if f.utilization is None else f"{100 * f.utilization:.1f}%")),
    ]
    for pool in platform.pools:
        rows.append((f"node-hours, pool {pool.name}", each(
            lambda f: f"{f.node_hours_by_pool.get(pool.name, 0.0):.1f}")))
    for p in (50, 95):
        rows.append((f"time to notebook, p{p}",
                     each(lambda f: _seconds(percentile(f.time_to_notebook, p)))))
    slugs = sorted({s for f in columns if f is not None for s in f.queue_waits})
    for slug in slugs:
        for p in (50, 95):
            rows.append((f"queue wait {slug}, p{p}", each(
                lambda f: _seconds(percentile(f.queue_waits.get(slug, ()), p)))))
    rows += [
        ("culls / idle shutdowns", each(lambda f: str(f.culls))),
        ("preemptions and evictions", each(lambda f: str(f.preemptions))),
        ("sessions that never got a server", each(lambda f: str(f.sessions_without_server))),
    ]
    return rows


def table(platform: Platform, columns: Sequence[Figures | None],
          titles: Sequence[str] | None = None) -> str:
    """The figures of each world side by side, as aligned text; a None column (the
    platform's, before a replay) shows every cell as missing."""
    titles = list(titles or [f.world if f else PLATFORM_NOT_REPLAYED for f in columns])
    rows = [("", titles), *_rows(platform, columns)]
    label = max(len(name) for name, _ in rows)
    widths = [max(len(cells[i]) for _, cells in rows) for i in range(len(columns))]
    lines = [name.ljust(label) + "  " + "  ".join(c.rjust(w) for c, w in zip(cells, widths))
             for name, cells in rows]
    return "\n".join(lines) + "\n"


def fixed_lines(bundle, people: int, hours: float) -> list[str]:
    """Every fixed cost of both sides (:mod:`.costs`), one line each with its basis."""
    from .costs import platform_fixed, vm_fixed

    lines = [f"fixed costs of {hours:g} hours, {people} people:"]
    for side, items in (("platform", platform_fixed(bundle, people, hours)),
                        ("VMs", vm_fixed(people, hours))):
        for c in items:
            lines.append(f"  {side}: {c.what}: {c.amount:,.2f} ({c.basis})")
    return lines


def every_cost(bundle, vms: Sequence[Figures], platforms: Sequence[Figures], people: int,
               hours: float) -> list[str]:
    """Each platform column's cost with every fixed cost added, against the first VM
    column's (the headline) with the VMs' fixed costs added; then the fixed costs."""
    from .costs import platform_fixed, vm_fixed

    fixed_platform = sum(c.amount for c in platform_fixed(bundle, people, hours))
    headline = vms[0].cost + sum(c.amount for c in vm_fixed(people, hours))
    lines = [f"every cost (the pools' or VMs' cost above plus the fixed costs below), "
             f"against {vms[0].world}: {headline:,.2f}"]
    for f in platforms:
        total = f.cost + fixed_platform
        lines.append(f"  {f.world}: {total:,.2f}, {100 * (total / headline - 1):+.0f}%")
    return lines + fixed_lines(bundle, people, hours)


def running(nodes: Iterable[NodeLifetime], end: datetime) -> list[tuple[datetime, int]]:
    """How many of ``nodes`` are up, as steps: (time, count from then on)."""
    changes: dict[datetime, int] = {}
    for n in nodes:
        stop = min(n.end or end, end)
        if stop > n.start:
            changes[n.start] = changes.get(n.start, 0) + 1
            changes[stop] = changes.get(stop, 0) - 1
    steps, count = [], 0
    for at in sorted(changes):
        count += changes[at]
        steps.append((at, count))
    return steps


def cumulative_cost(platform: Platform, nodes: Iterable[NodeLifetime], end: datetime
                    ) -> list[tuple[datetime, float]]:
    """The cost spent by each time a node started or stopped (linear in between),
    and at ``end``."""
    rate_changes: dict[datetime, float] = {}
    for n in nodes:
        stop, price = min(n.end or end, end), platform.pool(n.pool).price_per_node_hour
        if stop > n.start:
            rate_changes[n.start] = rate_changes.get(n.start, 0.0) + price
            rate_changes[stop] = rate_changes.get(stop, 0.0) - price
    points, rate, spent, last = [], 0.0, 0.0, None
    for at in sorted(rate_changes):
        if last is not None:
            spent += rate * (at - last).total_seconds() / 3600
        rate, last = rate + rate_changes[at], at
        points.append((at, spent))
    if points and points[-1][0] < end:
        points.append((end, spent))  # nothing up: the line stays flat to the end
    return points


def _machines(ax, platform: Platform, world: Figures, end: datetime) -> None:
    colors = {pool.name: f"C{i}" for i, pool in enumerate(platform.pools)}
    for pool in platform.pools:
        steps = running([n for n in world.nodes if n.pool == pool.name], end)
        if steps:
            ax.step([t for t, _ in steps], [c for _, c in steps], where="post",
                    color=colors[pool.name], label=pool.name)
    total = running(world.nodes, end)
    if total:
        ax.step([t for t, _ in total], [c for _, c in total], where="post", color="black",
                linewidth=0.8, label="all")
    ax.set_title(world.world, fontsize="small", loc="left")
    ax.set_ylabel("machines up")
    ax.legend(fontsize="x-small", ncol=3, loc="upper right")


def plot(platform: Platform, columns: Sequence[Figures], start: datetime, end: datetime,
         path: str) -> None:
    """Write the PNG: for each world the machines up per pool over time, then every
    world's cumulative cost."""
    try:
        import matplotlib
    except ImportError:
        raise RuntimeError("plotting needs matplotlib: pip install 'jupyterhub-gpu[replay]'"
                           ) from None
    matplotlib.use("Agg")
    from matplotlib import pyplot

    fig, axes = pyplot.subplots(len(columns) + 1, 1, figsize=(11, 2.6 * (len(columns) + 1)),
                                sharex=True)
    for ax, world in zip(axes, columns):
        _machines(ax, platform, world, end)
    spent = axes[-1]
    for world in columns:
        points = cumulative_cost(platform, world.nodes, end)
        spent.plot([t for t, _ in points], [c for _, c in points], label=world.world)
    spent.set_ylabel("cumulative cost\n(spec prices)")
    spent.set_xlim(start, end)
    spent.legend(fontsize="small")
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    pyplot.close(fig)
