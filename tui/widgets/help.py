"""The `?` help screen: keys and the colours of the timeline."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from gmpmon.tui.render import legend

KEYS = """\
1-5 / tab         switch view: Procs, Scheduling, Contention, Goroutines, Findings
up down j k       scroll (PgUp PgDn, g G: top/bottom; home end when live)
p / space         pause / resume: freeze the numbers shown (a replay pauses too)
e                 export the contended mutex stacks now (folded format)
r                 start / stop recording events to a file (live only)
!                 live, with --trigger key: fire it (burst, dump, a ▼ on the timeline)
z  t              reset the counters (count from now); last 10 s / since attach
+ -  o            Procs: time per timeline cell; busiest Ps first / by id
← →               replay: step back / forward 100 ms (shift: 1 s)
[ ]  home end     replay: seek -/+ 10%, to the start, to the end
< >               replay: slower / faster
s / click header  Goroutines: change the sort column (again: reverse)
w                 Goroutines: wait stacks (grouped) / goroutine table
enter             details: the goroutine or wait stack under the cursor; Contention: stacks
/                 filter goroutines and stacks by text (empty: all)
T                 several targets (attach PID PID...): pick the one shown
?                 this help          q  quit (detaches every probe)
"""

VIEWS = (
    "Procs: one row per P. state is what the P does now: running, searching (its M is in "
    "findRunnable looking for work), idle, syscall, GC stop; 'idle?' is the last state seen, "
    "not observed since. runq is the P's local run queue. The strip shows the time per cell "
    "in its header, newest on the right. With more than 8 Ps: a heat strip of every P, the "
    "busiest first, the idle ones on one line. In sample mode the strip is 'sampled': "
    "running where a perf sample (99 Hz) saw the P's goroutine on a CPU, idle/syscall/GC from "
    "50 Hz P status reads, blank where neither saw anything; default mode does the same "
    "between its windows, and marks the windows (probe events) with ━ on a 'probes' line. "
    "Below: Ms (OS threads) with "
    "their on-CPU time and kernel run-queue delay (sched tracepoints: --kernel "
    "samples,sched; else a CPU estimate from the samples), syscalls per P by name and time "
    "(syscall tracepoints: --kernel samples,sched,syscalls; else the runtime's per-P "
    "syscall ticks), and the goroutines most on a CPU (perf samples). Each says its "
    "source.\n"
    "Scheduling: runnable -> running latency (from ready or preemption to execute), park "
    "reasons, work stealing (thief x victim), preemption, syscalls, hand-offs, "
    "stop-the-world. '<655µs' is a histogram bucket bound: under 655µs. In sample mode the "
    "latency is the runtime's own histogram (runtime counters: it times ~1 transition in "
    "8).\n"
    "Contention: contended sync.Mutex / RWMutex stacks by total wait; e exports them.\n"
    "Goroutines: where they wait (the census's wait stacks: parked goroutines grouped by "
    "state, wait reason, stack and creation site; enter shows the stack; w switches), or "
    "the goroutine table: every goroutine of the newest census (<= 1 s old, every mode) in "
    "the census's state and wait reason, with what the probes measured where they saw it "
    "(P, wait time, in state, runs, parent; '–' where they did not), longest total wait "
    "first; s or a click on a header sorts. States: running (on a P), runnable (in a run "
    "queue), waiting (parked: see the wait reason), syscall; in a recording whose census "
    "told no states the table lists the probes' goroutines: dead (exited, kept a while), "
    "unknown (not observed since attaching or since the last window) too. 'in state >2s': "
    "unchanged since the capture began. start: the goroutine's function (go f(x): f), "
    "then, if there is room, '< creator file.go:line' (its go statement; enter shows "
    "both).\n"
    "Findings: the scheduler pathologies named (most severe first); enter or a click shows "
    "the evidence and what to try (docs/findings.md).\n"
    "Default mode counts hot events inside its windows only: those numbers say 'in N% of the "
    "time'. '–' means not measured in this mode, never zero. Sources: probes (events), "
    "runtime counters (the runtime's memory), census, perf samples (statistical, ~1 ms "
    "each: CPU~), tracepoints (exact kernel counts)."
)


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,question_mark,q", "dismiss", "Close"),
    ]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            yield Static(Text("Keys", style="bold"))
            yield Static(Text(KEYS))
            yield Static(Text("Timeline colours", style="bold"))
            yield Static(legend())
            yield Static(Text("\n" + VIEWS, style="dim"))

    def on_mount(self) -> None:
        self.query_one("#help-box").border_title = "gmpmon help (esc to close)"
