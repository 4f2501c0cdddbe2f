"""Evidence from the kernel sources (Snapshot.kernel: 1 kHz perf samples with user stacks,
tracepoints for syscalls): the function and stack of a goroutine, syscalls by name, samples
outside Go code. Trap-free, every mode; all of it is sampled except the syscall counts."""

from __future__ import annotations

from typing import Any

from gmpmon.events import SAMPLE_G0, SAMPLE_GO, SAMPLE_NOT_GO
from gmpmon.model.kernelview import KernelView

_RUNTIME = ("runtime.", "internal/", "syscall.", "sync.", "[")


def _is_program(frame: str) -> bool:
    """A frame of the program (main, or a module: github.com/x/y.F), not of Go's standard
    library (time.now, net/http.(*conn).serve): a standard package's path has no dot in its
    first element."""
    slash = frame.rfind("/")
    pkg = frame[: slash + 1] + frame[slash + 1 :].split(".", 1)[0]
    first = pkg.split("/", 1)[0]
    return pkg == "main" or "." in first


def own_frame(stack: tuple[str, ...]) -> str:
    """The innermost frame of the program's own code (stacks are root first): of main or a
    module if there is one, else of the standard library; "" if none (runtime.goexit and the
    like are not the program's). A goroutine sampled in time.now inside main.poll is at
    main.poll."""
    fallback = ""
    for f in reversed(stack):
        if f.startswith(_RUNTIME):
            continue
        if _is_program(f):
            return f
        fallback = fallback or f
    return fallback


def goroutine_stacks(kern: KernelView | None) -> dict[int, tuple[int, tuple[str, ...]]]:
    """goid -> (samples, its most sampled stack that reaches the program's own code), from
    the on-CPU profile. Kernel-mode samples are left out: their stack is the thread's last
    user-mode one, and a G blocked in a syscall is not on a CPU anyway."""
    if kern is None:
        return {}
    per: dict[tuple[int, int], int] = {}
    for sid, goid, _p, outcome, n in kern.profile:
        if goid and outcome in (SAMPLE_GO, SAMPLE_G0) and own_frame(kern.stacks.get(sid, ())):
            per[(goid, sid)] = per.get((goid, sid), 0) + n
    best: dict[int, tuple[int, tuple[str, ...]]] = {}
    for (goid, sid), n in sorted(per.items()):
        cur = best.get(goid)
        if cur is None or n > cur[0]:
            best[goid] = (n, kern.stacks[sid])
    return best


def name_goroutines(kern: KernelView | None, rows: list[dict[str, Any]]) -> str:
    """Add ``function`` and ``stack`` (leaf first) to rows that have a ``goid``; the first
    row's function, or ""."""
    if kern is None:
        return ""
    long_fn = {r.goid: (r.function, r.stack) for r in reversed(kern.long_running)
               if own_frame(r.stack)}
    stacks = goroutine_stacks(kern)
    for row in rows:
        g = row.get("goid", 0)
        fn, stack = long_fn.get(g, ("", ()))
        if not stack and g in stacks:
            stack = stacks[g][1]
        if stack:
            fn = own_frame(stack) or fn
        if fn:
            row["function"] = fn
        if stack:
            row["stack"] = list(reversed(stack))[:10]
    return str(rows[0].get("function", "")) if rows else ""


def syscall_names(kern: KernelView | None, goids: set[int], top: int = 5) -> dict[str, Any]:
    """Syscalls by name (tracepoints) and the stacks the hand-off goroutines were sampled in
    inside the kernel (their syscall sites)."""
    out: dict[str, Any] = {}
    if kern is None:
        return out
    if kern.syscalls_by_name:
        out["syscalls_by_name"] = {s.name: {"count": s.count, "ns": s.ns}
                                   for s in kern.syscalls_by_name[:top]}
    # Where those goroutines run when sampled: the code around their syscalls (a G blocked
    # in one is off-CPU, so its samples are the moments before and after).
    sites: dict[tuple[str, ...], int] = {}
    for g, (n, stack) in goroutine_stacks(kern).items():
        if g in goids:
            sites[stack] = sites.get(stack, 0) + n
    if sites:
        stack, n = max(sites.items(), key=lambda kv: (kv[1], kv[0]))
        out["syscall_site"] = own_frame(stack)
        out["syscall_stack"] = list(reversed(stack))[:10]
        out["syscall_site_samples"] = n
    return out


def outside_go(kern: KernelView | None) -> dict[str, Any]:
    """Samples of the target's threads outside Go code (cgo, assembly) and where."""
    if kern is None or not kern.samples.total:
        return {}
    out: dict[str, Any] = {"samples_outside_go": kern.samples.not_go,
                           "samples_total": kern.samples.total}
    sites: dict[tuple[str, ...], int] = {}
    for sid, _goid, _p, outcome, n in kern.profile:
        if outcome == SAMPLE_NOT_GO:
            stack = kern.stacks.get(sid, ())
            if stack:
                sites[stack] = sites.get(stack, 0) + n
    if sites:
        stack, _n = max(sites.items(), key=lambda kv: (kv[1], kv[0]))
        out["outside_go_stack"] = list(reversed(stack))[:10]
    return out


def search_samples(kern: KernelView | None) -> tuple[int, int, int]:
    """(samples in runtime.findRunnable on g0, samples of goroutines running, ns a sample
    stands for): the CPU the Ms spent looking for work, seen by the perf sampler."""
    if kern is None or not kern.samples.period_ns:
        return 0, 0, 0
    search = run = 0
    for sid, _goid, _p, outcome, n in kern.profile:
        if outcome == SAMPLE_G0:
            if any(f.startswith("runtime.findRunnable") for f in kern.stacks.get(sid, ())):
                search += n
        elif outcome == SAMPLE_GO:
            run += n
    return search, run, kern.samples.period_ns
