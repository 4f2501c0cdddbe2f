"""Capture in full mode on real Go programs: workloads with known facts give the right numbers.

Each test starts a workload under ``gmpmon run --mode full`` (probes in place before its first
goroutine) and parses ``--summary-json``, py-spy style. Helpers here are shared by
test_attach.py and test_run.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.gotargets import CI_EXTRA, build, versions

GM = [sys.executable, "-m", "gmpmon"]
TIMEOUT = 90


def env(**extra: str) -> dict[str, str]:
    e = dict(os.environ)
    e.update(extra)
    return e


def gm_run(
    tmp_path: Path,
    exe: Path,
    *args: str,
    options: tuple[str, ...] = (),
    mode: str = "full",
    gomaxprocs: int = 2,
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """``gmpmon run --mode M --no-tui --summary-json`` on ``exe args``; (process, summary)."""
    summary = tmp_path / "summary.json"
    p = subprocess.run(
        [*GM, "run", "--mode", mode, "--no-tui", "--summary-json", str(summary), *options,
         "--", str(exe), *args],
        capture_output=True, text=True, timeout=TIMEOUT, env=env(GOMAXPROCS=str(gomaxprocs)),
    )
    assert p.returncode == 0, f"gmpmon run failed ({p.returncode}): {p.stderr[-2000:]}"
    assert "Traceback" not in p.stderr, p.stderr
    return p, json.loads(summary.read_text())


def matrix(stripped: bool = False) -> list[Any]:
    """Go versions (CI subset or all), default builds; plus stripped ones (and the extra
    -w and PIE builds) when asked."""
    out = [pytest.param(v, "default", id=f"go{v}") for v in versions()]
    if stripped:
        out += [pytest.param(v, "stripped", id=f"go{v}-stripped") for v in versions()]
        out += [pytest.param(v, m, id=f"go{v}-{m}") for v, m in CI_EXTRA]
    return out


@pytest.mark.bpf
@pytest.mark.parametrize(("go", "build_mode"), matrix(stripped=True))
def test_every_sleep_is_one_sleep_park(tmp_path: Path, go: str, build_mode: str) -> None:
    n = 30
    p, s = gm_run(tmp_path, build("sleeper", go, build_mode), "-n", str(n), "-d", "1ms")
    assert f"done {n}" in p.stdout
    assert s["park_reasons"]["sleep"]["count"] == n
    # Each sleep lasts >= 1ms: the park->ready wait says so.
    assert s["park_reasons"]["sleep"]["wait_ns"] >= n * 1_000_000
    assert s["target"]["gomaxprocs"] == 2
    assert s["events"]["lost"] == 0
    # No loss: every record the probes wrote (the kernel's count) was read.
    ring = s["events"]["ring"]
    assert ring["written"] == ring["read"] > 2 * n, ring
    assert not ring.get("refused") and not ring.get("cut_at_end"), ring


@pytest.mark.bpf
@pytest.mark.parametrize(("go", "build_mode"), matrix(stripped=True))
def test_goroutines_created_and_exited_match_spawn(
    tmp_path: Path, go: str, build_mode: str
) -> None:
    n = 500
    p, s = gm_run(tmp_path, build("spawn", go, build_mode), "-n", str(n))
    assert f"spawned {n}" in p.stdout
    g = s["goroutines"]
    assert g["exited"] == n
    # The runtime starts a few goroutines of its own (GC workers, finalizer, ...).
    assert n <= g["created"] <= n + 16


@pytest.mark.bpf
@pytest.mark.parametrize(("go", "build_mode"), matrix())
def test_fanout_is_stolen_from_mains_p(tmp_path: Path, go: str, build_mode: str) -> None:
    from gmpmon.events import Kind
    from gmpmon.record import read_recording

    rec = tmp_path / "fanout.gmp"
    p, s = gm_run(
        tmp_path, build("fanout", go, build_mode), "-k", "16", "-work", "5000000",
        options=("--record", str(rec)),
    )
    assert "done" in p.stdout
    # headless --record says where the complete recording is (#17)
    assert f"gmpmon: wrote recording {rec} ({rec.stat().st_size:,} bytes)" in p.stderr
    steals = s["steals"]
    assert steals["count"] > 0 and steals["goroutines"] > 0
    assert steals["attempts"] >= steals["count"]
    # The P main created the goroutines on (GO_CREATE's P, parent goid 1) is the victim
    # the most goroutines were taken from.
    create_p: Counter[int] = Counter()
    for batch in read_recording(str(rec)):
        for e in batch.events:
            if e[1] == Kind.GO_CREATE and e[5] == 1:
                create_p[e[2]] += 1
    assert sum(create_p.values()) >= 16
    main_p = create_p.most_common(1)[0][0]
    top = max(steals["matrix"], key=lambda c: c["goroutines"])
    assert top["victim"] == main_p
    assert top["thief"] != main_p


@pytest.mark.bpf
@pytest.mark.parametrize(("go", "build_mode"), matrix())
def test_tight_loop_is_preempted_by_sysmon(tmp_path: Path, go: str, build_mode: str) -> None:
    p, s = gm_run(tmp_path, build("spin", go, build_mode), "-t", "1s")
    assert "done" in p.stdout
    pre = s["preemptions"]
    # sysmon asks after 10 ms of the spinner's time slice: up to ~100 requests in 1 s (fewer
    # on a loaded machine, where sysmon itself waits for a CPU).
    assert pre["requested"] >= 10
    assert pre["preempted"] >= 10


@pytest.mark.bpf
@pytest.mark.parametrize(("go", "build_mode"), matrix())
def test_runtime_gc_stops_the_world(tmp_path: Path, go: str, build_mode: str) -> None:
    n = 10
    p, s = gm_run(tmp_path, build("gc", go, build_mode), "-n", str(n))
    assert f"gcs {n}" in p.stdout
    stw = s["gc_stw"]
    assert stw["count"] >= n
    assert 0 < stw["max_ns"] <= stw["total_ns"]


@pytest.mark.bpf
@pytest.mark.parametrize(("go", "build_mode"), matrix())
def test_blocking_syscalls_and_handoffs(tmp_path: Path, go: str, build_mode: str) -> None:
    n = 50
    p, s = gm_run(tmp_path, build("syscall", go, build_mode), "-n", str(n))
    assert f"syscalls {n}" in p.stdout
    sc = s["syscalls"]
    assert sc["count"] >= n
    # 1 ms syscalls with busy goroutines waiting: sysmon retakes the P (handoffp).
    assert sc["handoffs"] > 0


@pytest.mark.bpf
@pytest.mark.parametrize(("go", "build_mode"), matrix(stripped=True))
def test_mutex_contention_names_the_contending_function(
    tmp_path: Path, go: str, build_mode: str
) -> None:
    folded = tmp_path / "mutex.folded"
    # Enough work (4 x 1000 x 20 µs) that the goroutines overlap even when the machine is so
    # loaded that the second P's thread starts late (with -n 200 they sometimes never met).
    p, s = gm_run(
        tmp_path, build("mutex", go, build_mode), "-g", "4", "-n", "1000",
        options=("--folded", str(folded)),
    )
    assert "locks 4000" in p.stdout
    m = s["mutex"]
    assert m["contentions"] > 0 and m["wait_ns"] > 0
    top = m["top"][0]["stack"]
    assert "main.contend" in top
    assert top[-1].endswith("(*Mutex).lockSlow")  # leaf last (root first)
    lines = folded.read_text().splitlines()
    heaviest = max(lines, key=lambda ln: int(ln.rsplit(" ", 1)[1]))
    frames = heaviest.rsplit(" ", 1)[0].split(";")
    assert "main.contend" in frames
    assert sum(int(ln.rsplit(" ", 1)[1]) for ln in lines) == m["wait_ns"]
