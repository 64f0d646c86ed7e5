"""Real servers for the tests: the app in waitress on a loopback port, stopped when the test ends."""
from __future__ import annotations

import contextlib
import threading

from siteapi import serving


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
def serve_wsgi(app, trusted_proxy: bool = True):
    """Run a WSGI app in waitress on 127.0.0.1:<free port> under siteapi.serving's options (without
    the trusted proxy if asked); yields the base URL. The loop runs in short turns so that it can
    stop, and its sockets are closed by the same thread (closing them under a running select()
    fails with EBADF)."""
    server = serving.create_server(app, behind_proxy=trusted_proxy, port=0, ident="siteapi-test")
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
