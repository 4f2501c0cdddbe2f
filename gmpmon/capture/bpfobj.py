"""BPF objects compiled once and kept on disk: an attach loads bytecode, it does not compile.

BCC compiles a program with clang in-process, and that is most of what attaching costs:
1.3 CPU-s for gmpmon.bpf.c and 2.4 CPU-s for the kernel sources here, which a CPU-saturated
target turns into 6+ s of wall time before the first line. The bytecode depends only on what
goes into the compile, so it is kept, keyed by all of it: the source text, every header in
probes/, the -D flags, the kernel release and build, the kernel headers' directory, BCC's
version and this file's SCHEMA. The target's TGID is not among them: the programs read it
from their `tgid_cfg` map (probes/gmpmon.bpf.c, probes/kernel_common.bpf.c), so one object
serves every process of a binary, and a restarted service attaches from the cache.

What an entry holds (JSON, nothing executable but the bytecode, which the kernel's verifier
checks on every load exactly as BCC's would be): the license, each map's type, sizes, flags
and BCC's ctypes description of its key and value, and each function's instructions with
every map reference (`ld_imm64` with BPF_PSEUDO_MAP_FD) rewritten from BCC's fd to the map's
index. Loading creates the maps afresh (nothing is shared between sessions), patches the
indices to the new fds and loads each program on first use. A miss compiles with BCC,
writes the entry, frees BCC's object and loads from the entry like a hit: one way to run.

The directory is ``bpf/`` under gmpmon's cache root (gmpmon/files.py, shared with `ps`'s
layout cache: /var/cache/gmpmon for root, ``$GMPMON_CACHE_DIR`` overrides, empty turns
caching off), used only if it is ours and writable by us alone. An unreadable or foreign
entry is a miss and is rewritten; deleting the directory is always safe.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes as ct
import errno
import hashlib
import json
import os
import struct
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

from gmpmon._bcc import bcc_version, import_bcc
from gmpmon.capture import bpfmaps, bpfsys
from gmpmon.capture.bpfsys import ATTR_SIZE, BPF_PROG_LOAD
from gmpmon.errors import KernelSupportError, PermissionDenied
from gmpmon.files import cache_root, private_dir

SCHEMA = 1
MAX_ENTRIES = 64  # the oldest (by use) go first
BPF_MAP_CREATE = 0
BPF_LD_IMM64 = 0x18
BPF_PSEUDO_MAP_FD = 1
BPF_PSEUDO_MAP_VALUE = 2
LOG_SIZE = 1 << 20


@dataclass(frozen=True)
class MapSpec:
    name: str
    type: int
    key_size: int
    value_size: int
    max_entries: int
    flags: int
    key_desc: str  # BCC's JSON description of the key's C type
    leaf_desc: str


@dataclass(frozen=True)
class ObjSpec:
    license: bytes
    maps: tuple[MapSpec, ...]
    funcs: dict[str, bytes]  # name -> instructions, map references as map indices


def _declare(lib: Any) -> None:
    """libbcc's table-by-index calls BCC's Python module does not declare."""
    for name, res, args in (
        ("bpf_num_tables", ct.c_size_t, [ct.c_void_p]),
        ("bpf_table_name", ct.c_char_p, [ct.c_void_p, ct.c_size_t]),
        ("bpf_table_fd_id", ct.c_int, [ct.c_void_p, ct.c_size_t]),
        ("bpf_table_key_size_id", ct.c_size_t, [ct.c_void_p, ct.c_size_t]),
        ("bpf_table_leaf_size_id", ct.c_size_t, [ct.c_void_p, ct.c_size_t]),
        ("bpf_table_key_desc_id", ct.c_char_p, [ct.c_void_p, ct.c_size_t]),
        ("bpf_table_leaf_desc_id", ct.c_char_p, [ct.c_void_p, ct.c_size_t]),
    ):
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args


def extract(bpf: Any, lib: Any) -> ObjSpec:
    """What a BCC object compiled: its maps and its functions' bytecode (map fds -> indices).
    Raises ValueError for anything this loader cannot redo (a reference it does not know)."""
    _declare(lib)
    module = bpf.module
    maps: list[MapSpec] = []
    index_of: dict[int, int] = {}
    for i in range(int(lib.bpf_num_tables(module))):
        name = lib.bpf_table_name(module, i).decode()
        fd = int(lib.bpf_table_fd_id(module, i))
        if fd < 0:
            raise ValueError(f"map {name} has no fd")
        index_of[fd] = i
        maps.append(MapSpec(
            name, int(lib.bpf_table_type_id(module, i)), int(lib.bpf_table_key_size_id(module, i)),
            int(lib.bpf_table_leaf_size_id(module, i)),
            int(lib.bpf_table_max_entries_id(module, i)), int(lib.bpf_table_flags_id(module, i)),
            (lib.bpf_table_key_desc_id(module, i) or b"").decode(),
            (lib.bpf_table_leaf_desc_id(module, i) or b"").decode(),
        ))
    funcs: dict[str, bytes] = {}
    for i in range(int(lib.bpf_num_functions(module))):
        name = lib.bpf_function_name(module, i)
        start = lib.bpf_function_start(module, name)
        size = int(lib.bpf_function_size(module, name))
        if not start or size % 8:
            raise ValueError(f"function {name!r} has no bytecode")
        funcs[name.decode()] = _relocate(ct.string_at(start, size), index_of)
    lic = lib.bpf_module_license(module) or b"GPL"
    return ObjSpec(bytes(lic), tuple(maps), funcs)


def _relocate(code: bytes, table: dict[int, int]) -> bytes:
    """Every map reference's immediate replaced through ``table`` (fd -> index, or index ->
    fd); anything else that refers outside the instructions is refused."""
    out = bytearray(code)
    i = 0
    while i < len(out):
        if out[i] == BPF_LD_IMM64:
            src = out[i + 1] >> 4
            if src in (BPF_PSEUDO_MAP_FD, BPF_PSEUDO_MAP_VALUE):
                (imm,) = struct.unpack_from("<i", out, i + 4)
                if imm not in table:
                    raise ValueError(f"instruction {i // 8} refers to unknown map {imm}")
                struct.pack_into("<i", out, i + 4, table[imm])
            elif src != 0:
                raise ValueError(f"instruction {i // 8}: ld_imm64 pseudo source {src}")
            i += 16
        else:
            i += 8
    return bytes(out)


# --- the cache --------------------------------------------------------------------------

def cache_key(text: bytes, cflags: list[str], probe_dir: str, bcc_version: str,
              header_dir: str) -> str:
    u = os.uname()
    h = hashlib.sha256(f"{SCHEMA}\0{u.release}\0{u.version}\0{bcc_version}\0{header_dir}\0"
                       .encode())
    h.update(text + b"\0" + "\0".join(cflags).encode())
    for name in sorted(os.listdir(probe_dir)):
        if name.endswith(".h"):
            with open(os.path.join(probe_dir, name), "rb") as f:
                h.update(name.encode() + b"\0" + f.read())
    return h.hexdigest()


def cache_dir() -> str | None:
    """The bpf/ directory under the layout cache's, or None (off, or not ours alone)."""
    base = cache_root()
    if base is None:
        return None
    path = os.path.join(base, "bpf")
    if private_dir(base) is not None or private_dir(path) is not None:
        return None
    return path


