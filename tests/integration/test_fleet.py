"""`gmpmon ps` and `gmpmon serve` on real Go processes, scraped by a real Prometheus.

No BPF (both only read memory and /proc), but root: they read other processes' memory.
The workload is scripts/targets/rtcounters (300 goroutines parked on a channel, 200 in
time.Sleep; `count` prints runtime.NumGoroutine(), `phase S` the runtime/metrics deltas of
S seconds of scheduling), so every number is checked against the runtime's own view.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests import gotargets
from tests.integration.test_capture import GM, env
from tests.integration.test_findings import cpu_cgroup  # noqa: F401 (a fixture)

pytestmark = pytest.mark.skipif(os.geteuid() != 0 and not os.environ.get("GMPMON_REQUIRE_BPF"),
                                reason="reads other processes' memory: needs root")
PROMETHEUS = shutil.which("prometheus")


class Workload:
    def __init__(self, exe: Path, *args: str, cwd: Path | None = None,
                 prefix: tuple[str, ...] = ()) -> None:
        self.p = subprocess.Popen([*prefix, str(exe), *args], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, cwd=cwd)
        assert self.p.stdout is not None
        line = self.p.stdout.readline()
        assert line.strip() == "ready", line

    @property
    def pid(self) -> int:
        return self.p.pid

    def ask(self, cmd: str, prefix: str) -> str:
        assert self.p.stdin is not None and self.p.stdout is not None
        self.p.stdin.write(cmd + "\n")
        self.p.stdin.flush()
        while True:
            line = self.p.stdout.readline()
            assert line, f"workload exited before answering {cmd!r}"
            if line.startswith(prefix + " "):
                return line[len(prefix) + 1:].strip()

    def stop(self) -> None:
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait()


def _copy(name: str, tmp: Path, go: str = "1.27", mode: str = "default",
          as_name: str | None = None) -> Path:
    dst = tmp / (as_name or f"fleet-{name}")
    shutil.copy(gotargets.build(name, go=go, mode=mode), dst)
    return dst


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Serve:
    def __init__(self, *args: str) -> None:
        self.p = subprocess.Popen([*GM, "serve", "--listen", "127.0.0.1:0", *args],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=env())
        assert self.p.stdout is not None
        line = self.first_line = self.p.stdout.readline()
        m = re.search(r"http://127\.0\.0\.1:(\d+)/metrics", line)
        if not m:
            self.p.kill()
            _, err = self.p.communicate()
            raise AssertionError(f"serve did not start: {line!r} {err}")
        self.port = int(m.group(1))
        self.url = f"http://127.0.0.1:{self.port}/metrics"

    def metrics(self) -> dict[str, Any]:
        body = urllib.request.urlopen(self.url, timeout=10).read().decode()
        return {f.name: f for f in text_string_to_metric_families(body)}

    def stop(self) -> str:
        self.p.send_signal(signal.SIGINT)
        _, err = self.p.communicate(timeout=15)
        assert self.p.returncode == 0, err
        return err


def _samples(fams: dict[str, Any], name: str, pid: int, suffix: str = "") -> list[Any]:
    f = fams.get(name)
    if f is None:
        return []
    return [s for s in f.samples if s.labels.get("pid") == str(pid)
            and (not suffix or s.name.endswith(suffix))]


def _wait(cond: Any, timeout: float, what: str) -> Any:
    end = time.monotonic() + timeout
    last = None
    while time.monotonic() < end:
        last = cond()
        if last:
            return last
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


@pytest.fixture
def rt(tmp_path: Path) -> Iterator[Workload]:
    w = Workload(_copy("rtcounters", tmp_path))
    yield w
    w.stop()


# ---------------------------------------------------------------------------- ps


def test_ps_lists_go_processes_in_other_namespaces_and_not_others(tmp_path: Path) -> None:
    exe = _copy("rtcounters", tmp_path)
    here = Workload(exe)
    # Its own pid and mount namespace, as in a container: pid 1 inside.
    inside = Workload(exe, prefix=("unshare", "--pid", "--mount", "--fork", "--kill-child"))
    not_go = subprocess.Popen(["sleep", "60"])
    try:
        count = int(here.ask("count", "count"))
        p = subprocess.run([*GM, "ps", "--json", "--match", re.escape(str(tmp_path))],
                           capture_output=True, text=True, timeout=60, env=env())
        assert p.returncode == 0, p.stderr
        rows = {r["pid"]: r for r in json.loads(p.stdout)}
        child = _wait(lambda: _child_of(inside.pid), 5, "the unshared workload")
        assert here.pid in rows and child in rows, (rows.keys(), here.pid, child)
        assert not_go.pid not in rows
        assert rows[child]["ns_pid"] == 1 and rows[here.pid]["ns_pid"] == here.pid
        for r in rows.values():
            assert r["go_version"].startswith("go1.27"), r
            assert r["gomaxprocs"] == len(os.sched_getaffinity(0)) or r["gomaxprocs"] >= 1
        # gcount from memory == NumGoroutine at a quiet moment (the workload is idle).
        assert abs(rows[here.pid]["goroutines"] - count) <= max(1, count * 0.02), (
            rows[here.pid]["goroutines"], count)
        print(f"ps: goroutines {rows[here.pid]['goroutines']} vs NumGoroutine {count}")
        # The whole-host table, with the non-Go sleep nowhere in it.
        t = subprocess.run([*GM, "ps"], capture_output=True, text=True, timeout=60, env=env())
        assert t.returncode == 0, t.stderr
        assert t.stdout.splitlines()[0].split()[:2] == ["PID", "NSPID"]
        assert re.search(rf"^\s*{here.pid}\s+{here.pid}\s", t.stdout, re.M), t.stdout
        assert not re.search(rf"^\s*{not_go.pid}\s", t.stdout, re.M)
    finally:
        not_go.kill()
        not_go.wait()
        inside.stop()
        here.stop()


def _child_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            kids = f.read().split()
    except OSError:
        return None
    return int(kids[0]) if kids else None


def test_ps_skips_a_process_that_exits_between_listing_and_reading(tmp_path: Path) -> None:
    from gmpmon.fleet.discover import Discovery
    from gmpmon.fleet.infocache import InfoCache
    from gmpmon.fleet.lifetime import read_lifetime

    w = Workload(_copy("rtcounters", tmp_path))
    gp = Discovery().probe(w.pid)
    assert gp is not None and gp.go_version.startswith("go1.")
    cache = InfoCache()
    w.stop()  # listed, then gone before its memory is read
    assert read_lifetime(gp, cache) is None
    assert Discovery().probe(w.pid) is None


def test_ps_on_a_stripped_binary_reads_the_same_numbers(tmp_path: Path) -> None:
    full = Workload(_copy("rtcounters", tmp_path, as_name="rt-default"))
    bare = Workload(_copy("rtcounters", tmp_path, mode="stripped", as_name="rt-stripped"))
    try:
        p = subprocess.run([*GM, "ps", "--json", "--match", re.escape(str(tmp_path))],
                           capture_output=True, text=True, timeout=60, env=env())
        assert p.returncode == 0, p.stderr
        rows = {r["pid"]: r for r in json.loads(p.stdout)}
        a, b = rows[full.pid], rows[bare.pid]
        assert a["note"] == "" and b["note"] == "", (a, b)
        assert a["gomaxprocs"] == b["gomaxprocs"]
        assert abs(a["goroutines"] - b["goroutines"]) <= 2, (a, b)
        assert b["sched_latency_samples"] and b["sched_latency_samples"] > 0
    finally:
        full.stop()
        bare.stop()


def _ps_rows(tmp: Path, cache: Path, *extra: str) -> dict[int, dict[str, Any]]:
    p = subprocess.run([*GM, "ps", "--json", "--match", re.escape(str(tmp)), *extra],
                       capture_output=True, text=True, timeout=60,
                       env=env(GMPMON_CACHE_DIR=str(cache)))
    assert p.returncode == 0, p.stderr
    return {r["pid"]: r for r in json.loads(p.stdout)}


def test_ps_keeps_what_it_read_of_each_binary_and_checks_it_all_the_same(tmp_path: Path) -> None:
    """One cache entry per distinct executable (two processes of one file share it); a later
    ps uses the entries as they are; a corrupt entry is ignored and rewritten; an entry that
    points sched somewhere wrong (stale, or written by someone else) fails the live check,
    so the binary is read again: the numbers stay right and the entry is mended.
    --no-cache reads and writes nothing."""
    cache = tmp_path / "cache"
    full = Workload(_copy("rtcounters", tmp_path, as_name="rt-default"))
    bare = Workload(_copy("rtcounters", tmp_path, mode="stripped", as_name="rt-stripped"))
    twin = Workload(tmp_path / "rt-stripped")
    procs = (full, bare, twin)
    try:
        counts = {w.pid: int(w.ask("count", "count")) for w in procs}

        def check(rows: dict[int, dict[str, Any]]) -> None:
            for pid, count in counts.items():
                r = rows[pid]
                assert r["note"] == "", r
                assert abs(r["goroutines"] - count) <= max(1, count * 0.02), (r, count)
                assert r["gomaxprocs"] == rows[full.pid]["gomaxprocs"] >= 1

        check(_ps_rows(tmp_path, cache))
        entries = sorted(cache.iterdir())
        assert len(entries) == 2, entries
        good = {e: e.read_bytes() for e in entries}
        ino = {e: e.stat().st_ino for e in entries}
        for e in entries:
            os.utime(e, (1e9, 1e9))
        check(_ps_rows(tmp_path, cache))
        for e in entries:  # read (its use time moved on), not written again (same inode)
            assert e.stat().st_mtime > 1e9 and e.stat().st_ino == ino[e]
            assert e.read_bytes() == good[e]

        for e in entries:
            e.write_bytes(b'{"schema": 1, "info": ' + good[e][:40])
        check(_ps_rows(tmp_path, cache))
        assert {e: e.read_bytes() for e in entries} == good

        stripped = next(e for e in entries if b'"stripped": true' in good[e])
        doc = json.loads(good[stripped])
        doc["info"]["globals"]["runtime.sched"] = 0x1000
        stripped.write_bytes(json.dumps(doc, sort_keys=True).encode())
        check(_ps_rows(tmp_path, cache))
        assert stripped.read_bytes() == good[stripped]

        off = tmp_path / "off"
        check(_ps_rows(tmp_path, off, "--no-cache"))
        assert not off.exists()
    finally:
        for w in procs:
            w.stop()


@pytest.mark.parametrize("mode", ["stripped", "pie"])
def test_ps_reads_no_binary_it_has_in_its_cache(tmp_path: Path, mode: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """With an entry for the file, the binary is not read at all (a PIE's load bias is found
    again from the process's maps), and the numbers are those of a fresh read."""
    from gmpmon.fleet import infocache
    from gmpmon.fleet.discover import Discovery
    from gmpmon.fleet.infocache import InfoCache
    from gmpmon.fleet.layoutcache import LayoutCache
    from gmpmon.fleet.lifetime import read_lifetime

    w = Workload(_copy("rtcounters", tmp_path, mode=mode))
    try:
        gp = Discovery().probe(w.pid)
        assert gp is not None
        d = str(tmp_path / "cache")
        fresh = read_lifetime(gp, InfoCache(readers_only=True, functab=False,
                                            disk=LayoutCache(d)))

        def no_read(*_a: Any, **_k: Any) -> None:
            raise AssertionError("the binary was read")

        monkeypatch.setattr(infocache, "load_pid_file", no_read)
        cache = InfoCache(readers_only=True, functab=False, disk=LayoutCache(d))
        cached = read_lifetime(gp, cache)
        assert cache.from_disk(gp)
        assert fresh is not None and cached is not None
        assert cached.note == fresh.note == "" and cached.gomaxprocs == fresh.gomaxprocs
        assert cached.goroutines is not None and fresh.goroutines is not None
        assert abs(cached.goroutines - fresh.goroutines) <= 2
        assert cache.get(gp).pie == (mode == "pie")
    finally:
        w.stop()


# ---------------------------------------------------------------------------- serve


def test_serve_numbers_match_the_runtime(rt: Workload) -> None:
    s = Serve(str(rt.pid), "--interval", "0.3", "--census-interval", "1")
    try:
        _wait(lambda: _samples(s.metrics(), "gmpmon_goroutines", rt.pid), 15, "first reading")
        count = int(rt.ask("count", "count"))

        def census() -> dict[str, float] | None:
            f = s.metrics()
            st = {x.labels["state"]: x.value for x in _samples(f, "gmpmon_goroutines", rt.pid)}
            return st if "waiting" in st else None

        states = _wait(census, 15, "a census")
        assert abs(states["all"] - count) <= max(1, 0.02 * count), (states, count)
        assert states["waiting"] >= 500, states  # 300 on the channel + 200 asleep
        before = _count(s.metrics(), rt.pid)
        phase = json.loads(rt.ask("phase 1.5", "phase"))
        want = sum(phase["/sched/latencies:seconds"]["counts"])
        time.sleep(1.0)  # two refreshes after the phase
        got = _count(s.metrics(), rt.pid) - before
        print(f"serve: latency samples over the phase {got} vs runtime/metrics {want}")
        assert want > 100
        assert abs(got - want) <= 0.05 * want + 20, (got, want)
        fams = s.metrics()
        (mp,) = _samples(fams, "gmpmon_gomaxprocs", rt.pid)
        assert mp.value >= 1
        assert _samples(fams, "gmpmon_kernel_runq_delay_seconds", rt.pid, "_total")
        assert _samples(fams, "gmpmon_syscalls", rt.pid, "_total")
    finally:
        s.stop()


def _count(fams: dict[str, Any], pid: int) -> float:
    c = _samples(fams, "gmpmon_sched_latency_seconds", pid, "_count")
    return c[0].value if c else 0.0


def test_serve_follows_processes_as_they_start_and_exit(tmp_path: Path) -> None:
    first = Workload(_copy("rtcounters", tmp_path))
    s = Serve("--match", re.escape(str(tmp_path)), "--interval", "0.5")
    second: Workload | None = None
    try:
        _wait(lambda: _samples(s.metrics(), "gmpmon_up", first.pid), 10, "the first process")
        t0 = time.monotonic()
        second = Workload(_copy("rtcounters", tmp_path, as_name="fleet-late"))
        late = second.pid
        _wait(lambda: _samples(s.metrics(), "gmpmon_up", late), 5, "the process started later")
        print(f"serve: a new process appeared after {time.monotonic() - t0:.1f}s")
        t0 = time.monotonic()
        first.stop()
        gone = first.pid
        _wait(lambda: not _samples(s.metrics(), "gmpmon_gomaxprocs", gone), 5,
              "the exited process's series to go")
        print(f"serve: an exited process's series went after {time.monotonic() - t0:.1f}s")
        assert _samples(s.metrics(), "gmpmon_up", late)[0].value == 1.0
    finally:
        s.stop()
        first.stop()
        if second is not None:
            second.stop()


def test_serve_bad_input(rt: Workload, tmp_path: Path) -> None:
    # A port in use: one line, exit 2.
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        p = subprocess.run([*GM, "serve", str(rt.pid), "--listen", f"127.0.0.1:{port}"],
                           capture_output=True, text=True, timeout=60, env=env())
    assert p.returncode == 2, p
    assert len(p.stderr.strip().splitlines()) == 1 and "cannot listen" in p.stderr
    # --per-p samples P states itself: not with the probes' own sampler.
    p = subprocess.run([*GM, "serve", str(rt.pid), "--mode", "default", "--per-p"],
                       capture_output=True, text=True, timeout=60, env=env())
    assert p.returncode == 2 and "--per-p" in p.stderr, p
    # An address that is not this host's.
    p = subprocess.run([*GM, "serve", str(rt.pid), "--listen", "192.0.2.1:9464"],
                       capture_output=True, text=True, timeout=60, env=env())
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p
    # A non-Go pid next to a Go one: one line for it, the Go one is served.
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        s = Serve(str(sleeper.pid), str(rt.pid))
        _wait(lambda: _samples(s.metrics(), "gmpmon_up", rt.pid), 10, "the Go process")
        assert not _samples(s.metrics(), "gmpmon_up", sleeper.pid)
        err = s.stop()
        assert f"process {sleeper.pid}: not a Go program" in err and "Traceback" not in err
        # Only non-Go pids: nothing to serve, exit 3.
        p = subprocess.run([*GM, "serve", str(sleeper.pid), "--listen", "127.0.0.1:0"],
                           capture_output=True, text=True, timeout=60, env=env())
        assert p.returncode == 3, p
        assert "Traceback" not in p.stderr
    finally:
        sleeper.kill()
        sleeper.wait()
    # Read-only: no other method, no other path.
    s = Serve(str(rt.pid))
    try:
        req = urllib.request.Request(s.url, data=b"x", method="POST")
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=5)
        assert e.value.code == 405
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(s.url.replace("/metrics", "/debug"), timeout=5)
        assert e.value.code == 404
    finally:
        s.stop()


