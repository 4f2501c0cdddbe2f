"""The kernel sources' model part (gmpmon/model/kernel.py) and its validation rule, on a
real recording (tests/data/kernel-cpuprof.gmp) and on hand-made sample sequences."""

from __future__ import annotations

import bisect
import gzip
import itertools
import json
import shutil
from pathlib import Path

from gmpmon.events import (
    SAMPLE_GO,
    SAMPLE_NOT_GO,
    Batch,
    Header,
    Kind,
)
from gmpmon.model import Model
from gmpmon.model.kernel import GAP_NS, LONG_RUN_NS
from gmpmon.model.snapshot import Snapshot
from gmpmon.model.validation import VALIDATE_MIN, validation_failure
from gmpmon.record import Recording, read_recording
from gmpmon.replay import replay_all


def header(gomaxprocs: int = 2) -> Header:
    return Header(pid=1, exe="x", go_version="go1.27.3", gomaxprocs=gomaxprocs, mode="sample",
                  start_ns=0, wall_start=0.0, wait_reasons=("",))


DATA = Path(__file__).resolve().parent.parent / "data"
# `gmpmon run --mode sample --kernel samples,sched,syscalls --record` of
# `cpuprof -t 1500ms -garbage` (Go 1.27, GOMAXPROCS=2); its stdout (the spinners' P logs)
# is kernel-cpuprof.out.
REC = DATA / "kernel-cpuprof.gmp"
MS = 1_000_000


def replayed() -> tuple[Recording, Snapshot]:
    rec = read_recording(str(REC))
    snap = replay_all(rec, model=Model(rec.header))
    return rec, snap


def spinner_logs() -> dict[int, tuple[list[int], list[int]]]:
    logs = {}
    for line in (DATA / "kernel-cpuprof.out").read_text().splitlines():
        f = line.split()
        if f[0] == "spinner":
            pairs = [tuple(map(int, x.split(":"))) for x in f[2:]]
            logs[int(f[1])] = ([t for t, _ in pairs], [p for _, p in pairs])
    return logs


def test_validation_needs_enough_samples_and_one_percent() -> None:
    assert validation_failure(0, VALIDATE_MIN - 1) == ""
    line = validation_failure(0, VALIDATE_MIN)
    assert line.startswith("perf samples off:") and "\n" not in line
    assert validation_failure(3, 300) == ""  # 1%: cgo-heavy but real, kept
    assert validation_failure(9, 1000) != ""


def test_replayed_samples_name_the_spinners_on_the_ps_they_logged() -> None:
    _rec, snap = replayed()
    k = snap.kernel
    assert k is not None and not k.samples.off
    logs = spinner_logs()
    assert {g.goid for g in k.cpu_by_goroutine[:3]} == set(logs)
    assert all(g.function == "main.burn" for g in k.cpu_by_goroutine[:3])
    right = wrong = 0
    for b in read_recording(str(REC)):
        for ts, kind, p, _m, goid, a0, _a1 in b.events:
            if kind != Kind.CPU_SAMPLE or a0 & 0xFF != SAMPLE_GO or goid not in logs:
                continue
            times, ps = logs[goid]
            i = bisect.bisect_right(times, ts) - 1
            if i < 0 or min(abs(ts - t) for t in times) < 2 * MS:
                continue
            right, wrong = (right + 1, wrong) if ps[i] == p else (right, wrong + 1)
    assert right > 300 and wrong <= right // 50, (right, wrong)
    # Profile keys add up to the records; not-in-Go samples name no G and no P.
    assert sum(n for *_k, n in k.profile) == k.samples.records
    assert all(g == 0 and p == -1 for _s, g, p, o, _n in k.profile if o == SAMPLE_NOT_GO)
    assert k.samples.not_go > 0  # the assembly loop with the garbage R14


def test_long_running_goroutines_are_spinners_and_at_least_10ms() -> None:
    _rec, snap = replayed()
    k = snap.kernel
    assert k is not None
    logs = spinner_logs()
    assert k.long_running and k.long_runs_total >= len([r for r in k.long_running
                                                         if not r.ongoing])
    for r in k.long_running:
        assert r.duration_ns >= LONG_RUN_NS and r.goid in logs and r.p in (0, 1)
        assert r.function == "main.burn" and r.stack[-2:] == ("main.spin", "main.burn")
    durs = [r.duration_ns for r in k.long_running]
    assert durs == sorted(durs, reverse=True)
    # The sampled timeline: spans of spinners on both Ps, in time order, labelled RUNNING.
    for p in (0, 1):
        spans = k.timeline[p]
        assert spans and all(a.start <= b.start for a, b in itertools.pairwise(spans))
        assert {s.goid for s in spans} & set(logs)


def test_long_run_breaks_at_a_gap_or_another_goroutine() -> None:
    m = Model(header())
    ev = []
    t = 1_000 * MS
    for i in range(15):  # G7 on P0 for 14 ms
        ev.append((t + i * MS, int(Kind.CPU_SAMPLE), 0, 11, 7, SAMPLE_GO, 0))
    t2 = t + 14 * MS + GAP_NS + 1  # a gap: a new run of the same G
    for i in range(5):
        ev.append((t2 + i * MS, int(Kind.CPU_SAMPLE), 0, 11, 7, SAMPLE_GO, 0))
    ev.append((t2 + 5 * MS, int(Kind.CPU_SAMPLE), 0, 11, 8, SAMPLE_GO, 0))
    m.feed(Batch(ev))
    m.flush()
    k = m.snapshot().kernel
    assert k is not None and k.long_runs_total == 1
    assert [(r.goid, r.duration_ns, r.samples) for r in k.long_running] == [(7, 14 * MS, 15)]
    assert [s.goid for s in k.timeline[0]] == [7, 7, 8]


