"""The spawn form: the profiles a user may start, with what each one gives them."""

from __future__ import annotations

from dataclasses import dataclass

from jinja2 import Environment, PackageLoader, select_autoescape

from .allocatable import node_resources
from .quantities import format_cpu, format_memory
from .spec import Platform, Pool, Profile


@dataclass(frozen=True)
class ProfileCard:
    """What the form shows for one profile."""

    slug: str
    display_name: str
    description: str
    gpu_model: str
    sharing: str
    gpu_memory: str
    count: int
    cpu: str
    memory: str
    price_per_hour: str
    preemptible: bool
    default: bool
    gpu: bool = True  # False: a CPU-only profile (no GPU facts on its card)


def price_per_hour(pool: Pool, profile: Profile) -> float:
    """What a server of ``profile`` costs: its GPU units' share of the node, or on a
    CPU-only pool the larger of its cpu and memory shares of what a node has left
    for notebooks."""
    if profile.units:
        return pool.price_per_unit_hour * profile.units
    node = node_resources(pool)
    share = max(profile.cpu * 1000 / node.pods_cpu_millis,
                profile.memory_bytes / node.pods_memory)
    return pool.price_per_node_hour * share


def profile_card(platform: Platform, profile: Profile) -> ProfileCard:
    pool = platform.pool(profile.pool)
    memory = f"{pool.unit_memory_gb} GB" + (" (shared)" if pool.sharing.shared else "")
    return ProfileCard(
        slug=profile.slug,
        display_name=profile.display_name,
        description=profile.description,
        gpu_model=pool.gpu.name,
        sharing=pool.sharing.mode.form_label(pool.sharing),
        gpu_memory=memory,
        count=profile.units,
        cpu=format_cpu(profile.cpu),
        memory=format_memory(profile.memory_bytes),
        price_per_hour=f"${price_per_hour(pool, profile):.2f}",
        preemptible=pool.spot or platform.priority(profile.priority).preemptible,
        default=profile.default,
        gpu=pool.has_gpu,
    )


_env = Environment(loader=PackageLoader("jupyterhub_gpu", "templates"),
                   autoescape=select_autoescape(["html"]))


def render_form(platform: Platform, groups: frozenset[str], selected: str | None,
                notice: str | None = None) -> str:
    """HTML for the spawn page. Only profiles the user's groups allow are listed,
    CPU-only ones first; ``notice`` says why the platform stopped the user's last
    server."""
    cards = [profile_card(platform, p) for p in platform.profiles_for(groups)]
    if cards and not any(c.slug == selected for c in cards):
        selected = next((c.slug for c in cards if c.default), cards[0].slug)
    return _env.get_template("form.html").render(cards=cards, selected=selected,
                                                 notice=notice)
