"""Evidence from the kernel sources (Snapshot.kernel: perf samples with user stacks,
tracepoints for syscalls): the function and stack of a goroutine, syscalls by name, samples
outside Go code. Trap-free, every mode; all of it is sampled except the syscall counts.

They run at every snapshot: they read the digests the model keeps of the on-CPU profile
(KernelView ``own_stacks``, ``not_go_sites``, ``search_samples``), never the whole profile."""

from __future__ import annotations

from typing import Any

from gmpmon.model.kernelview import KernelView, own_frame

__all__ = ["goroutine_stack", "name_goroutines", "outside_go", "own_frame", "search_samples",
           "syscall_names"]


def goroutine_stack(kern: KernelView, goid: int) -> tuple[int, tuple[str, ...]] | None:
    """(samples, the goroutine's most sampled stack that reaches the program's own code),
    from the on-CPU profile; None if it has none. Kernel-mode samples are left out: their
    stack is the thread's last user-mode one, and a G blocked in a syscall is not on a CPU
    anyway."""
    best = kern.own_stacks.get(goid)
    return None if best is None else (best[0], kern.stacks[best[1]])


def name_goroutines(kern: KernelView | None, rows: list[dict[str, Any]]) -> str:
    """Add ``function`` and ``stack`` (leaf first) to rows that have a ``goid``; the first
    row's function, or ""."""
    if kern is None:
        return ""
    long_fn = {r.goid: (r.function, r.stack) for r in reversed(kern.long_running)
               if own_frame(r.stack)}
    for row in rows:
        g = row.get("goid", 0)
        fn, stack = long_fn.get(g, ("", ()))
        if not stack and (best := goroutine_stack(kern, g)) is not None:
            stack = best[1]
        if stack:
            fn = own_frame(stack) or fn
        if fn:
            row["function"] = fn
        if stack:
            row["stack"] = list(reversed(stack))[:10]
    return str(rows[0].get("function", "")) if rows else ""


SITE_MIN_SAMPLES = 10  # a site is named from this many perf samples ...
SITE_MIN_SHARE = 0.5  # ... that are this share of the goroutines' sampled stacks


def syscall_names(kern: KernelView | None, goids: set[int], top: int = 5) -> dict[str, Any]:
    """Syscalls by name (tracepoints) and the stacks the hand-off goroutines were sampled in
    (their syscall sites). The site is named only from SITE_MIN_SAMPLES samples that are
    SITE_MIN_SHARE of those goroutines' samples; below that it is a ``syscall_site_guess``
    with its samples, never a ``syscall_site``."""
    out: dict[str, Any] = {}
    if kern is None:
        return out
    if kern.syscalls_by_name:
        out["syscalls_by_name"] = {s.name: {"count": s.count, "ns": s.ns}
                                   for s in kern.syscalls_by_name[:top]}
    # Where those goroutines run when sampled: the code around their syscalls (a G blocked
    # in one is off-CPU, so its samples are the moments before and after).
    sites: dict[tuple[str, ...], int] = {}
    for g in sorted(goids):
        if (best := goroutine_stack(kern, g)) is not None:
            n, stack = best
            sites[stack] = sites.get(stack, 0) + n
    if sites:
        stack, n = max(sites.items(), key=lambda kv: (kv[1], kv[0]))
        total = sum(sites.values())
        sure = n >= SITE_MIN_SAMPLES and n >= SITE_MIN_SHARE * total
        out["syscall_site" if sure else "syscall_site_guess"] = own_frame(stack)
        out["syscall_stack"] = list(reversed(stack))[:10]
        out["syscall_site_samples"] = n
        out["syscall_site_share"] = round(n / total, 3)
    return out


def outside_go(kern: KernelView | None) -> dict[str, Any]:
    """Samples of the target's threads outside Go code (cgo, assembly) and where."""
    if kern is None or not kern.samples.total:
        return {}
    out: dict[str, Any] = {"samples_outside_go": kern.samples.not_go,
                           "samples_total": kern.samples.total}
    sites: dict[tuple[str, ...], int] = {}
    for sid, n in kern.not_go_sites.items():
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
    return kern.search_samples, kern.run_samples, kern.samples.period_ns