def test_the_headers_sample_rate_sets_the_period_the_gap_and_the_long_run() -> None:
    """At 99 Hz (--sample-hz, the default) a sample stands for 10.1 ms; one missing sample
    (a 20-ms gap) does not split a run, and a run needs 3 periods: 2 samples 10 ms apart (a G
    seen twice, not seen running in between) are not a long run; 4 are."""
    import dataclasses

    h = dataclasses.replace(header(), sample_hz=99)
    m = Model(h)
    period = 1_000_000_000 // 99
    t = 1_000 * MS
    ev = [(t, int(Kind.CPU_SAMPLE), 0, 11, 7, SAMPLE_GO, 0),
          (t + period, int(Kind.CPU_SAMPLE), 0, 11, 7, SAMPLE_GO, 0),
          (t + 2 * period, int(Kind.CPU_SAMPLE), 0, 11, 8, SAMPLE_GO, 0)]
    t2 = t + 10 * period  # G9: 4 samples, the third one missing (a 2-period gap)
    ev += [(t2 + i * period, int(Kind.CPU_SAMPLE), 1, 12, 9, SAMPLE_GO, 0) for i in (0, 1, 3, 4)]
    ev.append((t2 + 5 * period, int(Kind.CPU_SAMPLE), 1, 12, 8, SAMPLE_GO, 0))
    m.feed(Batch(ev))
    m.flush()
    k = m.snapshot().kernel
    assert k is not None and k.samples.period_ns == period
    assert [(r.goid, r.duration_ns, r.samples) for r in k.long_running] == [(9, 4 * period, 4)]
    assert [s.goid for s in k.timeline[1]] == [9, 8]
    # A Header made before it said its rate (old recordings): 999 Hz.
    assert header().sample_hz == 999


def test_the_sample_rate_survives_a_recording_and_old_ones_mean_999(tmp_path: Path) -> None:
    import dataclasses

    from gmpmon.record import RecordingWriter

    path = str(tmp_path / "r.gmp")
    w = RecordingWriter(path, dataclasses.replace(header(), sample_hz=99))
    w.close()
    assert read_recording(path).header.sample_hz == 99
    assert read_recording(str(REC)).header.sample_hz == 999  # committed before the field


def test_a_bad_sample_rate_is_one_line_and_exit_2() -> None:
    import subprocess
    import sys

    for bad in ("0", "1001", "x"):
        p = subprocess.run([sys.executable, "-m", "gmpmon", "attach", "--sample-hz", bad,
                            "--no-tui", "1"], capture_output=True, text=True, timeout=60)
        assert p.returncode == 2, (bad, p.returncode, p.stderr)
        # argparse's usage, then one line naming the option (a type error); a range error is
        # that line alone
        last = p.stderr.strip().splitlines()[-1]
        assert "sample-hz" in last and "Traceback" not in p.stderr, p.stderr


def test_sampler_off_drops_every_sample_number() -> None:
    rec, _ = replayed()
    m = Model(rec.header)
    for b in read_recording(str(REC)):
        m.feed(b)
    end = m.snapshot().now
    m.feed(Batch([(end + 1, int(Kind.SAMPLER_OFF), -1, 0, 0, 0, 500)]))
    m.flush()
    k = m.snapshot().kernel
    assert k is not None and k.samples.off.startswith("perf samples off: R14 was a goroutine")
    assert not (k.profile or k.cpu_by_goroutine or k.long_running or k.timeline or k.cpu_by_p)
    # Tracepoint numbers are another source: they stay.
    assert k.syscalls > 0 and k.runq_latency is not None


def test_summary_json_kernel_blocks_name_their_source() -> None:
    from gmpmon import report
    from gmpmon.export.json import summary

    _rec, snap = replayed()
    s = summary(snap)
    kern = s["kernel"]
    assert set(kern) == {"samples", "cpu_by_p", "cpu_by_goroutine", "long_running",
                         "threads", "runq_latency_ns", "syscalls"}
    for name, block in kern.items():
        want = "tracepoints" if name in ("threads", "runq_latency_ns", "syscalls") else "samples"
        assert block["source"] == want, name
    sys_ = kern["syscalls"]
    assert sys_["count"] == sum(p["count"] for p in sys_["by_p"]) > 0
    assert {t["name"] for t in sys_["top"]} >= {"nanosleep"}
    json.dumps(s)
    text = report.text_report(snap)
    assert "CPU samples (perf" in text and "Syscalls (tracepoints)" in text
    assert all(len(line) <= 80 for line in text.splitlines())


def test_pprof_cpu_export_opens_in_go_tool_pprof_with_goid_and_p_labels(tmp_path: Path) -> None:
    from gmpmon.export.base import export_recording
    from gmpmon.export.registry import make_exporter
    from tests.unit.test_export import pprof, pprof_rows

    rec = read_recording(str(REC))
    ex = make_exporter("pprof", rec.header, what="cpu")
    export_recording(rec, ex)
    out = tmp_path / "cpu.pb.gz"
    out.write_bytes(ex.render())
    assert gzip.decompress(out.read_bytes())
    top = pprof_rows(pprof(out, "-top"))
    assert top[0][-1] == "main.burn"
    tags = pprof(out, "-tags")
    logs = spinner_logs()
    for goid in logs:
        assert f": {goid}\n" in tags
    assert ": P0\n" in tags and ": P1\n" in tags and "not in Go" in tags
    one = next(iter(logs))
    focused = pprof(out, "-top", f"-tagfocus=goid=^{one}$")  # a bare number is a range
    assert "main.burn" in focused and "main.garbageLoop" not in focused
    shutil.rmtree(tmp_path, ignore_errors=True)
