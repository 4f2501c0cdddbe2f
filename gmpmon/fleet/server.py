"""The /metrics HTTP endpoint: read-only, loopback unless told otherwise.

prometheus-client renders the exposition format (text or OpenMetrics, gzip, by the scraper's
Accept headers); this module only decides what may be asked: GET or HEAD of ``/metrics``
(and ``/`` for a pointer to it). Anything else is 404 or 405: nothing here changes state.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
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


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, addr: tuple[str, int], handler: Any) -> None:
        try:
            family = socket.AF_INET6 if ipaddress.ip_address(addr[0]).version == 6 else (
                socket.AF_INET
            )
        except ValueError:
            family = socket.AF_INET  # a host name: bind resolves it
        self.address_family = family
        super().__init__(addr, handler)


def serve_registry(registry: CollectorRegistry, host: str, port: int) -> _Server:
    """Bind and start serving in a daemon thread. Raises UsageError when the address cannot
    be bound (in use, not local, no permission)."""
    base = MetricsHandler.factory(registry)

    class Handler(base):  # type: ignore[misc, valid-type]
        server_version = "gmpmon"

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
