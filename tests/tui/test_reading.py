"""Issue #17: what a demanding user reads. Each test drives the real app (pilot) on the
committed recordings of real workloads, and checks what the screen says."""

from __future__ import annotations

import re
from pathlib import Path

from textual.widgets import TabbedContent

from gmpmon.model.snapshot import PState
from gmpmon.replay import ReplaySource
from gmpmon.tui.app import GmpmonApp, make_app
from gmpmon.tui.measure import coverage
from gmpmon.tui.render import LEGEND, cell_glyph, fmt_count
from gmpmon.tui.widgets.procs import CELL_CHOICES_NS, ProcTable
from gmpmon.tui.widgets.sched import SchedView
from gmpmon.tui.widgets.status import StatusHeader
from tests.tui.screen import proc_rows, screen_text
from tests.tui.sources import ListSource

DATA = Path(__file__).resolve().parents[1] / "data"


def replay(name: str, at: float) -> ReplaySource:
    src = ReplaySource(str(DATA / f"{name}.gmp"), autostart=False, paused=True)
    src.seek(at)
    return src


def active_bindings(app: GmpmonApp) -> dict[str, str]:
    """key -> description of what the footer offers now."""
    return {k: b.binding.description for k, b in app.active_bindings.items() if b.enabled}


# 1. windowed numbers carry their coverage; rates are over the covered time
async def test_default_mode_numbers_say_how_much_of_the_time_they_cover() -> None:
    src = replay("demo-default", 1.0)
    snap = src.latest()
    assert snap is not None and snap.window == "windows"
    cov = coverage(snap)
    assert 0 < cov.fraction < 1
    share = f"{100 * cov.fraction:.0f}%"
    app = make_app(src)
    async with app.run_test(size=(100, 60)) as pilot:
        await pilot.pause()
        assert f"hot probes {share} of the time" in screen_text(app)
        assert "[windows]" not in screen_text(app)
        await pilot.press("2")
        await pilot.pause()
        text = screen_text(app)
        assert f"count in {share}" in text and "~/s" in text
        top = snap.park_reasons[0]
        row = next(ln for ln in text.splitlines() if f" {top.reason} " in ln)
        # The rate is the count over the covered time, not over the whole run.
        assert fmt_count(top.count / cov.covered_s) in row.split()
        assert "Gs created" in text and f"left: in {share} of the time" in text


# 2. not measured is "–", never 0
async def test_sample_mode_shows_a_dash_and_says_what_it_does_not_measure() -> None:
    src = replay("demo-sample", 0.9)
    app = make_app(src)
    async with app.run_test(size=(80, 50)) as pilot:
        await pilot.pause()
        assert "goroutines –" in screen_text(app)
        assert re.search(r"\s–/–\s", screen_text(app))  # per-P steals
        await pilot.press("2")
        await pilot.pause()
        text = screen_text(app)
        assert "parks: not measured in sample mode" in text
        assert "no parks seen yet" not in text
        assert "work stealing: not measured in sample mode" in text
        assert re.search(r"syscalls +– +–", text)
        assert re.search(r"preempt requests +\d", text)  # cold probe: measured in every mode


# 3. every view scrolls from the keyboard
async def test_scheduling_view_scrolls_with_the_keyboard_at_80x24() -> None:
    app = make_app(replay("demo-default", 1.0))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("2")
        await pilot.pause()
        view = app.query_one(SchedView)
        assert view.max_scroll_y > 0 and view.scroll_y == 0
        await pilot.press("pagedown")
        await pilot.pause(0.3)
        assert view.scroll_y > 0
        # In a replay home/end seek (priority); G and g go to the bottom/top in every mode.
        await pilot.press("G")
        await pilot.pause(0.3)
        assert view.scroll_y == view.max_scroll_y
        await pilot.press("g")
        await pilot.pause(0.3)
        assert view.scroll_y == 0
        await pilot.press("j", "j", "down")
        await pilot.pause(0.3)
        assert view.scroll_y == 3
        await pilot.press("k", "up")
        await pilot.pause(0.3)
        assert view.scroll_y == 1


