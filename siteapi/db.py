"""site.db: connections, the shared schema, and the job-run record.

Writers (jobs, and the app's few small rows) open read-write connections in WAL mode; readers
open `mode=ro`, one connection per thread. Every connection sets `busy_timeout`. Each area owns
its own tables and declares them as a `SCHEMA` string in its module; `ensure_schema` applies them
all, so a fresh `site.db` is complete after one call.
"""
from __future__ import annotations

import importlib
import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path

BUSY_TIMEOUT_MS = 5000

# Modules whose SCHEMA string defines tables in site.db (each area adds itself here).
SCHEMA_MODULES = (
    "siteapi.db", "siteapi.content", "siteapi.ranker", "siteapi.photos",
    "siteapi.feeds.tracks", "siteapi.feeds.around", "siteapi.feeds.coffee", "siteapi.feeds.ledger",
    "siteapi.lens.vault", "siteapi.lens.discovery", "siteapi.lens.scan", "siteapi.lens.census",
)

SCHEMA = """
CREATE TABLE IF NOT EXISTS job_runs (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    started TEXT NOT NULL,
    finished TEXT,
    ok INTEGER,
    error TEXT,
    summary TEXT
);
CREATE INDEX IF NOT EXISTS job_runs_name ON job_runs(name, started);
"""


def connect(path: str | Path, readonly: bool = False) -> sqlite3.Connection:
    """Open site.db. Read-only connections cannot write even by mistake (`mode=ro`)."""
    path = Path(path)
    if readonly:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(path, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    if not readonly:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
    return conn


_local = threading.local()


def reader(path: str | Path) -> sqlite3.Connection:
    """This thread's read-only connection to `path` (opened once, reused)."""
    key = str(path)
    conns = getattr(_local, "conns", None)
    if conns is None:
        conns = _local.conns = {}
    conn = conns.get(key)
    if conn is None:
        conn = conns[key] = connect(path, readonly=True)
    return conn


class LazyReader:
    """This thread's reader of `path`, opened at the first query: a site.db that cannot be opened
    then fails as that query (sqlite3.Error), where the feeds already answer in their own shape."""

    def __init__(self, path: str | Path):
        self.path = path

    def execute(self, sql: str, params=()) -> sqlite3.Cursor:
        return reader(self.path).execute(sql, params)


def versioned_cache(conn: sqlite3.Connection, limit: int = 512, recheck_s: float = 1.0) -> dict:
    """A per-thread dict for `conn` that empties itself when another connection has committed
    (PRAGMA data_version moved) or it holds `limit` entries. The version is read at most once per
    `recheck_s` per thread (a SQLite call per request costs a GIL hand-off under load), so an
    entry is at most that stale after a job writes. The thread keeps a reference to the last `conn`
    it saw, so a new connection can never take a closed one's place (and its cache) by reusing its id."""
    now = time.monotonic()
    if getattr(_local, "cache_checked", -recheck_s) + recheck_s <= now or getattr(_local, "cache_conn", None) is not conn:
        version = conn.execute("PRAGMA data_version").fetchone()[0]
        if getattr(_local, "cache_version", None) != (conn, version) or len(_local.cache) >= limit:
            _local.cache, _local.cache_version = {}, (conn, version)
        _local.cache_checked, _local.cache_conn = now, conn
    elif len(_local.cache) >= limit:
        _local.cache = {}
    return _local.cache


@contextmanager
def transaction(conn: sqlite3.Connection):
    """One short write transaction: BEGIN IMMEDIATE ... COMMIT, rolled back on any error."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def writer(path: str | Path) -> sqlite3.Connection:
    """A read-write connection with every area's tables in place (autocommit; see `transaction`)."""
    conn = connect(path)
    ensure_schema(conn)
    return conn


def ensure_schema(conn: sqlite3.Connection) -> None:
    """Every area's SCHEMA; then the columns an area added later (its ADDED_COLUMNS, {table:
    {column: declaration}}), so a site.db made before them gains them instead of failing inserts."""
    conn.isolation_level = None  # autocommit; `transaction()` draws the boundaries
    for name in SCHEMA_MODULES:
        module = importlib.import_module(name)
        conn.executescript(module.SCHEMA)
        for table, columns in getattr(module, "ADDED_COLUMNS", {}).items():
            present = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
            for column, declaration in columns.items():
                if column not in present:
                    conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")


def now_iso(ago_s: float = 0) -> str:
    """UTC now (or `ago_s` seconds before) as site.db stores times: 2026-11-21T08:17:00Z."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - ago_s))


def start_job_run(conn: sqlite3.Connection, name: str) -> int:
    with transaction(conn):
        cur = conn.execute("INSERT INTO job_runs(name, started) VALUES (?, ?)", (name, now_iso()))
    return cur.lastrowid


def finish_job_run(conn: sqlite3.Connection, run_id: int, ok: bool, summary: str = "", error: str | None = None) -> None:
    with transaction(conn):
        conn.execute(
            "UPDATE job_runs SET finished = ?, ok = ?, summary = ?, error = ? WHERE id = ?",
            (now_iso(), int(ok), summary, error, run_id),
        )
