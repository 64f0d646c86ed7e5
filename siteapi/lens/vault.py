"""Representation snapshots: one URL fetched as up to four client profiles, one row per profile.

Backs the MCP tools representation_capture / representation_read / representation_compare.
A profile is a set of request headers: `browser` (a desktop browser's Accept headers), `bot`
(the lens's own crawler headers), `markdown` (`Accept: text/markdown`) and `identity` (no
compression). Fetches go through the caller's safe fetcher (the app's: its signer and [lens]
limits), concurrently, outside any transaction; the rows are written in one short transaction.

Anyone may add rows, so a row is small and the table bounded: header values are cut at
HEADER_CHARS, titles at TITLE_CHARS, a URL is refused when it is longer than MAX_URL_CHARS once
normalised (compare refetches it, so it is kept whole), only the newest KEEP_ROWS rows are kept,
and the daily `run_snapshot_purge` deletes rows older than KEEP_DAYS.
"""
from __future__ import annotations

import hashlib
import sqlite3
from concurrent.futures import ThreadPoolExecutor

from .. import db
from ..ratelimit import TargetBudget
from ..web import ApiError
from . import page, targets
from .fetch import (ACCEPT_ENCODING, ACCEPT_HTML, CHROME_UA, MAX_URL_CHARS, FetchFailed, Fetcher, FetchRefused,
                    FetchResult)
from .observe import checked, fetch_error

SCHEMA = """
CREATE TABLE IF NOT EXISTS representation_snapshots (
    id INTEGER PRIMARY KEY,
    url TEXT NOT NULL,
    profile TEXT NOT NULL,
    observed_at TEXT NOT NULL,
    final_url TEXT,
    status INTEGER,
    content_type TEXT,
    content_encoding TEXT,
    content_length TEXT,
    cache_control TEXT,
    vary TEXT,
    etag TEXT,
    last_modified TEXT,
    server TEXT,
    age TEXT,
    body_bytes INTEGER,
    body_hash TEXT,
    truncated INTEGER,
    title TEXT,
    word_count INTEGER,
    error TEXT
);
CREATE INDEX IF NOT EXISTS representation_snapshots_url ON representation_snapshots(url, profile, observed_at);
"""

PROFILES = {
    "browser": {"User-Agent": CHROME_UA, "Accept": ACCEPT_HTML, "Accept-Language": "en-US,en;q=0.9",
                "Accept-Encoding": ACCEPT_ENCODING},
    "bot": {"Accept": ACCEPT_HTML, "Accept-Encoding": ACCEPT_ENCODING},
    "markdown": {"Accept": "text/markdown, text/plain;q=0.5", "Accept-Encoding": ACCEPT_ENCODING},
    "identity": {"Accept": ACCEPT_HTML, "Accept-Encoding": "identity"},
}
DEFAULT_PROFILES = ("browser", "markdown", "identity")
MAX_PROFILES = 4
HEADER_COLUMNS = {"content_type": "content-type", "content_encoding": "content-encoding",
                  "content_length": "content-length", "cache_control": "cache-control", "vary": "vary",
                  "etag": "etag", "last_modified": "last-modified", "server": "server", "age": "age"}
COMPARED = ("final_url", "status", *HEADER_COLUMNS, "body_bytes", "body_hash", "truncated", "title", "word_count",
            "error")
HEADER_CHARS = 256
TITLE_CHARS = 300
KEEP_ROWS = 10_000
KEEP_DAYS = 30


def parse_profiles(profiles) -> list[str]:
    """The profile list from a list or a comma-separated string; raises ApiError 400 when wrong."""
    if profiles is None or profiles == "" or profiles == []:
        return list(DEFAULT_PROFILES)
    items = profiles.split(",") if isinstance(profiles, str) else profiles
    if not isinstance(items, (list, tuple)) or not all(isinstance(p, str) for p in items):
        raise ApiError(400, "profiles must be a list of profile names: browser, bot, markdown, identity.",
                       code="bad_profiles", parameter="profiles")
    names = list(dict.fromkeys(p.strip().lower() for p in items if p.strip()))
    unknown = [p for p in names if p not in PROFILES]
    if unknown:
        raise ApiError(400, f"Unknown profile {unknown[0][:40]!r}; use browser, bot, markdown or identity.",
                       code="bad_profiles", parameter="profiles")
    if len(names) > MAX_PROFILES:
        raise ApiError(400, f"At most {MAX_PROFILES} profiles per capture.", code="bad_profiles", parameter="profiles")
    return names or list(DEFAULT_PROFILES)


def capture(conn: sqlite3.Connection, url: str, profiles=None, *, fetcher: Fetcher,
            budget: TargetBudget | None = None) -> dict:
    """Fetch `url` as each profile, spending `budget` (targets.py), and store one row per profile.
    Returns {ok, url, snapshots}. When no profile got an answer, raises the error /lens/fetch
    answers for the first failure and stores nothing: a snapshot holding only an error is nothing
    to compare with."""
    names = parse_profiles(profiles)
    target = checked(url, fetcher)
    if len(target.url) > MAX_URL_CHARS:
        raise ApiError(400, f"The URL is longer than {MAX_URL_CHARS} characters once percent-encoded; send a shorter one.",
                       code="url_refused", parameter="url")
    fetcher = targets.spending(fetcher, budget, target)
    with ThreadPoolExecutor(max_workers=len(names)) as pool:
        observed = list(pool.map(lambda name: _observe(fetcher, target.url, name), names))
    failures = [failed for _, failed in observed if failed is not None]
    if len(failures) == len(observed):
        raise fetch_error(failures[0])
    rows = [row for row, _ in observed]
    ids = _store(conn, rows)
    return {"ok": True, "url": target.url,
            "snapshots": [{"id": row_id, **row} for row_id, row in zip(ids, rows)]}


