"""semacquire1 waits on real Go programs: RWMutex readers and writers and a WaitGroup, each by
kind, and none of them counted as sync.Mutex contention."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.gotargets import build
from tests.integration.test_capture import gm_run, matrix

R, N, HOLD_MS = 4, 20, 1


@pytest.mark.bpf
@pytest.mark.parametrize(("go", "build_mode"), matrix())
def test_rwmutex_and_waitgroup_waits_by_kind(tmp_path: Path, go: str, build_mode: str) -> None:
    p, s = gm_run(tmp_path, build("rwmutex", go, build_mode),
                  "-r", str(R), "-n", str(N), "-hold", f"{HOLD_MS}ms")
    assert f"done {R * N} {N}" in p.stdout
    assert s["mutex"]["contentions"] == 0  # one writer: RWMutex's inner Mutex never contends
    kinds = s["waits_by_kind"]
    # (kind, the innermost main.* frame: stacks are root first)
    tops = {(w["kind"], next((f for f in reversed(w["stack"]) if f.startswith("main.")), ""))
            for w in s["waits_top"]}
    # main waits in wg.Wait for the whole run: the writer alone takes >= N * 1.5 * hold.
    wg = [w for w in s["waits_top"] if any("WaitGroup" in f for f in w["stack"])]
    assert len(wg) == 1 and wg[0]["kind"] == "semacquire" and wg[0]["count"] == 1
    assert wg[0]["wait_ns"] >= N * 1.5 * HOLD_MS * 1_000_000
    if int(go.split(".")[1]) >= 21:
        # semacquire1's reason argument tells readers from writers.
        assert set(kinds) == {"sync.RWMutex.RLock", "sync.RWMutex.Lock", "semacquire"}, kinds
        assert 1 <= kinds["sync.RWMutex.RLock"]["count"] <= R * N
        assert 1 <= kinds["sync.RWMutex.Lock"]["count"] <= N
        assert ("sync.RWMutex.RLock", "main.read") in tops, tops
        assert ("sync.RWMutex.Lock", "main.write") in tops, tops
    else:
        # 1.19: no reason argument; RWMutex goes through SemacquireMutex: all "semacquire".
        assert set(kinds) == {"semacquire"}, kinds
        assert kinds["semacquire"]["count"] >= 3
    assert s["events"]["lost"] == 0
