"""The model's aggregate parts, in the order they see each event (after the state machine,
gmpmon.model.sched, and the two aggregates it feeds: latency and parks).

Adding a part: a module with a :class:`gmpmon.model.part.Part` (its handlers, counters,
section) and one line here.
"""

from __future__ import annotations

from collections.abc import Callable

from gmpmon.model.cost import CostTracker
from gmpmon.model.counts import Lifecycle, Preemption, ProbeHits, RingLedger, Syscalls
from gmpmon.model.gcheap import GcPart
from gmpmon.model.kernel import KernelPart
from gmpmon.model.part import Context, Part
from gmpmon.model.runtime import RuntimePart
from gmpmon.model.steals import Steals
from gmpmon.model.stw import Stw
from gmpmon.model.waits import Waits

PARTS: tuple[Callable[[Context], Part], ...] = (
    Steals,
    Syscalls,
    Preemption,
    Lifecycle,
    Stw,
    Waits,
    ProbeHits,
    RingLedger,
    RuntimePart.for_model,  # the runtime's own counters and the goroutine census (40-59)
    GcPart.for_model,  # the GC and heap values of the runtime's memory (RT_GC)
    CostTracker,  # default mode's budget controller (COST, TRIGGER: 80-89)
    KernelPart.for_model,  # perf-event samples and kernel tracepoints (60-79, tables 10-19)
)
