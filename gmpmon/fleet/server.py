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


# At most this many connections are served at once (a thread each). Past it, the connection
# that has waited longest for its request to arrive is closed to make room: 500 slow
# clients cannot crowd out a scrape, whose request comes in one packet. A request must
# arrive within REQUEST_TIMEOUT_S, and no read or write of a connection may stall longer.
MAX_CONNECTIONS = 64
REQUEST_TIMEOUT_S = 5.0


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
        self._lock = threading.Lock()
        # Connections being served -> (accepted at, its request has been read).
        self._open: dict[socket.socket, list[Any]] = {}
        self.evicted = 0
        super().__init__(addr, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._lock:
            if len(self._open) >= MAX_CONNECTIONS:
                waiting = [(v[0], s) for s, v in self._open.items() if not v[1]]
                if not waiting:  # every slot is writing a response: refuse this one
                    self.shutdown_request(request)
                    return
                _, oldest = min(waiting, key=lambda w: w[0])
                del self._open[oldest]
                self.evicted += 1
                with contextlib.suppress(OSError):
                    oldest.shutdown(socket.SHUT_RDWR)  # its thread ends on the closed socket
            self._open[request] = [time.monotonic(), False]
        super().process_request(request, client_address)

    def request_read(self, request: Any) -> None:
        with self._lock:
            v = self._open.get(request)
            if v is not None:
                v[1] = True

    def shutdown_request(self, request: Any) -> None:
        with self._lock:
            self._open.pop(request, None)
        super().shutdown_request(request)

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

        def setup(self) -> None:
            super().setup()
            # The whole request (line and headers) within REQUEST_TIMEOUT_S, not per read:
            # a client trickling a byte a second would otherwise hold its thread forever.
            self._deadline = time.monotonic() + REQUEST_TIMEOUT_S

        def parse_request(self) -> bool:
            ok: bool = super().parse_request()
            if time.monotonic() > self._deadline:
                self.close_connection = True
                return False
            self.server.request_read(self.request)
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
    threading.Thread(target=server.serve_forever, name="gmpmon-http", daemon=True).start()
    return server
