"""site.db: connections, every area's schema (and `job_runs`, which jobs.py writes), transactions,
and the readers that follow the file when it is rebuilt.

Writers (jobs, and the app's few small rows) open read-write connections in WAL mode; readers
open `mode=ro`, one connection per thread. Every connection sets `busy_timeout`. Each area owns
its own tables and declares them as a `SCHEMA` string in its module; `ensure_schema` applies them
all, so a fresh `site.db` is complete after one call.

A site.db that is missing or empty when a writer opens it is made whole under a temporary name
and renamed into place, after the -wal and -shm of the file that was there are set aside (SQLite
would otherwise replay that WAL into the new file). A thread's reader follows the file at the path:
when it is replaced by another database it reopens; while the path holds nothing readable (deleted,
garbage) it keeps reading the file it has, the last good data. When SQLite cannot make the file's
WAL index (site.db-shm) for a reader, the disk full as the app starts, a site.db whose WAL holds
nothing is read as it stands on disk (`immutable`) until the index can be made again.
"""
from __future__ import annotations

import contextlib
import fcntl
import importlib
import logging
import os
import sqlite3
import threading
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from siteapi import files

log = logging.getLogger(__name__)

BUSY_TIMEOUT_MS = 5000
# How often a thread's reader checks that the path still names the file it reads (a stat call).
REOPEN_CHECK_S = 1.0
WAL_KEEP_BYTES = 8 * 1024 * 1024

