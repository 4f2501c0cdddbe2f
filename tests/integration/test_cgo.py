"""A cgo-built target (scripts/targets/cgocall: CGO_ENABLED=1, dynamically linked against
libc), in full and sample mode, against the runtime's own view of the same run.

C calls go through runtime.cgocall, which enters and leaves a syscall: the runtime/trace
records each as Running->Syscall; runtime.NumCgoCall() counts the calls themselves. The
trace has no event per handoffp (its Syscall->Runnable, a call that came back without its P,
outnumbers sysmon's retakes ~1.7x here: HACKING.md), so hand-offs are checked against the
kernel's own count of runtime.handoffp entries: a tracefs uprobe, independent of gmpmon's
BPF, on the same process.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest

from gmpmon.binary import load
from gmpmon.binary.elf import PT_LOAD, Elf
from tests.gotargets import CGO_WORKLOADS, build
from tests.gotrace import TraceFacts, parse_trace

GM = [sys.executable, "-m", "gmpmon"]
# The trace oracle needs Go 1.21+; 1.27 in CI, the redesigned syscall path's neighbours
# with --full.
FULL_VERSIONS = [pytest.param("1.27", id="go1.27"),
                 *(pytest.param(v, id=f"go{v}", marks=pytest.mark.slow) for v in ("1.22", "1.25"))]


def cgo_exe(tmp_path: Path, go: str) -> Path:
    exe = tmp_path / "cgocall"
    shutil.copy2(build("cgocall", go), exe)
    head = subprocess.run(["readelf", "-lW", str(exe)], capture_output=True, text=True).stdout
    assert "cgocall" in CGO_WORKLOADS and "Requesting program interpreter" in head, (
        "cgocall is not a dynamically linked cgo build")
    return exe


# Under `unshare --mount`: a private tracefs, one uprobe per function (in a trace instance
# of its own, so nobody's global buffer fills), the command, then uprobe_profile's hits.
COUNTER = textwrap.dedent("""
    import os, subprocess, sys
    group, defs, argv = sys.argv[1], sys.argv[2].split(";"), sys.argv[3:]
    T = "/sys/kernel/tracing"
    subprocess.run(["mount", "-t", "tracefs", "nodev", T], check=True)
    inst = f"{T}/instances/{group}"

    def append(path, text):  # O_APPEND, not open(path, "a"): tracefs refuses the seek
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)

    try:
        for d in defs:
            append(f"{T}/uprobe_events", d + "\\n")
        os.mkdir(inst)
        with open(f"{inst}/buffer_size_kb", "w") as f:
            f.write("4")
        with open(f"{inst}/events/{group}/enable", "w") as f:
            f.write("1")
        rc = subprocess.run(argv).returncode
        with open(f"{T}/uprobe_profile") as f:
            # "  FILE EVENT HITS": the event's name without its group
            hits = [ln for ln in f if ln.split()[1:2] and ln.split()[1].startswith(group)]
        sys.stderr.write("".join("uprobe-hits " + ln for ln in hits))
        sys.exit(rc)
    finally:
        if os.path.isdir(inst):
            with open(f"{inst}/events/{group}/enable", "w") as f:
                f.write("0")
            os.rmdir(inst)
        for d in defs:
            append(f"{T}/uprobe_events", "-:" + d.split()[0].split(":", 1)[1] + "\\n")
