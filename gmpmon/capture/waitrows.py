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
from collections.abc import Callable
from typing import Any

from gmpmon.capture.bpfsys import RawHash
from gmpmon.events import NO_P, EventTuple, Kind

_KEY = struct.Struct("<QQQ")  # struct gm_wait_key: addr, stack, kind
_VAL = struct.Struct("<QQ")  # struct gm_wait_row: n, ns
_ROWS = int(Kind.MUTEX_ROWS)


class WaitRows:
    def __init__(self, table: Any) -> None:
        self.table = table
        self._raw: RawHash | None = RawHash(table.map_fd, _KEY.size, _VAL.size)
        self._prev: dict[bytes, tuple[int, int]] = {}
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
        returns how many."""
        keys, vals = self._items()
        if (keys, vals) == self._last:
            return 0
        self._last = (keys, vals)
        prev = self._prev
        ks = _KEY.size
        n_out = 0
        for i, nv in enumerate(_VAL.iter_unpack(vals)):
            k = keys[i * ks : (i + 1) * ks]
            was = prev.get(k, (0, 0))
            if nv == was:
                continue
            prev[k] = nv
            dn, dns = nv[0] - was[0], nv[1] - was[1]
            if dn < 0 or dns < 0:
                continue  # never from the kernel (rows only grow); keeps a torn read harmless
            addr, word, kind = _KEY.unpack(k)
            out.append((now, _ROWS, NO_P, kind, addr, dns, sid(word) | dn << 32))
            n_out += 1
        return n_out
