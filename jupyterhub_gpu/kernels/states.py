"""What each GPU kernel of this server is doing, in words: one record per server
process (:data:`STATES`), which the notebook's GPU status item reads
(:mod:`jupyterhub_gpu.labext.handler`: the server extension hands it
:meth:`KernelStates.notes`).

Who writes it:

* the provisioner (:mod:`.provisioner`), while it starts a kernel: each stage the
  gpu-kernels service says the pod is at (:mod:`.progress`: the spawn page's words for
  a queued server, from the same function), then ready once the kernel connected back;
  and when its poll sees the platform take the pod back (being deleted with Kueue's
  ``TerminationTarget`` condition or a ``DisruptionTarget``, in the words of a
  server's stop notice; or gone without a word);
* the server extension (:mod:`.server_ext`), when it releases an idle kernel.

:meth:`KernelStates.notes` turns it into the item's notes, e.g.::

    GPU kernel "Python 3 — T4 shared": Waiting for a T4 time-sliced share in queue
    ml-eng: position 2 of 3 (for 4 minutes so far).
    GPU kernel "Python 3 — T4 shared" is ready: it took 6 minutes to start.
    The GPU of kernel "Python 3 — T4 shared" was released at 14:02 UTC after 15 minutes
    idle: its variables are gone, and the next cell you run starts a new GPU kernel,
    which queues for a GPU again.

A kernel the platform took back is shut down by the server once its pod is gone, as
a released one, not restarted (:meth:`KernelStates.end`): so the next cell starts a
new one, as the words say. A kernel its user shut down or restarted leaves no note. What the service
answers is bounded (:data:`MAX_WORDS`) before it is kept.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Callable

from ..contract import KERNEL_COMPONENT, KERNELS_SERVICE_NAME
from ..cull.notice import clock_time
from ..cull.policy import utcnow
from ..kueue.messages import Step
from ..labext.status import KernelNotes, Note, duration_words

#: what a kernel is doing
STARTING, READY, RELEASED, STOPPED = "starting", "ready", "released", "stopped"
#: the longest words taken from the service (characters; longer ones are cut)
MAX_WORDS = 400
#: how many ended kernels are remembered, and for how long their notes are shown
MAX_ENDED = 10
ENDED_SHOWN = timedelta(hours=24)
#: how long a kernel's "ready" note is shown
READY_SHOWN = timedelta(minutes=10)
#: a kernel's pod gone without a word from the platform (deleted before the poll saw why)
POD_GONE = ("taken back: its pod went away (a preemption, an eviction or its node "
            "going away)")
NEXT_CELL = ("its variables are gone, and the next cell you run starts a new GPU kernel, "
             "which queues for a GPU again")


@dataclass(frozen=True)
class KernelState:
    """One GPU kernel of this server, as last seen."""

    kernel_id: str
    name: str  # its kernelspec's display name, e.g. "Python 3 — T4 shared"
    state: str  # STARTING, READY, RELEASED or STOPPED
    launched: datetime  # when this start began
    since: datetime  # when it reached its state (while starting: its stage)
    launch: int = 1  # the how-many-th start of this kernel id here (a restart is one)
    step: str = ""  # while starting: the service's stage, e.g. "queued", "scale-up"
    message: str = ""  # while starting: the service's words; stopped: how
    position: tuple[int, int] | None = None  # while queued: (place, total)
    idle_seconds: float | None = None  # released: how long nothing had run in it


def _text(value: Any) -> str:
    return value[:MAX_WORDS] if isinstance(value, str) else ""


def _position(value: Any) -> tuple[int, int] | None:
    if (isinstance(value, (list, tuple)) and len(value) == 2
            and all(isinstance(n, int) and 0 <= n < 10**6 for n in value)):
        return value[0], value[1]
    return None


def words(state: KernelState, now: datetime) -> str:
    """What the item says of ``state`` (see the module's docstring)."""
    name = f'"{state.name}"'
    if state.state == STARTING:
        so_far = duration_words((now - state.since).total_seconds())
        doing = state.message or f"requested from the {KERNELS_SERVICE_NAME} service"
        return f"GPU kernel {name}: {doing} (for {so_far} so far)."
    if state.state == READY:
        took = duration_words((state.since - state.launched).total_seconds())
        return f"GPU kernel {name} is ready: it took {took} to start."
    at = clock_time(state.since, now)
    if state.state == RELEASED:
        idle = duration_words(state.idle_seconds or 0)
        return f"The GPU of kernel {name} was released at {at} after {idle} idle: {NEXT_CELL}."
    return f"The GPU of kernel {name} was {state.message or POD_GONE} at {at}: {NEXT_CELL}."


def label(state: KernelState) -> str:
    """The status bar's few words for a starting kernel."""
    if state.step == Step.QUEUED and state.position:
        return f"GPU kernel queued {state.position[0]}/{state.position[1]}"
    if state.step == Step.QUEUED:
        return "GPU kernel queued"
    if state.step == Step.SCALE_UP:
        return "GPU kernel: machine starting"
    return "GPU kernel starting"


#: each note's kind (the alert's key, ``gpu-kernel-released:<kernel id>:...``) and level
_NOTE_KINDS = {STARTING: (f"{KERNEL_COMPONENT}-starting", "info"),
               READY: (f"{KERNEL_COMPONENT}-ready", "info"),
               RELEASED: (f"{KERNEL_COMPONENT}-released", "warning"),
               STOPPED: (f"{KERNEL_COMPONENT}-stopped", "warning")}


class KernelStates:
    """The record (see the module's docstring). Each method takes the time as ``now``,
    by default the production clock's."""

    def __init__(self) -> None:
        self._states: dict[str, KernelState] = {}
        self._end: Callable[[str], None] | None = None

    def get(self, kernel_id: str) -> KernelState | None:
        return self._states.get(kernel_id)

    def launching(self, kernel_id: str, name: str, now: datetime | None = None) -> None:
        """A start of ``kernel_id`` (a new kernel, or a restart) begins; a note about
        an ended kernel of the same kernelspec is no longer news."""
        now = now or utcnow()
        old = self._states.get(kernel_id)
        self._states = {k: s for k, s in self._states.items()
                        if not (s.state in (RELEASED, STOPPED) and s.name == name)}
        self._states[kernel_id] = KernelState(kernel_id, _text(name), STARTING, now, now,
                                              old.launch + 1 if old else 1)

    def starting(self, kernel_id: str, stage: Any, now: datetime | None = None) -> None:
        """The service's ``stage`` of a starting kernel's pod (its API's answer: a dict
        with ``step``, ``message``, ``position``; anything else is ignored)."""
        state = self._states.get(kernel_id)
        if state is None or state.state != STARTING or not isinstance(stage, dict):
            return
        step, message = _text(stage.get("step")), _text(stage.get("message"))
        if not message:
            return
        since = state.since if step == state.step else (now or utcnow())
        self._states[kernel_id] = replace(state, step=step, message=message, since=since,
                                          position=_position(stage.get("position")))

    def ready(self, kernel_id: str, now: datetime | None = None) -> None:
        self._become(kernel_id, READY, now, step="", message="", position=None)

    def released(self, kernel_id: str, idle_seconds: float, now: datetime | None = None) -> None:
        """The server releases ``kernel_id`` after ``idle_seconds`` with nothing run."""
        self._become(kernel_id, RELEASED, now, idle_seconds=idle_seconds)

    def stopped(self, kernel_id: str, how: Any, now: datetime | None = None) -> None:
        """The platform took ``kernel_id``'s pod back; ``how``: the service's words
        (:func:`jupyterhub_gpu.kernels.progress.stopped`), or None if it went unseen."""
        self._become(kernel_id, STOPPED, now, message=_text(how) or POD_GONE)

    def ended(self, kernel_id: str) -> None:
        """``kernel_id`` is shut down: forgotten, unless released or taken back (whose
        notes stay, :data:`ENDED_SHOWN`)."""
        state = self._states.get(kernel_id)
        if state is not None and state.state not in (RELEASED, STOPPED):
            del self._states[kernel_id]

    def _become(self, kernel_id: str, what: str, now: datetime | None, **changes: Any) -> None:
        state = self._states.get(kernel_id)
        if state is not None:
            self._states[kernel_id] = replace(state, state=what, since=now or utcnow(),
                                              **changes)

    # -- ending a kernel the platform took back ----------------------------------------

    def end_with(self, end: Callable[[str], None] | None) -> None:
        """Who shuts a kernel down once the platform took it back (the server
        extension: through the server's kernel manager, as a release does)."""
        self._end = end

    def end(self, kernel_id: str) -> bool:
        """Have ``kernel_id`` shut down rather than restarted; False if nobody here
        can (then Jupyter's restarter does what it does with a dead kernel)."""
        if self._end is None:
            return False
        self._end(kernel_id)
        return True

    # -- what the item shows -----------------------------------------------------------

    def notes(self, now: datetime | None = None) -> KernelNotes:
        """The item's notes now, oldest kernel first; forgets ended kernels past
        :data:`ENDED_SHOWN` or beyond the :data:`MAX_ENDED` newest."""
        now = now or utcnow()
        ended = sorted((s for s in self._states.values() if s.state in (RELEASED, STOPPED)),
                       key=lambda s: s.since, reverse=True)
        for old in [s for i, s in enumerate(ended) if i >= MAX_ENDED
                    or now - s.since > ENDED_SHOWN]:
            del self._states[old.kernel_id]
        shown = sorted(self._states.values(), key=lambda s: s.launched)
        starting = [s for s in shown if s.state == STARTING]
        notes = []
        for s in shown:
            if s.state == READY and now - s.since > READY_SHOWN:
                continue
            kind, type_ = _NOTE_KINDS[s.state]
            notes.append(Note(kind, f"{s.kernel_id}:{s.launch}", type_, words(s, now)))
        return KernelNotes(tuple(notes), label(starting[0]) if starting else None,
                           bool(starting))


#: this server process's record
STATES = KernelStates()
