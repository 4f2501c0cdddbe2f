"""evaluate(): Snapshot + tracker inputs -> findings, most severe first. Pure.

``snapshot_with_findings(model)`` is the Model's Snapshot with its findings: what the
session, replay and the fleet's windows hand to views (the model does not know the rules)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from gmpmon.findings import rules_cpu, rules_wait
from gmpmon.findings.attribution import attribute
from gmpmon.findings.context import Context, Thresholds
from gmpmon.model import Model
from gmpmon.model.evidence import FindingsTracker
from gmpmon.model.findingtypes import Attribution, Finding, FindingsInputs, Severity
from gmpmon.model.snapshot import Snapshot

Rule = Callable[[Context], Finding | None]

# One rule per finding id, in the order ties are shown.
RULES: tuple[tuple[str, Rule], ...] = (
    ("gomaxprocs-above-cpus", rules_cpu.gomaxprocs_above_cpus),
    ("cpu-throttled", rules_cpu.cpu_throttled),
    ("cpu-saturation", rules_cpu.cpu_saturation),
    ("runq-overflow", rules_wait.runq_overflow),
    ("gc-stw-latency", rules_wait.gc_stw_latency),
    ("lock-contention", rules_wait.lock_contention),
    ("long-running-goroutine", rules_cpu.long_running),
    ("syscall-handoff", rules_wait.syscall_handoff),
    ("cgo-pinning", rules_wait.cgo_pinning),
    ("goroutine-leak", rules_wait.goroutine_leak),
    ("idle-spinning", rules_cpu.idle_spinning),
)
FINDING_IDS = tuple(i for i, _r in RULES)
# Causes: at WARNING or above, shown before every other finding whatever their severity
# (too many Ps for the CPUs makes long runs, saturation, STW waits and spinning).
CAUSES = frozenset({"gomaxprocs-above-cpus"})


def evaluate(
    snap: Snapshot,
    inputs: FindingsInputs,
    *,
    thresholds: Thresholds | None = None,
    attribution: Attribution | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> tuple[tuple[Finding, ...], Attribution]:
    th = thresholds or Thresholds()
    att = attribution if attribution is not None else attribute(
        snap, inputs.latency_samples, cancelled=cancelled)
    ctx = Context(snap, inputs, att, th)
    if ctx.duration_ns < th.min_duration_ns:
        return (), att
    order = {fid: i for i, fid in enumerate(FINDING_IDS)}
    out = [f for _fid, rule in RULES if (f := rule(ctx)) is not None]
    for f in out:
        f.evidence.setdefault("window_ns", ctx.duration_ns)  # the time the evidence covers
    out.sort(key=lambda f: (not (f.id in CAUSES and f.severity >= Severity.WARNING),
                            -f.severity, order.get(f.id, 99)))
    return tuple(out), att


def with_findings(snap: Snapshot, tracker: FindingsTracker,
                  cancelled: Callable[[], bool] | None = None) -> Snapshot:
    """``snap`` with its findings, latency attribution and cgroup reading filled in
    (``cancelled``: see attribution.attribute)."""
    inputs = tracker.inputs(snap.now)
    found, att = evaluate(snap, inputs, cancelled=cancelled)
    return dataclasses.replace(
        snap, findings=found, latency_attribution=att, cgroup_cpu=inputs.cgroup
    )


def snapshot_with_findings(model: Model, cancelled: Callable[[], bool] | None = None) -> Snapshot:
    """The model's Snapshot now, with its findings, latency attribution and cgroup reading
    (``cancelled``: see attribution.attribute)."""
    return with_findings(model.snapshot(), model.findings, cancelled)
