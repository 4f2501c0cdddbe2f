"""`gmpmon ps --sort cpu`: every column filled, on real Go processes, checked against /proc
and the programs' own metrics.

Two processes: the gcheap workload (Go 1.22), allocating for the whole ps (a busy process:
CPU% high), and Debian's Prometheus (go1.19, -s -w), idle. Each row's CPU% is checked
against the process's own /proc/PID/stat over a window around the ps, RSS against VmRSS,
goroutines and GOMAXPROCS against runtime/metrics (gcheap) and Prometheus's own /metrics
(its goroutine profile's total, less the handler; its GOMAXPROCS is the CPUs it may run
on), the Go version against
go_info and the build info.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from gmpmon.fleet.procstat import CLK_TCK, cpu_ticks
from tests import gotargets
from tests.integration.test_capture import GM, env
from tests.integration.test_fleet import Workload, _free_port, _wait

PROMETHEUS = shutil.which("prometheus")
pytestmark = pytest.mark.skipif(
    (os.geteuid() != 0 or PROMETHEUS is None) and not os.environ.get("GMPMON_REQUIRE_BPF"),
    reason="needs root and Debian's prometheus (scripts/setup installs it)")


def vm_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def prom_metrics(url: str) -> str:
    return urllib.request.urlopen(url, timeout=10).read().decode()


def test_ps_sort_cpu_fills_every_column(tmp_path: Path) -> None:
    assert PROMETHEUS is not None
    exe = tmp_path / "ps-gcheap"
    shutil.copy(gotargets.build("gcheap", go="1.22"), exe)
    w = Workload(exe)
    port = _free_port()
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text("global:\n  scrape_interval: 1h\nscrape_configs: []\n")
    prom = subprocess.Popen(
        [PROMETHEUS, f"--config.file={cfg}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    own = f"http://127.0.0.1:{port}/metrics"
    churn: threading.Thread | None = None
    try:
        _wait(lambda: _ok(own), 60, "prometheus to serve /metrics")
        time.sleep(3)  # its start-up (TSDB, WAL) moves its goroutines and RSS
        m = json.loads(w.ask("metrics", "metrics"))
        churn = threading.Thread(target=w.ask, args=("churn 4", "churned"))
        churn.start()
        time.sleep(0.5)
        prof0 = profile_total(own)
        # VmRSS of both, every few ms while ps runs: ps's reading must lie in that range.
        rss_seen: dict[int, list[int]] = {w.pid: [], prom.pid: []}
        done = threading.Event()

        def watch_rss() -> None:
            while not done.is_set():
                for pid, seen in rss_seen.items():
                    seen.append(vm_rss(pid))
                time.sleep(0.003)

        watcher = threading.Thread(target=watch_rss)
        watcher.start()
        t0, c0 = time.monotonic(), cpu_ticks(w.pid)
        p = subprocess.run([*GM, "ps", "--sort", "cpu", "--json", "--match",
                            f"{re.escape(str(tmp_path))}|prometheus"],
                           capture_output=True, text=True, timeout=60, env=env())
        t1, c1 = time.monotonic(), cpu_ticks(w.pid)
        done.set()
        watcher.join()
        prof1 = profile_total(own)
        text = subprocess.run([*GM, "ps", "--sort", "cpu", "--match", re.escape(str(exe))],
                              capture_output=True, text=True, timeout=60, env=env())
        body = prom_metrics(own)
        prom_cpus = len(os.sched_getaffinity(prom.pid))
    finally:
        if churn is not None:
            churn.join()
        w.stop()
        prom.terminate()
        prom.wait(15)
    assert p.returncode == 0, p.stderr
    rows = json.loads(p.stdout)
    by_pid = {r["pid"]: r for r in rows}
    assert w.pid in by_pid and prom.pid in by_pid, (list(by_pid), w.pid, prom.pid)
    # --sort cpu: largest first, and the churning workload is busier than idle Prometheus.
    cpus = [r["cpu_percent"] for r in rows if r["cpu_percent"] is not None]
    assert cpus == sorted(cpus, reverse=True)
    assert rows.index(by_pid[w.pid]) < rows.index(by_pid[prom.pid])
    for pid, r in ((w.pid, by_pid[w.pid]), (prom.pid, by_pid[prom.pid])):
        for k in ("cpu_percent", "rss_bytes", "gomaxprocs", "goroutines",
                  "sched_latency_p99_ns", "go_version"):
            assert r[k] is not None, (pid, k, r)
        assert r["attachable"] is True and r["attach_note"] == "", r
        assert 0.5 <= r["cpu_interval_s"] < t1 - t0
        lo, hi = min(rss_seen[pid]), max(rss_seen[pid])
        assert 0.98 * lo <= r["rss_bytes"] <= 1.02 * hi, (r["rss_bytes"], lo, hi)
    # CPU%: the workload's own ticks around the whole ps bound what ps measured inside it.
    around = (c1 - c0) / CLK_TCK / (t1 - t0) * 100
    got = by_pid[w.pid]["cpu_percent"]
    print(f"ps: gcheap CPU {got:.1f}% (around ps: {around:.1f}%), prometheus "
          f"{by_pid[prom.pid]['cpu_percent']:.1f}%")
    # ps's interval lies inside the window around it, so its ticks are at most the window's
    # (+1 for the tick boundary); on a shared 2-CPU machine the churn's share moves within
    # the window, so that and its being busy are what is sure.
    ps_ticks = got / 100 * by_pid[w.pid]["cpu_interval_s"] * CLK_TCK
    assert 1 <= round(ps_ticks) <= (c1 - c0) + 1, (ps_ticks, c1 - c0)
    # Goroutines and GOMAXPROCS against the programs' own view.
    assert by_pid[w.pid]["goroutines"] == m["/sched/goroutines:goroutines"]
    assert by_pid[w.pid]["gomaxprocs"] == m["/sched/gomaxprocs:threads"]
    lo_g, hi_g = sorted((prof0, prof1))
    assert lo_g - 1 <= by_pid[prom.pid]["goroutines"] <= hi_g + 1, (
        by_pid[prom.pid]["goroutines"], prof0, prof1)
    assert by_pid[prom.pid]["gomaxprocs"] == prom_cpus
    ver = re.search(r'^go_info\{version="([^"]+)"\}', body, re.M)
    assert ver is not None and by_pid[prom.pid]["go_version"] == ver.group(1)
    assert by_pid[w.pid]["go_version"].startswith("go1.22")
    # The table: the header names every column, the row says yes to attach.
    head = text.stdout.splitlines()[0].split()
    assert head[:13] == ["PID", "NSPID", "CONTAINER", "EXE", "GO", "CPU%", "RSS", "PROCS",
                         "GOROUTINES", "SCHED", "P99", "UPTIME", "ATTACH"], head
    line = next(ln for ln in text.stdout.splitlines()[1:] if ln.split()[0] == str(w.pid))
    cells = line.split()
    assert cells[-1] == "yes" and "-" not in cells[4:], line  # CONTAINER is "-": root


def test_ps_bad_sort_is_one_line(tmp_path: Path) -> None:
    p = subprocess.run([*GM, "ps", "--sort", "colour"], capture_output=True, text=True,
                       timeout=60, env=env())
    assert p.returncode == 2
    assert p.stderr.startswith("gmpmon: --sort 'colour': one of pid,") and \
        len(p.stderr.splitlines()) == 1, p.stderr
    p = subprocess.run([*GM, "ps", "--interval", "-1"], capture_output=True, text=True,
                       timeout=60, env=env())
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 1, p.stderr


def profile_total(metrics_url: str) -> int:
    """Prometheus's goroutines from its goroutine profile, less the handler answering it
    (go_goroutines would count the goroutines gathering the page too)."""
    prof = prom_metrics(metrics_url.replace("/metrics", "/debug/pprof/goroutine?debug=1"))
    m = re.search(r"^goroutine profile: total (\d+)$", prof, re.M)
    assert m is not None, prof[:200]
    return int(m.group(1)) - 1


def _ok(url: str) -> bool:
    try:
        prom_metrics(url)
    except OSError:
        return False
    return True
