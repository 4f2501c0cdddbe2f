"""Struct field offsets from DWARF, reading only the few structs gmpmon needs.

Walking every DIE of a Go binary with pyelftools takes seconds; even the top-level DIEs of
every CU take ~0.4 s. Go's linker writes type names inline (DW_FORM_string) right after the
DIE's one-byte abbrev code, so the DIE of ``runtime.g`` starts one byte before the bytes
``runtime.g\\0`` in .debug_info: we search for the name, parse the DIE there and keep it
only if it really is a structure type of that name. The walk is the fallback.
"""

from __future__ import annotations

import itertools
from typing import Any

from gmpmon.binary.dwarfsec import dwarf_info
from gmpmon.binary.elf import Elf
from gmpmon.errors import BinaryFormatError

# A hostile DWARF must not make the search slow: occurrences of a struct's name tried as
# DIEs (Go's has ~6), members of one struct (runtime.m has ~80), typedefs looked through,
# and DIEs parsed by the walk (its ~200 us a top-level DIE: a 10 MB server's every type
# takes 4.5 s; it is never needed for DWARF from Go's linker).
MAX_TRIES = 256
MAX_MEMBERS = 4096
MAX_TYPEDEFS = 8
MAX_WALK_DIES = 50_000


class _Damaged(Exception):
    """DWARF that is not what Go writes (read_offsets names the file)."""

# Struct -> fields the probes read, as dotted paths into nested structs. Keys of the result
# are "runtime.g.goid" etc.; a field in an atomic wrapper resolves to the value inside it.
WANTED: dict[str, tuple[str, ...]] = {
    "runtime.g": (
        "goid",
        "m",
        "atomicstatus",
        "waitreason",
        "sched",
        "parentGoid",
        "sched.sp",
        "sched.pc",
        "sched.bp",
        # the goroutine census (gmpmon/capture/census.py)
        "waitsince",
        "gopc",
        "startpc",
        # the goroutine dump (gmpmon/capture/goroutines.py)
        "stack.lo",
        "stack.hi",
        "syscallsp",
        "syscallpc",
        "lockedm",
    ),
    "runtime.m": (
        "g0", "id", "procid", "curg", "p", "spinning", "oldp",
        # runtime lock waits not yet flushed into sched.totalRuntimeLockWaitTime (1.22+)
        "alllink", "mLockProfile.waitTime",
    ),
    "runtime.p": (
        "id",
        "status",
        "runqhead",
        "runqtail",
        "runq",
        "runnext",
        "m",
        "schedtick",
        "syscalltick",
        "gFree.n",  # <= 1.24: gFree struct{gList; n int32}
        "gFree.size",  # 1.25+: gFree gList{head; size}
    ),
    "runtime.schedt": (
        "npidle",
        "nmspinning",
        "runqsize",
        "runq.size",
        # the runtime's own counters (gmpmon/capture/runtime_counters.py)
        "ngsys",
        "gcwaiting",
        "gFree.n",  # <= 1.24
        "gFree.stack.size",  # 1.25+: gcount subtracts both lists' sizes
        "gFree.noStack.size",
        "timeToRun",
        "timeToRun.underflow",
        "timeToRun.overflow",  # 1.21+
        "totalMutexWaitTime",  # 1.22+ (the rest of this block too)
        "totalRuntimeLockWaitTime",
        "stwStoppingTimeGC",
        "stwStoppingTimeOther",
        "stwTotalTimeGC",
        "stwTotalTimeOther",
    ),
    # The GC and heap panel (gmpmon/capture/gcstats.py): what runtime/metrics reads for
    # /gc/cycles/total, /gc/heap/live, /gc/heap/goal, /gc/gogc, /gc/gomemlimit and the
    # /cpu/classes/gc/* totals (metrics.go at each tag).
    "runtime.mstats": ("numgc", "pause_total_ns"),
    "runtime.gcControllerState": (
        "gcPercent",
        "memoryLimit",
        "heapMarked",
        "heapLive",
        "gcPercentHeapGoal",
        "sweepDistMinTrigger",
        "triggered",
        # memoryLimitHeapGoal's inputs (the goal under GOMEMLIMIT)
        "heapFree",
        "totalAlloc",
        "totalFree",
        "mappedReady",
    ),
    # work.cpuStats (1.20+; its fields are capitalised from 1.25): cumulative GC CPU ns.
    # work.cycles: GC cycles started (the live check: numgc <= cycles <= numgc + 1).
    "runtime.workType": (
        "cycles",
        *(f"cpuStats.{p}{f}" for f in ("AssistTime", "DedicatedTime", "IdleTime", "PauseTime")
          for p in ("gc", "GC")),
    ),
}

