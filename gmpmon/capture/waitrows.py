"""Lock and semaphore waits summed in the kernel: the `wait_rows` hash of gmpmon.bpf.c,
(lock address, stack word, LockKind) -> (waits, total wait ns), read with the counters.

Each row that grew since the last read becomes one MUTEX_ROWS event (the deltas), instead
of a MUTEX_ADDR + MUTEX ring record pair per wait: on Prometheus 2.42 under wrk those pairs
were ~3/4 of all the records gmpmon decoded, sorted, modelled and recorded in Python (~4k
waits a second in sample mode). The model adds a row as it adds that many pairs
(gmpmon/model/waits.py). A wait that finds the hash full goes to the ring as the pair.

The kernel adds a wait's count and its ns with two atomic adds: a read between them sees the
count without the ns; the next read brings the rest (a row whose count did not grow), so the
totals are whole at the end.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Callable
from itertools import compress
from operator import ne
from typing import Any

from gmpmon.capture.bpfsys import RawHash
from gmpmon.events import NO_P, EventTuple, Kind

_KEY = struct.Struct("<QQQ")  # struct gm_wait_key: addr, stack, kind
_VAL = struct.Struct("<QQ")  # struct gm_wait_row: n, ns
_K = struct.Struct(f"{_KEY.size}s")  # a row's key and value as bytes (iter_unpack)
_V = struct.Struct(f"{_VAL.size}s")
_ROWS = int(Kind.MUTEX_ROWS)
_Rows = set[tuple[tuple[bytes], tuple[bytes]]]


def _rows(keys: bytes, vals: bytes) -> _Rows:
    return set(zip(_K.iter_unpack(keys), _V.iter_unpack(vals), strict=True))


class WaitRows:
    def __init__(self, table: Any) -> None:
        self.table = table
        self._raw: RawHash | None = RawHash(table.map_fd, _KEY.size, _VAL.size)
        self._prev: dict[bytes, tuple[int, int]] = {}  # key -> (n, ns) handed on
        self._rows: _Rows | None = set()  # the last read's rows (None: make them again)
        self._last = (b"", b"")

    def _items(self) -> tuple[bytes, bytes]:
        if self._raw is not None:
            try:
                return self._raw.items()
            except OSError:  # no batch ops for hashes here: BCC's walk
                self._raw = None
        rows = list(self.table.items())
        return b"".join(bytes(k) for k, _ in rows), b"".join(bytes(v) for _, v in rows)

    def read(self, now: int, out: list[EventTuple], sid: Callable[[int], int]) -> int:
        """Append a MUTEX_ROWS event per row that grew (``sid``: a stack word's small id);
        returns how many. The rows that did not move are told apart by a set difference (at
        C speed): the hash keeps every row it ever had, up to WAIT_ROWS_MAX, and on a server
        with a lock per connection most of them are old."""
        keys, vals = self._items()
        if (keys, vals) == self._last:
            return 0
        old_keys, old_vals = self._last
        self._last = (keys, vals)
        ks, vs = _KEY.size, _VAL.size
        if keys == old_keys:  # no new row: the values that moved, by a C-level compare
            a, b = array("Q", vals), array("Q", old_vals)
            at = sorted({i // 2 for i in compress(range(len(a)), map(ne, a, b))})
            moved = [(keys[i * ks:(i + 1) * ks], vals[i * vs:(i + 1) * vs]) for i in at]
            self._rows = None  # stale: made again from the blobs when it is needed
        else:
            rows = _rows(keys, vals)
            before = self._rows if self._rows is not None else _rows(old_keys, old_vals)
            moved = [(k, v) for (k,), (v,) in rows - before]
            self._rows = rows
        prev = self._prev
        n_out = 0
        for k, v in moved:
            nv = _VAL.unpack(v)
            was = prev.get(k, (0, 0))
            prev[k] = nv
            dn, dns = nv[0] - was[0], nv[1] - was[1]
            if dn < 0 or dns < 0 or not (dn or dns):
                continue  # never from the kernel (rows only grow); keeps a torn read harmless
            addr, word, kind = _KEY.unpack(k)
            out.append((now, _ROWS, NO_P, kind, addr, dns, sid(word) | dn << 32))
            n_out += 1
        return n_out
