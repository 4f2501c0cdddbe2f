"""Exporters: folded lines parse, pprof opens in `go tool pprof`, the perfetto trace (read
back with Perfetto's own protobuf classes) has a track per P and every span of the model, json
is the summary; the `gmpmon export` command end to end."""

from __future__ import annotations

import gzip
import json
import os
import re
import stat
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from gmpmon.cli import main
from gmpmon.events import Batch, Header, Kind
from gmpmon.export.base import Exporter, export_recording
from gmpmon.export.folded import LINE_RE, FoldedExporter
from gmpmon.export.json import SCHEMA_VERSION
from gmpmon.export.registry import make_exporter
from gmpmon.model.snapshot import Snapshot
from gmpmon.record import RecordingWriter, read_recording
from tests import gotargets, perfetto_trace

HDR = Header(
    pid=777,
    exe="/srv/bank",
    go_version="go1.27.3",
    gomaxprocs=3,
    mode="full",
    start_ns=0,
    wall_start=1_700_000_000.0,
    wait_reasons=("", "GC assist marking", "IO wait", "sleep", "sync.Mutex.Lock"),
)
HOT = ("main.main", "main.(*Bank).Transfer", "sync.(*Mutex).Lock")
COLD = ("main.main", "main.audit", "sync.(*RWMutex).RLock")
ODD = ("main.main", "[unknown 0x4011aa]", "weird;name with spaces")
T = 1_000_000_000
DATA = Path(__file__).resolve().parent.parent / "data"


def scenario() -> list[Batch]:
    k = Kind
    ev1 = [
        (T + 0, k.EXECUTE, 0, 10, 1, 0, 0),
        (T + 100, k.FIND_RUNNABLE, 1, 11, 0, 0, 0),
        (T + 150, k.FIND_RUNNABLE, 2, 12, 0, 0, 0),
        (T + 200, k.GO_CREATE, 0, 10, 2, 1, 0),
        (T + 300, k.STEAL, 1, 11, 0, 0, 1),
        (T + 400, k.EXECUTE, 1, 11, 2, 0, 0),
        (T + 1_000, k.MUTEX_ADDR, 1, 11, 2, 0xC0000A0000, 1),
        (T + 1_000, k.MUTEX, 1, 11, 2, 900_000, 1),
        (T + 2_000, k.PARK, 1, 11, 2, 3, 0),
        (T + 2_100, k.FIND_RUNNABLE, 1, 11, 0, 0, 0),
    ]
    ev2 = [
        (T + 3_000, k.MUTEX, 0, 10, 1, 100_000, 2),
        (T + 3_500, k.MUTEX, 0, 10, 1, 5, 3),
        (T + 4_000, k.STW_START, 0, 10, 1, 0, 0),
        (T + 9_000, k.STW_END, 0, 10, 1, 0, 5_000),
        (T + 10_000, k.READY, -1, 12, 2, 0, 3),
        (T + 12_000, k.EXECUTE, 2, 12, 2, 0, 0),
        (T + 13_000, k.MUTEX, 2, 12, 2, 50_000, 1),
        (T + 20_000, k.GO_EXIT, 2, 12, 2, 0, 0),
    ]
    return [
        Batch([tuple(int(x) for x in e) for e in ev1], {1: HOT}),  # type: ignore[misc]
        Batch([tuple(int(x) for x in e) for e in ev2], {2: COLD, 3: ODD}),  # type: ignore[misc]
    ]


@pytest.fixture()
def recording(tmp_path: Path) -> Path:
    path = tmp_path / "s.gmp"
    with RecordingWriter(str(path), HDR) as w:
        for b in scenario():
            w.write(b)
    return path


def export(path: Path, fmt: str, **kw: str) -> bytes:
    rec = read_recording(str(path))
    ex = make_exporter(fmt, rec.header, **kw)
    export_recording(rec, ex)
    return ex.render()