async def test_live_home_and_end_scroll_since_they_do_not_seek(live_source: ListSource) -> None:
    app = make_app(live_source)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("2")
        await pilot.pause()
        view = app.query_one(SchedView)
        await pilot.press("end")
        await pilot.pause(0.3)
        assert view.scroll_y == view.max_scroll_y > 0
        await pilot.press("home")
        await pilot.pause(0.3)
        assert view.scroll_y == 0


# 5. one glyph per state
def test_every_state_has_its_own_glyph_whatever_the_colour() -> None:
    glyphs = {s: {cell_glyph(s, lv) for lv in range(1, 9)}
              for s in (PState.RUNNING, PState.SYSCALL, PState.SEARCHING, PState.IDLE,
                        PState.GCSTOP)}
    states = list(glyphs)
    for i, a in enumerate(states):
        for b in states[i + 1:]:
            assert not glyphs[a] & glyphs[b], (a, b)
    assert cell_glyph(PState.UNKNOWN, 0) == " "
    legend_glyphs = "".join(g for g, _c, _w in LEGEND)
    for s in states:
        assert glyphs[s] & set(legend_glyphs), s


async def test_legend_says_what_a_blank_cell_means() -> None:
    app = make_app(replay("syscall", 0.7))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        text = screen_text(app)
        assert "blank: not observed" in text
        assert "▓" in text or "▒" in text or "░" in text  # syscall time on P1


# 6. the time per cell is always shown; + and - zoom
async def test_timeline_shows_time_per_cell_and_zooms() -> None:
    app = make_app(replay("fanout", 1.0))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        table = app.query_one(ProcTable)
        auto = table.cell_ns
        assert re.search(r"\S+/cell, last \S+", screen_text(app))
        await pilot.press("plus")
        await pilot.pause()
        assert table.zoom_index is not None and table.cell_ns < auto
        smaller = table.cell_ns
        await pilot.press("minus", "minus")
        await pilot.pause()
        assert table.cell_ns > smaller
        assert table.cell_ns in CELL_CHOICES_NS
        assert "/cell" in screen_text(app)


# 7. no internal diagnostics on the main screens; one word for the search state: "searching"
# (#10: "spinning" is the runtime's m.spinning, shown only as nmspinning, "spinning Ms")
async def test_no_illegal_transitions_on_the_scheduling_view_and_one_word_for_spinning() -> None:
    app = make_app(replay("fanout", 1.0))
    async with app.run_test(size=(100, 60)) as pilot:
        await pilot.pause()
        text = screen_text(app)
        assert "searching Ps" in text and "spinning" not in text  # full mode: no nmspinning
        await pilot.press("2")
        await pilot.pause()
        text = screen_text(app)
        assert "illegal" not in text
        assert "blocking syscalls" in text and "P hand-offs" in text
        # STW durations sit under their own header, not under "/s"
        assert re.search(r"stop-the-world +count +total +max", text)


# 8. percentiles no more precise than the histogram
async def test_percentiles_are_marked_as_bucket_bounds() -> None:
    src = replay("fanout", 1.0)
    snap = src.latest()
    assert snap is not None and snap.sched_latency.count
    app = make_app(src)
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        await pilot.press("2")
        await pilot.pause()
        line = next(ln for ln in screen_text(app).splitlines() if "p99" in ln and "n=" in ln)
        assert re.search(r"p99 <\d", line), line
        assert "under X" in screen_text(app)


# 11. replay: one clock, the last state kept, r answers, footer keys, speed
async def test_replay_has_one_clock_keeps_last_states_and_answers_every_key() -> None:
    src = replay("demo-default", 1.0)
    snap = src.latest()
    assert snap is not None
    assert all(p.state is PState.UNKNOWN for p in snap.procs)  # the model's view at the end
    app = make_app(src)
    async with app.run_test(size=(120, 24)) as pilot:
        await pilot.pause()
        header = str(app.query_one(StatusHeader).render())
        assert "replay " in header and " up " not in f" {header}"
        rows = proc_rows(screen_text(app))
        assert rows and all(re.match(r"^ +\d+ (idle|running|searching|syscall)\?", r)
                            for r in rows), rows
        await pilot.press("r")
        await pilot.pause()
        assert any("replay" in str(n.message) for n in app._notifications)
        keys = active_bindings(app)
        assert {"left", "left_square_bracket", "home"} <= set(keys)
        footer = "\n".join(screen_text(app).splitlines()[-2:])  # the key bar's two lines
        assert "←→" in footer and "[]" in footer and "home/end" in footer
        speed = src.speed
        await pilot.press("greater_than_sign")
        assert src.speed == 2 * speed
        await pilot.press("less_than_sign", "less_than_sign")
        assert src.speed == speed / 2
        assert "x0.5" in src.status() or src.paused()


