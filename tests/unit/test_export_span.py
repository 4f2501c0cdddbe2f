"""`gmpmon export --from/--to`: a span of a recording. The model sees everything up to the
span's end, the exporter only what happened within it. Checked on committed recordings of
real Go programs: spans that tile a recording add up to the whole, and a span's Perfetto
trace is the whole one's, cut to the span."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from gmpmon.export.base import export_recording
from gmpmon.export.registry import make_exporter
from gmpmon.record import read_recording
from tests import perfetto_trace

DATA = Path(__file__).resolve().parent.parent / "data"
GM = [sys.executable, "-m", "gmpmon"]


def summary(name: str, span: tuple[float, float | None] | None) -> dict[str, Any]:
    rec = read_recording(str(DATA / f"{name}.gmp"))
    ex = make_exporter("json", rec.header)
    export_recording(rec, ex, span)
    out: dict[str, Any] = json.loads(ex.render())
    return out


def counts(s: dict[str, Any]) -> Counter[str]:
    """What a span adds to: events, syscalls, parks by reason, steals."""
    c: Counter[str] = Counter({"events": s["events"]["total"],
                               "syscalls": s["syscalls"]["count"] or 0})
    for reason, r in (s["park_reasons"] or {}).items():
        c[f"park {reason}"] = r["count"]
    c["steals"] = (s["steals"] or {}).get("count") or 0
    return c


@pytest.mark.parametrize("name", ["demo-default", "caddy-wrk-default", "gc"])
def test_spans_that_tile_a_recording_add_up_to_the_whole(name: str) -> None:
    whole = summary(name, None)
    cuts = [0.0, *(whole["duration_s"] * f for f in (0.17, 0.46, 0.6))]
    parts = [summary(name, (a, b)) for a, b in zip(cuts, [*cuts[1:], None], strict=True)]
    got: Counter[str] = Counter()
    for p in parts:
        got.update(counts(p))
    assert +got == +counts(whole)
    assert counts(whole)["events"] > 1000
    assert all(p["duration_s"] >= 0 for p in parts)
    assert abs(sum(p["duration_s"] for p in parts) - whole["duration_s"]) < 0.01


@pytest.mark.parametrize("name", ["gc", "caddy-wrk-default"])
def test_a_spans_perfetto_trace_is_the_whole_one_cut_to_it(name: str) -> None:
    def slices(span: tuple[float, float | None] | None) -> list[tuple[Any, ...]]:
        rec = read_recording(str(DATA / f"{name}.gmp"))
        ex = make_exporter("perfetto", rec.header)
        export_recording(rec, ex, span)
        return perfetto_trace.read(ex.render()).slices

    evs = [e[0] for b in read_recording(str(DATA / f"{name}.gmp")) for e in b.events]
    first = evs[0]
    a, b = (evs[-1] - first) * 0.12, (evs[-1] - first) * 0.36
    lo, hi = first + round(a), first + round(b)
    last = max(t for t in evs if t <= hi)  # the model's now at the span's end
    want = Counter((t, max(s, lo), min(e, last), n) for t, s, e, n, _c, _a in slices(None)
                   if t != "stop-the-world" and e > lo and s < last)
    got = [sl for sl in slices((a / 1e9, b / 1e9)) if sl[0] != "stop-the-world"]
    assert len(got) > 100
    assert Counter((t, s, e, n) for t, s, e, n, _c, _a in got) == want


def test_a_span_after_the_last_event_or_backwards_is_one_line_and_exit_2(tmp_path: Path) -> None:
    rec = str(DATA / "demo-default.gmp")
    for opts in (["--from", "100"], ["--from", "2", "--to", "1"], ["--to", "0"]):
        r = subprocess.run([*GM, "export", rec, "-f", "json", "-o", str(tmp_path / "o.json"),
                            *opts], capture_output=True, text=True, timeout=60)
        assert r.returncode == 2, (opts, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
        assert not (tmp_path / "o.json").exists()