def to_json(spec: ObjSpec) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "license": spec.license.decode(),
        "maps": [m.__dict__ for m in spec.maps],
        "funcs": {k: base64.b64encode(v).decode() for k, v in spec.funcs.items()},
    }


def from_json(d: Any) -> ObjSpec:
    """The spec of an entry; ValueError/KeyError/TypeError for anything not one."""
    if not isinstance(d, dict) or d.get("schema") != SCHEMA:
        raise ValueError("not an entry of this schema")
    maps = []
    for m in d["maps"]:
        spec = MapSpec(**m)
        if not all(isinstance(getattr(spec, f), int) for f in
                   ("type", "key_size", "value_size", "max_entries", "flags")):
            raise TypeError("map fields")
        if not all(isinstance(getattr(spec, f), str) for f in ("name", "key_desc", "leaf_desc")):
            raise TypeError("map fields")
        maps.append(spec)
    funcs = {str(k): base64.b64decode(v, validate=True) for k, v in d["funcs"].items()}
    if any(len(v) % 8 for v in funcs.values()):
        raise ValueError("bytecode length")
    return ObjSpec(str(d["license"]).encode(), tuple(maps), funcs)


def read_entry(path: str) -> ObjSpec | None:
    try:
        with open(path, "rb") as f:
            spec = from_json(json.loads(f.read()))
        os.utime(path)  # least recently used goes first
        return spec
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_entry(directory: str, path: str, spec: ObjSpec) -> None:
    """Atomically (rename); keeps at most MAX_ENTRIES entries. Failures are silent: the
    cache only saves time."""
    tmp = f"{path}.{os.getpid()}.tmp"
    body = json.dumps(to_json(spec)).encode()
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        try:
            os.write(fd, body)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        entries = sorted(
            (e for e in os.scandir(directory) if e.name.endswith(".json")),
            key=lambda e: e.stat().st_mtime,
        )
        for e in entries[:-MAX_ENTRIES]:
            os.unlink(e.path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


# --- loading ----------------------------------------------------------------------------

def create_map(m: MapSpec) -> int:
    attr = ct.create_string_buffer(ATTR_SIZE)
    for off, v in ((0, m.type), (4, m.key_size), (8, m.value_size), (12, m.max_entries),
                   (16, m.flags)):
        ct.c_uint32.from_buffer(attr, off).value = v
    name = m.name.encode()[:15]
    ct.memmove(ct.addressof(attr) + 28, name, len(name))
    try:
        return bpfsys.bpf_call(BPF_MAP_CREATE, attr)
    except OSError as e:
        if e.errno == errno.EPERM:
            raise PermissionDenied(f"creating BPF map {m.name} was refused",
                                   hint="needs root or CAP_BPF") from None
        raise KernelSupportError(f"cannot create BPF map {m.name}: {os.strerror(e.errno or 0)}",
                                 hint="run `gmpmon doctor`") from None


def load_prog(name: str, insns: bytes, prog_type: int, license: bytes,
              attach_type: int = -1) -> int:
    code = ct.create_string_buffer(insns, len(insns))
    lic = ct.create_string_buffer(license)
    attr = ct.create_string_buffer(ATTR_SIZE)
    ct.c_uint32.from_buffer(attr, 0).value = prog_type
    ct.c_uint32.from_buffer(attr, 4).value = len(insns) // 8
    ct.c_uint64.from_buffer(attr, 8).value = ct.addressof(code)
    ct.c_uint64.from_buffer(attr, 16).value = ct.addressof(lic)
    pname = name.encode()[:15]
    ct.memmove(ct.addressof(attr) + 48, pname, len(pname))
    if attach_type >= 0:
        ct.c_uint32.from_buffer(attr, 68).value = attach_type
    try:
        return bpfsys.bpf_call(BPF_PROG_LOAD, attr)
    except OSError as e:
        if e.errno == errno.EPERM:
            raise PermissionDenied(f"loading BPF program {name} was refused",
                                   hint="needs root or CAP_BPF+CAP_PERFMON") from None
        err = e.errno or 0
    # Again with the verifier's log, for the one line that says why.
    log = ct.create_string_buffer(LOG_SIZE)
    ct.c_uint32.from_buffer(attr, 24).value = 1
    ct.c_uint32.from_buffer(attr, 28).value = LOG_SIZE
    ct.c_uint64.from_buffer(attr, 32).value = ct.addressof(log)
    try:
        return bpfsys.bpf_call(BPF_PROG_LOAD, attr)
    except OSError as e:
        err = e.errno or err
    lines = [ln for ln in log.value.decode(errors="replace").splitlines() if ln.strip()]
    why = lines[-1] if lines else os.strerror(err)
    raise KernelSupportError(f"the kernel refused BPF program {name}: {why}",
                             hint="run `gmpmon doctor`")


class Function:
    def __init__(self, name: bytes, fd: int) -> None:
        self.name = name
        self.fd = fd


class LoadedObject:
    """What gmpmon uses of a BCC ``BPF`` object (tables by name, load_func, perf events, raw
    tracepoints, cleanup), over maps and programs this module created from an ObjSpec. It
    needs no libbcc (gmpmon/capture/bpfmaps.py): loading from the cache maps no compiler."""

    def __init__(self, spec: ObjSpec) -> None:
        self.spec = spec
        self.map_fds: list[int] = []
        self.tables: dict[bytes, Any] = {}
        self.funcs: dict[bytes, Function] = {}
        self.open_perf_events: dict[tuple[int, int], dict[int, int]] = {}
        self.raw_tracepoint_fds: dict[bytes, int] = {}
        self._by_name = {m.name.encode(): i for i, m in enumerate(spec.maps)}
        try:
            for m in spec.maps:
                self.map_fds.append(create_map(m))
            self._code = {name.encode(): _relocate(code, dict(enumerate(self.map_fds)))
                          for name, code in spec.funcs.items()}
        except BaseException:
            self.cleanup()
            raise

    # tables
    def __getitem__(self, name: bytes) -> Any:
        t = self.tables.get(name)
        if t is None:
            i = self._by_name.get(name)
            if i is None:
                raise KeyError(name)
            t = self.tables[name] = make_table(self.spec.maps[i], self.map_fds[i])
        return t

    def __contains__(self, name: bytes) -> bool:
        return name in self._by_name

    # programs
    def load_func(self, name: bytes, prog_type: int, device: Any = None,
                  attach_type: int = -1) -> Function:
        fn = self.funcs.get(name)
        if fn is None:
            code = self._code.get(name)
            if code is None:
                raise KernelSupportError(f"no BPF function {name.decode()} in the object")
            fd = load_prog(name.decode(), code, prog_type, self.spec.license, attach_type)
            fn = self.funcs[name] = Function(name, fd)
        return fn

    def attach_perf_event(self, ev_type: int = -1, ev_config: int = -1, fn_name: bytes = b"",
                          sample_period: int = 0, sample_freq: int = 0, pid: int = -1,
                          cpu: int = -1, group_fd: int = -1) -> None:
        fn = self.load_func(fn_name, bpfmaps.PERF_EVENT)
        lib = bpfmaps.lib()
        cpus = [cpu] if cpu >= 0 else bpfmaps.online_cpus()
        res: dict[int, int] = {}
        self.open_perf_events[(ev_type, ev_config)] = res
        for c in cpus:
            fd = int(lib.bpf_attach_perf_event(fn.fd, ev_type, ev_config, sample_period,
                                               sample_freq, pid, c, group_fd))
            if fd < 0:
                raise KernelSupportError(
                    f"cannot open a perf event on CPU {c}: {os.strerror(ct.get_errno())}")
            res[c] = fd

    def detach_perf_event(self, ev_type: int = -1, ev_config: int = -1) -> None:
        for fd in self.open_perf_events.pop((ev_type, ev_config), {}).values():
            bpfmaps.lib().bpf_close_perf_event_fd(fd)

    def attach_raw_tracepoint(self, tp: bytes = b"", fn_name: bytes = b"") -> None:
        if tp in self.raw_tracepoint_fds:
            raise KernelSupportError(f"raw tracepoint {tp.decode()} is already attached")
        fn = self.load_func(fn_name, bpfmaps.RAW_TRACEPOINT)
        fd = int(bpfmaps.lib().bpf_attach_raw_tracepoint(fn.fd, tp))
        if fd < 0:
            raise KernelSupportError(f"cannot attach raw tracepoint {tp.decode()}: "
                                     f"{os.strerror(ct.get_errno())}")
        self.raw_tracepoint_fds[tp] = fd

    def detach_raw_tracepoint(self, tp: bytes = b"") -> None:
        fd = self.raw_tracepoint_fds.pop(tp, None)
        if fd is not None:
            os.close(fd)

    def cleanup(self) -> None:
        for tp in list(self.raw_tracepoint_fds):
            self.detach_raw_tracepoint(tp)
        for key in list(self.open_perf_events):
            self.detach_perf_event(*key)
        for fn in self.funcs.values():
            _close(fn.fd)
        self.funcs.clear()
        self.tables.clear()
        for fd in self.map_fds:
            _close(fd)
        self.map_fds = []


def _close(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)


def make_table(m: MapSpec, fd: int) -> bpfmaps.Table:
    """A table over our fd, its key and value types decoded from BCC's descriptions."""
    if m.type not in (bpfmaps.HASH, bpfmaps.ARRAY, bpfmaps.PERCPU_ARRAY, bpfmaps.LRU_HASH,
                      bpfmaps.STACK_TRACE, bpfmaps.RINGBUF, bpfmaps.PERCPU_HASH):
        raise KernelSupportError(f"map {m.name}: type {m.type} is not supported here")
    key = bpfmaps.decode_type(json.loads(m.key_desc)) if m.key_desc else ct.c_int
    leaf = bpfmaps.decode_type(json.loads(m.leaf_desc)) if m.leaf_desc else ct.c_int
    return bpfmaps.Table(m.name, m.type, fd, key, leaf)


# --- the entry point --------------------------------------------------------------------

def build(text: bytes, cflags: list[str], probe_dir: str, header_dir: str) -> Any:
    """The object for ``text`` compiled with ``cflags``: loaded from the cache, else compiled
    by BCC in a child process (gmpmon/capture/bpfcompile.py: LLVM's ~100 MB heap and its
    libraries never enter this long-lived process) and cached. Raises Exception with BCC's
    message when the compile fails. A ``-DTGID=N`` flag is not compiled in: N goes into the
    object's `tgid_cfg` map before anything can be attached.

    If BCC's output holds something this loader cannot redo, BCC compiles it again here and
    its own object is returned (uncached); it has the same interface."""
    tgid = 0
    flags = []
    for f in cflags:
        if f.startswith("-DTGID="):
            tgid = int(f.split("=", 1)[1])
        else:
            flags.append(f)
    try:
        hdr_id = str(os.stat(header_dir).st_mtime_ns)
    except OSError:
        hdr_id = "-"
    directory = cache_dir()
    key = cache_key(text, flags, probe_dir, bcc_version(), f"{header_dir}\0{hdr_id}")
    path = os.path.join(directory, f"{key}.json") if directory else None
    spec = read_entry(path) if path else None
    if spec is None:
        spec = compile_in_child(text, flags)
        if spec is None:
            compiled = import_bcc().BPF(text=text, cflags=flags)
            set_tgid(compiled, tgid)
            return compiled
        if path and directory:
            write_entry(directory, path, spec)
    obj = LoadedObject(spec)
    set_tgid(obj, tgid)
    return obj


def compile_in_child(text: bytes, flags: list[str]) -> ObjSpec | None:
    """BCC's compile of ``text`` in a short-lived process; None if the result cannot be
    cached. The child's fds 1 and 2 are ours (a caller's captured_output catches BCC's
    chatter); its answer comes on a pipe of its own."""
    import gmpmon

    root = os.path.dirname(os.path.dirname(os.path.abspath(gmpmon.__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (root, os.environ.get("PYTHONPATH", "")) if p))
    rfd, wfd = os.pipe()
    try:
        req = json.dumps({"text": base64.b64encode(text).decode(), "flags": flags,
                          "fd": wfd}).encode()
        proc = subprocess.Popen([sys.executable, "-m", "gmpmon.capture.bpfcompile"],
                                stdin=subprocess.PIPE, pass_fds=(wfd,), env=env)
        os.close(wfd)
        wfd = -1
        assert proc.stdin is not None
        proc.stdin.write(req)
        proc.stdin.close()
        with os.fdopen(rfd, "rb") as f:
            rfd = -1
            body = f.read()
        rc = proc.wait()
    finally:
        for fd in (rfd, wfd):
            if fd >= 0:
                os.close(fd)
    try:
        answer = json.loads(body)
    except ValueError:
        raise Exception(f"the BPF compiler process ended ({rc}) without an answer") from None
    if "error" in answer:
        raise Exception(str(answer["error"]))
    if "uncacheable" in answer:
        return None
    return from_json(answer)


def set_tgid(obj: Any, tgid: int) -> None:
    obj[b"tgid_cfg"][ct.c_int(0)] = ct.c_uint32(tgid)