# Structs whose absence is not an error (the readers say what is missing).
OPTIONAL_STRUCTS = frozenset({"runtime.mstats", "runtime.gcControllerState", "runtime.workType"})

# Fields that do not exist in every supported version; absence is not an error.
OPTIONAL_FIELDS = frozenset(
    {"runtime.g.parentGoid", "runtime.schedt.runqsize", "runtime.schedt.runq.size"}
    # Read by the runtime-counter and census readers, which say per feature what is missing.
    | {
        f"runtime.schedt.{f}"
        for f in WANTED["runtime.schedt"]
        if f not in ("npidle", "nmspinning", "runqsize", "runq.size")
    }
    | {"runtime.p.gFree.n", "runtime.p.gFree.size"}
    | {"runtime.m.alllink", "runtime.m.mLockProfile.waitTime"}
    | {"runtime.g.waitsince", "runtime.g.gopc", "runtime.g.startpc"}
    | {f"runtime.g.{f}" for f in ("stack.lo", "stack.hi", "syscallsp", "syscallpc", "lockedm")}
    | {f"{s}.{f}" for s in OPTIONAL_STRUCTS for f in WANTED[s]}
)

# work.cpuStats' fields were renamed gcAssistTime -> GCAssistTime (1.25): published under
# the lower-case key.
def _fold_cpu_stats(out: dict[str, int]) -> None:
    for f in ("AssistTime", "DedicatedTime", "IdleTime", "PauseTime"):
        upper = out.pop(f"runtime.workType.cpuStats.GC{f}", None)
        if upper is not None:
            out.setdefault(f"runtime.workType.cpuStats.gc{f}", upper)


# The global run queue length moved from schedt.runqsize (<=1.24) into schedt.runq.size
# (1.25+); both are published under this stable key.
RUNQSIZE_KEY = "runtime.schedt.runqsize"


def _name(die: Any) -> str | None:
    a = die.attributes.get("DW_AT_name")
    if a is None:
        return None
    v = a.value
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def _member_offset(die: Any) -> int:
    loc = die.attributes["DW_AT_data_member_location"].value
    if isinstance(loc, int):
        return loc
    # A location expression: Go never emits one, but DW_OP_plus_uconst <uleb> is the form.
    if isinstance(loc, list) and loc and loc[0] == 0x23:
        val, shift = 0, 0
        for b in loc[1:]:
            val |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        return val
    raise _Damaged(f"unsupported DW_AT_data_member_location {loc!r}")


def _type_die(die: Any) -> Any | None:
    if "DW_AT_type" not in die.attributes:
        return None
    t = die.get_DIE_from_attribute("DW_AT_type")
    # typedefs (rare in Go's DWARF) are looked through, a few deep (a loop is not).
    for _ in range(MAX_TYPEDEFS):
        if t is None or t.tag != "DW_TAG_typedef" or "DW_AT_type" not in t.attributes:
            return t
        t = t.get_DIE_from_attribute("DW_AT_type")
    raise _Damaged(f"typedefs nested over {MAX_TYPEDEFS} deep")


def _members(struct_die: Any) -> dict[str, Any]:
    children = list(itertools.islice(struct_die.iter_children(), MAX_MEMBERS + 1))
    if len(children) > MAX_MEMBERS:
        raise _Damaged(f"type {_name(struct_die)} has over {MAX_MEMBERS} members")
    return {
        n: c for c in children if c.tag == "DW_TAG_member" and (n := _name(c)) is not None
    }


