"""Each goroutine's start function and `go` statement, against the runtime's own traceback.

The demo runs under `gmpmon attach` (real BPF); after gmpmon stops, SIGQUIT makes the Go
runtime print every goroutine: its frames (the outermost is its function: Go hides the
gowrap wrapper) and "created by F in goroutine N" with the file:line of the `go` statement.
For every goroutine in both, gmpmon's creation site must be the runtime's, and its start
function the runtime's outermost frame (unless gmpmon names the wrapper because the function
was inlined into it). Full mode checks the probe's path too: the short-lived goroutines the
producer starts, created and gone between censuses, name their `go func` line from GO_CREATE.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from gmpmon.events import Kind
from gmpmon.model.snapshot import GState
from gmpmon.record import read_recording
from gmpmon.replay import replay_all
from tests import gotargets

GM = [sys.executable, "-m", "gmpmon"]
DEMO_SRC = Path(__file__).resolve().parents[2] / "scripts" / "targets" / "demo" / "main.go"
_GOROUTINE = re.compile(r"^goroutine (\d+)")
_CREATED = re.compile(r"^created by (\S+) in goroutine \d+")
_WRAP = re.compile(r"\.gowrap\d+$")


def traceback_sites(dump: str) -> dict[int, tuple[str, str, str]]:
    """goid -> (its function, creating function, file:line) from a SIGQUIT dump. Its
    function is the outermost frame; SIGQUIT shows Go's ``gowrapN`` wrapper of ``go f(x)``
    (1.22+) too, and then f is the frame above it."""
    out: dict[int, tuple[str, str, str]] = {}
    goid, funcs = 0, []
    lines = dump.splitlines()
    for i, line in enumerate(lines):
        m = _GOROUTINE.match(line)
        if m:
            goid, funcs = int(m[1]), []
            continue
        m = _CREATED.match(line)
        if m and goid and i + 1 < len(lines):
            where = lines[i + 1].strip().split()[0]  # /abs/path/demo/main.go:181
            if len(funcs) >= 2 and _WRAP.search(funcs[-1]):
                funcs.pop()
            out[goid] = (funcs[-1] if funcs else "", m[1], "/".join(where.split("/")[-2:]))
            goid = 0
        elif goid and line and not line.startswith(("\t", " ")) and "(" in line:
            name = line[: line.rindex("(")] if line.endswith(")") else line
            if name != "runtime.goexit":  # SIGQUIT shows runtime frames: goexit is below all
                funcs.append(name)
    return out


def source_line(prefix: str) -> int:
    for n, line in enumerate(DEMO_SRC.read_text().splitlines(), 1):
        if line.strip().startswith(prefix):
            return n
    raise AssertionError(prefix)


@pytest.mark.bpf
@pytest.mark.parametrize(("version", "mode"), [("1.27", "full"), ("1.22", "default")])
def test_goroutines_show_the_start_function_and_go_statement_the_runtime_shows(
    tmp_path: Path, version: str, mode: str
) -> None:
    exe = tmp_path / "demo"
    shutil.copy(gotargets.build("demo", go=version), exe)  # private inode for uprobes
    target = subprocess.Popen(
        [str(exe), "-burst-every", "1s"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
        env={"GOMAXPROCS": "2", "PATH": "/usr/bin:/bin"},
    )
    rec = tmp_path / "demo.gmp"
    try:
        assert target.stdout is not None
        assert target.stdout.readline().strip() == "ready"
        gm = subprocess.run(
            [*GM, "attach", str(target.pid), "--mode", mode, "--no-tui", "--duration", "3",
             "--record", str(rec)],
            capture_output=True, text=True, timeout=120,
        )
        assert gm.returncode == 0, gm.stderr[-2000:]
        target.send_signal(signal.SIGQUIT)
        _out, dump = target.communicate(timeout=30)
    finally:
        if target.poll() is None:
            target.kill()
            target.wait()

    runtime_view = traceback_sites(dump)
    assert len(runtime_view) >= 10, dump[-2000:]
    snap = replay_all(read_recording(str(rec)))
    ours = {g.goid: g for g in snap.goroutines if g.start}
    both = sorted(set(ours) & set(runtime_view))
    assert len(both) >= 8, (sorted(ours), sorted(runtime_view))
    for goid in both:
        start, creator, where = runtime_view[goid]
        g = ours[goid]
        assert g.created_at == f"{creator} {where}", (goid, g, runtime_view[goid])
        if not _WRAP.search(g.start):  # gmpmon names the wrapper only when f is inlined in it
            assert g.start == start, (goid, g, runtime_view[goid])
    workers = [g for g in ours.values() if g.start == "main.worker"]
    assert len(workers) == 4
    assert {g.created_at for g in workers} == {
        f"main.main demo/main.go:{source_line('go worker(')}"}
    if mode == "full":
        # The producer's bursts of 300 goroutines, created and gone between two censuses:
        # their site comes with GO_CREATE (the new G's startpc/gopc, read in the same probe
        # hit). Every GO_CREATE names a site.
        line = source_line("go func(n int) {")
        stacks: dict[int, tuple[str, ...]] = {}
        creates = []
        for batch in read_recording(str(rec)):
            stacks.update(batch.stacks)
            creates += [e for e in batch.events if e[1] == Kind.GO_CREATE]
        sites = [stacks.get(e[6]) for e in creates]
        assert creates and None not in sites, len(creates)
        burst = [s for s in sites if s and s[1:] == ("main.producer", f"demo/main.go:{line}")]
        assert len(burst) >= 300, Counter(sites).most_common(5)
        dead = [g for g in snap.goroutines if g.state is GState.DEAD]
        assert dead and all(g.created_at for g in dead), dead
