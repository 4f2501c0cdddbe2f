"""The census's wait stacks on real Go programs, trap-free (sample mode: the census reads
/proc/PID/mem, no probe): where the goroutines wait, in the summary, the recording, the folded
export and the goroutine-leak finding; Debian's Prometheus must not look leaky."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from gmpmon.export.folded import LINE_RE
from tests.gotargets import build

GM = [sys.executable, "-m", "gmpmon"]
PROMETHEUS = shutil.which("prometheus") or (
    "/usr/bin/prometheus" if os.path.exists("/usr/bin/prometheus") else None)


def run_sample(tmp: Path, name: str, *args: str, timeout: int = 120) -> tuple[dict[str, Any],
                                                                           Path]:
    exe = tmp / name
    shutil.copy2(build(name, "1.27"), exe)
    out, rec = tmp / f"{name}.json", tmp / f"{name}.gmp"
    p = subprocess.run([*GM, "run", "--mode", "sample", "--no-tui", "--summary-json", str(out),
                        "--record", str(rec), "--", str(exe), *args], capture_output=True,
                       text=True, timeout=timeout, env=dict(os.environ, GOMAXPROCS="2"))
    assert p.returncode == 0, p.stderr[-2000:]
    assert "Traceback" not in p.stderr, p.stderr
    return json.loads(out.read_text()), rec


def leak_finding(doc: dict[str, Any]) -> dict[str, Any]:
    got = {f["id"]: f for f in doc["findings"]}
    assert "goroutine-leak" in got, json.dumps(doc["findings"])[:1500]
    return got["goroutine-leak"]


@pytest.mark.bpf
def test_leak_wait_stacks_summary_recording_and_flame(tmp_path: Path) -> None:
    """leak: main.serve starts 200 main.handle a second, each parked for good on its own
    channel; a GC a second sets their g.waitsince."""
    doc, rec = run_sample(tmp_path, "leak", "-t", "6s", "-rate", "200", "-gc-every", "1s")
    c = doc["census"]
    top = c["wait_stacks"][0]
    assert top["frames"] == ["main.handle"], top
    assert (top["created_by"], top["function"], top["wait_reason"]) == (
        "main.serve", "main.handle", "chan receive")
    assert top["waited"] > 0 and top["wait_max_ns"] > 1e9
    # The groups are the census's own goroutines: every waiting one is in a group, and the
    # chan receive groups add up to the census's chan receive count.
    waiting = {s["wait_reason"]: s["count"] for s in c["states"]
               if not s["system"] and s["state"] == "waiting"}
    grouped: dict[str, int] = {}
    for w in c["wait_stacks"]:
        grouped[w["wait_reason"]] = grouped.get(w["wait_reason"], 0) + w["count"]
    assert grouped == waiting, (grouped, waiting)
    assert top["count"] >= 0.95 * waiting["chan receive"] > 500
    # The finding says where they wait, and that the group grew at every census.
    st = leak_finding(doc)["evidence"]["stacks"][0]
    assert (st["site"], st["created_by"]) == ("main.handle", "main.serve")
    assert st["falls"] == 0 and st["rises"] >= 3
    # The recording replays to the same census, wait stacks included.
    out = tmp_path / "replayed.json"
    p = subprocess.run([*GM, "replay", str(rec), "--no-tui", "--summary-json", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert json.loads(out.read_text())["census"] == c
    # ... and exports where they wait as a flame graph, by count: valid folded lines.
    p = subprocess.run([*GM, "export", str(rec), "--format", "folded", "--what", "waits",
                        "--weight", "count", "-o", "-"], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert all(LINE_RE.match(x) for x in lines), lines
    assert f"main.handle;[chan_receive] {top['count']}" in lines


@pytest.mark.bpf
@pytest.mark.slow
def test_leak_found_by_its_stack_once_parked_for_a_minute(tmp_path: Path) -> None:
    """2 leaked goroutines a second for 80 s: the group grows at every census and its
    oldest has waited more than the rule's minute."""
    doc, _rec = run_sample(tmp_path, "leak", "-t", "80s", "-rate", "2", "-gc-every", "5s",
                           timeout=200)
    f = leak_finding(doc)
    st = f["evidence"]["stacks"][0]
    assert (st["site"], st["created_by"], st["wait_reason"]) == (
        "main.handle", "main.serve", "chan receive")
    assert st["wait_max_s"] >= 60, st
    assert st["growth"] >= 50 and st["falls"] == 0
    assert "main.handle" in f["title"]


@pytest.mark.bpf
@pytest.mark.slow
def test_prometheus_is_no_leak_and_shows_where_it_waits() -> None:
    """Debian's Prometheus scraping itself every second, watched for 75 s: its goroutines
    wait in its own code, and none of its stacks is called a leak."""
    assert PROMETHEUS is not None, "scripts/setup installs Debian's prometheus"
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        cfg = tmp / "prometheus.yml"
        cfg.write_text("global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: self\n"
                       "    static_configs:\n      - targets: ['127.0.0.1:18402']\n")
        prom = subprocess.Popen(
            [PROMETHEUS, f"--config.file={cfg}", f"--storage.tsdb.path={tmp / 'tsdb'}",
             "--web.listen-address=127.0.0.1:18402"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(3)
            out = tmp / "prom.json"
            p = subprocess.run([*GM, "attach", str(prom.pid), "--mode", "sample", "--no-tui",
                                "--duration", "75", "--summary-json", str(out)],
                               capture_output=True, text=True, timeout=200)
            assert p.returncode == 0, p.stderr[-2000:]
            doc = json.loads(out.read_text())
        finally:
            prom.terminate()
            prom.wait(20)
    assert "goroutine-leak" not in {f["id"] for f in doc["findings"]}, doc["findings"]
    stacks = doc["census"]["wait_stacks"]
    assert stacks and any(fr.startswith("github.com/prometheus/") for w in stacks
                          for fr in w["frames"]), stacks
