"""Real servers for the tests: the app in waitress on a loopback port, stopped when the test ends."""
from __future__ import annotations

import contextlib
import threading

import waitress.server


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
def serve_wsgi(app, threads: int = 8, trusted_proxy: str | None = "127.0.0.1"):
    """Run a WSGI app in waitress on 127.0.0.1:<free port>; yields the base URL."""
    kwargs = dict(host="127.0.0.1", port=0, threads=threads, ident="siteapi-test")
    if trusted_proxy:
        kwargs.update(trusted_proxy=trusted_proxy, trusted_proxy_count=1,
                      trusted_proxy_headers={"x-forwarded-for"}, clear_untrusted_proxy_headers=True)
    server = waitress.server.create_server(app, **kwargs)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.effective_port}"
    finally:
        server.close()
        server.task_dispatcher.shutdown(timeout=5)
        thread.join(timeout=5)
