"""The lens's lookup caches in site.db: an origin's discovery result (`lens_discovery_cache`, for
`[lens] discovery_cache_hours`) and a URL's CDN readiness level (`lens_mode_cache`, for
`cloudflare_cache_hours`), and the hourly job that deletes what is past its window.

A cache that cannot be read or written costs the next lookup some time, never an answer.
"""
from __future__ import annotations

import json
import sqlite3
import time

from .. import db
from .settings import scan_settings

SCHEMA = """
CREATE TABLE IF NOT EXISTS lens_discovery_cache (
    origin TEXT PRIMARY KEY,
    fetched_at REAL NOT NULL,
    payload TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS lens_mode_cache (
    url TEXT PRIMARY KEY,
    fetched_at REAL NOT NULL,
    payload TEXT NOT NULL
);
"""
# observed_at repeated fetched_at as text, and nothing read it; site.dbs made before 2026-11-21 have it.
DROPPED_COLUMNS = {"lens_discovery_cache": ("observed_at",)}
DISCOVERY, LEVELS = "lens_discovery_cache", "lens_mode_cache"
# Anyone can have any origin scanned (a wildcard DNS name gives every scan a new one), so what the
# caches may hold is bounded: a discovery result takes 6-9 KB on the test sites and 67 KB with every
# document at its cap (a robots.txt over about 200 KB goes past the cap, and its origin is read
# afresh each time); 1,000 rows are at most 256 MB and typically under 10.
MAX_PAYLOAD_BYTES = 256 * 1024  # of UTF-8: a character may take four
MAX_ROWS = 1000
WRITE_WAIT_MS = 100  # the wait of an optional cache write for the write lock a job may hold
_KEYS = {DISCOVERY: "origin", LEVELS: "url"}


def read(conn: sqlite3.Connection | None, table: str, key: str, hours: float) -> dict | None:
    """The payload stored under `key` within the last `hours`, or None."""
    if conn is None or hours <= 0:
        return None
    try:
        row = conn.execute(f"SELECT fetched_at, payload FROM {table} WHERE {_KEYS[table]} = ?", (key,)).fetchone()
        return json.loads(row[1]) if row and time.time() - row[0] <= hours * 3600 else None
    except (sqlite3.Error, ValueError):
        return None


def write(conn: sqlite3.Connection | None, table: str, key: str, payload: dict) -> None:
    """Store `payload` under `key` as of now, replacing what was there, unless it is longer than
    MAX_PAYLOAD_BYTES; the table keeps its newest MAX_ROWS rows."""
    if conn is None:
        return
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    if len(text.encode()) > MAX_PAYLOAD_BYTES:
        return
    row = {_KEYS[table]: key, "fetched_at": time.time(), "payload": text}
    try:
        conn.isolation_level = None  # the app's connection: `transaction` draws the boundaries
        waits = conn.execute("PRAGMA busy_timeout").fetchone()[0]
        # A cache entry is worth less than the request thread: it waits this long for a job's write.
        conn.execute(f"PRAGMA busy_timeout={WRITE_WAIT_MS}")
        try:
            with db.transaction(conn):
                conn.execute(f"INSERT OR REPLACE INTO {table}({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                             tuple(row.values()))
                conn.execute(f"DELETE FROM {table} WHERE {_KEYS[table]} IN (SELECT {_KEYS[table]} FROM {table} "
                             "ORDER BY fetched_at DESC LIMIT -1 OFFSET ?)", (MAX_ROWS,))
        finally:
            conn.execute(f"PRAGMA busy_timeout={waits}")
    except sqlite3.Error:
        pass


def run_cache_purge(settings) -> str:
    """Job (hourly): delete the cached lookups past their window, so the origins and URLs callers
    inspected are kept only as long as the caches reuse them."""
    conf = scan_settings(settings)
    now = time.time()
    conn = db.writer(settings.db_path)
    try:
        with db.transaction(conn):
            origins = conn.execute("DELETE FROM lens_discovery_cache WHERE fetched_at < ?",
                                   (now - conf["discovery_cache_hours"] * 3600,)).rowcount
            urls = conn.execute("DELETE FROM lens_mode_cache WHERE fetched_at < ?",
                                (now - conf["cloudflare_cache_hours"] * 3600,)).rowcount
    finally:
        conn.close()
    return f"{origins} discovery results and {urls} CDN levels past their window deleted"