def test_folded_mutex_lines_are_well_formed(recording: Path) -> None:
    text = export(recording, "folded").decode()
    lines = text.splitlines()
    assert all(LINE_RE.match(line) for line in lines), lines
    assert lines == sorted(lines)
    weights = {line.rsplit(" ", 1)[0]: int(line.rsplit(" ", 1)[1]) for line in lines}
    assert weights["main.main;main.(*Bank).Transfer;sync.(*Mutex).Lock"] == 950_000
    assert weights["main.main;main.audit;sync.(*RWMutex).RLock"] == 100_000
    assert weights["main.main;[unknown_0x4011aa];weird_name_with_spaces"] == 5
    counts = export(recording, "folded", weight="count").decode().splitlines()
    assert "main.main;main.(*Bank).Transfer;sync.(*Mutex).Lock 2" in counts


def test_folded_latency_pseudo_stacks(recording: Path) -> None:
    lines = export(recording, "folded", what="latency", weight="count").decode().splitlines()
    assert all(LINE_RE.match(line) for line in lines), lines
    assert "sched_latency;created;P1 1" in lines
    assert "sched_latency;sleep;P2 1" in lines
    waits = export(recording, "folded", what="latency").decode().splitlines()
    assert "sched_latency;sleep;P2 2000" in waits


def test_folded_frame_sanitising_keeps_lines_valid() -> None:
    from gmpmon.model import Model

    model = Model(HDR)
    model.feed(Batch([(T, int(Kind.MUTEX), 0, 0, 1, 7, 1)], {1: ("", " ; ", "a\tb")}))
    model.flush()
    ex = FoldedExporter(HDR)
    ex.add(model.snapshot())
    line = ex.text().strip()
    assert LINE_RE.match(line) and line == "[unknown];_;a_b 7"


def pprof(profile: Path, *flags: str) -> str:
    """What `go tool pprof FLAGS PROFILE` prints."""
    go = gotargets.ensure_go(gotargets.versions()[-1])  # installed on first use, like builds
    return subprocess.run(
        [str(go), "tool", "pprof", *flags, str(profile)],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, GOTOOLCHAIN="local", GOFLAGS="-mod=mod"),
        check=True,
    ).stdout


def pprof_rows(top: str) -> list[list[str]]:
    """The function rows of `pprof -top` output, split into columns (name last)."""
    return [ln.split() for ln in top.splitlines() if re.match(r"^\s*[0-9.]+\w*s?\s+[0-9.]+%", ln)]


def test_pprof_opens_in_go_tool_pprof_with_the_contended_function_first(
    recording: Path, tmp_path: Path
) -> None:
    data = export(recording, "pprof")
    assert gzip.decompress(data)  # a valid gzip stream
    out = tmp_path / "mutex.pb.gz"
    out.write_bytes(data)
    top = pprof(out, "-top", "-sample_index=delay")
    rows = pprof_rows(top)
    assert rows, top
    # lock frames trimmed: the function that waited longest is the first (flat) row
    assert rows[0][-1] == "main.(*Bank).Transfer", top  # 950us of 1050us
    assert "sync.(*Mutex).Lock" not in top
    cum = pprof(out, "-top", "-cum", "-sample_index=contentions")
    assert "main.(*Bank).Transfer" in cum and "Type: contentions" in cum
    names = [ln.split()[-1] for ln in cum.splitlines() if ln.strip().endswith(")") or "main." in ln]
    assert names.index("main.(*Bank).Transfer") < names.index("main.audit")