# Modules whose SCHEMA string defines tables in site.db (each area adds itself here).
SCHEMA_MODULES = (
    "siteapi.db", "siteapi.content", "siteapi.ranker", "siteapi.photos",
    "siteapi.feeds.tracks", "siteapi.feeds.around", "siteapi.feeds.coffee", "siteapi.feeds.ledger",
    "siteapi.lens.vault", "siteapi.lens.cache", "siteapi.lens.census",
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


class AsOnDisk(sqlite3.Connection):
    """A reader opened `immutable`, its WAL index not to be made: reader() tries again."""


_told_as_on_disk: set[str] = set()


def connect(path: str | Path, readonly: bool = False, as_it_stands: bool = False) -> sqlite3.Connection:
    """Open site.db. Read-only connections cannot write even by mistake (`mode=ro`); with
    `as_it_stands` (the app's readers), one whose WAL index cannot be made reads the file as it
    stands on disk when no WAL holds anything (AsOnDisk). A writer makes a missing or empty site.db
    first (`_create`)."""
    path = Path(path)
    if readonly:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        if as_it_stands:
            conn = _or_as_it_stands(path, conn)
    else:
        if not has_content(path):
            _create(path)
        _writable_sidecars(path)
        conn = sqlite3.connect(path, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    if not readonly:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        # A WAL grown by one large write (a rebuild) is cut back to this once a checkpoint empties it.
        conn.execute(f"PRAGMA journal_size_limit={WAL_KEEP_BYTES}")
    return conn


def _or_as_it_stands(path: Path, conn: sqlite3.Connection) -> sqlite3.Connection:
    """`conn`, or, when SQLite cannot make its WAL index (a full disk) and no WAL holds anything,
    an AsOnDisk reader of the file as it stands: then the file on disk is the whole database."""
    try:
        conn.execute("PRAGMA schema_version")  # opens the file and its WAL index now
        return conn
    except sqlite3.OperationalError as exc:
        if "disk i/o" not in str(exc).lower() or _wal_bytes(path):
            raise
        conn.close()
        if str(path) not in _told_as_on_disk:
            _told_as_on_disk.add(str(path))
            log.warning("%s It is read as it stands on disk until its WAL index can be made again.",
                        storage_problem(path, exc))
        return sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True, check_same_thread=False, factory=AsOnDisk)


def _wal_bytes(path: Path) -> int:
    try:
        return os.stat(f"{path}-wal").st_size
    except OSError:
        return 0


def has_content(path: Path) -> bool:
    """The file exists and is not empty: a writer opening it would not build a new site.db."""
    try:
        return path.stat().st_size > 0
    except FileNotFoundError:
        return False


def _create(path: Path) -> None:
    """Put an empty site.db with every area's tables, in WAL mode, at `path` (missing or empty).

    A -wal or -shm at the path belongs to a file that is gone or was emptied: SQLite would replay
    that WAL into the new file, and a reader still on the old file shares that -shm. So the -shm
    is removed and a WAL with frames kept aside as `-wal-orphaned-<time>`. The file is built under
    a temporary name and renamed into place, so no reader sees it half made; writers that find
    the path empty at once take turns on a lock of the folder, and the first one builds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        fcntl.flock(folder, fcntl.LOCK_EX)
        if has_content(path):
            return
        for stale in path.parent.glob(f".{path.name}.new-*"):  # left by a creator killed while building
            stale.unlink(missing_ok=True)
        temp = path.with_name(f".{path.name}.new-{os.getpid()}-{threading.get_ident()}")
        try:
            conn = sqlite3.connect(temp)
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                ensure_schema(conn)
            finally:
                conn.close()  # the last connection checkpoints and removes temp's -wal and -shm
            wal = Path(f"{path}-wal")
            if has_content(wal):
                os.replace(wal, f"{wal}-orphaned-{time.strftime('%Y%m%dT%H%M%S')}")
            for leftover in (wal, Path(f"{path}-shm")):
                leftover.unlink(missing_ok=True)
            files.replace_synced(temp, path)  # temp is on the disk: SQLite syncs a file it checkpoints as it closes
        finally:
            for name in (temp, Path(f"{temp}-wal"), Path(f"{temp}-shm")):
                name.unlink(missing_ok=True)
    finally:
        os.close(folder)


def _writable_sidecars(path: Path) -> None:
    """SQLite gives a new -wal and -shm the mode of site.db; made while site.db was read-only they
    stay read-only while a reader keeps them (they are never recreated), and every write then
    fails after site.db is writable again. Give them site.db's mode (only their owner can)."""
    if not os.access(path, os.W_OK):
        return
    for suffix in ("-wal", "-shm"):
        sidecar = Path(f"{path}{suffix}")
        if sidecar.exists() and not os.access(sidecar, os.W_OK):
            with contextlib.suppress(OSError):
                os.chmod(sidecar, path.stat().st_mode & 0o666)


_local = threading.local()


def identity_of(path: Path) -> tuple[int, int] | None:
    """The file `path` names (device, inode), or None when there is none."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_dev, stat.st_ino


def _holds_pages(conn: sqlite3.Connection) -> bool:
    """True when the database's content is indexed: a file the jobs have only begun to rebuild
    (every table empty), or one that is no site.db, is not served in place of the last good one."""
    try:
        return conn.execute("SELECT 1 FROM pages LIMIT 1").fetchone() is not None
    except sqlite3.Error:
        return False


def _has_photos(conn: sqlite3.Connection) -> bool:
    try:
        return conn.execute("SELECT 1 FROM photos LIMIT 1").fetchone() is not None
    except sqlite3.Error:
        return False


_waiting_for_photos: set[tuple] = set()  # the rebuilt files whose wait was logged


def _fills_in_for(conn: sqlite3.Connection, over: sqlite3.Connection | None) -> bool:
    """True when the database may be served in place of `over` (the file read so far, if any): its
    content is indexed, and where `over` has photos, so does it or a photos run has ended in it
    (ok or failed: a photos job that keeps failing must not hold every other change back). A
    rebuilt file would otherwise answer an empty archive, cacheable for minutes, until that job ran."""
    if not _holds_pages(conn):
        return False
    if over is None or _has_photos(conn) or not _has_photos(over):
        return True
    try:
        ended = conn.execute("SELECT 1 FROM job_runs WHERE name = 'photos' AND finished IS NOT NULL LIMIT 1").fetchone()
        path = conn.execute("PRAGMA database_list").fetchone()[2]
    except sqlite3.Error:
        return False
    rebuilt = (path, identity_of(Path(path)))
    if ended is None and rebuilt not in _waiting_for_photos:
        _waiting_for_photos.add(rebuilt)
        log.warning("site.db at %s is a new file with its pages but no photos yet: the last good file is served "
                    "until the photos job has run in it", path)
    return ended is not None


def can_serve(path: Path, over: sqlite3.Connection | None = None) -> bool:
    """True when `path` opens read-only as a site.db that may be served in place of `over`
    (_fills_in_for; with no `over`, when its content is indexed)."""
    try:
        with contextlib.closing(connect(path, readonly=True)) as conn:
            return _fills_in_for(conn, over)
    except sqlite3.Error:
        return False


# path -> a connection to the last file there that had pages, with its identity: a worker thread
# that had not opened site.db before it was deleted or emptied reads that one too (read-only
# connections may be shared: check_same_thread is off and SQLite serializes).
_last_good: dict[str, tuple[sqlite3.Connection, tuple[int, int] | None]] = {}


def reader(path: str | Path) -> sqlite3.Connection:
    """This thread's read-only connection to `path` (opened once, reused). At most every
    REOPEN_CHECK_S it checks that the path still names the file it reads: replaced by another
    site.db that can stand in for it (can_serve: rebuilt, or restored), it opens that one; deleted,
    replaced by something that is no database, or by a site.db still being rebuilt, it keeps the
    file it has; a thread that had none then takes the process's last good file (`_last_good`).
    The connection it leaves is closed once no cursor uses it any more."""
    key = str(path)
    conns = getattr(_local, "conns", None)
    if conns is None:
        conns = _local.conns = {}
    now = time.monotonic()
    held = conns.get(key)
    if held is not None:
        conn, identity, checked = held
        if now - checked < REOPEN_CHECK_S:
            return conn
        current = identity_of(Path(path))
        if isinstance(conn, AsOnDisk) and current == identity:  # its WAL index may be made again now
            with contextlib.suppress(sqlite3.Error):
                fresh = connect(path, readonly=True, as_it_stands=True)
                if not isinstance(fresh, AsOnDisk):
                    _told_as_on_disk.discard(key)
                    conns[key] = (fresh, identity, now)
                    return fresh
        if current is None or current == identity or not can_serve(Path(path), over=conn):
            conns[key] = (conn, identity, now)
            return conn
    identity = identity_of(Path(path))
    good = _last_good.get(key)
    if good is not None and good[1] != identity and (identity is None or not can_serve(Path(path), over=good[0])):
        conns[key] = (good[0], good[1], now)  # a thread that never opened it: the process's last good file
        return good[0]
    conn = connect(path, readonly=True, as_it_stands=True)
    conns[key] = (conn, identity, now)
    if (good is None or good[1] != identity) and _fills_in_for(conn, good[0] if good else None):
        _last_good[key] = (conn, identity)
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
def one_snapshot(conn: sqlite3.Connection | LazyReader):
    """Reads of several statements on an autocommit reader from one snapshot of site.db (a read
    transaction): a job's commit between them cannot mix two versions in one answer. A LazyReader
    is pinned to this thread's connection for the block (opening it may raise sqlite3.Error here)."""
    conn = reader(conn.path) if isinstance(conn, LazyReader) else conn
    # The last good file's connection is shared by the threads that never opened site.db: one of
    # them may be in its snapshot already, and these reads then ride on it.
    began = not conn.in_transaction
    if began:
        try:
            conn.execute("BEGIN")
        except sqlite3.OperationalError:  # another thread began between the check and here
            began = False
    try:
        yield conn
    finally:
        if began:
            conn.execute("COMMIT")


@contextmanager
def transaction(conn: sqlite3.Connection):
    """One short write transaction: BEGIN IMMEDIATE ... COMMIT, rolled back on any error."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
        conn.execute("COMMIT")  # may fail (disk full, deferred constraint): the transaction is then still open
    except BaseException:
        if conn.in_transaction:  # SQLite has already rolled back after some errors (SQLITE_FULL, IOERR)
            with contextlib.suppress(sqlite3.Error):  # the error that got here says more
                conn.execute("ROLLBACK")
        raise


def writer(path: str | Path) -> sqlite3.Connection:
    """A read-write connection with every area's tables in place (autocommit; see `transaction`)."""
    conn = connect(path)
    ensure_schema(conn)
    return conn


def upgrade(path: Path) -> None:
    """Bring an existing site.db to this version's tables now, as the app starts, rather than when
    the jobs next open it: an app upgraded before its jobs would otherwise answer from tables it
    does not know (/ask a 503, the lens's cache writes refused). A missing or empty path is left to
    the jobs to build; a file that cannot be written (a read-only copy) is served as it is."""
    if not has_content(path):
        return
    try:
        writer(path).close()
    except sqlite3.Error as exc:
        log.warning("%s Its tables stay as they are until the jobs bring them up to date.", storage_problem(path, exc))


def ensure_schema(conn: sqlite3.Connection) -> None:
    """Every area's SCHEMA; then the columns an area added later (its ADDED_COLUMNS, {table:
    {column: declaration}}) or dropped (its DROPPED_COLUMNS, {table: (column, ...)}), so a site.db
    made before them gains or loses them instead of failing inserts."""
    conn.isolation_level = None  # autocommit; `transaction()` draws the boundaries
    for name in SCHEMA_MODULES:
        module = importlib.import_module(name)
        conn.executescript(module.SCHEMA)
        if _column_changes(conn, module):
            with transaction(conn):  # asked again under the write lock: another process may have just made them
                for statement in _column_changes(conn, module):
                    conn.execute(statement)


def _column_changes(conn: sqlite3.Connection, module) -> list[str]:
    """The ALTER TABLE statements that bring this site.db's tables to the area's columns."""
    statements = []
    for table, columns in getattr(module, "ADDED_COLUMNS", {}).items():
        present = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
        statements += [f"ALTER TABLE {table} ADD COLUMN {column} {declaration}"
                       for column, declaration in columns.items() if column not in present]
    for table, columns in getattr(module, "DROPPED_COLUMNS", {}).items():
        present = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
        statements += [f"ALTER TABLE {table} DROP COLUMN {column}" for column in columns if column in present]
    return statements


def iso_at(seconds: float) -> str:
    """A Unix time as site.db stores times, UTC to the second: 2026-11-21T08:17:00Z."""
    # isoformat, not strftime: glibc's %Y writes year 5 as "5"
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def now_iso(ago_s: float = 0) -> str:
    """UTC now (or `ago_s` seconds before) as site.db stores times."""
    return iso_at(time.time() - ago_s)


def parse_iso(stored: str) -> datetime:
    """A time as site.db stores it (iso_at), as an aware UTC datetime. A time with no zone (an
    owner's hand edit) is read as UTC, as every stored time is, rather than failing a comparison."""
    parsed = datetime.fromisoformat(stored)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def storage_problem(path: str | Path, exc: BaseException) -> str:
    """One sentence for an error from site.db itself (sqlite3.Error, or OSError around the file):
    what failed and what the owner can do."""
    text = str(exc) if isinstance(exc, sqlite3.Error) else (getattr(exc, "strerror", None) or str(exc))
    lowered = text.lower()
    if "readonly" in lowered or "read-only" in lowered or "permission" in lowered:
        hint = "make it, its folder and its -wal and -shm files writable by the user the jobs run as"
    elif "full" in lowered or "no space" in lowered:
        hint = "free disk space; the last good data stays until a run succeeds"
    elif "disk i/o" in lowered:
        hint = ("check the disk: full (SQLite cannot grow site.db-shm then) or failing; the last good data stays "
                "until a run succeeds")
    elif "not a database" in lowered or "malformed" in lowered:
        hint = ("the file is damaged: stop the app, Datasette and the jobs, then restore a backup (removing "
                "site.db-wal and site.db-shm) or move the file aside and run the jobs to rebuild it")
    elif "locked" in lowered or "busy" in lowered:
        hint = f"another connection held it longer than {BUSY_TIMEOUT_MS // 1000} s; the next run tries again"
    else:
        hint = "the last good data stays; the next run tries again"
    return f"site.db ({path}) could not be used: {text}; {hint}."
