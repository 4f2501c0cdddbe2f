"""The findings engine: names the scheduler pathology, shows its evidence, says what to try.

Pure (no /proc, no BPF): ``FindingsTracker`` follows the events the Model applies and keeps
what the Snapshot does not (long runs, hand-off causes, run-queue and goroutine series,
cgroup readings, latency samples with their times); ``evaluate(snapshot, inputs)`` runs one
rule per finding id (rules_cpu, rules_wait) and the latency attribution (attribution.py).
The tracker is a part of the model (gmpmon/model/evidence.py: it rides the hot loop); the
rules run above it: ``engine.snapshot_with_findings(model)`` is the Snapshot with
``findings`` and ``latency_attribution`` filled, which the session, replay and fleet hand on.
Thresholds and the reasons for them: docs/findings.md.
"""

from gmpmon.model.findingtypes import Attribution, Finding, FindingsInputs, Severity

__all__ = ["Attribution", "Finding", "FindingsInputs", "Severity"]