def test_perfetto_is_a_protobuf_trace_with_one_track_per_p(recording: Path) -> None:
    data = export(recording, "perfetto")
    tr = perfetto_trace.read(data)
    proc = tr.tracks[1]
    assert (proc.name, proc.pid) == ("/srv/bank (pid 777, go1.27.3)", 777)
    children = sorted((t.rank, t.name) for t in tr.tracks.values() if t.parent == proc.uuid)
    assert [n for _, n in children] == ["P0", "P1", "P2", "stop-the-world"]
    sl = {(t, name): (s0, s1, cat, args) for t, s0, s1, name, cat, args in tr.slices}
    # ns timestamps, the recording's own: G2 ran on P1 from T+400 to T+2000
    assert sl["P1", "G2"] == (T + 400, T + 2_000, "running", {"goid": 2})
    assert ("P2", "G2") in sl and ("P0", "GC stop") in sl
    assert sl["stop-the-world", "STW"] == (T + 4_000, T + 9_000, "stw", {})
    inst = {name: (t, ts, cat, args) for t, ts, name, cat, args in tr.instants}
    assert inst["steal 1 from P0"] == ("P1", T + 300, "steal", {"victim": 0, "goroutines": 1})
    assert inst["park G2: sleep"] == ("P1", T + 2_000, "park", {"goid": 2, "reason": "sleep"})
    # write() streams the same bytes
    rec = read_recording(str(recording))
    ex = make_exporter("perfetto", rec.header)
    export_recording(rec, ex)
    out = recording.parent / "t.pftrace"
    ex.write(str(out))
    assert out.read_bytes() == data


class _Spans(Exporter):
    """Every span the model closes, as the perfetto exporter is handed them, and the one
    still open at the end (not the last closed one again: the Chrome JSON had it twice)."""

    wants_spans = True

    def __init__(self, header: Header) -> None:
        super().__init__(header)
        self.spans: list[tuple[int, int, int, int, int]] = []

    def on_span(self, p: int, start: int, end: int, state: int, goid: int) -> None:
        self.spans.append((p, start, end, state, goid))

    def add(self, snapshot: Snapshot) -> None:
        for pv in snapshot.procs:
            sp = pv.timeline[-1] if pv.timeline else None
            done = max((e for q, _s, e, _st, _g in self.spans if q == pv.id), default=-1)
            if sp is not None and sp.end == snapshot.now and sp.end > max(sp.start, done):
                self.on_span(pv.id, sp.start, sp.end, int(sp.state), sp.goid)


SPAN_NAMES = {1: "G{}", 2: "searching", 3: "idle", 4: "syscall G{}", 5: "GC stop", 0: "unknown"}


@pytest.mark.parametrize("name", ["gc", "caddy-wrk-default"])
def test_perfetto_carries_every_span_pause_steal_and_park_of_a_recording(name: str) -> None:
    """A real recording's export read back slice by slice: each span the model closes (P,
    times, state, goroutine), each STW pause, steal and park of the recording, nothing else;
    and at most a fifth of the bytes per event of the Chrome JSON it replaced (~107 bytes an
    event on gc.gmp: 1.87 MB for 17.6k)."""
    path = str(DATA / f"{name}.gmp")
    want = _Spans(read_recording(path).header)
    export_recording(read_recording(path), want)
    rec = read_recording(path)
    ex = make_exporter("perfetto", rec.header)
    export_recording(rec, ex)
    data = ex.render()
    tr = perfetto_trace.read(data)
    got = Counter((t, s0, s1, n) for t, s0, s1, n, _c, _a in tr.slices if t != "stop-the-world")
    spans = Counter(
        (f"P{p}", s, e, SPAN_NAMES[st].format(g) if g or st not in (1, 4) else "syscall")
        for p, s, e, st, g in want.spans
    )
    assert got == spans
    assert all(a == ({"goid": int(n.split("G")[-1])} if "G" in n and n != "GC stop" else {})
               for _t, _s, _e, n, _c, a in tr.slices)
    stw = steals = parks = 0
    stw_start = -1
    for batch in read_recording(path):
        for ts, kind, p, _m, _g, _a0, a1 in batch.events:
            if kind == Kind.STW_START:
                stw_start = ts
            elif kind == Kind.STW_END:
                assert ("stop-the-world", stw_start if stw_start >= 0 else ts - a1, ts, "STW",
                        "stw", {}) in tr.slices
                stw += 1
                stw_start = -1
            steals += kind == Kind.STEAL and a1 > 0
            parks += kind == Kind.PARK and p >= 0
    assert stw and (parks or name != "gc"), (stw, parks)
    assert sum(t == "stop-the-world" for t, *_ in tr.slices) == stw
    assert Counter(c for *_, c, _a in tr.instants) == Counter(
        {k: v for k, v in (("steal", steals), ("park", parks)) if v})
    assert len(data) <= 21 * (len(tr.slices) + len(tr.instants)), len(data)


