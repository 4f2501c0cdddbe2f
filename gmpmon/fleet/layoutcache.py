"""What `gmpmon ps` learned from each executable, kept on disk for its next run.

Reading a binary (its globals, found in the code of a stripped build, and the struct
offsets) is most of what ``ps`` costs; the answer depends only on the file's bytes and on
gmpmon's own code. An entry is kept per file identity, (device, inode, size, mtime, ctime),
the same tuple the process's ``/proc/PID/exe`` is checked by, and holds:

- that identity, checked again on reading (a file renamed into the entry's name is no hit);
  ctime cannot be set by a program, so a file rewritten in place, or a new file that took
  an old inode, is always a miss even with the same size and a restored mtime;
- a digest of the gmpmon code and offsets table that made it (another gmpmon: a miss);
- the readers-only BinaryInfo (no probe sites, no function table) and the PT_LOAD segments
  (a PIE's load bias is found again for every process).

An entry only saves the reading of the file: the layout it gives is validated on every live
process exactly as a fresh one (check_layout), and a cached layout that fails is read again
from the file (``InfoCache``). JSON only (nothing executable), every value type-checked; an
unreadable, corrupt or foreign entry is a miss and is rewritten. The directory (default
/var/cache/gmpmon for root, else $XDG_CACHE_HOME/gmpmon; ``$GMPMON_CACHE_DIR`` overrides,
empty turns it off, as does ``ps --no-cache``) must be ours and writable by us only, or it is
not used. It holds at most MAX_ENTRIES files, the least recently used go first; deleting it
is always safe.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import stat
from typing import Any

import gmpmon.binary as binary_pkg
from gmpmon import __version__
from gmpmon.binary.info import UNLOADED_FUNCTAB, BinaryInfo
from gmpmon.binary.table import TABLE_ENV
from gmpmon.binary.target import LoadSegments
from gmpmon.files import CACHE_ENV
from gmpmon.files import cache_root as default_dir
from gmpmon.files import private_dir as _safe_dir

SCHEMA = 1
ENV_DIR = CACHE_ENV
MAX_ENTRIES = 1000
MAX_ENTRY_BYTES = 1 << 20
FileId = tuple[int, int, int, int, int]

# The BinaryInfo fields an entry holds, by JSON shape; the others are per process (path,
# pid, load_bias) or absent from a readers-only load (probe_sites, functab).
_STR = ("go_version", "go_version_source", "arch", "offsets_source", "offsets_table")
_INT = ("go_minor",)
_BOOL = ("pie", "stripped", "dwarf")
_STR_INT = ("symbols", "symbol_sizes", "offsets", "globals", "global_sizes")
_STR_STR = ("missing_optional", "global_how", "globals_missing")
_STRS = ("wait_reasons", "g_status", "p_status", "stw_reasons")
_PER_PROCESS = ("path", "pid", "load_bias", "probe_sites", "functab")
FIELDS = (*_STR, *_INT, *_BOOL, *_STR_INT, *_STR_STR, *_STRS)


def file_id(st: os.stat_result) -> FileId:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def code_digest() -> str | None:
    """Digest of what decides an entry's content: gmpmon's version, the code of
    gmpmon.binary and its offsets table, and a $GMPMON_OFFSETS_TABLE override (None when
    that cannot be read, or the package's files: no cache then)."""
    h = hashlib.sha256(f"{SCHEMA} {__version__}\n".encode())
    # The package's own directory (importlib.resources costs more to import than this).
    pkg = os.path.dirname(binary_pkg.__file__ or "")
    try:
        for name in sorted(os.listdir(pkg)):
            if name.endswith((".py", ".json")):
                with open(os.path.join(pkg, name), "rb") as f:
                    h.update(name.encode() + b"\0" + f.read())
    except OSError:
        return None
    override = os.environ.get(TABLE_ENV)
    if override:
        try:
            with open(override, "rb") as f:
                h.update(b"override\0" + f.read())
        except OSError:
            return None
    return h.hexdigest()


@dataclasses.dataclass(frozen=True, slots=True)
class Entry:
    info: BinaryInfo  # path, pid, load_bias: to be set for the process
    segments: LoadSegments


class LayoutCache:
    """The on-disk cache; every failure to read or write it is a miss, never an error."""

    def __init__(self, directory: str | None = None) -> None:
        self.dir = directory if directory is not None else default_dir()
        self.off_reason = ""  # why the cache is not used (empty when it is, or is off)
        self.hits = self.writes = 0
        self._digest: str | None = None
        self._pruned = False
        if self.dir is not None:
            why = _safe_dir(self.dir)
            digest = code_digest()
            if why is not None or digest is None:
                self.off_reason = why or f"${TABLE_ENV} cannot be read"
                self.dir = None
            self._digest = digest

    @property
    def enabled(self) -> bool:
        return self.dir is not None

    def _path(self, key: FileId) -> str:
        assert self.dir is not None
        name = hashlib.sha256(repr(key).encode()).hexdigest()[:32]
        return os.path.join(self.dir, name + ".json")

    def has(self, key: FileId) -> bool:
        """An entry is there (whether it is whole is for get() to say)."""
        return self.dir is not None and os.path.exists(self._path(key))

    def get(self, key: FileId) -> Entry | None:
        if self.dir is None:
            return None
        path = self._path(key)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if (not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid()
                    or st.st_size > MAX_ENTRY_BYTES):
                return None
            with os.fdopen(fd, "rb", closefd=False) as f:
                raw = f.read(MAX_ENTRY_BYTES + 1)
        except OSError:
            return None
        finally:
            os.close(fd)
        entry = decode(raw, key, self._digest)
        if entry is not None:
            self.hits += 1
            with contextlib.suppress(OSError):
                os.utime(path)  # least recently used goes first
        return entry

    def put(self, key: FileId, info: BinaryInfo, segments: LoadSegments) -> None:
        if self.dir is None or self._digest is None:
            return
        path = self._path(key)
        tmp = f"{path}.{os.getpid()}.tmp"
        body = encode(key, self._digest, info, segments)
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, body)
            finally:
                os.close(fd)
            os.replace(tmp, path)
            self.writes += 1
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            return
        if not self._pruned:
            self._pruned = True
            self.prune()

    def prune(self, keep: int = MAX_ENTRIES) -> None:
        """Remove the least recently used entries beyond ``keep`` (and stale temp files)."""
        if self.dir is None:
            return
        try:
            names = os.listdir(self.dir)
        except OSError:
            return
        aged = []
        for n in names:
            p = os.path.join(self.dir, n)
            with contextlib.suppress(OSError):
                aged.append((os.lstat(p).st_mtime_ns, p))
        aged.sort(reverse=True)
        for _mtime, p in aged[keep:]:
            with contextlib.suppress(OSError):
                os.unlink(p)