async def test_a_step_refreshes_the_goroutines_table() -> None:
    src = replay("spawn", 0.3)
    app = make_app(src)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        await pilot.press("4")
        await pilot.pause()
        from textual.widgets import DataTable

        table = app.query_one(DataTable)
        before = {str(table.get_row_at(i)[0]) for i in range(table.row_count)}
        await pilot.press("right", "right", "right")
        await pilot.pause()
        snap = src.latest()
        assert snap is not None
        after = {str(table.get_row_at(i)[0]) for i in range(table.row_count)}
        assert after == {str(g.goid) for g in snap.goroutines}
        assert after != before


# 13. the footer says Resume while paused
async def test_footer_says_resume_while_paused(live_source: ListSource) -> None:
    app = make_app(live_source)
    async with app.run_test(size=(100, 24)) as pilot:
        await pilot.pause()
        assert active_bindings(app).get("p") == "Pause"
        await pilot.press("p")
        await pilot.pause()
        assert active_bindings(app).get("p") == "Resume"
        assert "Resume" in "\n".join(screen_text(app).splitlines()[-2:])
        await pilot.press("p")
        await pilot.pause()
        assert active_bindings(app).get("p") == "Pause"
        assert app.query_one(TabbedContent).active == "procs"


# issue 13: busy Ps first, a key toggles the order
async def test_o_toggles_busy_first_and_id_order_with_64_ps() -> None:
    app = make_app(replay("wide64", 0.7))
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        table = app.query_one(ProcTable)

        def ids() -> list[int]:
            return [int(ln.split()[0]) for ln in proc_rows(screen_text(app))]

        snap = table.snapshot
        assert snap is not None and len(snap.procs) == 64
        busy = ids()
        assert busy != sorted(busy)  # the busiest first, not by id
        assert set(table.collapsed).isdisjoint(busy)
        assert len(busy) + len(table.collapsed) == 64
        await pilot.press("o")
        await pilot.pause()
        assert ids() == sorted(ids()) and set(ids()) == set(busy)
        await pilot.press("o")
        await pilot.pause()
        assert ids() == busy


def g_rows(app: GmpmonApp) -> list[list[str]]:
    from textual.widgets import DataTable

    table = app.query_one("#g-table", DataTable)
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


# 4. the Goroutines table: states with a meaning, no stale wait reasons, true help, details
async def test_goroutines_table_states_dead_rows_and_in_state() -> None:
    from gmpmon.tui.render import GSTATE_WORD
    from gmpmon.tui.widgets.help import VIEWS

    src = replay("demo-runtime", 1.0)
    snap = src.latest()
    assert snap is not None
    app = make_app(src)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("4")
        await pilot.pause()
        rows = g_rows(app)
        assert rows
        states = {r[1] for r in rows}
        assert states <= set(GSTATE_WORD.values()) and "?" not in states
        # the summary counts use the same words as the rows
        assert all(k in GSTATE_WORD.values() for k in snap.g_state_counts)
        dead = [r for r in rows if r[1] == "dead"]
        assert dead and all(r[3] == "" for r in dead)
        unknown = [r for r in rows if r[1] == "unknown"]
        assert all(r[5] == "–" for r in unknown)
        # a goroutine seen since the first event says "at least" (it started before)
        old = [g for g in snap.goroutines if g.state not in (0,) and g.since <= snap.start]
        for g in old:
            row = next(r for r in rows if r[0] == str(g.goid))
            assert row[5].startswith(">"), row
        # the help says the order the table uses
        assert "longest total wait first" in VIEWS and "newest first" not in VIEWS
        assert "wait time ↓" in screen_text(app)


