"""The gmpmon Textual app: handed a SnapshotSource, shows its Snapshots, never aggregates.

A background thread polls ``source.latest()`` a few times a second and posts each new
Snapshot as a :class:`SnapshotReady` message (newer ones replace queued older ones). The app
keeps the newest one in its ``snapshot`` reactive and hands it to the status header and to
the visible view only: hidden views are brought up to date when they are shown, so the
refresh cost is one view's, whatever the number of views.
"""

from __future__ import annotations

import asyncio
import gc
import threading
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.reactive import reactive
from textual.widgets import TabbedContent, TabPane

from gmpmon.export.folded import FoldedExporter
from gmpmon.files import unique_path, write_new_private
from gmpmon.model.delta import since
from gmpmon.model.snapshot import Snapshot
from gmpmon.source import RecordingControl, SeekControl, SnapshotSource, TriggerControl
from gmpmon.tui.history import GHistory
from gmpmon.tui.messages import SnapshotReady, SourceFailed
from gmpmon.tui.render import NS_PER_S, fmt_ns
from gmpmon.tui.widgets.contention import ContentionView
from gmpmon.tui.widgets.details import FilterScreen
from gmpmon.tui.widgets.findings import FindingsView
from gmpmon.tui.widgets.goroutines import GoroutinesView
from gmpmon.tui.widgets.help import HelpScreen
from gmpmon.tui.widgets.keybar import KeyBar
from gmpmon.tui.widgets.procs import ProcsView
from gmpmon.tui.widgets.sched import SchedView
from gmpmon.tui.widgets.status import StatusHeader
from gmpmon.tui.widgets.targets import pick_target

VIEWS = ("procs", "sched", "contention", "goroutines", "findings")
AnyView = ProcsView | SchedView | ContentionView | GoroutinesView | FindingsView
STEP_NS = NS_PER_S // 10
SEEK_FRACTION = 0.1
_VIEWS_GROUP = Binding.Group("views", compact=True)
_SEEK_ACTIONS = frozenset({"step", "seek_by", "seek_to", "speed"})
RECENT_NS = 10 * NS_PER_S  # `t`: the numbers of the last 10 s
KEEP_EVERY_NS = NS_PER_S // 4  # snapshots kept for it: one per 250 ms of snapshot time
KEEP_SNAPSHOTS = 64  # 16 s of them


def counting_label(snap: Snapshot, base: Snapshot | None, recent: bool) -> str:
    """What the header says the counts count from ("" = since attach)."""
    if base is None:
        return ""
    span = fmt_ns(max(snap.now - base.now, 0))
    return f"last {span}" if recent else f"since reset {span} ago"


SPEEDS = (0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0)


@runtime_checkable
class SpeedControl(Protocol):
    """A replay source whose playback speed can change (gmpmon.replay.ReplaySource)."""

    speed: float


