"""When the headless printer says an interval line, and how long it waits for its snapshot."""

from gmpmon.commands.attach_one import ANSWER_S, line_due


def test_no_line_before_it_is_due() -> None:
    assert line_due(9.9, 10.0, None) is None


def test_a_due_line_waits_for_its_snapshot_at_most_answer_s() -> None:
    assert line_due(10.0, 10.0, None) == ANSWER_S
    assert line_due(10.0, 10.0, 30.0) == ANSWER_S


def test_no_line_at_the_deadline_the_summary_says_it() -> None:
    # -d 10 with --interval 1: the tenth line would fall on the end, and its snapshot of 64
    # busy Ps (~0.5 s) made the run end late.
    assert line_due(10.0, 10.0, 10.0) is None
    assert line_due(10.3, 10.0, 10.0) is None


def test_a_line_just_before_the_deadline_does_not_wait_past_it() -> None:
    t = line_due(9.8, 9.7, 10.0)
    assert t is not None and abs(t - 0.2) < 1e-9