def encode(key: FileId, digest: str, info: BinaryInfo, segments: LoadSegments) -> bytes:
    if info.probe_sites:
        raise ValueError("only readers-only loads are cached")
    fields = {f: getattr(info, f) for f in FIELDS}
    doc = {"schema": SCHEMA, "digest": digest, "file": list(key),
           "segments": [list(s) for s in segments], "info": fields}
    return json.dumps(doc, sort_keys=True).encode()


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def decode(raw: bytes, key: FileId, digest: str | None) -> Entry | None:
    """The entry in ``raw`` if it is whole, well-typed and made for ``key`` by this gmpmon."""
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        return None
    if digest is None or doc.get("digest") != digest or doc.get("file") != list(key):
        return None
    segs = doc.get("segments")
    fields = doc.get("info")
    if not isinstance(segs, list) or not isinstance(fields, dict) or set(fields) != set(FIELDS):
        return None
    if not all(isinstance(s, list) and len(s) == 3 and all(_is_int(x) for x in s) for s in segs):
        return None
    ok = (
        all(isinstance(fields[f], str) for f in _STR)
        and all(_is_int(fields[f]) for f in _INT)
        and all(isinstance(fields[f], bool) for f in _BOOL)
        and all(_str_map(fields[f], _is_int) for f in _STR_INT)
        and all(_str_map(fields[f], lambda v: isinstance(v, str)) for f in _STR_STR)
        and all(isinstance(fields[f], list) and all(isinstance(v, str) for v in fields[f])
                for f in _STRS)
    )
    if not ok:
        return None
    values: dict[str, Any] = {f: tuple(fields[f]) if f in _STRS else fields[f] for f in FIELDS}
    try:
        info = BinaryInfo(path="", probe_sites={}, functab=UNLOADED_FUNCTAB, **values)
    except TypeError:  # BinaryInfo grew a required field: this schema does not know it
        return None
    return Entry(info, tuple((a, b, c) for a, b, c in segs))


def _str_map(v: Any, ok: Any) -> bool:
    return isinstance(v, dict) and all(isinstance(k, str) and ok(x) for k, x in v.items())