def _is_atomic_wrapper(die: Any) -> bool:
    n = _name(die) or ""
    return die.tag == "DW_TAG_structure_type" and "atomic." in n


def _resolve(struct_die: Any, path: str) -> int | None:
    off = 0
    die = struct_die
    for part in path.split("."):
        if die is None or die.tag != "DW_TAG_structure_type":
            return None
        mem = _members(die).get(part)
        if mem is None:
            return None
        off += _member_offset(mem)
        die = _type_die(mem)
    # atomic.Int32{_ noCopy; v int32}, atomic.Bool{u Uint8}, ...: the value's offset.
    depth = 0
    while die is not None and _is_atomic_wrapper(die) and depth < 4:
        inner = [(n, m) for n, m in _members(die).items() if n != "_"]
        if not inner:
            break
        off += _member_offset(inner[0][1])
        die = _type_die(inner[0][1])
        depth += 1
    return off


def _find_structs(dwarf: Any, names: set[str]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    info = dwarf.debug_info_sec.stream  # a window on the file or the inflated bytes
    for name in names:
        needle = name.encode() + b"\0"
        pos = info.find(needle, 0)  # (an mmap would start at its position)
        tries = 0
        while pos > 0 and name not in found and tries < MAX_TRIES:
            tries += 1
            for code_len in (1, 2):  # the abbrev code is a ULEB128: 1 byte below 128
                try:
                    die = dwarf.get_DIE_from_refaddr(pos - code_len)
                    if die.tag == "DW_TAG_structure_type" and _name(die) == name:
                        found[name] = die
                        break
                except Exception:  # a wrong guess at a DIE start; keep looking
                    pass
            pos = info.find(needle, pos + 1)
    missing = names - set(found)
    parsed = 0
    for cu in dwarf.iter_CUs() if missing else ():
        for die in cu.get_top_DIE().iter_children():
            if die.tag == "DW_TAG_structure_type" and (n := _name(die)) in missing:
                found[n] = die
                missing.discard(n)
        # pyelftools keeps every DIE it parsed in its unit (a subtree is parsed to find the
        # next sibling): the budget counts those
        parsed += len(getattr(cu, "_dielist", ())) or 1
        if not missing or parsed > MAX_WALK_DIES:
            break
    return found


def read_offsets(elf: Elf) -> dict[str, int] | None:
    """{"runtime.g.goid": 152, ...} from DWARF, or None when the binary has no DWARF.
    Only the sections needed are read, within gmpmon.binary.dwarfsec's caps; anything
    over them or damaged is a BinaryFormatError."""
    path = elf.path
    try:
        dwarf = dwarf_info(elf)
        if dwarf is None:
            return None
        structs = _find_structs(dwarf, set(WANTED))
        out: dict[str, int] = {}
        for sname, fields in WANTED.items():
            die = structs.get(sname)
            if die is None and sname in OPTIONAL_STRUCTS:
                continue
            if die is None:
                raise BinaryFormatError(f"{path}: DWARF has no type {sname}")
            for f in fields:
                off = _resolve(die, f)
                key = f"{sname}.{f}"
                if off is None:
                    if key in OPTIONAL_FIELDS:
                        continue
                    raise BinaryFormatError(f"{path}: DWARF type {sname} has no field {f}")
                out[key] = off
    except BinaryFormatError:
        raise
    except _Damaged as e:
        raise BinaryFormatError(f"{path}: damaged DWARF ({e})") from e
    except Exception as e:  # pyelftools raises anything on damaged DWARF
        raise BinaryFormatError(f"{path}: damaged DWARF ({type(e).__name__}: {e})") from e
    _fold_cpu_stats(out)
    nested = out.pop("runtime.schedt.runq.size", None)
    if RUNQSIZE_KEY not in out:
        if nested is None:
            raise BinaryFormatError(f"{path}: DWARF runtime.schedt has no runqsize or runq.size")
        out[RUNQSIZE_KEY] = nested
    return out
