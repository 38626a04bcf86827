"""Forged spawn options, shared by the unit tier's property tests
(``tests/unit/test_forged_options.py``) and the cluster tier's, which posts them to a
real hub (``tests/integration/test_forged_rest.py``).

:func:`expected_profile` is the oracle, written independently of the code under test:
the profile a user gets for ``user_options``, or None when they must be refused.
"""

from __future__ import annotations

from hypothesis import strategies as st

# Values of the wrong type, of any shape JSON can carry.
junk = st.one_of(st.none(), st.integers(), st.text(max_size=8), st.lists(st.text(max_size=4)),
                 st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=2))
# Keys a forger would try: the ones the pod is built from, and Kueue's own label.
FORGED_KEYS = ["profile", "image", "queue", "priority", "pool", "kueue.x-k8s.io/queue-name",
               "kueue.x-k8s.io/priority-class", "cpu_limit", "namespace", "node_selector"]


def allowed_profiles(platform, user_groups) -> list[str]:
    """The slugs a user may start, in spec order."""
    if not any(set(t.groups) & user_groups for t in platform.teams):
        return []
    return [p.slug for p in platform.profiles
            if not p.allowed_groups or set(p.allowed_groups) & user_groups]


def expected_profile(platform, user_groups, opts) -> str | None:
    """The profile the user gets for ``opts``, or None when they must be refused.
    Only ``profile`` may be sent; none (or null) means the default profile."""
    allowed = allowed_profiles(platform, user_groups)
    if not isinstance(opts, dict) or set(opts) - {"profile"} or not allowed:
        return None
    slug = opts.get("profile")
    if slug is None:
        defaults = [s for s in allowed if platform.profile(s).default]
        return (defaults or allowed)[0]
    return slug if slug in allowed else None
