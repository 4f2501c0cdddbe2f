"""Suite-wide wiring: the ``bpf`` marker, ``--full``, and the ``slow`` marker.

- ``@pytest.mark.bpf``: the test runs real BPF; it is skipped with the reason when BPF is
  unusable, and fails instead when ``GMPMON_REQUIRE_BPF=1`` (CI).
- ``--full`` (or env ``GMPMON_FULL_MATRIX=1``): every Go version x build mode in
  tests/gotargets.py, and ``@pytest.mark.slow`` tests run; without it they are skipped.
- Skips in CI (``GMPMON_REQUIRE_BPF=1``): any skip not on tests/skip-allowlist.txt fails;
  the allowed ones are listed with their reasons at the end of the run (tests/skiplist.py).
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import tempfile
from collections.abc import Generator
from typing import Any

import pytest

from tests.bpfcheck import require_bpf
from tests.skiplist import AllowListError, SkipGate

# A suite started in the background of a non-interactive shell (`bash .ci/run &`, nohup)
# inherits SIGINT and SIGQUIT ignored, and so would every gmpmon and Go program it starts:
# an ignored disposition survives exec, so the tests that send an early ^C would see it
# ignored. The tests speak for an interactive user: restore the defaults for the children.
for _sig, _default in ((signal.SIGINT, signal.default_int_handler),
                       (signal.SIGQUIT, signal.SIG_DFL)):
    if signal.getsignal(_sig) == signal.SIG_IGN:
        signal.signal(_sig, _default)


# `gmpmon ps` keeps a layout cache (root: /var/cache/gmpmon): the suite's gmpmons use a
# directory of their own instead, removed at exit (tests of the cache set theirs).
if "GMPMON_CACHE_DIR" not in os.environ:
    os.environ["GMPMON_CACHE_DIR"] = tempfile.mkdtemp(prefix="gmpmon-test-cache-")
    atexit.register(shutil.rmtree, os.environ["GMPMON_CACHE_DIR"], True)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--full",
        action="store_true",
        default=False,
        help="full Go version x build mode matrix and slow tests (sets GMPMON_FULL_MATRIX=1)",
    )


def pytest_configure(config: pytest.Config) -> None:
    # Set before collection, so parametrizations that call gotargets.versions() see it.
    if config.getoption("--full"):
        os.environ["GMPMON_FULL_MATRIX"] = "1"
    try:
        config.stash[_GATE] = SkipGate.from_env()
    except (OSError, AllowListError) as e:
        raise pytest.UsageError(f"skip allow-list: {e}") from e


_GATE = pytest.StashKey[SkipGate]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item,
                              call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    rep: pytest.TestReport = outcome.get_result()
    if rep.skipped and _GATE in item.config.stash:
        item.config.stash[_GATE].judge(rep, {m.name for m in item.iter_markers()})


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, None]:
    outcome = yield
    rep: pytest.CollectReport = outcome.get_result()
    if rep.skipped and _GATE in collector.config.stash:
        collector.config.stash[_GATE].judge(rep, set())


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter,
                            config: pytest.Config) -> None:
    lines = config.stash[_GATE].summary() if _GATE in config.stash else []
    if lines:
        terminalreporter.section("skips and the allow-list (tests/skip-allowlist.txt)")
        for line in lines:
            terminalreporter.write_line(line)


def _full() -> bool:
    return os.environ.get("GMPMON_FULL_MATRIX", "") not in ("", "0")


@pytest.fixture(autouse=True)
def _gmpmon_markers(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("slow") is not None and not _full():
        pytest.skip("slow test: run with --full or GMPMON_FULL_MATRIX=1")
    if request.node.get_closest_marker("bpf") is not None:
        require_bpf()