def read(conn: sqlite3.Connection, snapshot_id) -> dict:
    """One stored snapshot. Raises ApiError 400 for a non-number id, 404 when it does not exist."""
    return {"ok": True, "snapshot": _row(conn, snapshot_id)}


def compare(conn: sqlite3.Connection, snapshot_id, *, fetcher: Fetcher, budget: TargetBudget | None = None) -> dict:
    """Refetch a snapshot's URL with the same profile, spending `budget` (targets.py), store the new
    row, list what changed."""
    before = _row(conn, snapshot_id)
    fetcher = targets.spending(fetcher, budget, checked(before["url"], fetcher))
    after, _ = _observe(fetcher, before["url"], before["profile"])  # a failure is a change worth keeping
    (after_id,) = _store(conn, [after])
    after = {"id": after_id, **after}
    changes = [{"field": name, "before": before[name], "after": after[name]}
               for name in COMPARED if before[name] != after[name]]
    return {"ok": True, "before": before, "after": after, "changed": bool(changes), "changes": changes}


def _observe(fetcher: Fetcher, url: str, profile: str) -> tuple[dict, FetchRefused | FetchFailed | None]:
    """The row of one profile's fetch, and why the fetch failed when it did."""
    row = {"url": url, "profile": profile, "observed_at": db.now_iso(), "final_url": None, "status": None,
           **{column: None for column in HEADER_COLUMNS}, "body_bytes": None, "body_hash": None,
           "truncated": None, "title": None, "word_count": None, "error": None}
    try:
        result = fetcher.fetch(url, PROFILES[profile])
    except (FetchRefused, FetchFailed) as exc:
        row["error"] = str(exc)
        return row, exc
    row.update(_describe(result))
    return row, None


def _describe(result: FetchResult) -> dict:
    fields = {column: _cut(result.headers.get(header), HEADER_CHARS) for column, header in HEADER_COLUMNS.items()}
    title, words = None, None
    if result.body_unreadable is None:
        analysed = page.analyse(result.body, result.content_type, result.headers, result.final_url)
        title = _cut(analysed.structured.get("title"), TITLE_CHARS) if analysed.html else None
        words = analysed.anatomy["wordCount"]
    return {**fields, "final_url": result.final_url[:MAX_URL_CHARS], "status": result.status,
            "body_bytes": len(result.body), "body_hash": "sha256:" + hashlib.sha256(result.body).hexdigest(),
            "truncated": int(result.truncated), "title": title, "word_count": words,
            "error": "undecodable content encoding" if result.body_unreadable else None}


def _cut(value: str | None, chars: int) -> str | None:
    return None if value is None else value[:chars]


def _store(conn: sqlite3.Connection, rows: list[dict]) -> list[int]:
    """Insert the rows and drop the oldest past the newest KEEP_ROWS, in one transaction."""
    columns = list(rows[0])
    sql = f"INSERT INTO representation_snapshots ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"
    ids = []
    with db.transaction(conn):
        for row in rows:
            ids.append(conn.execute(sql, [row[c] for c in columns]).lastrowid)
        conn.execute("DELETE FROM representation_snapshots WHERE id < (SELECT id FROM representation_snapshots "
                     "ORDER BY id DESC LIMIT 1 OFFSET ?)", (KEEP_ROWS - 1,))
    return ids


def run_snapshot_purge(settings) -> str:
    """Job (daily): delete the snapshots older than KEEP_DAYS."""
    conn = db.writer(settings.db_path)
    try:
        with db.transaction(conn):
            deleted = conn.execute("DELETE FROM representation_snapshots WHERE observed_at < ?",
                                   (db.now_iso(ago_s=KEEP_DAYS * 86400),)).rowcount
    finally:
        conn.close()
    return f"{deleted} snapshots older than {KEEP_DAYS} days deleted"


def _row(conn: sqlite3.Connection, snapshot_id) -> dict:
    try:
        # JSON's 1.0 is the integer 1 to JSON Schema, so an MCP client may send it that way
        key = int(snapshot_id) if isinstance(snapshot_id, float) and snapshot_id.is_integer() else int(str(snapshot_id).strip())
    except (TypeError, ValueError, OverflowError):
        raise ApiError(400, "snapshot_id must be the whole number a capture returned.", code="bad_snapshot_id",
                       parameter="snapshot_id") from None
    row = None
    if 0 < key < 2 ** 63:  # ids are positive SQLite integers; a bigger number overflows the driver
        row = conn.execute("SELECT * FROM representation_snapshots WHERE id = ?", (key,)).fetchone()
    if row is None:
        raise ApiError(404, f"No snapshot has id {key}; capture one first.", code="not_found", parameter="snapshot_id")
    return {name: row[name] for name in row.keys()}
