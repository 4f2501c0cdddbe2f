"""`gmpmon serve` under hostile clients: 500 slow clients (each sends half a request, then a
byte now and then; a fifth of them reset mid-way), and clients that send a whole request
and vanish (reset) while it is being answered. Scrapes keep being answered in under a
second, the server never runs more than its cap of connection threads, no slow client keeps
its connection past the request deadline, and it prints no traceback (it printed one for
each client that went away, ran a thread per connection, and a client sending a byte a
second kept its thread for as long as it liked)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from gmpmon.fleet.server import MAX_CONNECTIONS, REQUEST_TIMEOUT_S
from tests.gotargets import build
from tests.integration.test_hardening_common import REPO, start_target

pytestmark = pytest.mark.bpf  # serve reads the target's memory: root

PORT = 18151
SLOW = 500
RESET = struct.pack("ii", 1, 0)  # SO_LINGER 0: close() sends RST


def scrape(timeout: float = 2.0) -> tuple[float, int, bytes]:
    t0 = time.monotonic()
    with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/metrics", timeout=timeout) as r:
        body = r.read()
        return time.monotonic() - t0, r.status, body


def status_field(pid: int, name: str) -> int:
    for ln in Path(f"/proc/{pid}/status").read_text().splitlines():
        if ln.startswith(name + ":"):
            return int(ln.split()[1])
    raise AssertionError(name)


def vanish(s: socket.socket) -> None:
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, RESET)
    s.close()


def closed_by_server(s: socket.socket) -> bool:
    try:
        return s.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:  # reset
        return True


def vanish_mid_response(n: int) -> None:
    """``n`` clients send a whole request and reset while serve answers it; every other
    one first waits for the status line (the body is still being written)."""
    for i in range(n):
        s = socket.create_connection(("127.0.0.1", PORT), timeout=5)
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        if i % 2:
            with contextlib.suppress(OSError):  # refused or closed: all the same here
                s.recv(12)
        vanish(s)


def test_serve_under_500_slow_clients(tmp_path: Path) -> None:
    target = start_target(build("parked", "1.27"), "-n", "100", env={"GOMAXPROCS": "2"})
    err = (tmp_path / "serve.err").open("w+")
    serve = subprocess.Popen(
        [sys.executable, "-m", "gmpmon", "serve", str(target.pid), "--listen",
         f"127.0.0.1:{PORT}"], stdout=subprocess.DEVNULL, stderr=err, cwd=REPO,
        stdin=subprocess.DEVNULL, env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    slow: list[socket.socket] = []
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                scrape()
                break
            except OSError:
                assert time.monotonic() < deadline and serve.poll() is None, err.name
                time.sleep(0.2)
        base = status_field(serve.pid, "Threads")
        for _ in range(SLOW):
            s = socket.create_connection(("127.0.0.1", PORT), timeout=5)
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            s.setblocking(False)
            slow.append(s)
        connected = time.monotonic()
        latencies = []
        threads = []
        end = connected + REQUEST_TIMEOUT_S + 2  # past every slow client's deadline
        while time.monotonic() < end:
            for s in slow:  # a header byte now and then: never a whole request
                with contextlib.suppress(OSError):  # closed to make room, or timed out
                    s.send(b"X")
            if len(slow) == SLOW and time.monotonic() > connected + 2:
                for s in slow[::5]:  # a fifth go away abruptly mid-request (RST)
                    vanish(s)
                slow = [s for i, s in enumerate(slow) if i % 5]
            vanish_mid_response(10)
            took, status, body = scrape()
            assert status == 200 and b"gmpmon_" in body
            latencies.append(took)
            threads.append(status_field(serve.pid, "Threads"))
            time.sleep(0.2)
        held = [s for s in slow if not closed_by_server(s)]
        for s in slow:
            vanish(s)
        slow.clear()
        time.sleep(1.0)
        took, status, _ = scrape()
        latencies.append(took)
        after = status_field(serve.pid, "Threads")
        rss_mb = status_field(serve.pid, "VmHWM") / 1024
        print(f"\nserve under {SLOW} slow clients and {10 * len(threads)} that vanished "
              f"mid-response: {len(latencies)} scrapes, slowest {max(latencies):.3f} s, "
              f"median {sorted(latencies)[len(latencies) // 2]:.3f} s; most threads "
              f"{max(threads)} ({base} before, {after} after); slow clients still held "
              f"{REQUEST_TIMEOUT_S + 2:g} s after connecting: {len(held)}; peak RSS "
              f"{rss_mb:.0f} MB")
        assert max(latencies) < 1.0, latencies
        # The cap, and the threads of connections just closed to make room, winding down.
        assert max(threads) <= base + MAX_CONNECTIONS + 32, (base, threads)
        assert not held, f"{len(held)} slow clients kept past the request deadline"
        assert after <= base + 2, (base, after)
        assert serve.poll() is None
    finally:
        for s in slow:
            s.close()
        serve.send_signal(signal.SIGINT)
        try:
            serve.wait(15)
        except subprocess.TimeoutExpired:
            serve.kill()
            serve.wait()
        target.stop()
    assert serve.returncode == 0, Path(err.name).read_text()[-3000:]
    err.seek(0)
    text = err.read()
    assert "Traceback" not in text, text[-3000:]
    assert "Exception" not in text and "Error" not in text, text[-3000:]
    assert "gmpmon: serve:" not in text, text[-3000:]  # nothing said of clients that left


def test_serve_says_when_a_hostile_pointer_stops_a_census(tmp_path: Path) -> None:
    """allgs[300] rewritten to a kernel-half pointer: the census thread died with a
    traceback. Now the census skips that G, serve says it once, on that process's line, and
    keeps serving."""
    from tests.integration.test_hostile_target import KERNEL_HALF, peek, poke, runtime_addr

    exe = build("parked", "1.27")
    target = start_target(exe, "-n", "1000", env={"GOMAXPROCS": "2"})
    err = (tmp_path / "serve.err").open("w+")
    serve = subprocess.Popen(
        [sys.executable, "-m", "gmpmon", "serve", str(target.pid), "--listen",
         f"127.0.0.1:{PORT + 1}", "--census-interval", "0.5"], stdout=subprocess.DEVNULL,
        stderr=err, cwd=REPO, stdin=subprocess.DEVNULL,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    url = f"http://127.0.0.1:{PORT + 1}/metrics"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    if b"gmpmon_goroutines" in r.read():
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline and serve.poll() is None, err.name
            time.sleep(0.2)
        ptr, _n = struct.unpack("<QQ", peek(target.pid, runtime_addr(exe, "runtime.allgs"), 16))
        poke(target.pid, ptr + 8 * 300, KERNEL_HALF)
        deadline = time.monotonic() + 10
        while "goroutine census skips" not in Path(err.name).read_text():
            assert time.monotonic() < deadline, Path(err.name).read_text()
            time.sleep(0.2)
        with urllib.request.urlopen(url, timeout=2) as r:
            assert r.status == 200 and b"gmpmon_" in r.read()
    finally:
        serve.send_signal(signal.SIGINT)
        try:
            serve.wait(15)
        except subprocess.TimeoutExpired:
            serve.kill()
            serve.wait()
        target.stop()
    text = Path(err.name).read_text()
    print(f"\nserve, allgs[300]={KERNEL_HALF:#x}:\n  {text.strip()}")
    assert "Traceback" not in text, text[-3000:]
    lines = [ln for ln in text.splitlines() if "census skips" in ln]
    assert len(lines) == 1 and lines[0].startswith("gmpmon: process "), text
    assert f"(first: allgs[300] = {KERNEL_HALF:#x}: refused a read" in lines[0], lines[0]
