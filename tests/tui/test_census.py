"""The runtime-counter / census panel of the Goroutines view (pure renderer)."""

from __future__ import annotations

from gmpmon.events import Batch
from gmpmon.model import Model
from gmpmon.tui.census import census_text, goroutine_count
from tests.unit.test_runtime_part import STACKS, header, rt_stream


def test_panel_names_its_sources_and_shows_the_census() -> None:
    m = Model(header())
    m.feed(Batch([], STACKS))
    m.feed(Batch(rt_stream()))
    m.flush()
    rv = m.snapshot().runtime
    text = census_text(rv).plain
    assert text.startswith("runtime counters")
    assert "runtime histogram, ~1 in 8 sampled" in text
    assert "census #1" in text and "300 waiting (chan receive)" in text
    assert "main.main.func1 <- main.main" in text
    assert goroutine_count(rv) == "104 (runtime)"


def test_no_runtime_section_no_count() -> None:
    assert goroutine_count(None) is None
    assert "no runtime counters" in census_text(None).plain


def test_a_line_budget_keeps_states_and_sites_within_it() -> None:
    """On a small terminal the panel gives up rows, not the goroutine table below it: the
    wait states and creation sites share what the header lines leave."""
    m = Model(header())
    m.feed(Batch([], STACKS))
    m.feed(Batch(rt_stream()))
    m.flush()
    rv = m.snapshot().runtime
    full = census_text(rv).plain.splitlines()
    for lines in range(3, len(full) + 2):
        text = census_text(rv, lines=lines).plain.splitlines()
        assert len(text) <= max(lines, 4), (lines, text)
        assert text[0].startswith("runtime counters")
    roomy = census_text(rv, lines=len(full) + 5).plain.splitlines()
    assert roomy == full
    tight = census_text(rv, lines=len(full) - 1).plain  # one short: the state stays
    assert "300 waiting (chan receive)" in tight and "<- main.main" not in tight
