"""When the perf sampler's R14 validation has failed (shared by capture, which turns the
sampler off, and the model, which says so on replay)."""

from __future__ import annotations

from gmpmon.events import SAMPLE_G0, SAMPLE_GO, SAMPLE_NOT_GO

VALIDATE_MIN = 200  # user-mode samples before any verdict
VALIDATE_RATIO = 0.01  # below this share of validated user-mode samples, the sampler is off


def validation_counts(outcomes: dict[int, int]) -> tuple[int, int]:
    """(user-mode samples whose R14 validated, user-mode samples) of SAMPLE_* totals."""
    good = outcomes.get(SAMPLE_GO, 0) + outcomes.get(SAMPLE_G0, 0)
    return good, good + outcomes.get(SAMPLE_NOT_GO, 0)


def validation_failure(good: int, seen: int) -> str:
    """The one line that turns the sampler off, or "" while R14 validates often enough."""
    if seen < VALIDATE_MIN or good >= VALIDATE_RATIO * seen:
        return ""
    return (
        f"perf samples off: R14 was a goroutine of its thread in {good} of {seen}"
        " user-mode samples (offsets wrong, or not Go code): nothing reported from them"
    )
