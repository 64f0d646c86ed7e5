"""Deadlines for blocking socket reads: a Watchdog shuts every socket handed to it down when its
deadline passes, waking any read blocked on one. A socket's own read timeout restarts with every
byte, so a server that drips its answer would otherwise hold the reader as long as it likes.

A thread installs one for a block with `watching(deadline)`; connections built on
`WatchedConnection` (and anything calling `watch_current`) hand their sockets to it, and are given
no more than its time left to connect, name lookup included. Used by the lens fetcher and by the
feed jobs' HTTP session.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import os
import socket
import threading
import time

import urllib3


class Watchdog:
    def __init__(self, deadline: float):
        self.deadline = deadline  # a time.monotonic() value
        self.budget_s = deadline - time.monotonic()
        self.fired = False
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(max(0.0, self.budget_s), self._fire)
        self._timer.daemon = True
        self._timer.start()

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def watch(self, sock: socket.socket) -> None:
        # A duplicate descriptor: shutdown() acts on the connection itself, so it also stops a TLS
        # layer over the original (an SSLSocket can neither be shut from another thread nor dup()ed).
        with self._lock, contextlib.suppress(OSError):  # a socket closed meanwhile has nothing to stop
            self._socks.append(socket.socket(fileno=os.dup(sock.fileno())))
            if self.fired:
                self._shutdown(self._socks[-1])

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
            for sock in self._socks:
                self._shutdown(sock)

    @staticmethod
    def _shutdown(sock: socket.socket) -> None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._timer.cancel()
        with self._lock:
            for sock in self._socks:
                sock.close()
            self._socks.clear()


_current = threading.local()  # the Watchdog of this thread's `watching` block


def watch_current(sock: socket.socket | None) -> None:
    """Hand `sock` to this thread's Watchdog; nothing outside a `watching` block, or without a socket."""
    watchdog = getattr(_current, "watchdog", None)
    if watchdog is not None and sock is not None:
        watchdog.watch(sock)


class WatchedConnection:
    """Mixin for a urllib3 connection class: each socket it opens is watched by the thread's Watchdog,
    and its connect, name lookup included, given no more than the Watchdog's time left."""

    def _new_conn(self):
        watchdog = getattr(_current, "watchdog", None)
        if watchdog is None:
            return super()._new_conn()
        # Until it connects, a socket is not the Watchdog's to shut down, and before that the name
        # lookup (getaddrinfo) can be neither interrupted nor timed: a name server that never answers
        # holds it for resolv.conf's timeout times its attempts, per server and search domain. So the
        # connect runs in a worker waited for the time left, and gets no more than that itself (not a
        # redirect hop's full connect timeout), should it outlive the wait.
        left = max(watchdog.remaining(), 0.001)
        self.timeout = min(self.timeout, left) if isinstance(self.timeout, (int, float)) else left
        connected = concurrent.futures.Future()
        threading.Thread(target=_connect, args=(super()._new_conn, connected), daemon=True).start()
        concurrent.futures.wait([connected], timeout=left)
        if connected.cancel():  # still looking up or connecting
            raise urllib3.exceptions.ConnectTimeoutError(
                self, f"Connecting to {self.host} took longer than the {left:.3g} s left of the time limit.")
        sock = connected.result()
        watchdog.watch(sock)
        return sock


class WatchedHTTPConnection(WatchedConnection, urllib3.connection.HTTPConnection):
    pass


class WatchedHTTPSConnection(WatchedConnection, urllib3.connection.HTTPSConnection):
    pass


def _connect(new_conn, connected: concurrent.futures.Future) -> None:
    """Settle `connected` with what `new_conn()` returns or raises; close a socket come too late."""
    try:
        sock = new_conn()
    except Exception as exc:
        with contextlib.suppress(concurrent.futures.InvalidStateError):
            connected.set_exception(exc)
        return
    try:
        connected.set_result(sock)
    except concurrent.futures.InvalidStateError:  # cancelled: the caller has given up on it
        sock.close()


@contextlib.contextmanager
def watching(deadline: float):
    """Within the block, this thread's watched sockets are shut down at `deadline` (a time.monotonic()
    value); yields the Watchdog. On the way out the outer block's Watchdog is back in force."""
    outer = getattr(_current, "watchdog", None)
    watchdog = _current.watchdog = Watchdog(deadline)
    try:
        yield watchdog
    finally:
        _current.watchdog = outer
        watchdog.close()
