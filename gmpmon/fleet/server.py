"""The /metrics HTTP endpoint: read-only, loopback unless told otherwise.

prometheus-client renders the exposition format (text or OpenMetrics, gzip, by the scraper's
Accept headers); this module only decides what may be asked: GET or HEAD of ``/metrics``
(and ``/`` for a pointer to it). Anything else is 404 or 405: nothing here changes state.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import sys
import threading
import time
from http.server import ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import MetricsHandler

from gmpmon.errors import UsageError


def parse_listen(spec: str) -> tuple[str, int]:
    """"127.0.0.1:9464", "[::1]:9464", ":9464" (all addresses) -> (host, port)."""
    host, sep, port_s = spec.rpartition(":")
    if not sep:
        raise UsageError(f"--listen {spec!r}: expected HOST:PORT (e.g. 127.0.0.1:9464)")
    try:
        port = int(port_s)
    except ValueError:
        raise UsageError(f"--listen {spec!r}: port {port_s!r} is not a number") from None
    if not 0 <= port <= 65535:
        raise UsageError(f"--listen {spec!r}: port {port} is out of range")
    host = host.strip("[]") or "0.0.0.0"
    return host, port


# At most MAX_CONNECTIONS connections are served at once (a thread each). Past it, the one
# that has waited longest for its request is closed to make room: 500 slow clients cannot
# crowd out a scrape, whose request comes in one packet; when every slot is answering a
# request, the new connection is closed at once (the scraper retries at its next interval).
# Each connection has deadlines for its whole request and its whole life, kept by the
# accept loop: a per-read timeout alone let a client sending a byte a second keep its
# thread for as long as it liked.
MAX_CONNECTIONS = 64
REQUEST_TIMEOUT_S = 5.0  # the request line and headers, all of them; also each read/write
CONNECTION_TIMEOUT_S = 30.0  # accept to the response's last byte
_POLL_S = 0.5  # how often serve_forever checks the deadlines (service_actions)


class _Conn:
    __slots__ = ("accepted", "answering")

    def __init__(self) -> None:
        self.accepted = time.monotonic()
        self.answering = False  # its request has arrived: the response is being made


def _hang_up(sock: socket.socket) -> None:
    """Its thread's next read or write ends at once (EOF or EPIPE); it closes the socket."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # the listen backlog: bursts of connections wait, not drop

    def __init__(self, addr: tuple[str, int], handler: Any) -> None:
        try:
            family = socket.AF_INET6 if ipaddress.ip_address(addr[0]).version == 6 else (
                socket.AF_INET
            )
        except ValueError:
            family = socket.AF_INET  # a host name: bind resolves it
        self.address_family = family
        # Guards _open. A socket is hung up only while it is in _open and under the lock,
        # and leaves _open (under the lock) before its thread closes it: never a shutdown()
        # of a closed socket whose descriptor was reused.
        self._lock = threading.Lock()
        self._open: dict[socket.socket, _Conn] = {}
        self.evicted = 0  # closed to make room for a newer connection
        self.refused = 0  # closed on arrival: every slot was answering
        self.timed_out = 0  # closed at a deadline
        super().__init__(addr, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._lock:
            full = len(self._open) >= MAX_CONNECTIONS
            if full:
                oldest = min((s for s, c in self._open.items() if not c.answering),
                             key=lambda s: self._open[s].accepted, default=None)
                if oldest is not None:
                    del self._open[oldest]
                    _hang_up(oldest)
                    self.evicted += 1
                    full = False
            if not full:
                self._open[request] = _Conn()
        if full:  # every slot is answering a request
            self.refused += 1
            super().shutdown_request(request)
            return
        super().process_request(request, client_address)

    def service_actions(self) -> None:
        """Called by serve_forever after each accept and at least every _POLL_S."""
        now = time.monotonic()
        with self._lock:
            late = [s for s, c in self._open.items() if now - c.accepted > (
                CONNECTION_TIMEOUT_S if c.answering else REQUEST_TIMEOUT_S)]
            for s in late:
                del self._open[s]
                _hang_up(s)
            self.timed_out += len(late)
        super().service_actions()

    def request_arrived(self, request: Any) -> None:
        with self._lock:
            c = self._open.get(request)
            if c is not None:
                c.answering = True

    def shutdown_request(self, request: Any) -> None:
        with self._lock:
            self._open.pop(request, None)
        super().shutdown_request(request)

    def server_close(self) -> None:
        """Hang up on every client first: closing joins the connection threads."""
        with self._lock:
            for s in self._open:
                _hang_up(s)
            self._open.clear()
        super().server_close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away, timed out or was closed to make room: nothing to say
        (socketserver printed a traceback for each). Anything else: one line."""
        e = sys.exc_info()[1]
        if isinstance(e, OSError):
            return
        print(f"gmpmon: serve: a request from {client_address[0]} failed: "
              f"{type(e).__name__}: {e}", file=sys.stderr)


def serve_registry(registry: CollectorRegistry, host: str, port: int) -> _Server:
    """Bind and start serving in a daemon thread. Raises UsageError when the address cannot
    be bound (in use, not local, no permission)."""
    base = MetricsHandler.factory(registry)

    class Handler(base):  # type: ignore[misc, valid-type]
        server_version = "gmpmon"
        timeout = REQUEST_TIMEOUT_S  # per read and write of the connection

        def parse_request(self) -> bool:
            ok: bool = super().parse_request()
            self.server.request_arrived(self.request)
            return ok

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                super().do_GET()
            elif path == "/":
                body = b'<html><body><a href="/metrics">/metrics</a></body></html>\n'
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            else:
                self.send_error(404, "only /metrics is served")

        def do_HEAD(self) -> None:
            self.send_response(200 if self.path.split("?", 1)[0] in ("/", "/metrics") else 404)
            self.end_headers()

        def _refuse(self) -> None:
            self.send_error(405, "read-only: only GET and HEAD")

        do_POST = do_PUT = do_DELETE = do_PATCH = _refuse

    try:
        server = _Server((host, port), Handler)
    except OSError as e:
        raise UsageError(f"cannot listen on {host}:{port}: {e.strerror or e}") from e
    threading.Thread(target=server.serve_forever, args=(_POLL_S,), name="gmpmon-http",
                     daemon=True).start()
    return server
