"""Loopback TLS servers for the fetcher's https path: `LoopbackTls`, an https site on 127.0.0.1
with a trustme certificate that records the SNI each handshake asked for, and `StallingListener`,
which accepts TCP and never speaks, so a client's TLS handshake hangs. Both bind 127.0.0.1 only,
run in daemon threads and stop when `serving()` ends; the fetcher reaches them through
`lens_web.loopback_fetcher` (its stub resolver and one-port policy)."""
from __future__ import annotations

import contextlib
import socketserver
import ssl
import threading
from http.server import ThreadingHTTPServer

import trustme

import lens_web
from servers import start_thread, stop_thread

CERT_NAMES = ("shop.test", "rebind.test", "127.0.0.1")
PAGE = b"<!doctype html><title>Over TLS</title><p>Served over TLS.</p>"


class TlsHandler(lens_web.Handler):
    server: "LoopbackTls"

    def do_GET(self):
        self.server.seen.append((self.path, dict(self.headers)))
        port = self.server.port
        routes = {
            "/page": lambda: self.send(200, PAGE),
            "/to-rebind": lambda: self.redirect(f"https://rebind.test:{port}/page"),
            "/to-plain": lambda: self.redirect(f"http://shop.test:{port}/page"),
        }
        routes.get(self.path, lambda: self.send(404, b"<title>Not found</title>"))()


class _Loopback:
    daemon_threads = True
    block_on_close = False

    @property
    def port(self) -> int:
        return self.server_address[1]


class LoopbackTls(_Loopback, ThreadingHTTPServer):
    """An https site whose certificate, issued by `ca`, covers `names`."""

    def __init__(self, ca: trustme.CA, names: tuple[str, ...] = CERT_NAMES):
        super().__init__(("127.0.0.1", 0), TlsHandler)
        self.stopping = threading.Event()
        self.seen: list = []
        self.server_names: list[str | None] = []  # the SNI of each handshake, None when none was sent
        self.failed_handshakes: list[str] = []
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert(*names).configure_cert(self.context)
        self.context.sni_callback = lambda tls, server_name, context: self.server_names.append(server_name)

    def url(self, path: str, host: str = "shop.test") -> str:
        return f"https://{host}:{self.port}{path}"

    def finish_request(self, request, client_address):
        # In the connection's own thread, so a client that stalls its handshake holds up no other
        with self.context.wrap_socket(request, server_side=True, do_handshake_on_connect=False) as tls:
            tls.settimeout(5)
            try:
                tls.do_handshake()
            except (ssl.SSLError, OSError) as exc:
                self.failed_handshakes.append(getattr(exc, "reason", None) or type(exc).__name__)
                return
            super().finish_request(tls, client_address)


class _Silent(socketserver.BaseRequestHandler):
    def handle(self):
        self.server.connections.append(self.client_address)
        self.server.stopping.wait()


class StallingListener(_Loopback, socketserver.ThreadingTCPServer):
    """Accepts TCP connections and never answers a byte."""

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _Silent)
        self.stopping = threading.Event()
        self.connections: list = []


@contextlib.contextmanager
def serving(server):
    """Run `server` in a daemon thread for the length of the block."""
    server, thread = start_thread(server)
    try:
        yield server
    finally:
        stop_thread(server, thread)