class GmpmonApp(App[None]):
    CSS_PATH = "app.tcss"
    TITLE = "gmpmon"
    ENABLE_COMMAND_PALETTE = False
    # App declares this as an instance variable, so it cannot be annotated ClassVar here.
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (140, "-wide")]  # noqa: RUF012
    VERTICAL_BREAKPOINTS = [(0, "-short"), (28, "-tall")]  # noqa: RUF012
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "Quit"),
        Binding("ctrl+c", "quit", "Quit", show=False, priority=True),
        Binding("question_mark", "help", "Help"),
        Binding("1", "view('procs')", "Procs", group=_VIEWS_GROUP),
        Binding("2", "view('sched')", "Sched", group=_VIEWS_GROUP),
        Binding("3", "view('contention')", "Mutex", group=_VIEWS_GROUP),
        Binding("4", "view('goroutines')", "Gs", group=_VIEWS_GROUP),
        Binding("5", "view('findings')", "Findings", group=_VIEWS_GROUP),
        Binding("tab", "cycle_view(1)", "Next view", show=False, priority=True),
        Binding("shift+tab", "cycle_view(-1)", "Previous view", show=False, priority=True),
        Binding("p,space", "pause", "Pause"),
        Binding("p,space", "resume", "Resume"),
        Binding("e", "export_folded", "Export"),
        Binding("r", "toggle_recording", "Record"),
        Binding("r", "no_recording", "Record", show=False),
        Binding("plus,equals_sign", "zoom(-1)", "Zoom", key_display="+-"),
        Binding("minus", "zoom(1)", "Zoom out", show=False),
        Binding("o", "toggle_order", "Order", show=False),
        Binding("slash", "filter", "Filter", key_display="/"),
        Binding("t", "toggle_recent", "Recent"),
        Binding("exclamation_mark", "fire_trigger", "Trigger", key_display="!"),
        Binding("z", "reset_counters", "Reset"),
        Binding("T", "pick_target", "Targets", show=False),
        Binding("left", f"step({-STEP_NS})", "Step", priority=True, key_display="←→"),
        Binding("right", f"step({STEP_NS})", "Step", show=False, priority=True),
        Binding("shift+left", f"step({-10 * STEP_NS})", "Step 1s", show=False, priority=True),
        Binding("shift+right", f"step({10 * STEP_NS})", "Step 1s", show=False, priority=True),
        Binding("left_square_bracket", f"seek_by({-SEEK_FRACTION})", "Seek", priority=True,
                key_display="[]"),
        Binding("right_square_bracket", f"seek_by({SEEK_FRACTION})", "Seek", show=False,
                priority=True),
        Binding("home", "seek_to(0.0)", "Start/End", priority=True, key_display="home/end"),
        Binding("end", "seek_to(1.0)", "End", show=False, priority=True),
        Binding("less_than_sign", "speed(0.5)", "Speed", key_display="<>"),
        Binding("greater_than_sign", "speed(2.0)", "Faster", show=False),
    ]

    snapshot: reactive[Snapshot | None] = reactive(None, always_update=True)
    paused: reactive[bool] = reactive(False)

    def __init__(self, source: SnapshotSource, *, refresh_hz: float = 4.0,
                 export_dir: str = ".", targets: Sequence[SnapshotSource] = ()) -> None:
        super().__init__()
        self.source = source
        # `gmpmon attach PID PID...`: every target's source; T picks which one is shown, by
        # ending this app with ``switch_to`` set (the caller runs the next one).
        self.targets = tuple(targets)
        self.switch_to: int | None = None
        self.refresh_hz = refresh_hz
        self.export_dir = export_dir
        self.seek: SeekControl | None = source if isinstance(source, SeekControl) else None
        self.recorder: RecordingControl | None = (
            source if source.live and isinstance(source, RecordingControl) else None
        )
        self.triggers: TriggerControl | None = (
            source if source.live and isinstance(source, TriggerControl) else None
        )
        self.source_closed = False
        self.history = GHistory()  # states seen per goroutine, for its details screen
        self.filter_text = ""  # `/`: applies to the Goroutines table and the stacks
        # What the numbers count from: since attach (None), since `z` (a Snapshot), or, with
        # `t`, the last RECENT_NS (the newest kept Snapshot at least that old).
        self.baseline: Snapshot | None = None
        self.recent = False
        self._kept: deque[Snapshot] = deque(maxlen=KEEP_SNAPSHOTS)
        self.raw: Snapshot | None = None  # the source's Snapshot, before any baseline
        self.close_error: Exception | None = None
        self._stop = threading.Event()
        self._failed = False

    def run(self, *args: Any, **kwargs: Any) -> None:
        try:
            return super().run(*args, **kwargs)
        finally:
            if not kwargs.get("headless"):
                # The process ends soon after the TUI does. Freezing what is alive spares the
                # interpreter's final GC pass over the widget tree and the model: 0.2 s of CPU
                # measured, seconds of wall time on a loaded machine, between `q` and the
                # exit. (Not for headless runs: tests run many apps in one process.)
                gc.freeze()

    # -- layout -------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield StatusHeader(self.source.header, replay=not self.source.live, id="status")
        with TabbedContent(initial="procs", id="views"):
            with TabPane("1 Procs", id="procs"):
                yield ProcsView(id="procs-view")
            with TabPane("2 Scheduling", id="sched"):
                yield SchedView(id="sched-view")
            with TabPane("3 Contention", id="contention"):
                yield ContentionView(id="contention-view")
            with TabPane("4 Goroutines", id="goroutines"):
                yield GoroutinesView(id="goroutines-view")
            with TabPane("5 Findings", id="findings"):
                yield FindingsView(id="findings-view")
        yield KeyBar(id="keys")

    def on_mount(self) -> None:
        if self.seek is not None:
            self.paused = self.seek.paused()
        self._deliver(self._poll_once())
        self._poll_source()

    def on_unmount(self) -> None:
        self._stop.set()

    # -- polling (worker thread: only reads the source and posts messages) ---------------
    def _poll_once(self) -> SnapshotReady:
        position = self.seek.position() if self.seek is not None else None
        state = self.source.state()
        ended = state.live and state.target_exited
        return SnapshotReady(self.source.latest(), state.line, position, ended)

    @work(thread=True, exclusive=True, group="poll", exit_on_error=False)
    def _poll_source(self) -> None:
        interval = 1.0 / max(self.refresh_hz, 0.1)
        last: tuple[object, str, object] | None = None
        while not self._stop.wait(interval):
            try:
                msg = self._poll_once()
            except Exception as e:  # a dying source must not take the terminal with it
                self.post_message(SourceFailed(str(e) or type(e).__name__))
                return
            key = (msg.snapshot, msg.status, msg.position)
            # Identity for the Snapshot, not equality: comparing two Snapshots field by field
            # costs more than drawing one, and the producer hands out a new object only when
            # something changed.
            if (last is None or key[0] is not last[0] or key[1] != last[1]
                    or key[2] != last[2]):
                last = key
                self.post_message(msg)

    def on_snapshot_ready(self, msg: SnapshotReady) -> None:
        if not self.is_running:
            # Shutting down (Textual clears _running first, then prunes the screens while
            # this queue still runs): a snapshot the poller posted meanwhile has no widgets
            # left to go to (a CI failure: NoMatches for StatusHeader).
            return
        if self.paused and self.seek is None:
            # Pausing a live view freezes the numbers; the capture goes on, and its status
            # (the target exiting above all) must still show.
            self._deliver_status(msg)
            return
        self._deliver(msg)

    def on_source_failed(self, msg: SourceFailed) -> None:
        if not self._failed:
            self._failed = True
            self.notify(msg.error, title="source failed", severity="error", timeout=10)

    def _deliver_status(self, msg: SnapshotReady) -> None:
        status = self.query_one(StatusHeader)
        status.status = msg.status
        if msg.ended and not status.ended:
            status.ended = True
            # The TUI stays up so the last numbers can be read; say once how to leave.
            self.notify("target exited: the numbers are final; q to quit",
                        title="target exited", severity="warning", timeout=10)

    def _deliver(self, msg: SnapshotReady) -> None:
        self._deliver_status(msg)
        if msg.snapshot is not None and msg.snapshot is not self.raw:
            self.raw = msg.snapshot
            self.snapshot = self._counted(msg.snapshot)

    def _counted(self, snap: Snapshot) -> Snapshot:
        """``snap`` counted from the chosen baseline (since attach, since `z`, last N s)."""
        kept = self._kept
        if kept and kept[-1].now > snap.now:  # a replay went back in time
            kept.clear()
            if self.baseline is not None and self.baseline.now > snap.now:
                self.baseline = None
        if not kept or snap.now - kept[-1].now >= KEEP_EVERY_NS:
            kept.append(snap)
        base = self.baseline
        if self.recent:
            old = [k for k in kept if k.now <= snap.now - RECENT_NS]
            base = old[-1] if old else kept[0]
            if self.baseline is not None and self.baseline.now > base.now:
                base = self.baseline
        self.query_one(StatusHeader).counting = counting_label(snap, base, self.recent)
        return since(snap, base)

    def action_toggle_recent(self) -> None:
        self.recent = not self.recent
        self.notify("numbers: " + (f"last {RECENT_NS // NS_PER_S}s" if self.recent
                                   else "since attach" if self.baseline is None
                                   else "since the reset"), timeout=2)
        self._recount()

    def action_reset_counters(self) -> None:
        self.baseline = self.raw
        self.notify("counters reset: the numbers count from now (z again: from now again)",
                    timeout=3)
        self._recount()

    def _recount(self) -> None:
        if self.raw is not None:
            self.snapshot = self._counted(self.raw)

    def watch_snapshot(self, snap: Snapshot | None) -> None:
        self.query_one(StatusHeader).snapshot = snap
        if snap is not None:
            self.history.feed(snap)
        if snap is not None:
            self._active_view().snapshot = snap

    def watch_paused(self, paused: bool) -> None:
        self.query_one(StatusHeader).paused = paused
        self.refresh_bindings()
        if self.seek is not None and self.seek.paused() != paused:
            self.seek.set_paused(paused)

    def _active_view(self) -> AnyView:
        active = self.query_one(TabbedContent).active or "procs"
        view = self.query_one(f"#{active}-view")
        assert isinstance(view, AnyView)
        return view

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        view = self._active_view()
        if self.query_one(TabbedContent).active == "goroutines":
            # The table takes the focus so that its keys (s, arrows, page up/down) work at once.
            self.query_one("#g-table").focus()
        else:
            # So do the other views: arrows, PgUp/PgDn, Home/End and j/k scroll them.
            view.focus()
        self.refresh_bindings()
        if self.snapshot is not None and view.snapshot is not self.snapshot:
            view.snapshot = self.snapshot

    # -- actions ------------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in _SEEK_ACTIONS:
            return self.seek is not None
        if action == "toggle_recording":
            return self.recorder is not None
        if action == "no_recording":
            return self.recorder is None
        if action == "fire_trigger":
            return self.triggers is not None
        if action in ("pause", "resume"):
            # Two bindings share p/space: the footer says "Pause" or "Resume", never both.
            return self.paused == (action == "resume")
        if action in ("zoom", "toggle_order"):
            return self.query_one(TabbedContent).active == "procs"
        if action == "filter":
            return self.query_one(TabbedContent).active in ("goroutines", "contention")
        return True

    def action_view(self, name: str) -> None:
        if name in VIEWS:
            self.query_one(TabbedContent).active = name

    def action_cycle_view(self, delta: int) -> None:
        if isinstance(self.screen, HelpScreen):
            return
        tabs = self.query_one(TabbedContent)
        i = VIEWS.index(tabs.active) if tabs.active in VIEWS else 0
        tabs.active = VIEWS[(i + delta) % len(VIEWS)]

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_pause(self) -> None:
        self.paused = not self.paused
        if not self.paused:
            self._deliver(self._poll_once())

    def action_resume(self) -> None:
        self.action_pause()

    def action_no_recording(self) -> None:
        self.notify("r records a live session; this is a replay of a recording already",
                    severity="warning")

    def action_speed(self, factor: float) -> None:
        src = self.source
        if not isinstance(src, SpeedControl):
            return
        i = min(range(len(SPEEDS)), key=lambda k: abs(SPEEDS[k] - src.speed))
        i = min(max(i + (1 if float(factor) > 1 else -1), 0), len(SPEEDS) - 1)
        src.speed = SPEEDS[i]
        self.notify(f"replay speed x{src.speed:g}", timeout=2)
        self._deliver(self._poll_once())

    def action_filter(self) -> None:
        def apply(text: str | None) -> None:
            if text is None:
                return
            self.filter_text = text
            self.query_one(GoroutinesView).set_filter(text)
            self.query_one(ContentionView).set_filter(text)

        self.push_screen(FilterScreen(self.filter_text), apply)

    def action_zoom(self, delta: int) -> None:
        self.query_one(ProcsView).zoom(int(delta))

    def action_toggle_order(self) -> None:
        self.query_one(ProcsView).toggle_order()

    def action_step(self, delta_ns: int) -> None:
        if self.seek is None:
            return
        self.seek.step(int(delta_ns))
        self.query_one(GoroutinesView).invalidate()
        self.query_one(ProcsView).invalidate()
        self.paused = True
        self._deliver(self._poll_once())

    def action_seek_by(self, fraction: float) -> None:
        if self.seek is None:
            return
        start, cur, end = self.seek.position()
        span = max(end - start, 1)
        self.action_seek_to((cur - start) / span + fraction)

    def action_seek_to(self, fraction: float) -> None:
        if self.seek is None:
            return
        self.seek.seek(min(max(float(fraction), 0.0), 1.0))
        self.query_one(GoroutinesView).invalidate()
        self.query_one(ProcsView).invalidate()
        self._deliver(self._poll_once())

    def action_export_folded(self) -> None:
        snap = self.snapshot
        exporter = FoldedExporter(self.source.header, what="mutex")
        if snap is not None:
            exporter.add(snap)
        text = exporter.text()
        if not text:
            self.notify("no contended mutex stacks to export yet", severity="warning")
            return
        try:
            path = write_new_private(
                Path(self.export_dir), f"gmpmon-{self.source.header.pid}-mutex", ".folded",
                text.encode(),
            )
        except OSError as e:
            self.notify(f"export failed: {e}", severity="error")
            return
        self.notify(f"{text.count(chr(10))} stacks -> {path}", title="exported folded mutex stacks")

    def action_toggle_recording(self) -> None:
        rec = self.recorder
        if rec is None:
            return
        try:
            if rec.recording_path() is None:
                path = unique_path(Path(self.export_dir),
                                   f"gmpmon-{self.source.header.pid}", ".gmp")
                rec.start_recording(str(path))
                self.notify(f"recording to {path}", title="recording")
            else:
                done = rec.stop_recording()
                self.notify(f"wrote {done}", title="recording stopped")
        except Exception as e:  # GmpmonError or OSError from the capture side
            self.notify(f"recording failed: {e}", severity="error")
        self.query_one(StatusHeader).recording = rec.recording_path()

    def action_fire_trigger(self) -> None:
        """`!`: the flight recorder's manual trigger (``--trigger key``): a burst of hot
        probes, a dump in --dump-dir, and a mark on the Procs timeline."""
        if self.triggers is None:
            return
        if self.triggers.trigger("key"):
            self.notify("trigger fired: a burst of hot probes (and a dump, with --dump-dir)",
                        title="trigger")
        else:
            self.notify("no trigger on this key: start gmpmon with --trigger key "
                        "--dump-dir DIR", severity="warning")

    def action_pick_target(self) -> None:
        pick_target(self)

    async def action_quit(self) -> None:
        self._stop.set()
        self.query_one(StatusHeader).status = "detaching…"
        try:
            await asyncio.to_thread(self.close_source)
        except Exception as e:  # reported once the terminal is restored (run_tui re-raises)
            self.close_error = e
        self.exit()

    def close_source(self) -> None:
        if not self.source_closed:
            self.source_closed = True
            self.source.close()


def make_app(source: SnapshotSource, *, refresh_hz: float = 4.0,
             export_dir: str = ".", targets: Sequence[SnapshotSource] = ()) -> GmpmonApp:
    return GmpmonApp(source, refresh_hz=refresh_hz, export_dir=export_dir, targets=targets)


def run_tui(source: SnapshotSource, *, refresh_hz: float = 4.0, export_dir: str = ".") -> None:
    """Run the TUI until the user quits, then close the source (detach every probe)."""
    app = make_app(source, refresh_hz=refresh_hz, export_dir=export_dir)
    try:
        app.run()
    finally:
        app._stop.set()
        if not app.source_closed:
            app.close_source()
    if app.close_error is not None:
        raise app.close_error