async def test_enter_opens_a_goroutines_details() -> None:
    from gmpmon.tui.widgets.details import DetailScreen

    app = make_app(replay("spawn", 0.5))
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        await pilot.press("4")
        await pilot.pause()
        first = g_rows(app)[0]
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, DetailScreen)
        text = screen_text(app)
        assert f"goroutine G{first[0]}" in text and "created by" in text
        assert "history" in text and first[1] in text
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, DetailScreen)


# 10. a stack cut at the terminal's width is shown whole on enter
async def test_enter_in_contention_shows_every_stack_in_full(live_source: ListSource) -> None:
    from gmpmon.tui.widgets.details import DetailScreen

    snap = live_source.latest()
    assert snap is not None and len(snap.mutex_stacks) >= 2
    app = make_app(live_source)
    async with app.run_test(size=(80, 40)) as pilot:
        await pilot.pause()
        await pilot.press("3")
        await pilot.pause()
        assert re.search(r"^ *│? *1 +\S+", screen_text(app), re.M)  # rows are numbered
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, DetailScreen)
        text = screen_text(app)
        for i in range(1, len(snap.mutex_stacks) + 1):
            assert f"#{i} " in text
        for frame in snap.mutex_stacks[0].stack:
            assert frame in text  # every frame, full name, lock frames included


# 14. `/` filters goroutines and stacks
async def test_slash_filters_goroutines_and_stacks(live_source: ListSource) -> None:
    snap = live_source.latest()
    assert snap is not None
    app = make_app(live_source)
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        await pilot.press("4")
        await pilot.pause()
        everything = len(g_rows(app))
        await pilot.press("slash", *"sleep", "enter")
        await pilot.pause()
        rows = g_rows(app)
        want = [g for g in snap.goroutines if "sleep" in g.wait_reason]
        assert 0 < len(rows) == len(want) < everything
        assert all(r[3] == "sleep" for r in rows)
        assert "filter 'sleep'" in screen_text(app)
        await pilot.press("3")
        await pilot.pause()
        assert "no contended stack matches 'sleep'" in screen_text(app)
        await pilot.press("slash", *"flusher", "enter")
        await pilot.pause()
        text = screen_text(app)
        assert "main.flusher" in text and "main.worker" not in text
        await pilot.press("slash")
        await pilot.pause()
        for _ in range(len("flusher")):
            await pilot.press("backspace")
        await pilot.press("enter")
        await pilot.pause()
        assert "main.worker" in screen_text(app)


# 12. recent against cumulative: z resets the counters, t shows the last 10 s
async def test_reset_and_recent_count_from_a_later_snapshot(live_source: ListSource) -> None:
    from gmpmon.model.delta import since

    app = make_app(live_source, refresh_hz=50.0)
    async with app.run_test(size=(100, 50)) as pilot:
        await pilot.pause()
        base = live_source.latest()
        assert base is not None
        await pilot.press("z")
        await pilot.pause()
        for _ in range(3):
            live_source.advance()
        await pilot.pause(0.3)
        cur = live_source.latest()
        assert cur is not None and cur is not base and app.raw is cur
        shown = app.snapshot
        assert shown is not None and shown.start == base.now
        assert shown.goroutines_created == cur.goroutines_created - base.goroutines_created
        parks = {r.reason: r.count for r in shown.park_reasons}
        before = {r.reason: r.count for r in base.park_reasons}
        for r in cur.park_reasons:
            assert parks.get(r.reason, 0) == r.count - before.get(r.reason, 0)
        assert shown.sched_latency.count == cur.sched_latency.count - base.sched_latency.count
        assert "counts: since reset" in str(app.query_one(StatusHeader).render())
        await pilot.press("2")
        await pilot.pause()
        text = screen_text(app)
        top = shown.park_reasons[0]
        row = next(ln for ln in text.splitlines() if f" {top.reason} " in ln)
        assert fmt_count(top.count) in row.split()
        await pilot.press("t")
        await pilot.pause()
        assert "counts: last" in str(app.query_one(StatusHeader).render())
        # the numbers are a difference of two snapshots of the same run, never negative
        assert all(v >= 0 for v in (shown.syscalls, shown.preempted, shown.stw_count))
        assert since(cur, None) is cur and since(cur, cur) is cur
