"""Real servers for the tests: the app in waitress on a loopback port, and other servers run as
processes (Caddy, Datasette), each stopped when the test ends."""
from __future__ import annotations

import contextlib
import socket
import subprocess
import threading
import time
from typing import Callable
from urllib.parse import urlsplit

from siteapi import serving


def write_response(handler, status: int, body: bytes | str, content_type: str, headers: dict | None = None) -> None:
    """One whole answer from a BaseHTTPRequestHandler: status, type, length, `headers`, then the body
    (none to a HEAD)."""
    data = body.encode() if isinstance(body, str) else body
    handler.send_response(status)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(data)))
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.end_headers()
    if handler.command != "HEAD":
        handler.wfile.write(data)


def start_thread(server):
    """Serve a socketserver-style server (one with a `stopping` event) in a daemon thread."""
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    return server, thread


def stop_thread(server, thread) -> None:
    server.stopping.set()  # lets handlers that sleep on purpose (slow, drip, hang) give up
    server.shutdown()
    server.server_close()
    thread.join(5)


@contextlib.contextmanager
def serve_wsgi(app, trusted_proxy: bool = True, **overrides):
    """Run a WSGI app in waitress on 127.0.0.1:<free port> under siteapi.serving's options (without
    the trusted proxy if asked, and with waitress `overrides`); yields the base URL. The loop runs in short turns so that it can
    stop, and its sockets are closed by the same thread (closing them under a running select()
    fails with EBADF)."""
    server = serving.create_server(app, behind_proxy=trusted_proxy, **{"port": 0, "ident": "siteapi-test", **overrides})
    stopping = threading.Event()

    def run():
        while not stopping.is_set():
            server.asyncore.loop(timeout=0.05, map=server._map, count=1)
        for dispatcher in list(server._map.values()):
            dispatcher.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.effective_port}"
    finally:
        stopping.set()
        thread.join(timeout=5)
        server.task_dispatcher.shutdown(timeout=5)


def open_stream(base: str, path: str, headers: str = "") -> socket.socket:
    """A raw GET on a socket, so a test sees each byte as the server sends it (no client buffering)."""
    parts = urlsplit(base)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=10)
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{headers}\r\n".encode())
    return sock


def read_until(sock: socket.socket, marker: bytes) -> bytes:
    """Read until `marker` arrives; socket.timeout (a failure) if something holds it back."""
    seen = b""
    while marker not in seen:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed before {marker!r}"
        seen += chunk
    return seen


@contextlib.contextmanager
def running(command: list[str], ready: Callable[[], bool], what: str, timeout: float = 60, **popen):
    """Start `command`, wait until `ready()` (failing if it exits first), yield the process, stop it."""
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **popen)
    try:
        deadline = time.monotonic() + timeout
        while not ready():
            assert time.monotonic() < deadline and proc.poll() is None, f"{what} did not come up"
            time.sleep(0.2)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def accepts(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        return True
    return False
