"""Go binary introspection: what gmpmon needs to know about a target, as one BinaryInfo.

    from gmpmon.binary import load, load_pid, to_json
    info = load("./server")          # or load_pid(1234): also sets pid and load_bias
    info.probe_sites["runtime.gopark"].entry_site, info.offsets["runtime.g.goid"]

Pure except for :func:`load_pid`, which reads /proc/PID/{exe,root,maps}.
"""

from __future__ import annotations

from typing import Any

from gmpmon.binary.info import BinaryInfo, FuncTab, ProbeSite
from gmpmon.binary.load import load, load_elf
from gmpmon.binary.target import load_pid
from gmpmon.binary.validate import offsets_origin

__all__ = ["BinaryInfo", "FuncTab", "ProbeSite", "load", "load_elf", "load_pid", "to_json"]

JSON_SCHEMA_VERSION = 1


def _hex(addr: int) -> str:
    return f"{addr:#x}"


def to_json(info: BinaryInfo) -> dict[str, Any]:
    """The `gmpmon inspect --json` object (addresses as "0x..." strings, link-time)."""
    sites: dict[str, Any] = {}
    for role, s in info.probe_sites.items():
        sites[role] = {
            "symbol": s.symbol,
            "entry": _hex(s.entry),
            "size": s.size,
            "entry_site": _hex(s.entry_site),
            "entry_insn": s.entry_insn,
            "entry_emulated": s.entry_emulated,
            "entry_sp_delta": s.entry_sp_delta,
            "rets": [_hex(a) for a in s.rets],
        }
        if s.exits:
            # [address, condition]: 0 always, else 0x10 | the x86 cc it fires on (exits.py)
            sites[role]["exits"] = [[_hex(a), c] for a, c in s.exits]
        if s.call_results:
            sites[role]["call_results"] = {
                callee: [_hex(a) for a in addrs] for callee, addrs in s.call_results.items()
            }
    return {
        "schema": JSON_SCHEMA_VERSION,
        "path": info.path,
        "pid": info.pid,
        "load_bias": _hex(info.load_bias),
        "go_version": info.go_version,
        "go_minor": info.go_minor,
        "go_version_source": info.go_version_source,
        "arch": info.arch,
        "pie": info.pie,
        "stripped": info.stripped,
        "dwarf": info.dwarf,
        "offsets_source": info.offsets_source,
        "offsets_table": info.offsets_table,
        "offsets_origin": offsets_origin(info),
        "symbols": {k: _hex(v) for k, v in sorted(info.symbols.items())},
        "symbol_sizes": dict(sorted(info.symbol_sizes.items())),
        "offsets": dict(sorted(info.offsets.items())),
        "globals": {
            g: {"addr": _hex(a), "size": info.global_sizes.get(g, 0), "how": info.global_how[g]}
            for g, a in info.globals.items()
        },
        "globals_missing": dict(info.globals_missing),
        "wait_reasons": list(info.wait_reasons),
        "stw_reasons": list(info.stw_reasons),
        "g_status": list(info.g_status),
        "p_status": list(info.p_status),
        "probe_sites": sites,
        "call_results": {
            role: {c: [_hex(a) for a in v] for c, v in s.call_results.items()}
            for role, s in info.probe_sites.items()
            if s.call_results
        },
        "missing_optional": dict(info.missing_optional),
        "functions": len(info.functab.names),
    }
