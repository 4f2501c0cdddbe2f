"""Security properties, checked on gmpmon's source and on the files it writes.

- no shell ever runs an untrusted string: no shell=True, os.system, os.popen;
- gmpmon reads the target's memory and never writes it: /proc/PID/mem is only opened
  read-only, and nothing can write another process (process_vm_writev, ptrace pokes);
- no network listener at all (so none off loopback);
- every file gmpmon creates is 0600 and created without following a planted symlink: the
  only write-opens are O_CREAT|O_EXCL (which refuses any existing name, links included)
  with mode 0o600, and the writers (recording, every export format, summary JSON) refuse
  a symlink at their path and leave its target untouched.
"""

from __future__ import annotations

import ast
import os
import stat
from pathlib import Path

import pytest

from gmpmon import cli
from gmpmon.events import Batch, Header, Kind
from gmpmon.record import RecordingWriter

PKG = Path(__file__).resolve().parents[2] / "gmpmon"


def sources() -> dict[Path, ast.Module]:
    seen: dict[Path, ast.Module] = {}
    for p in sorted(PKG.rglob("*.py")):
        real = p.resolve()
        if real not in seen:
            seen[real] = ast.parse(real.read_text(), str(real))
    assert len(seen) > 30, "gmpmon's sources not found"
    return seen


def calls(tree: ast.AST) -> list[ast.Call]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call)]


def dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{dotted(node.value)}.{node.attr}"
    return "?"


def names_in(node: ast.AST) -> set[str]:
    return {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)} | {
        n.id for n in ast.walk(node) if isinstance(n, ast.Name)
    }


def strings_in(node: ast.AST) -> str:
    return " ".join(
        n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    )


def where(path: Path, node: ast.AST) -> str:
    return f"{path.relative_to(PKG.parent)}:{getattr(node, 'lineno', 0)}"


def test_no_shell_with_any_string() -> None:
    bad = []
    for path, tree in sources().items():
        for c in calls(tree):
            name = dotted(c.func)
            if name in ("os.system", "os.popen", "subprocess.getoutput",
                        "subprocess.getstatusoutput", "pty.spawn"):
                bad.append(f"{where(path, c)} {name}")
            for kw in c.keywords:
                if kw.arg == "shell" and not (
                    isinstance(kw.value, ast.Constant) and kw.value.value is False
                ):
                    bad.append(f"{where(path, c)} shell=")
    assert bad == []


def test_target_memory_is_only_read() -> None:
    mem_opens = 0
    for path, tree in sources().items():
        text = path.read_text()
        for word in ("process_vm_writev", "PTRACE_POKE", "PTRACE_ATTACH", "PTRACE_SEIZE"):
            assert word not in text, f"{path}: {word}"
        for c in calls(tree):
            name = dotted(c.func)
            if name not in ("os.open", "open", "io.open") or not c.args:
                continue
            if "/mem" not in strings_in(c.args[0]):
                continue
            mem_opens += 1
            rest = c.args[1:] + [k.value for k in c.keywords]
            if name == "os.open":
                flags = names_in(c.args[1]) if len(c.args) > 1 else set()
                assert flags == {"os", "O_RDONLY"} or flags == {"O_RDONLY"}, where(path, c)
            else:
                assert strings_in(ast.Tuple(elts=rest)) in ("rb", "r"), where(path, c)
    assert mem_opens >= 1, "the sampler reads /proc/PID/mem: where did it go?"


# `gmpmon serve` is the one listener: its /metrics endpoint. It binds what --listen says,
# loopback by default (tested in tests/integration/test_fleet.py), and serves GET/HEAD only.
LISTENER = "gmpmon/fleet/server.py"
SERVE_DEFAULT = "127.0.0.1:9464"


def test_the_only_network_listener_is_serve_on_loopback_by_default() -> None:
    listeners = []
    for path, tree in sources().items():
        if path.as_posix().endswith(LISTENER):
            listeners.append(path)
            continue
        for n in ast.walk(tree):
            if isinstance(n, ast.Import | ast.ImportFrom):
                mods = [a.name for a in n.names] + [getattr(n, "module", None) or ""]
                for m in mods:
                    assert m.split(".")[0] not in ("socket", "socketserver", "http", "xmlrpc"), (
                        f"{where(path, n)} imports {m}: a listener must bind 127.0.0.1 by default"
                    )
        for c in calls(tree):
            assert dotted(c.func).split(".")[-1] not in (
                "start_server", "create_server", "start_unix_server"), where(path, c)
    assert len(listeners) == 1, listeners
    serve = next(p for p in sources() if p.as_posix().endswith("gmpmon/commands/serve.py"))
    assert f'DEFAULT_LISTEN = "{SERVE_DEFAULT}"' in serve.read_text()


