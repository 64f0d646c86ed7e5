"""Live feeds: each module owns a job that refreshes site.db from an outside source and a reader.

tracks (the owner's playlist), around (venture-firm homepages and their changes), coffee (open
coffee slots from the owner's calendar), ledger (AI-crawler visits read from Caddy's access log);
crawlers is the one registry of AI and search crawlers, shared with the lens.

The jobs that read the network (tracks, coffee) make their calls through `session()` inside a
`time_limit(deadline)`: a socket's read timeout restarts with every byte, so a server that drips
its status line and headers (http.client reads a hundred header lines of 64 KB) would otherwise
hold a job for days; at the deadline the limit shuts the call's sockets down. That holds for the
whole call: every redirect hop's connection, its name lookup included (a name server that never
answers would hold getaddrinfo for as long as resolv.conf says), and the connections to an
http(s):// proxy named by HTTP_PROXY or HTTPS_PROXY (honoured, as requests does, for an owner whose
server reaches out only through one).
"""
from __future__ import annotations

import contextlib
import time

import requests
import urllib3

from siteapi import config
from siteapi.watchdog import WatchedHTTPConnection, WatchedHTTPSConnection, watch_current, watching


class FeedError(RuntimeError):
    """An outside source could not be read or answered something unusable; the message says which."""


def option(settings, key: str, default, low: float | None = None, high: float | None = None):
    """`[feeds] key` from site.toml (or SITE_FEEDS_KEY), checked as config.option checks it."""
    return config.option(settings, "feeds", key, default, low, high)


def read_capped(response, max_bytes: int, deadline: float, what: str) -> tuple[bytes, bool]:
    """Read a streamed requests response up to `max_bytes`; (body, truncated). Past `deadline` raise.

    read1 returns whatever one socket read brings, so a server that drips a byte at a time is
    stopped at the deadline (give or take one read timeout) instead of filling a 16 KB chunk first."""
    chunks, size = [], 0
    try:
        while chunk := response.raw.read1(16384, decode_content=True):
            if time.monotonic() > deadline:
                raise FeedError(f"{what} took longer than its time limit.")
            chunks.append(chunk)
            size += len(chunk)
            if size > max_bytes:
                return b"".join(chunks)[:max_bytes], True
    except urllib3.exceptions.HTTPError as exc:
        raise FeedError(f"{what} broke off its answer: {exc.__class__.__name__}.") from None
    return b"".join(chunks), False


class _WatchedPool:
    def _get_conn(self, timeout=None):
        conn = super()._get_conn(timeout)
        watch_current(conn.sock)  # a kept-alive connection was opened under an earlier limit
        return conn


class _WatchedHTTPPool(_WatchedPool, urllib3.HTTPConnectionPool):
    ConnectionCls = WatchedHTTPConnection


class _WatchedHTTPSPool(_WatchedPool, urllib3.HTTPSConnectionPool):
    ConnectionCls = WatchedHTTPSConnection


_WATCHED_POOLS = {"http": _WatchedHTTPPool, "https": _WatchedHTTPSPool}


class _WatchedAdapter(requests.adapters.HTTPAdapter):
    def init_poolmanager(self, *args, **kwargs):
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = _WATCHED_POOLS

    def proxy_manager_for(self, proxy, **proxy_kwargs):
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        if isinstance(manager, urllib3.ProxyManager):  # not a SOCKS one, whose pools are its own
            manager.pool_classes_by_scheme = _WATCHED_POOLS
        return manager


def session() -> requests.Session:
    """A requests Session whose calls `time_limit` can cut off."""
    http = requests.Session()
    http.mount("http://", _WatchedAdapter())
    http.mount("https://", _WatchedAdapter())
    return http


@contextlib.contextmanager
def time_limit(deadline: float, what: str):
    """Within the block, this thread's calls through a `session()` are cut off at `deadline` (a
    time.monotonic() value). Once the deadline has passed, the block raises FeedError saying `what`
    took too long, whether the cut broke a read or ended it early (http.client takes the end of the
    stream for the end of the headers, or of a body without a length), or a connect (name lookup
    included) given only the time left timed out a moment before the cut."""
    with watching(deadline) as watchdog:
        try:
            yield
        except Exception:
            if not (watchdog.fired or watchdog.remaining() <= 0):
                raise
    if watchdog.fired or watchdog.remaining() <= 0:
        raise FeedError(f"{what} took longer than its time limit.")
