"""Small server-side charts: inline SVG built from numbers (pure; no script, no CDN)."""

from __future__ import annotations

from html import escape
from typing import Sequence

BAR_HEIGHT, GAP, LABEL_WIDTH, BAR_WIDTH, VALUE_WIDTH = 18, 6, 170, 360, 90
COLOR = "#3b6ea5"


def bars(title: str, items: Sequence[tuple[str, float]], unit: str = "") -> str:
    """A horizontal bar chart of ``items`` (label, value >= 0), labelled with the values."""
    if not items:
        return ""
    top = max(v for _, v in items) or 1.0
    height = len(items) * (BAR_HEIGHT + GAP) + GAP
    width = LABEL_WIDTH + BAR_WIDTH + VALUE_WIDTH
    parts = [f'<svg class="chart" role="img" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">'
             f'<title>{escape(title)}</title>']
    for i, (label, value) in enumerate(items):
        y = GAP + i * (BAR_HEIGHT + GAP)
        w = max(0.0, value) / top * BAR_WIDTH
        text_y = y + BAR_HEIGHT - 5
        parts.append(
            f'<text x="{LABEL_WIDTH - 6}" y="{text_y}" text-anchor="end">{escape(label)}</text>'
            f'<rect x="{LABEL_WIDTH}" y="{y}" width="{w:.1f}" height="{BAR_HEIGHT}" '
            f'fill="{COLOR}"/>'
            f'<text x="{LABEL_WIDTH + w + 4:.1f}" y="{text_y}">{value:,.2f}{escape(unit)}</text>')
    parts.append("</svg>")
    return "".join(parts)