def test_every_file_creation_is_exclusive_and_private() -> None:
    """Write-opens: only os.open with O_CREAT|O_EXCL and mode 0o600 (O_EXCL fails on any
    existing name, a planted symlink included); no builtin open() for writing. os.devnull
    (put under a dead stdout) creates nothing."""
    creations = 0
    for path, tree in sources().items():
        for c in calls(tree):
            name = dotted(c.func)
            if name in ("open", "io.open", "pathlib.Path.open"):
                mode = c.args[1] if len(c.args) > 1 else next(
                    (k.value for k in c.keywords if k.arg == "mode"), None)
                m = mode.value if isinstance(mode, ast.Constant) else "r"
                assert isinstance(m, str) and not set(m) & set("wax+"), (
                    f"{where(path, c)}: open(..., {m!r}) writes without open_private"
                )
            if dotted(c.func).endswith((".write_text", ".write_bytes")):
                pytest.fail(f"{where(path, c)}: Path.write_* creates files 0644 via symlinks")
            if name == "os.open" and len(c.args) >= 2 and dotted(c.args[0]) != "os.devnull":
                flags = names_in(c.args[1])
                if flags & {"O_WRONLY", "O_RDWR", "O_CREAT", "flags"}:
                    creations += 1
                    src = ast.unparse(c)
                    func_src = _enclosing_source(tree, c)
                    assert "O_EXCL" in func_src and "O_CREAT" in func_src, where(path, c)
                    mode = c.args[2] if len(c.args) >= 3 else None
                    assert isinstance(mode, ast.Constant) and mode.value == 0o600, (
                        f"{where(path, c)}: {src}")
    assert creations >= 1


def _enclosing_source(tree: ast.Module, node: ast.AST) -> str:
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef) and any(n is node for n in ast.walk(fn)):
            return ast.unparse(fn)
    return ast.unparse(tree)


# --- the files themselves ----------------------------------------------------------------


@pytest.fixture
def recording(tmp_path: Path) -> Path:
    h = Header(pid=1, exe="/x", go_version="go1.27.3", gomaxprocs=2, mode="full",
               start_ns=1_000, wall_start=0.0, wait_reasons=("", "chan receive"))
    p = tmp_path / "r.gmp"
    with RecordingWriter(str(p), h) as w:
        w.write(Batch([
            (2_000, Kind.EXECUTE, 0, 10, 5, 0, 0),
            (3_000, Kind.PARK, 0, 10, 5, 1, 0),
            (4_000, Kind.READY, 1, 11, 5, 0, 0),
        ]))
    return p


@pytest.fixture
def lax_umask() -> object:
    old = os.umask(0)  # what a careless shell profile does; gmpmon must not care
    yield
    os.umask(old)


OUTPUTS = [
    ["export", "{rec}", "--format", "folded", "-o", "{out}"],
    ["export", "{rec}", "--format", "json", "-o", "{out}"],
    ["export", "{rec}", "--format", "pprof", "-o", "{out}"],
    ["export", "{rec}", "--format", "perfetto", "-o", "{out}"],
    ["replay", "{rec}", "--summary-json", "{out}"],
]


@pytest.mark.parametrize("argv", OUTPUTS, ids=lambda a: "-".join(a[:1] + a[2:4]))
def test_outputs_are_0600_and_never_follow_a_planted_symlink(
    argv: list[str], recording: Path, tmp_path: Path, lax_umask: object,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "out"
    fill = {"rec": str(recording), "out": str(out)}
    assert cli.main([a.format(**fill) for a in argv]) == 0, capsys.readouterr().err
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    # An existing 0644 file is replaced by a new private one, not rewritten in place.
    out.unlink()
    out.write_text("old")
    out.chmod(0o644)
    assert cli.main([a.format(**fill) for a in argv]) == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    # A symlink planted at the path (to a file the attacker wants clobbered) is refused.
    victim = tmp_path / "victim"
    victim.write_text("precious")
    out.unlink()
    out.symlink_to(victim)
    capsys.readouterr()
    assert cli.main([a.format(**fill) for a in argv]) == 13
    assert victim.read_text() == "precious"
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "symbolic link" in err[0]


def test_recording_is_0600_and_refuses_a_symlink(tmp_path: Path, lax_umask: object) -> None:
    from gmpmon.errors import OutputPathError

    h = Header(pid=1, exe="/x", go_version="go1.27.3", gomaxprocs=1, mode="full",
               start_ns=0, wall_start=0.0, wait_reasons=())
    p = tmp_path / "r.gmp"
    RecordingWriter(str(p), h).close()
    assert stat.S_IMODE(p.stat().st_mode) == 0o600
    link = tmp_path / "l.gmp"
    link.symlink_to(tmp_path / "dangling")  # a dangling link: O_CREAT alone would follow it
    with pytest.raises(OutputPathError):
        RecordingWriter(str(link), h)
    assert not (tmp_path / "dangling").exists()
