"""The two status lines at the top: what is being watched, and how the capture is doing."""

from __future__ import annotations

import os

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from gmpmon.events import Header
from gmpmon.model.snapshot import Snapshot
from gmpmon.model.thinning import fidelity, fmt_k, thinning
from gmpmon.tui.census import goroutine_count
from gmpmon.tui.measure import coverage, hot_count, pct
from gmpmon.tui.render import fmt_count, fmt_ns, uptime_ns


class StatusHeader(Widget):
    snapshot: reactive[Snapshot | None] = reactive(None, always_update=True)
    status: reactive[str] = reactive("")
    paused: reactive[bool] = reactive(False)
    recording: reactive[str | None] = reactive(None)
    ended: reactive[bool] = reactive(False)  # live target exited
    counting: reactive[str] = reactive("")  # "last 10.0s" / "since reset 3.0s ago" / ""

    def __init__(self, header: Header, *, replay: bool = False, id: str | None = None) -> None:
        super().__init__(id=id)
        self.header = header
        self.replay = replay  # the source's status line carries the clock ("replay 1.2/5.0s")

    def render(self) -> Text:
        h, snap = self.header, self.snapshot
        exe = os.path.basename(h.exe) or h.exe or "?"
        gomaxprocs = snap.gomaxprocs if snap is not None and snap.gomaxprocs else h.gomaxprocs
        top = Text(no_wrap=True, overflow="ellipsis")
        top.append("gmpmon ", style="bold #58a6ff")
        top.append(f"pid {h.pid} ", style="bold")
        top.append(f"{exe} ")
        top.append(f"{h.go_version} ", style="bold #3fb950")
        top.append(f"GOMAXPROCS {gomaxprocs} ")
        top.append(f"mode {h.mode}", style="#d29922")

        second = Text(no_wrap=True, overflow="ellipsis")
        if self.ended:
            # The TUI stays up after the target is gone: first on the line (never cut off at
            # 80 columns), so it cannot pass for a live view.
            second.append(f" {self.status or 'target exited'} - q to quit ",
                          style="bold white on #da3633")
            second.append("  ")
        if self.replay and self.status and not self.ended:
            second.append(f"{self.status}  ", style="#a371f7")  # the replay's one clock
        # What watching costs, right after the clock: at 80 columns it is what the line
        # keeps (issue 27: it came last and was the first thing cut). Live, the budget
        # controller's status line starts with it; its cut-back detail goes to the end.
        cost, detail = cost_text(snap, self.status if not self.replay else "")
        if snap is not None and not self.replay:
            second.append(f"up {fmt_ns(uptime_ns(snap, h.start_ns))}  ")
        if cost:
            second.append(f"{cost}  ", style="bold #d29922")
        if snap is None:
            second.append("waiting for the first events…", style="dim")
        else:
            second.append(f"{fmt_count(snap.event_rate)} ev/s  ")
            lost = f"lost {fmt_count(snap.events_lost)}"
            second.append(lost, style="bold white on #da3633" if snap.events_lost else "")
            thin = thinning(snap)
            if thin.thinned:
                # what thinning took, and that the counts are still whole ("exact" only then)
                second.append(f"  {fidelity(snap, thin)} {fmt_k(thin.missed)}/"
                              f"{fmt_k(thin.written)}", style="bold #d29922")
            cov = coverage(snap)
            # The runtime's own count (gcount, trap-free, every mode) when it was read.
            from_runtime = goroutine_count(snap.runtime)
            second.append(f"  goroutines {from_runtime or hot_count(snap.goroutines_live, cov)}")
            if cov.window == "windows":
                second.append(f"  hot probes {pct(cov.fraction)} of the time", style="#d29922")
            elif cov.window == "sampled":
                second.append("  sampled: no hot probes", style="#d29922")
        if self.counting:
            second.append(f"  counts: {self.counting}", style="bold #58a6ff")
        if self.recording:
            second.append(f"  ● REC {os.path.basename(self.recording)}", style="bold #f85149")
        if self.paused:
            second.append("  ❚❚ PAUSED", style="bold black on #d29922")
        if detail and not self.ended:
            second.append(f"  {detail}", style="#a371f7")
        out = Text("\n", no_wrap=True, overflow="ellipsis").join([top, second])
        out.no_wrap = True
        return out


COST_PREFIX = "cost ~"  # gmpmon.capture.budget: CostStatus.header_text()


def cost_text(snap: Snapshot | None, live_status: str) -> tuple[str, str]:
    """(what watching costs the target, the rest of a live status line).

    Live: the budget controller's line, ``cost ~0.4% (budget 1%); mutex: ...``, split at
    its first "; " (any other status is all detail). Replay: the recording's last COST event
    (since attach); nothing when the capture had no controller (full mode)."""
    if live_status:
        if live_status.startswith(COST_PREFIX):
            cost, _, rest = live_status.partition("; ")
            return cost, rest
        return "", live_status
    c = snap.cost if snap is not None else None
    if c is None:
        return "", ""
    return f"{COST_PREFIX}{c.estimated_pct:.1f}% (budget {c.budget_pct:g}%)", ""