class Prometheus:
    """Debian's prometheus server scraping ``serve`` every second, queried by its HTTP API."""

    def __init__(self, tmp_path: Path, serve_port: int) -> None:
        assert PROMETHEUS is not None, "scripts/setup installs Debian's prometheus"
        port = _free_port()
        cfg = tmp_path / "prometheus.yml"
        cfg.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: gmpmon\n    static_configs:\n"
            f"      - targets: ['127.0.0.1:{serve_port}']\n"
        )
        self.p = subprocess.Popen(
            [PROMETHEUS, f"--config.file={cfg}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        self.api = f"http://127.0.0.1:{port}/api/v1"

    def query(self, q: str) -> list[Any]:
        url = f"{self.api}/query?" + urllib.parse.urlencode({"query": q})
        try:
            body = json.loads(urllib.request.urlopen(url, timeout=5).read())
        except OSError:
            return []
        res: list[Any] = body["data"]["result"]
        return res

    def stop(self) -> None:
        self.p.terminate()
        try:
            self.p.wait(10)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


needs_prometheus = pytest.mark.skipif(
    PROMETHEUS is None and not os.environ.get("GMPMON_REQUIRE_BPF"),
    reason="prometheus not installed (scripts/setup installs it)")


@needs_prometheus
def test_a_real_prometheus_scrapes_serve(rt: Workload, tmp_path: Path) -> None:
    s = Serve(str(rt.pid), "--interval", "0.5")
    prom = Prometheus(tmp_path, s.port)
    query = prom.query
    try:
        rt.ask("phase 1", "phase")  # some scheduling for the histogram

        # At least two scrapes of our target.
        _wait(lambda: query(f'count_over_time(gmpmon_up{{pid="{rt.pid}"}}[1m]) >= 2'), 60,
              "two scrapes by Prometheus")
        buckets = query(f'gmpmon_sched_latency_seconds_bucket{{pid="{rt.pid}"}}')
        assert buckets, "no gmpmon_sched_latency_seconds_bucket in Prometheus"
        les = {b["metric"]["le"] for b in buckets}
        assert "+Inf" in les and len(les) >= 5
        inf = next(b for b in buckets if b["metric"]["le"] == "+Inf")
        assert float(inf["value"][1]) > 0
        assert inf["metric"]["exe"] == "fleet-rtcounters"
        assert inf["metric"]["go_version"].startswith("go1.27")
        print(f"prometheus: {len(buckets)} bucket series, +Inf = {inf['value'][1]}")
    finally:
        prom.stop()
        s.stop()


@needs_prometheus
def test_prometheus_sees_the_findings_of_a_leak_and_a_throttled_process(
        rt: Workload, tmp_path: Path, cpu_cgroup: Path) -> None:  # noqa: F811
    """Trap-free findings (runtime counters, census, cgroup files): a goroutine leak, and
    GOMAXPROCS=2 in a 0.2-CPU cgroup, each raised on its own process only; the healthy
    rtcounters beside them raises no warning."""
    leak = Workload(_copy("leak", tmp_path), "-t", "120s", "-rate", "200")
    procs = str(cpu_cgroup / "cgroup.procs")

    def enter_cgroup() -> None:  # in the child, before exec: only this workload is limited
        with open(procs, "w") as f:
            f.write(str(os.getpid()))

    sat = subprocess.Popen([str(_copy("saturate", tmp_path)), "-t", "120s", "-w", "2"],
                           stdout=subprocess.PIPE, text=True, preexec_fn=enter_cgroup,
                           env=dict(os.environ, GOMAXPROCS="2"))
    s = prom = None
    try:
        assert sat.stdout is not None and sat.stdout.readline().strip() == "ready"
        s = Serve(str(leak.pid), str(sat.pid), str(rt.pid), "--interval", "0.5",
                  "--findings-window", "30")
        prom = Prometheus(tmp_path, s.port)

        def raised(pid: int) -> dict[str, str]:
            return {r["metric"]["id"]: r["metric"]["severity"]
                    for r in prom.query(f'gmpmon_findings{{pid="{pid}"}} == 1')}

        got = _wait(lambda: raised(leak.pid).get("goroutine-leak") and raised(leak.pid), 60,
                    "goroutine-leak in Prometheus")
        print(f"prometheus: findings of the leak {got}")
        assert got["goroutine-leak"] in ("warning", "critical")
        got = _wait(lambda: raised(sat.pid).get("cpu-throttled") and raised(sat.pid), 60,
                    "cpu-throttled in Prometheus")
        print(f"prometheus: findings of the throttled process {got}")
        assert got["cpu-throttled"] in ("warning", "critical")
        assert "goroutine-leak" not in got and "cpu-throttled" not in raised(leak.pid)
        # Labels: bounded ones only, the process's and the finding's.
        (row,) = prom.query(f'gmpmon_findings{{pid="{sat.pid}",id="cpu-throttled"}}')
        assert set(row["metric"]) == {"__name__", "instance", "job", "pid", "exe",
                                      "go_version", "container", "id", "severity"}
        assert row["metric"]["container"].startswith("/gmpmon-test-")
        healthy = {i: v for i, v in raised(rt.pid).items() if v != "info"}
        assert not healthy, healthy
    finally:
        if prom is not None:
            prom.stop()
        if s is not None:
            s.stop()
        sat.kill()
        sat.wait()
        leak.stop()


# ---------------------------------------------------------------------------- serve --mode


def test_serve_without_probes_exports_no_handoffs(rt: Workload) -> None:
    """Hand-offs need the handoffp probe: trap-free, the series is absent, never a 0."""
    s = Serve(str(rt.pid), "--interval", "0.3")
    try:
        # 30 s: once in a CI rehearsal (2026-12-07, right after the test that runs a real
        # Prometheus) no reading came in 15 s, which 10 runs here, 5 of them beside two busy
        # loops, never repeated (~2.5 s each); if it comes again, what serve said tells why.
        _wait(lambda: _samples(s.metrics(), "gmpmon_syscalls", rt.pid, "_total"), 30,
              "a reading")
        assert not _samples(s.metrics(), "gmpmon_handoffs", rt.pid)
    except AssertionError as e:
        gm = s.metrics().get("gmpmon_up")
        raise AssertionError(f"{e}; gmpmon_up {gm.samples if gm else None}; serve's stderr: "
                             f"{s.stop()[-2000:]!r}") from None
    else:
        s.stop()
    assert "(no probes)" in s.first_line, s.first_line


@pytest.mark.bpf
def test_serve_mode_default_counts_handoffs_and_detaches(tmp_path: Path) -> None:
    """serve --mode default: attach's capture with its budget, per target. blocksys's four
    goroutines block in 15-ms nanosleeps (sysmon retakes their Ps): gmpmon_handoffs_total
    rises at the rate `gmpmon run --mode full` counts on the same program, and never above
    the workload's own count of the syscalls it made. The probes go when a target exits
    (serve still running) and when serve exits."""
    from tests.integration.test_hardening_common import uprobes_on

    exe = _copy("blocksys", tmp_path)
    seconds = 8.0
    bs = subprocess.Popen([str(exe), "-t", f"{seconds}s", "-wait-stdin"], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True, env=dict(os.environ, GOMAXPROCS="2"))
    rt = Workload(_copy("rtcounters", tmp_path, as_name="fleet-rt-probed"))
    s = None
    try:
        assert bs.stdout is not None and bs.stdout.readline().strip() == "ready"
        s = Serve(str(bs.pid), str(rt.pid), "--mode", "default", "--budget", "1",
                  "--interval", "0.5")
        assert "default mode probes, budget 1%" in s.first_line, s.first_line
        assert uprobes_on(bs.pid, str(exe)), "serve --mode default attached no uprobe"
        assert uprobes_on(rt.pid), "no uprobe on the second target"
        assert bs.stdin is not None
        bs.stdin.write("go\n")
        bs.stdin.flush()

        def handoffs() -> float | None:
            got = _samples(s.metrics(), "gmpmon_handoffs", bs.pid, "_total")
            return got[0].value if got else None

        _wait(lambda: handoffs() is not None, 10, "gmpmon_handoffs_total")
        time.sleep(1.0)
        t0, h0 = time.monotonic(), handoffs()
        time.sleep(4.0)
        t1, h1 = time.monotonic(), handoffs()
        assert h0 is not None and h1 is not None
        rate = (h1 - h0) / (t1 - t0)
        out, _ = bs.communicate(timeout=30)
        calls = int(out.split()[-1])  # "done N": the slow syscalls it made in `seconds`
        # Its own count bounds the hand-offs of its syscalls (one per blocked call at most;
        # the 0.5-s refresh makes the window up to one refresh longer than measured).
        assert rate <= 1.15 * calls / seconds + 5, (rate, calls)
        full = _full_mode_handoff_rate(tmp_path)
        print(f"serve --mode default: {rate:.0f} hand-offs/s; gmpmon run --mode full "
              f"{full:.0f}/s; the workload's own syscalls {calls / seconds:.0f}/s")
        assert rate >= 50 and full / 2.5 <= rate <= 2.5 * full, (rate, full)
        # The target exited: its probes go and its series with it, serve goes on.
        _wait(lambda: not uprobes_on(bs.pid, str(exe)), 10, "the exited target's uprobes to go")
        _wait(lambda: not _samples(s.metrics(), "gmpmon_up", bs.pid), 10,
              "the exited target's series to go")
        assert _samples(s.metrics(), "gmpmon_up", rt.pid)[0].value == 1.0
        err = s.stop()
        s = None
        assert "Traceback" not in err, err
        assert not uprobes_on(rt.pid), "uprobes left after serve exited"
    finally:
        if s is not None:
            s.p.kill()
            s.p.wait()
        if bs.poll() is None:
            bs.kill()
            bs.wait()
        rt.stop()


def _full_mode_handoff_rate(tmp_path: Path) -> float:
    exe = _copy("blocksys", tmp_path, as_name="fleet-blocksys-full")
    out = tmp_path / "full.json"
    p = subprocess.run([*GM, "run", "--mode", "full", "--no-tui", "--summary-json", str(out),
                        "--", str(exe), "-t", "3s"], capture_output=True, text=True,
                       timeout=120, env=env(GOMAXPROCS="2"))
    assert p.returncode == 0, p.stderr[-2000:]
    doc = json.loads(out.read_text())
    return float(doc["syscalls"]["handoffs"]) / 3.0


def test_serve_per_p_raises_cpu_saturation_from_p_samples(rt: Workload, tmp_path: Path) -> None:
    """--per-p feeds the 10-Hz P samples to the findings: six CPU-bound workers on
    GOMAXPROCS=2 saturate every P (cpu-saturation); the idle rtcounters beside it raises no
    warning."""
    sat = subprocess.Popen([str(_copy("saturate", tmp_path)), "-t", "120s", "-w", "6"],
                           stdout=subprocess.PIPE, text=True, env=dict(os.environ, GOMAXPROCS="2"))
    s = None
    try:
        assert sat.stdout is not None and sat.stdout.readline().strip() == "ready"
        s = Serve(str(sat.pid), str(rt.pid), "--per-p", "--interval", "0.5")

        def raised(pid: int) -> dict[str, str]:
            f = s.metrics().get("gmpmon_findings")
            return {x.labels["id"]: x.labels["severity"] for x in f.samples
                    if x.labels["pid"] == str(pid)} if f else {}

        got = _wait(lambda: raised(sat.pid).get("cpu-saturation") and raised(sat.pid), 30,
                    "cpu-saturation")
        print(f"serve --per-p: findings of saturate {got}")
        assert got["cpu-saturation"] in ("warning", "critical")
        healthy = {i: v for i, v in raised(rt.pid).items() if v != "info"}
        assert not healthy, healthy
    finally:
        if s is not None:
            s.stop()
        sat.kill()
        sat.wait()
