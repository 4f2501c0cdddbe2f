"""gmpmon's printed lines reach the kernel one write each (gmpmon/cli.py _whole_lines):
`gmpmon run`'s program shares the streams, and under PYTHONUNBUFFERED its own line once
landed between a line's text and its newline."""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys

from gmpmon.cli import _WholeLines
from tests import gotargets


def messages(sock: socket.socket) -> list[bytes]:
    """Each write(2) on a SOCK_SEQPACKET socket arrives as one message."""
    sock.setblocking(False)
    out = []
    while True:
        try:
            out.append(sock.recv(1 << 17))
        except BlockingIOError:
            return out


def test_a_print_is_one_write_multi_line_or_not() -> None:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with a, b:
        raw = io.FileIO(a.fileno(), "w", closefd=False)
        s = _WholeLines(io.BufferedWriter(raw, 1 << 16), encoding="utf-8")
        print("Tracing...", file=s)
        print("legend one\nlegend two\n(full mode)", file=s)
        print("x" * 20000, file=s)
        assert messages(b) == [b"Tracing...\n", b"legend one\nlegend two\n(full mode)\n",
                               b"x" * 20000 + b"\n"]


def test_the_command_under_pythonunbuffered_writes_whole_lines() -> None:
    """The real entry point, its stdout an unbuffered FileIO (PYTHONUNBUFFERED=1): every
    write `gmpmon inspect` makes ends a line (its report is one multi-line print)."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with a, b:
        spin = str(gotargets.build("spin"))
        p = subprocess.run([sys.executable, "-m", "gmpmon", "inspect", spin], stdout=a.fileno(),
                            env=dict(os.environ, PYTHONUNBUFFERED="1"), timeout=60)
        assert p.returncode == 0
        got = messages(b)
    assert got and all(m.endswith(b"\n") for m in got), [m[-40:] for m in got]
