"""Live feeds: each module owns a job that refreshes site.db from an outside source and a reader.

tracks (the owner's playlist), around (venture-firm homepages and their changes), coffee (open
coffee slots from the owner's calendar), ledger (AI-crawler visits read from Caddy's access log);
crawlers is the one registry of AI and search crawlers, shared with the lens.
"""
from __future__ import annotations

import time

import urllib3

from siteapi import config


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
