"""The spawn form: the profiles a user may start, with what each one gives them."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

from jinja2 import Environment, PackageLoader, select_autoescape

from ..spec.allocatable import node_resources
from ..contract import USER_PROFILES_API_PATH
from ..spec.quantities import format_cpu, format_memory
from ..spec.model import Platform, Pool, Profile

#: how often the spawn form asks the availability API again
REFRESH_SECONDS = 15


def user_profiles_url(hub_base_url: str, name: str) -> str:
    """Where the form of ``name``'s server asks for availability (``hub_base_url``:
    the hub's, ``/hub/``)."""
    return hub_base_url.rstrip("/") + "/" + USER_PROFILES_API_PATH.format(
        name=quote(name, safe=""))


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
    price_per_hour: str  # "$0.90", or "$0.90–$3.40" over a fallback profile's pools
    preemptible: bool
    default: bool
    pools: str = ""  # a fallback profile's pools in order of preference, with their prices
    gpu: bool = True  # False: a CPU-only profile (no GPU facts on its card)


def _one_or_range(values: list[float]) -> str:
    """``$0.90`` or, when the pools' prices differ, ``$0.90–$3.40``."""
    low, high = f"${min(values):.2f}", f"${max(values):.2f}"
    return low if low == high else f"{low}–{high}"


def _either(words: list[str]) -> str:
    """The distinct ``words`` in order, joined by "or" (the pools of a fallback profile)."""
    return " or ".join(dict.fromkeys(words))


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
    pools = platform.pools_of(profile)
    pool, prices = pools[0], [price_per_hour(p, profile) for p in pools]
    memory = _either([f"{p.unit_memory_gb} GB" for p in pools]) + (
        " (shared)" if pool.sharing.shared else "")
    return ProfileCard(
        slug=profile.slug,
        display_name=profile.display_name,
        description=profile.description,
        gpu_model=_either([p.gpu.name for p in pools]),
        sharing=pool.sharing.mode.form_label(pool.sharing),
        gpu_memory=memory,
        count=profile.units,
        cpu=format_cpu(profile.cpu),
        memory=format_memory(profile.memory_bytes),
        price_per_hour=_one_or_range(prices),
        preemptible=(any(p.spot for p in pools)
                     or platform.priority(profile.priority).preemptible),
        default=profile.default,
        pools=(", then ".join(f"{p.name} (${price:.2f})" for p, price in zip(pools, prices))
               if profile.fallback else ""),
        gpu=pool.has_gpu,
    )


_env = Environment(loader=PackageLoader("jupyterhub_gpu.hub", "templates"),
                   autoescape=select_autoescape(["html"]))


def render_form(platform: Platform, groups: frozenset[str], selected: str | None,
                notice: str | None = None, availability_url: str | None = None,
                refresh_seconds: int = REFRESH_SECONDS) -> str:
    """HTML for the spawn page. Only profiles the user's groups allow are listed,
    CPU-only ones first; ``notice`` says why the platform stopped the user's last
    server. With ``availability_url`` (the hub's availability API for this user,
    :mod:`jupyterhub_gpu.hub.api`) a small script shows each profile's availability
    under it and asks again every ``refresh_seconds`` while the page is open."""
    cards = [profile_card(platform, p) for p in platform.profiles_for(groups)]
    if cards and not any(c.slug == selected for c in cards):
        selected = next((c.slug for c in cards if c.default), cards[0].slug)
    return _env.get_template("form.html").render(
        cards=cards, selected=selected, notice=notice, availability_url=availability_url,
        refresh_ms=refresh_seconds * 1000)