def test_json_export_is_the_summary(recording: Path) -> None:
    doc = json.loads(export(recording, "json"))
    assert doc["schema_version"] == SCHEMA_VERSION
    assert doc["target"] == {
        "pid": 777,
        "exe": "/srv/bank",
        "go_version": "go1.27.3",
        "gomaxprocs": 3,
    }
    assert doc["mutex"]["contentions"] == 4
    assert doc["steals"]["count"] == 1


def test_export_command(
    recording: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "m.folded"
    assert main(["export", str(recording), "--format", "folded", "-o", str(out)]) == 0
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600
    assert out.read_text().count("\n") == 3
    # success says so, with the file and its size (#17)
    said = capsys.readouterr().err
    assert said == f"gmpmon: wrote folded to {out} ({out.stat().st_size:,} bytes)\n"
    # bad output path is checked before any work; bad input is one line
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere")
    assert main(["export", str(recording), "--format", "json", "-o", str(link)]) == 13
    bogus = tmp_path / "bogus.gmp"
    bogus.write_text("nope")
    assert main(["export", str(bogus), "--format", "json", "-o", str(tmp_path / "o")]) == 9
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(e.startswith("gmpmon: ") for e in err)
    assert (
        main(
            [
                "export",
                str(recording),
                "--format",
                "pprof",
                "--what",
                "latency",
                "-o",
                str(tmp_path / "p"),
            ]
        )
        == 2
    )


def test_export_to_stdout_writes_no_file_named_dash(recording: Path, tmp_path: Path) -> None:
    got = subprocess.run([sys.executable, "-m", "gmpmon", "export", str(recording), "-f", "json",
                          "-o", "-"], capture_output=True, cwd=tmp_path, timeout=60)
    assert got.returncode == 0, got.stderr
    assert not (tmp_path / "-").exists()
    assert json.loads(got.stdout)["schema_version"] >= 1
    assert got.stderr.decode() == (
        f"gmpmon: wrote json to standard output ({len(got.stdout):,} bytes)\n")


def test_export_of_truncated_recording_says_where(
    recording: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = recording.read_bytes()
    cut = tmp_path / "cut.gmp"
    cut.write_bytes(data[:-30])
    assert main(["export", str(cut), "--format", "json", "-o", str(tmp_path / "o.json")]) == 0
    err = capsys.readouterr().err
    assert "stopped at byte" in err and "1 good batches" in err


def test_pprof_of_a_real_recording_lists_the_contending_function_first(tmp_path: Path) -> None:
    data = export(Path(__file__).resolve().parent.parent / "data" / "mutex.gmp", "pprof")
    out = tmp_path / "mutex.pb.gz"
    out.write_bytes(data)
    top = pprof(out, "-top")
    rows = pprof_rows(top)
    assert rows and rows[0][-1] == "main.contend", top  # mutex workload: contend() locks


def test_attach_folded_uses_the_exporter(recording: Path, tmp_path: Path) -> None:
    from gmpmon.commands.attach_one import write_output
    from gmpmon.replay import replay_all

    rec = read_recording(str(recording))
    snap = replay_all(rec)
    out = tmp_path / "live.folded"
    write_output("folded", rec.header, snap, str(out))
    assert out.read_text() == export(recording, "folded").decode()
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600
