"""`gmpmon inspect PID|BINARY [--json]`: what gmpmon reads from a Go binary, and where it
would put its probes. Needs no root for a file; a pid needs permission to read /proc/PID/exe.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections.abc import Mapping
from typing import Any

from gmpmon.binary import BinaryInfo, load, load_pid, to_json

EPILOG = """\
examples:
  gmpmon inspect ./server            # summary of a binary
  sudo gmpmon inspect 1234           # of a running process (also its PIE load bias)
  gmpmon inspect ./server --json     # everything, for tools (addresses as "0x..." strings)
  gmpmon inspect ./1234              # a file whose name is all digits
"""

WIDTH = 79


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "inspect",
        help="show Go version, symbols, struct offsets and probe sites of a Go binary",
        description="Show what gmpmon reads from a Go binary and where it would probe it.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("target", metavar="PID|BINARY", help="a process id, or a path to a Go binary")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def resolve(target: str) -> BinaryInfo:
    if target.isdigit():
        return load_pid(int(target))
    return load(target)


# The struct offsets the probes read, one line per tuple of (struct, ((label, key), ...)).
OFFSET_LINES: tuple[tuple[tuple[str, tuple[tuple[str, str], ...]], ...], ...] = (
    (
        ("g", (("goid", "runtime.g.goid"), ("m", "runtime.g.m"),
               ("status", "runtime.g.atomicstatus"), ("waitreason", "runtime.g.waitreason"))),
        ("m", (("id", "runtime.m.id"), ("procid", "runtime.m.procid"),
               ("curg", "runtime.m.curg"), ("p", "runtime.m.p"))),
    ),
    (
        ("p", (("id", "runtime.p.id"), ("status", "runtime.p.status"),
               ("runqhead", "runtime.p.runqhead"), ("runq", "runtime.p.runq"),
               ("runnext", "runtime.p.runnext"))),
        ("sched", (("runqsize", "runtime.schedt.runqsize"),)),
    ),
)


def _offsets_line(
    offsets: Mapping[str, int], groups: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]
) -> str:
    return "   ".join(
        f"{struct}: " + " ".join(f"{label} {offsets.get(key, '?')}" for label, key in fields)
        for struct, fields in groups
    )


def _globals_lines(info: BinaryInfo) -> list[str]:
    from gmpmon.binary.globals import GLOBAL_NAMES

    out = [f"{'global':<27} {'address':<10} found by"]
    for g in GLOBAL_NAMES:
        if g in info.globals:
            out.append(f"{g:<27} {info.globals[g]:<#10x} {info.global_how[g]}")
        elif info.stripped and g in info.globals_missing:
            out.append(f"{g:<27} {'-':<10} {info.globals_missing[g]}")
        else:
            out.append(f"{g:<27} {'-':<10} not found")
    return out


def _yn(b: bool) -> str:
    return "yes" if b else "no"


def render(info: BinaryInfo) -> str:
    lines: list[str] = [info.path]
    if info.pid is not None:
        lines.append(f"pid {info.pid}, load bias {info.load_bias:#x}")
    lines.append(
        f"{info.go_version} {info.arch}  pie: {_yn(info.pie)}  stripped: "
        f"{_yn(info.stripped)}  dwarf: {_yn(info.dwarf)}  offsets: {info.offsets_source}"
        + (f" go{info.offsets_table}" if info.offsets_table else "")
    )
    lines.append(f"version from: {info.go_version_source}")
    if info.offsets_table and info.offsets_table != f"1.{info.go_minor}":
        lines.append(
            f"{info.go_version} is newer than the table: go{info.offsets_table} offsets, "
            "used only if they validate live"
        )
    lines.append(
        f"functions: {len(info.functab.names)}  wait reasons: {len(info.wait_reasons)}  "
        f"stw reasons: {len(info.stw_reasons)}  g states: {len(info.g_status)}"
    )
    lines.extend(_offsets_line(info.offsets, groups) for groups in OFFSET_LINES)
    lines.append("")
    lines.extend(_globals_lines(info))
    lines.append("")
    lines.append(f"{'probe role':<29} {'entry':<9} {'entry insn':<19} rets")
    for role, s in info.probe_sites.items():
        insn = s.entry_insn if s.entry_emulated else f"{s.entry_insn} (slow)"
        insn = insn if len(insn) <= 19 else insn[:16] + "..."
        extra = f" ({len(s.exits)} exits)" if s.exits else ""
        if s.call_results:
            extra += " +" + ",".join(
                f"{len(v)} after {k.split('.')[-1]}" for k, v in s.call_results.items()
            )
        lines.append(f"{role:<29} {s.entry_site:<#9x} {insn:<19} {len(s.rets)}{extra}")
    if info.missing_optional:
        lines.append("")
        lines.append("disabled:")
        for feat, why in info.missing_optional.items():
            lines.extend(
                textwrap.wrap(
                    f"{feat}: {why}", WIDTH, initial_indent="  ", subsequent_indent="    "
                )
            )
    return "\n".join(
        line if len(line) <= WIDTH else "\n".join(textwrap.wrap(line, WIDTH)) for line in lines
    )


def live_layout(info: BinaryInfo) -> dict[str, str] | None:
    """For a pid: every validate_layout group -> its failed check ({} = all hold); None when
    the process's memory cannot be read (not root, or it exited)."""
    if info.pid is None:
        return None
    from gmpmon.binary.validate import GROUPS
    from gmpmon.capture.sampler import check_layout

    try:
        return dict(check_layout(info, info.pid, GROUPS).failed)
    except OSError:
        return None


def layout_lines(failed: dict[str, str] | None) -> list[str]:
    if failed is None:
        return ["layout checks: not run (cannot read the process's memory)"]
    if not failed:
        return ["layout checks on the live process: all hold (procs, sched, allgs, allm)"]
    return [f"layout check failed ({g}): {why}" for g, why in failed.items()]


def run(args: argparse.Namespace) -> int:
    info = resolve(args.target)
    failed = live_layout(info)
    if args.json:
        j = to_json(info)
        if info.pid is not None:
            j["layout"] = {"checked": failed is not None, "failed": failed or {}}
        json.dump(j, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        text = render(info)
        if info.pid is not None:
            head, _, rest = text.partition("\n\n")
            text = "\n".join([head, *layout_lines(failed)]) + "\n\n" + rest
        print(text)
    return 0
