"""The goroutine dump's text as Go prints it (runtime/traceback.go goroutineheader,
traceback2, printcreatedby): pure formatting of hand-made goroutines."""

from __future__ import annotations

from gmpmon.binary.unwind import OK, TRUNCATED, Frame
from gmpmon.capture.goroutines import Dump, Goroutine
from gmpmon.export.goroutines import debug2_text, grouped_text, to_json

MIN = 60_000_000_000


def frame(func: str, line: int, off: int | None = 0x25, inlined: bool = False) -> Frame:
    return Frame(func, "app/main.go", line, 0x401000, None if inlined else off, inlined, 0,
                 0x401000)


def g(goid: int, *, status: str = "waiting", code: int = 4, reason: str = "chan receive",
      wait_ns: int | None = None, locked: bool = False, changed: bool = False,
      shown: list[Frame] | None = None, unwind: str = OK, p: int | None = None,
      creator: int = 1) -> Goroutine:
    shown = [frame("main.inner", 10, inlined=True), frame("main.worker", 12)] \
        if shown is None else shown
    return Goroutine(goid=goid, status=status, status_code=code, scan=False,
                     wait_reason=reason if code == 4 else "", wait_ns=wait_ns, locked=locked,
                     system=False, frames=shown, shown=shown, unwind=unwind, changed=changed,
                     created_by=frame("main.main", 20, 0x85), creator=creator, p=p)


def test_header_wait_minutes_locked_and_frames() -> None:
    d = Dump("go1.27.3", [g(7, wait_ns=5 * MIN + 1, locked=True)])
    assert debug2_text(d) == (
        "goroutine 7 [chan receive, 5 minutes, locked to thread]:\n"
        "main.inner(...)\n\tapp/main.go:10\n"
        "main.worker(...)\n\tapp/main.go:12 +0x25\n"
        "created by main.main in goroutine 1\n\tapp/main.go:20 +0x85\n")


def test_under_a_minute_no_minutes_and_go119_creator() -> None:
    text = debug2_text(Dump("go1.19.8", [g(8, wait_ns=59 * 10**9, creator=0)]))
    assert text.startswith("goroutine 8 [chan receive]:\n")
    assert "created by main.main\n" in text


def test_running_changed_and_cut_stacks() -> None:
    d = Dump("go1.27.3", [
        g(2, status="running", code=2, shown=[], p=3),
        g(3, changed=True, unwind=TRUNCATED),
    ])
    text = debug2_text(d)
    assert "goroutine 2 [running]:\n\tstack not taken: running on P 3\n" in text
    assert "goroutine 3 [chan receive, changed while read]:\n" in text
    assert "...stack not complete: truncated...\n" in text
    assert "\n\ngoroutine 3" in text  # blocks separated by one blank line, as Go's


def test_deep_stacks_elided_as_go_does() -> None:
    deep = [frame(f"main.f{i}", i) for i in range(130)]
    text = debug2_text(Dump("go1.27.3", [g(4, shown=deep)]))
    assert "...30 frames elided...\n" in text
    assert "main.f49(...)" in text and "main.f50(...)" not in text and "main.f80(...)" in text


def test_group_and_json() -> None:
    d = Dump("go1.27.3", [g(10), g(11), g(12, reason="select"), g(13, wait_ns=2 * MIN)])
    text = grouped_text(d)
    # the wait time does not split a group; its range is in the header
    assert text.startswith("3 goroutines [chan receive, 0-2 minutes]: 10 11 13\n")
    doc = to_json(d, grouped=True)
    assert [x["count"] for x in doc["groups"]] == [3, 1]
    one = to_json(d)["goroutines"][3]
    assert one["wait_seconds"] == 120.0 and one["frames"][0]["inlined"]
    assert one["frames"][1]["offset"] == 0x25 and one["creator_goid"] == 1
