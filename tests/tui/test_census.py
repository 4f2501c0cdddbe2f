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
