"""The findings engine: names the scheduler pathology, shows its evidence, says what to try.

Pure (no /proc, no BPF): ``FindingsTracker`` follows the events the Model applies and keeps
what the Snapshot does not (long runs, hand-off causes, run-queue and goroutine series,
cgroup readings, latency samples with their times); ``evaluate(snapshot, inputs)`` runs one
rule per finding id (rules_cpu, rules_wait) and the latency attribution (attribution.py).
The Model calls both, so every Snapshot carries ``findings`` and ``latency_attribution``.
Thresholds and the reasons for them: docs/findings.md.
"""

from gmpmon.findings.types import Attribution, Finding, FindingsInputs, Severity

__all__ = ["Attribution", "Finding", "FindingsInputs", "Severity"]
