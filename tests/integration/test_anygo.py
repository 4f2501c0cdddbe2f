"""Any Go binary: npm's esbuild (go1.26.5, built without Go build info) under `gmpmon run`,
`attach`, `inspect` and `ps`; and a Go process whose version cannot be told is listed by
`ps` with the reason.

Truth for esbuild's version: the "go1.26.5" its runtime.buildVersion holds (what
`strings` shows; scripts/corpus.toml pins it), checked here from the file's bytes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.cli import inspect
from tests.corpus import PROGRAMS, go_pid, serve
from tests.gotargets import build
from tests.integration.test_attach import Proc
from tests.integration.test_capture import GM, TIMEOUT

ESBUILD = PROGRAMS["esbuild"]


def test_esbuild_has_no_build_info_and_holds_its_version() -> None:
    data = ESBUILD.require().read_bytes()
    assert b"\xff Go buildinf:" not in data  # what makes it a test of this path
    assert ESBUILD.go.encode() in data
    r = inspect("--json", str(ESBUILD.path))
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert j["go_version"] == ESBUILD.go
    assert "found by a scan" in j["go_version_source"]
    text = inspect(str(ESBUILD.path)).stdout
    assert "version from: runtime.buildVersion (found by a scan of its data)" in text


@pytest.mark.bpf
def test_esbuild_under_run(tmp_path: Path) -> None:
    summary = tmp_path / "s.json"
    wrap = [*GM, "run", "--mode", "full", "--no-tui", "--summary-json", str(summary), "--"]
    with serve("esbuild", wrap=wrap, ready_timeout=60) as srv:
        assert os.path.realpath(f"/proc/{go_pid(srv)}/exe") == str(ESBUILD.path.resolve())
        srv.load(seconds=2, connections=4)
    assert "Traceback" not in srv.output
    assert f"({ESBUILD.go}, GOMAXPROCS=" in srv.output, srv.output[-2000:]
    s = json.loads(summary.read_text())
    assert s["target"]["go_version"] == ESBUILD.go
    # esbuild serves each request on a goroutine of its own: full mode sees them start
    assert s["goroutines"]["created"] > 100


@pytest.mark.bpf
def test_esbuild_attach_and_ps(tmp_path: Path) -> None:
    summary = tmp_path / "a.json"
    with serve("esbuild") as srv:
        r = subprocess.run([*GM, "ps", "--json", "--match", "esbuild"], capture_output=True,
                           text=True, timeout=TIMEOUT)
        assert r.returncode == 0, r.stderr
        rows = {p["pid"]: p for p in json.loads(r.stdout)}
        assert srv.pid in rows, r.stdout
        assert rows[srv.pid]["go_version"] == ESBUILD.go
        assert rows[srv.pid]["note"] == ""
        assert rows[srv.pid]["gomaxprocs"] is not None
        gm = Proc([*GM, "attach", str(srv.pid), "--mode", "full", "--no-tui",
                   "--duration", "3", "--summary-json", str(summary)])
        try:
            gm.wait_line("Tracing Go scheduler of PID")
            srv.load(seconds=2, connections=4)
            assert gm.p.wait(timeout=TIMEOUT) == 0, gm.err
        finally:
            gm.kill()
        live = inspect(str(srv.pid))
        assert live.returncode == 0, live.stderr
        assert "found by a scan" in live.stdout
    s = json.loads(summary.read_text())
    assert s["target"]["go_version"] == ESBUILD.go
    assert s["goroutines"]["created"] > 100


def test_ps_lists_a_go_process_it_cannot_attach_and_says_why(tmp_path: Path) -> None:
    # A sleeper with its build info removed and its runtime.buildVersion blanked: a Go
    # program (it has a .gopclntab) whose version nothing tells.
    objcopy = shutil.which("objcopy")
    assert objcopy is not None, "objcopy (binutils, installed with gcc by scripts/setup)"
    exe = build("sleeper", go="1.27", mode="stripped")
    bare = tmp_path / "nover"
    subprocess.run([objcopy, "--remove-section", ".go.buildinfo", str(exe), str(bare)],
                   check=True)
    data = bare.read_bytes()
    bare.write_bytes(data.replace(b"go1.27.", b"xxxxxxx"))
    p = subprocess.Popen([str(bare), "-n", "1000000", "-d", "10ms"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        r = subprocess.run([*GM, "ps", "--json", "--match", "nover"], capture_output=True,
                           text=True, timeout=TIMEOUT)
        assert r.returncode == 0, r.stderr
        rows = {row["pid"]: row for row in json.loads(r.stdout)}
        assert p.pid in rows, r.stdout
        assert rows[p.pid]["go_version"] == "?"
        assert "cannot tell which Go version built it" in rows[p.pid]["note"]
        text = subprocess.run([*GM, "ps", "--match", "nover"], capture_output=True,
                              text=True, timeout=TIMEOUT).stdout
        line = next(ln for ln in text.splitlines() if ln.lstrip().startswith(str(p.pid)))
        assert "cannot tell which Go version" in line
    finally:
        p.kill()
        p.wait()