""")


def counted_run(exe: Path, funcs: tuple[str, ...], argv: list[str], env: dict[str, str]
                ) -> tuple[subprocess.CompletedProcess[str], dict[str, int]]:
    """Run argv (which runs exe) while the kernel counts entries of funcs in exe."""
    info, elf = load(str(exe)), Elf(exe.read_bytes(), str(exe))
    group = f"gmpmon_cgo{uuid.uuid4().hex[:8]}"
    defs = []
    for n, fn in enumerate(funcs):
        addr = info.symbols[fn]
        seg = next(s for s in elf.segments
                   if s.type == PT_LOAD and s.vaddr <= addr < s.vaddr + s.filesz)
        defs.append(f"p:{group}/{group}f{n} {exe}:{addr - seg.vaddr + seg.offset:#x}")
    p = subprocess.run(["unshare", "--mount", "--propagation", "private", sys.executable,
                        "-c", COUNTER, group, ";".join(defs), *argv],
                       capture_output=True, text=True, timeout=120, env=env)
    hits = {ln.split()[2]: int(ln.split()[3])
            for ln in p.stderr.splitlines() if ln.startswith("uprobe-hits ")}
    assert len(hits) == len(funcs), p.stderr[-2000:]
    return p, {fn: hits[f"{group}f{n}"] for n, fn in enumerate(funcs)}


def field(out: str, name: str) -> int:
    return int(next(ln.split()[1] for ln in out.splitlines() if ln.startswith(name + " ")))


@pytest.mark.bpf
@pytest.mark.parametrize("go", FULL_VERSIONS)
def test_full_mode_counts_cgo_calls_hand_offs_and_locked_threads(tmp_path: Path, go: str
                                                                  ) -> None:
    exe = cgo_exe(tmp_path, go)
    summary, tr = tmp_path / "s.json", tmp_path / "trace.out"
    p, calls = counted_run(
        exe, ("runtime.handoffp",),
        [*GM, "run", "--mode", "full", "--no-tui", "--summary-json", str(summary), "--",
         str(exe), "-t", "2s", "-trace-run", str(tr)],
        env=dict(os.environ, GOMAXPROCS="2"),
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert "done" in p.stdout, p.stdout[-500:]
    s: dict[str, Any] = json.loads(summary.read_text())
    t: TraceFacts = parse_trace(tr)
    cgocalls = field(p.stdout, "cgocalls")
    entered = t.transitions[("Running", "Syscall")]
    lost_p = t.transitions[("Syscall", "Runnable")]
    print(f"cgocalls {cgocalls}; trace: syscalls {entered}, back without a P {lost_p}; "
          f"handoffp entries (uprobe) {calls['runtime.handoffp']}; gmpmon: {s['syscalls']}")
    assert cgocalls >= 500, cgocalls  # 2 s of 1 ms sleeps in C, plus the spinners' calls

    # Every C call is a syscall to the scheduler: gmpmon (the whole run) counts the
    # runtime's own NumCgoCall (ready to done) and the trace's (same span), plus the few
    # real syscalls of start-up and exit.
    sc = s["syscalls"]
    assert cgocalls <= sc["count"] <= cgocalls * 1.07 + 50, (sc, cgocalls)
    assert abs(sc["count"] - entered) <= 0.07 * entered + 50, (sc, entered)

    # Hand-offs: every handoffp entry the kernel counted (sysmon retaking a P from a call
    # in C, a locked M parking), within 5%. Each retake leaves one call to come back
    # without its P, so the retakes are at most the trace's such exits.
    ho = calls["runtime.handoffp"]
    assert ho >= 200, calls
    assert abs(sc["handoffs"] - ho) <= 0.05 * ho, (sc["handoffs"], ho)
    syscall_ho = finding(s, "syscall-handoff")["evidence"]
    retakes = syscall_ho["by_cause"].get("syscall-retake", 0)
    assert 50 <= retakes <= lost_p, (retakes, lost_p)

    # The locked goroutine parks on its ticker's channel: each park hands its P off
    # (stoplockedm). Its chan-receive parks are the only ones in this program.
    pin = finding(s, "cgo-pinning")["evidence"]
    chan_parks = t.parks["chan receive"]
    assert chan_parks >= 200, t.parks
    assert 0.9 * chan_parks <= pin["locked_handoffs"] <= 1.1 * chan_parks + 20, (
        pin["locked_handoffs"], chan_parks)
    # one locked goroutine (main may add one: the main goroutine is locked during init)
    top_locked = pin["locked_goroutines"][0]["handoffs"]
    assert top_locked >= 0.98 * pin["locked_handoffs"], pin["locked_goroutines"]


def finding(doc: dict[str, Any], fid: str) -> dict[str, Any]:
    got = {f["id"]: f for f in doc["findings"]}
    assert fid in got, f"{fid} not found; findings: {json.dumps(doc['findings'])[:1500]}"
    return got[fid]


@pytest.mark.bpf
@pytest.mark.parametrize("go", ["1.19", "1.27"])
def test_sample_mode_attaches_to_a_cgo_program_and_counts_its_goroutines(
        tmp_path: Path, go: str) -> None:
    exe = cgo_exe(tmp_path, go)
    target = subprocess.Popen([str(exe), "-t", "60s"], stdout=subprocess.PIPE, text=True,
                              env=dict(os.environ, GOMAXPROCS="2"))
    try:
        assert target.stdout is not None and target.stdout.readline().strip() == "ready"
        running = field(target.stdout.readline(), "goroutines")  # runtime.NumGoroutine()
        out = tmp_path / "s.json"
        p = subprocess.run([*GM, "attach", str(target.pid), "--mode", "sample", "--no-tui",
                            "-d", "2", "--summary-json", str(out)],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr[-2000:]
        assert "Traceback" not in p.stderr
        s: dict[str, Any] = json.loads(out.read_text())
        assert target.poll() is None, "the target died under gmpmon"
    finally:
        target.kill()
        target.wait()
    assert s["target"]["gomaxprocs"] == 2
    # main + 2 sleepers + 1 spinner + 1 locked + 1 worker, as the runtime counts them
    # (NumGoroutine leaves out system goroutines); the census leaves out the extra M's idle
    # g that a cgo program keeps for callbacks (Go 1.26+: _Gdeadextra) as the runtime does.
    census = s["census"]
    assert census["complete"] and census["goroutines"] == running == 6, (running, census)
    print("runtime goroutines:", s["runtime"]["goroutines"])
    # The Go worker's CPU is charged to it. (CPU in C is not checked: where it lands
    # varies from run to run: HACKING.md, "cgo".)
    top = s["kernel"]["cpu_by_goroutine"]["top"]
    assert any(g["function"] == "main.worker" for g in top), top
