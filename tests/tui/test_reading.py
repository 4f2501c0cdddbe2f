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
    async with app.run_test(size=(80, 24)):
        text = screen_text(app)
        assert "blank: not observed" in text
        assert "▓" in text or "▒" in text or "░" in text  # syscall time on P1


# 6. the time per cell is always shown; + and - zoom
async def test_timeline_shows_time_per_cell_and_zooms() -> None:
    app = make_app(replay("fanout", 1.0))
    async with app.run_test(size=(80, 24)) as pilot:
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


# 7. no internal diagnostics on the main screens; one word for spinning
async def test_no_illegal_transitions_on_the_scheduling_view_and_one_word_for_spinning() -> None:
    app = make_app(replay("fanout", 1.0))
    async with app.run_test(size=(100, 60)) as pilot:
        assert "spinning Ms" in screen_text(app) and "searching" not in screen_text(app)
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
        header = str(app.query_one(StatusHeader).render())
        assert "replay " in header and " up " not in f" {header}"
        rows = proc_rows(screen_text(app))
        assert rows and all(re.match(r"^ +\d+ (idle|running|spinning|syscall)\?", r)
                            for r in rows), rows
        await pilot.press("r")
        await pilot.pause()
        assert any("replay" in str(n.message) for n in app._notifications)
        keys = active_bindings(app)
        assert {"left", "left_square_bracket", "home"} <= set(keys)
        footer = screen_text(app).splitlines()[-1]
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
        await pilot.press("4")
        await pilot.pause()
        from textual.widgets import DataTable

        table = app.query_one(DataTable)
        before = {table.get_row_at(i)[0] for i in range(table.row_count)}
        await pilot.press("right", "right", "right")
        await pilot.pause()
        snap = src.latest()
        assert snap is not None
        after = {table.get_row_at(i)[0] for i in range(table.row_count)}
        assert after == {str(g.goid) for g in snap.goroutines}
        assert after != before


# 13. the footer says Resume while paused
async def test_footer_says_resume_while_paused(live_source: ListSource) -> None:
    app = make_app(live_source)
    async with app.run_test(size=(100, 24)) as pilot:
        assert active_bindings(app).get("p") == "Pause"
        await pilot.press("p")
        await pilot.pause()
        assert active_bindings(app).get("p") == "Resume"
        assert "Resume" in screen_text(app).splitlines()[-1]
        await pilot.press("p")
        await pilot.pause()
        assert active_bindings(app).get("p") == "Pause"
        assert app.query_one(TabbedContent).active == "procs"


# issue 13: busy Ps first, a key toggles the order
async def test_o_toggles_busy_first_and_id_order_with_64_ps() -> None:
    app = make_app(replay("wide64", 0.7))
    async with app.run_test(size=(100, 30)) as pilot:
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
