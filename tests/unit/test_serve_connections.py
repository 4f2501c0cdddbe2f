"""serve's HTTP server against clients that hold connections: a real server on a real
loopback socket, fed by a real registry. The cap of MAX_CONNECTIONS (a slot that waits for
its request is given up for a newer connection; when every slot is answering, a newcomer is
closed at once), the request deadline (a client sending a byte a second held its thread
for hours: the per-read timeout never expired), and a close that does not wait for them.
`tests/integration/test_hostile_serve.py` runs `gmpmon serve` itself under 500 clients."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric

from gmpmon.fleet import server as srv

REQUEST = b"GET /metrics HTTP/1.0\r\n\r\n"


class GatedCollector:
    """Collects only once ``gate`` is set: every request that reaches it holds its slot."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.inside = 0
        self._lock = threading.Lock()

    def collect(self) -> list[Metric]:
        with self._lock:
            self.inside += 1
        try:
            self.gate.wait(30)
        finally:
            with self._lock:
                self.inside -= 1
        return [GaugeMetricFamily("gmpmon_test_up", "up", value=1)]


@pytest.fixture
def served() -> Iterator[tuple[srv._Server, GatedCollector]]:
    collector = GatedCollector()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    server = srv.serve_registry(registry, "127.0.0.1", 0)
    try:
        yield server, collector
    finally:
        collector.gate.set()
        # A deadlocked accept loop never ends serve_forever: fail, do not hang the suite.
        stop = threading.Thread(target=server.shutdown, daemon=True)
        stop.start()
        stop.join(10)
        assert not stop.is_alive(), "the accept loop is stuck"
        server.server_close()


def connect(server: srv._Server) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", server.server_port), timeout=5)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")  # RST on close
    return s


def scrape(server: srv._Server, timeout: float = 3.0) -> bytes:
    with socket.create_connection(("127.0.0.1", server.server_port), timeout=timeout) as s:
        s.sendall(REQUEST)
        return read_all(s)


def read_all(s: socket.socket) -> bytes:
    out = b""
    while chunk := s.recv(65536):
        out += chunk
    return out


def closed_by_server(s: socket.socket) -> bool:
    """True if the server has closed ``s`` (EOF or reset), False if it still holds it."""
    s.setblocking(False)
    try:
        return s.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        s.setblocking(True)


def eventually(cond: object, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():  # type: ignore[operator]
            return True
        time.sleep(0.02)
    return bool(cond())  # type: ignore[operator]


def test_every_slot_answering_refuses_a_newcomer_and_serves_on(
        served: tuple[srv._Server, GatedCollector]) -> None:
    """The cap's full case closed the newcomer while holding the lock that closing takes:
    the accept loop deadlocked and serve never answered again."""
    server, collector = served
    collector.gate.clear()
    held = []
    for _ in range(srv.MAX_CONNECTIONS):
        s = connect(server)
        s.sendall(REQUEST)
        held.append(s)
    assert eventually(lambda: collector.inside == srv.MAX_CONNECTIONS, 10), collector.inside
    late = connect(server)
    late.sendall(REQUEST)
    assert eventually(lambda: closed_by_server(late), 3), "a newcomer waited for a slot"
    late.close()
    assert server.refused >= 1 and server.evicted == 0
    collector.gate.set()
    for s in held:  # each request that got a slot is answered in full
        assert read_all(s).startswith(b"HTTP/1.0 200"), "an answering slot was given up"
        s.close()
    assert b"gmpmon_test_up 1.0" in scrape(server)


def test_a_slot_waiting_for_its_request_makes_room_for_a_scrape(
        served: tuple[srv._Server, GatedCollector]) -> None:
    server, _ = served
    slow = []
    for _ in range(3 * srv.MAX_CONNECTIONS):
        s = connect(server)
        s.sendall(REQUEST[:10])
        slow.append(s)
    assert b"gmpmon_test_up 1.0" in scrape(server)
    assert server.evicted >= 2 * srv.MAX_CONNECTIONS, server.evicted
    assert eventually(lambda: sum(not closed_by_server(s) for s in slow)
                      <= srv.MAX_CONNECTIONS, 3)
    for s in slow:
        s.close()


def test_a_byte_a_second_does_not_hold_a_connection_past_the_request_deadline(
        served: tuple[srv._Server, GatedCollector], monkeypatch: pytest.MonkeyPatch) -> None:
    server, _ = served
    monkeypatch.setattr(srv, "REQUEST_TIMEOUT_S", 1.0)  # read by the accept loop each pass
    threads = threading.active_count()
    s = connect(server)
    s.sendall(b"GET /metrics HTTP/1.0\r\nX-Slow: ")
    t0 = time.monotonic()
    while not closed_by_server(s):  # one header byte every 0.2 s: each read is in time
        assert time.monotonic() - t0 < 1.0 + 2.0, "still held past the deadline"
        try:
            s.send(b"a")
        except OSError:
            break
        time.sleep(0.2)
    held = time.monotonic() - t0
    s.close()
    assert held >= 0.9, held  # not before its deadline either
    assert server.timed_out == 1
    assert eventually(lambda: threading.active_count() <= threads, 3)
    assert b"gmpmon_test_up 1.0" in scrape(server)


def test_closing_the_server_does_not_wait_for_slow_clients() -> None:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(GatedCollector())
    server = srv.serve_registry(registry, "127.0.0.1", 0)
    slow = [connect(server) for _ in range(8)]
    for s in slow:
        s.sendall(REQUEST[:5])
    assert b"gmpmon_test_up" in scrape(server)
    t0 = time.monotonic()
    server.shutdown()
    server.server_close()  # joins the connection threads
    assert time.monotonic() - t0 < srv.REQUEST_TIMEOUT_S - 1, "close waited for the clients"
    assert all(closed_by_server(s) for s in slow)
    for s in slow:
        s.close()
