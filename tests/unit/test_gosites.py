"""Go sites (start function, creating function, file:line of the `go` statement).

- pcline.LineTable against `go tool addr2line` on real builds (non-PIE, stripped, PIE);
- capture.gosites: the packed GO_CREATE word is rebuilt exactly, also when the text straddles
  a 4 GiB boundary; `go f(x)`'s gowrap names f, and a wrapper f was inlined into keeps its
  own name (never one of f's callees);
- the model: GO_CREATE's site, the census's CENSUS_G for a goroutine seen later, and "gone".
"""

from __future__ import annotations

import dataclasses
import random
import subprocess

import pytest

from gmpmon.binary.elf import Elf
from gmpmon.binary.load import load
from gmpmon.binary.pcline import LineTable, short_path
from gmpmon.capture.gosites import GoSites
from gmpmon.events import GO_SITE_BASE, Batch, Kind
from gmpmon.model import Model
from tests import gotargets
from tests.unit.test_model_scenarios import ev, header


@pytest.mark.parametrize(("version", "mode"), [("1.27", "default"), ("1.22", "stripped"),
                                               ("1.19", "default"), ("1.27", "pie")])
def test_line_table_agrees_with_go_tool_addr2line(version: str, mode: str) -> None:
    exe = gotargets.build("demo", go=version, mode=mode)
    info = load(str(exe))
    lines = LineTable(Elf(exe.read_bytes(), str(exe)))
    ft = info.functab
    rnd = random.Random(7)
    pcs = [rnd.randrange(ft.starts[i], ft.ends[i])
           for i in rnd.sample(range(len(ft.starts)), 300) if ft.ends[i] > ft.starts[i]]
    go = gotargets.ensure_go("1.27")
    out = subprocess.run([str(go), "tool", "addr2line", str(exe)], check=True,
                         input="".join(f"{pc:#x}\n" for pc in pcs), capture_output=True,
                         text=True).stdout.splitlines()
    known = 0
    for k, pc in enumerate(pcs):
        theirs = out[2 * k + 1]
        mine = lines.at(pc)
        if theirs.endswith(":-1") or theirs.endswith(":0"):  # addr2line knows no line either
            continue
        known += 1
        assert mine is not None and f"{mine[0]}:{mine[1]}" == theirs, (hex(pc), mine, theirs)
    assert known > 250


def demo_sites(bias: int = 0) -> tuple[GoSites, dict[str, int]]:
    info = load(str(gotargets.build("demo", go="1.27")))
    if bias:
        info = dataclasses.replace(info, load_bias=bias)
    ft = info.functab
    return GoSites(info), {n: s + bias for s, n in zip(ft.starts, ft.names, strict=True)}


def test_gowrap_names_the_function_it_calls_and_never_an_inlined_ones_callee() -> None:
    sites, entry = demo_sites()
    wrapped = {n: sites.names(0, pc)[0] for n, pc in entry.items() if ".gowrap" in n
               and n.startswith("main.main.")}
    # demo's main: go worker(...), go producer(...), go auditor(...) x2, go gcLoop(...)
    assert sorted(wrapped.values()).count("main.auditor") == 2
    assert {"main.worker", "main.producer", "main.gcLoop"} <= set(wrapped.values())
    # go sleeper(d): sleeper is inlined into its wrapper, whose first call is time.Sleep
    assert "time.Sleep" not in wrapped.values()
    assert all(v == k or v.startswith("main.") for k, v in wrapped.items())


@pytest.mark.parametrize("bias", [0, (1 << 32) - 0x200000])  # text across a 4 GiB boundary
def test_packed_go_create_word_is_rebuilt_exactly(bias: int) -> None:
    sites, entry = demo_sites(bias)
    start = entry["main.worker"]
    gopc = entry["main.main"] + 0x40
    # probes/gmpmon.bpf.c gm_go_site: low32(startpc) | low32(gopc) << 32
    word = (start & 0xFFFFFFFF) | ((gopc & 0xFFFFFFFF) << 32)
    sid = sites.packed(word)
    assert sid > GO_SITE_BASE and sid == sites.sid(gopc, start)
    named = sites.take()[sid]
    assert named[0] == "main.worker" and named[1] == "main.main"
    exe = gotargets.build("demo", go="1.27")
    at = LineTable(Elf(exe.read_bytes(), str(exe))).at(gopc - 1 - bias)
    assert at is not None and named[2] == f"{short_path(at[0])}:{at[1]}"
    assert sites.packed(0) == 0 and sites.take() == {}


def test_model_takes_sites_from_go_create_and_from_the_census() -> None:
    site_a = GO_SITE_BASE + 1
    site_b = GO_SITE_BASE + 2
    stacks = {site_a: ("main.worker", "main.main", "demo/main.go:181"),
              site_b: ("main.auditor", "main.main", "demo/main.go:184")}
    model = Model(header())
    model.feed(Batch([], stacks))
    model.feed(Batch([
        ev(0, Kind.GO_CREATE, p=0, g=20, a0=1, a1=site_a),
        ev(1, Kind.CENSUS_G, g=30, a0=site_b),  # known to the census before any probe
        ev(2, Kind.EXECUTE, p=1, g=30),
        ev(3, Kind.CENSUS_G, g=40, a0=site_b),
        ev(4, Kind.CENSUS_G, g=40, a0=0),  # gone before any probe saw it
        ev(5, Kind.EXECUTE, p=0, g=40),
    ]))
    model.flush()
    by = {g.goid: g for g in model.snapshot().goroutines}
    assert (by[20].start, by[20].created_at) == ("main.worker", "main.main demo/main.go:181")
    assert (by[30].start, by[30].created_at) == ("main.auditor", "main.main demo/main.go:184")
    assert (by[40].start, by[40].created_at) == ("", "")
