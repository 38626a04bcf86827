"""IPython extension in the notebook's kernels: warn in cell output before a hard stop.

When a cell runs less than ``JUPYTERHUB_GPU_CULL_WARN_BEFORE`` seconds (default 900)
before the server's max-age deadline, the cell's output starts with a warning (at
most once every 5 minutes). Idle culls need no such warning -- running a cell is
activity. Load it in every kernel with an IPython kernel config file, e.g.
``{sys.prefix}/etc/ipython/ipython_kernel_config.json``::

    {"InteractiveShellApp": {"extensions": ["jupyterhub_gpu.cull.kernel_ext"]}}
"""

from __future__ import annotations

import os
import sys
from datetime import datetime, timedelta
from typing import Any

from ..contract import ENV_CULL_WARN_BEFORE
from .notice import CullRules, deadline_warning
from .policy import Clock, utcnow

REPEAT_AFTER = timedelta(minutes=5)


class DeadlineWarner:
    def __init__(self, rules: CullRules, warn_before: timedelta, clock: Clock = utcnow):
        self.rules, self.warn_before, self.clock = rules, warn_before, clock
        self._last: datetime | None = None

    def message(self) -> str | None:
        """The warning due now, if any (and not shown in the last 5 minutes)."""
        now = self.clock()
        if self._last is not None and now - self._last < REPEAT_AFTER:
            return None
        text = deadline_warning(self.rules, now, self.warn_before)
        if text is not None:
            self._last = now
        return text

    def pre_run_cell(self, *_: Any) -> None:
        text = self.message()
        if text:
            print(f"\N{WARNING SIGN} {text}", file=sys.stderr, flush=True)


def load_ipython_extension(ipython: Any) -> None:
    rules = CullRules.from_env(os.environ)
    if rules is None or rules.max_age_deadline is None:
        return
    try:
        warn_before = timedelta(seconds=int(os.environ.get(ENV_CULL_WARN_BEFORE, "900")))
    except ValueError:
        warn_before = timedelta(minutes=15)
    ipython.events.register("pre_run_cell", DeadlineWarner(rules, warn_before).pre_run_cell)
