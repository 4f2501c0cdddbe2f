"""Compiled BPF objects from the cache (gmpmon/capture/bpfobj.py) on real Go processes.

Two processes of one binary: the attach to the first compiles and writes the entries, the
attach to the second loads them. The second must see its own process and only it (the TGID
is a map the loader sets, not compiled in), with the same kinds of data as a compile gives.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.gotargets import build
from tests.integration.test_capture import GM, TIMEOUT, env


def _attach(pid: int, cache: Path, out: Path, *args: str) -> dict[str, Any]:
    p = subprocess.run(
        # full mode: every uprobe in from the start, so that "the cached object's uprobes ran"
        # does not hang on whether default mode's budget opened a window within 2 s.
        [*GM, "attach", str(pid), "--no-tui", "-d", "2", "--mode", "full",
         "--kernel", "samples,sched",
         "--summary-json", str(out), *args],
        capture_output=True, text=True, timeout=TIMEOUT, env=env(GMPMON_CACHE_DIR=str(cache)),
    )
    assert p.returncode == 0, p.stderr[-2000:]
    s: dict[str, Any] = json.loads(out.read_text())
    return s


def _entries(cache: Path) -> dict[str, int]:
    d = cache / "bpf"
    return {e.name: e.stat().st_mtime_ns for e in d.iterdir()} if d.is_dir() else {}


@pytest.mark.bpf
def test_a_second_process_of_a_binary_attaches_from_the_cache(tmp_path: Path) -> None:
    exe = tmp_path / "demo"
    shutil.copy(build("demo", "1.27"), exe)
    cache = tmp_path / "cache"
    procs = [subprocess.Popen([str(exe)], stdout=subprocess.DEVNULL) for _ in range(2)]
    try:
        first = _attach(procs[0].pid, cache, tmp_path / "a.json")
        made = _entries(cache)
        print(f"entries after the first attach: {len(made)}")
        assert len(made) == 2  # gmpmon.bpf.c, and the kernel sources as one object
        second = _attach(procs[1].pid, cache, tmp_path / "b.json")
        used = _entries(cache)
        assert set(used) == set(made)  # no new compile: the same keys
        assert all(used[k] > made[k] for k in made)  # both read again (their use is noted)
        for pid, s in ((procs[0].pid, first), (procs[1].pid, second)):
            tids = {int(t) for t in os.listdir(f"/proc/{pid}/task")}
            seen = {m["tid"] for m in s["kernel"]["threads"]["ms"]}
            print(f"pid {pid}: threads sampled {sorted(seen)}, its tasks {sorted(tids)}")
            assert seen and seen <= tids  # its own threads, and only its own
            assert s["events"]["lost"] == 0
            assert s["kernel"]["samples"]["go"] > 0
            assert any(r["count"] > 0 for r in s["park_reasons"].values())  # uprobes ran
            switches = sum(m["voluntary"] + m["involuntary"] for m in s["kernel"]["threads"]["ms"])
            assert switches > 0  # the sched tracepoints ran, on this process
        assert {m["tid"] for m in first["kernel"]["threads"]["ms"]}.isdisjoint(
            m["tid"] for m in second["kernel"]["threads"]["ms"])
    finally:
        for p in procs:
            p.kill()
            p.wait()


@pytest.mark.bpf
def test_a_damaged_entry_is_compiled_again(tmp_path: Path) -> None:
    exe = tmp_path / "demo"
    shutil.copy(build("demo", "1.27"), exe)
    cache = tmp_path / "cache"
    p = subprocess.Popen([str(exe)], stdout=subprocess.DEVNULL)
    try:
        _attach(p.pid, cache, tmp_path / "a.json", "--kernel", "samples")
        made = _entries(cache)
        assert made
        for name in made:
            (cache / "bpf" / name).write_text('{"schema": 1, "maps": [{"name": 3}]}')
        s = _attach(p.pid, cache, tmp_path / "b.json", "--kernel", "samples")
        assert s["kernel"]["samples"]["go"] > 0
        for name in made:  # rewritten whole by the new compile
            json.loads((cache / "bpf" / name).read_text())["funcs"]
    finally:
        p.kill()
        p.wait()


@pytest.mark.bpf
def test_an_attach_from_the_cache_maps_no_compiler(tmp_path: Path) -> None:
    """libbcc.so links LLVM and clang (~53 MB resident): a compile runs in a child process
    (capture/bpfcompile.py) and an attach from the cache never loads it."""
    exe = tmp_path / "demo"
    shutil.copy(build("demo", "1.27"), exe)
    cache = tmp_path / "cache"
    target = subprocess.Popen([str(exe)], stdout=subprocess.DEVNULL)
    try:
        for how in ("compiles", "from the cache"):
            gm = subprocess.Popen(
                [*GM, "attach", str(target.pid), "--no-tui", "-d", "3", "--mode", "default",
                 "--kernel", "samples,sched", "--summary-json", str(tmp_path / "s.json")],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                env=env(GMPMON_CACHE_DIR=str(cache)),
            )
            try:
                assert gm.stdout is not None
                for line in gm.stdout:
                    if line.startswith("Tracing Go scheduler"):
                        break
                maps = Path(f"/proc/{gm.pid}/maps").read_text()
                hwm = [ln for ln in Path(f"/proc/{gm.pid}/status").read_text().splitlines()
                       if ln.startswith("VmHWM")]
                print(how, hwm)
                assert "libLLVM" not in maps and "libbcc.so" not in maps, how
                assert "libbcc_bpf.so" in maps  # the attach calls come from there
                _out, err = gm.communicate(timeout=TIMEOUT)
            finally:
                if gm.poll() is None:
                    gm.kill()
                    gm.wait()
            assert gm.returncode == 0, err[-2000:]
            s = json.loads((tmp_path / "s.json").read_text())
            assert s["kernel"]["samples"]["go"] > 0
        assert len(_entries(cache)) == 2
    finally:
        target.kill()
        target.wait()
