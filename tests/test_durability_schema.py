"""A site.db made by an earlier version is brought to the current tables by the next writer that
opens it (db.ensure_schema): a dropped column goes, the rows stay, twice changes nothing, two
processes at once change it once, and readers (the app, Datasette) never wait for it. The app
does this for itself as it starts, so an app upgraded before its jobs serves its new tables."""
from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from pathlib import Path

import requests

import jobs
from app import make_app
from conftest import make_settings
from servers import serve_wsgi
from siteapi import db
from siteapi.lens import cache

# lens_discovery_cache as every site.db made before 2026-11-21 has it
OLD_DISCOVERY_CACHE = """
CREATE TABLE lens_discovery_cache (
    origin TEXT PRIMARY KEY,
    fetched_at REAL NOT NULL,
    observed_at TEXT NOT NULL,
    payload TEXT NOT NULL
);
"""
ROWS = 2000


def old_site_db(path) -> list[tuple]:
    """A site.db as the version before made it: every table, lens_discovery_cache with the old
    columns and ROWS rows (about an hour of /lens/fetch at the inspect limit); returns the rows as
    (origin, fetched_at, payload)."""
    db.writer(path).close()
    now = time.time()
    rows = [(f"https://site{i}.example", now - i, f'{{"probes": {{"n": {i}}}}}') for i in range(ROWS)]
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.executescript(f"DROP TABLE lens_discovery_cache; {OLD_DISCOVERY_CACHE}")
        with conn:
            conn.executemany("INSERT INTO lens_discovery_cache VALUES (?, ?, '2026-11-20T08:00:00Z', ?)", rows)
    return rows


def columns(conn: sqlite3.Connection) -> list[str]:
    return [row[1] for row in conn.execute("PRAGMA table_info(lens_discovery_cache)")]


def test_the_unread_column_goes_the_rows_stay_and_a_second_pass_changes_nothing(tmp_path):
    path = tmp_path / "site.db"
    rows = old_site_db(path)
    conn = db.writer(path)
    try:
        assert columns(conn) == ["origin", "fetched_at", "payload"]
        kept = conn.execute("SELECT * FROM lens_discovery_cache ORDER BY fetched_at DESC").fetchall()
        assert [tuple(row) for row in kept] == rows
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert cache.read(conn, cache.DISCOVERY, "https://site7.example", 6) == {"probes": {"n": 7}}
        cache.write(conn, cache.DISCOVERY, "https://new.example", {"probes": {}})  # the app's write, three columns
        assert cache.read(conn, cache.DISCOVERY, "https://new.example", 6) == {"probes": {}}
        version = conn.execute("PRAGMA schema_version").fetchone()[0]
        db.ensure_schema(conn)
        assert conn.execute("PRAGMA schema_version").fetchone()[0] == version  # no statement ran
    finally:
        conn.close()


def test_two_processes_opening_an_old_site_db_at_once_both_start(tmp_path, write_lock_asks):
    """Both find the column there; the first to get the write lock drops it, and the second, asking
    again under the lock, finds nothing to do instead of failing on a column that is gone."""
    path = tmp_path / "site.db"
    old_site_db(path)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # both writers look at the columns, then wait for the lock
    outcomes = []

    def open_writer():
        try:
            db.writer(path).close()
            outcomes.append("ok")
        except sqlite3.Error as exc:
            outcomes.append(str(exc))

    threads = [threading.Thread(target=open_writer) for _ in range(2)]
    for thread in threads:
        thread.start()
    write_lock_asks.wait_for(2)  # both have looked at the columns and wait for the lock the holder has
    holder.execute("COMMIT")
    holder.close()
    for thread in threads:
        thread.join()
    assert outcomes == ["ok", "ok"]
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert columns(conn) == ["origin", "fetched_at", "payload"]


def test_a_read_held_open_does_not_hold_the_migration_up(tmp_path):
    """Datasette's queries and the app's requests are read transactions; the job that migrates runs
    beside one, and the read keeps the snapshot it began with."""
    settings = make_settings(tmp_path)
    rows = old_site_db(settings.db_path)
    long_read = sqlite3.connect(f"file:{settings.db_path}?mode=ro", uri=True, isolation_level=None)
    long_read.execute("BEGIN")
    assert len(long_read.execute("SELECT * FROM lens_discovery_cache").fetchall()) == ROWS
    started = time.monotonic()
    ok, summary = jobs.run_job(settings, "lens-caches")  # the hourly purge: its writer migrates first
    took = time.monotonic() - started
    assert ok, summary
    assert took < db.BUSY_TIMEOUT_MS / 1000  # it did not wait out the busy timeout on the reader
    assert columns(long_read) == ["origin", "fetched_at", "observed_at", "payload"]  # its snapshot
    long_read.execute("COMMIT")
    assert columns(long_read) == ["origin", "fetched_at", "payload"]
    assert long_read.execute("SELECT origin, fetched_at, payload FROM lens_discovery_cache "
                             "ORDER BY fetched_at DESC").fetchall() == rows  # all inside the purge's window
    long_read.close()


def test_an_app_upgraded_before_its_jobs_brings_site_db_to_its_tables_as_it_starts(tmp_path, site_settings):
    """A site.db from before page_vectors_state and the lens cache's new columns: the app started
    on it answers /ask with the model and writes its lens cache, without waiting for a job."""
    settings = make_settings(tmp_path)
    with contextlib.closing(sqlite3.connect(site_settings.db_path)) as built, \
            contextlib.closing(sqlite3.connect(settings.db_path)) as copy:
        built.backup(copy)
        copy.executescript(f"DROP TABLE page_vectors_state; DROP TABLE lens_discovery_cache; {OLD_DISCOVERY_CACHE}")
    with serve_wsgi(make_app(settings).wsgi) as base:
        answer = requests.get(f"{base}/ask", params={"query": "rebuilding carburetors", "streaming": "0"}, timeout=30)
    assert answer.status_code == 200, answer.text
    assert answer.json()["_meta"]["ranking"] == "model:minilm-l6-v2-int8"
    with contextlib.closing(db.connect(settings.db_path)) as conn:
        assert columns(conn) == ["origin", "fetched_at", "payload"]
        assert conn.execute("SELECT name FROM sqlite_master WHERE name = 'page_vectors_state'").fetchone()


def test_a_site_db_from_before_the_unspaced_index_and_lang_is_served_as_it_is(tmp_path, site_settings):
    """An app that cannot bring site.db up to date as it starts (here a job holds the write lock past
    the busy timeout; a read-only copy alike) serves the file as it is: its pages, not a 500 for a
    missing `lang`, and a Japanese title found whole by pages_fts, not a 503 for a missing index
    (review25 M2, L1)."""
    settings = make_settings(tmp_path)
    with contextlib.closing(sqlite3.connect(site_settings.db_path)) as built, \
            contextlib.closing(sqlite3.connect(settings.db_path)) as copy:
        built.backup(copy)
        copy.executescript("DROP TABLE pages_unspaced; ALTER TABLE pages DROP COLUMN lang;")
        with copy:
            copy.execute("INSERT INTO pages(path, title, description, kind, body, text, hash, source) VALUES "
                         "('/writing/tokyo', '東京', 'A night in the city.', 'writing', '夜景', '夜景', 'h', 'tokyo.md')")
    holder = sqlite3.connect(settings.db_path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # a job's write, longer than the app waits for it
    try:
        with serve_wsgi(make_app(settings).wsgi) as base:
            page = requests.get(f"{base}/writing/tokyo", headers={"Accept": "text/html"}, timeout=30)
            assert page.status_code == 200 and '<html lang="en" dir="ltr">' in page.text
            found = requests.get(f"{base}/search.json", params={"q": "東京"}, timeout=30)
            assert found.status_code == 200 and [r["url"] for r in found.json()["results"]] == [
                "https://aadhar.sh/writing/tokyo"], found.text
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    with contextlib.closing(db.connect(settings.db_path, readonly=True)) as conn:
        assert not conn.execute("SELECT name FROM sqlite_master WHERE name = 'pages_unspaced'").fetchone()


def test_an_app_started_before_any_site_db_leaves_the_path_to_the_jobs(tmp_path):
    settings = make_settings(tmp_path)
    make_app(settings)
    assert not settings.db_path.exists()


def test_a_wal_grown_by_one_large_write_is_cut_back_once_a_checkpoint_empties_it(tmp_path):
    path = tmp_path / "site.db"
    conn = db.writer(path)
    try:
        conn.execute("CREATE TABLE big (b BLOB)")
        with db.transaction(conn):
            conn.executemany("INSERT INTO big VALUES (?)", [(os.urandom(1 << 20),) for _ in range(24)])
        wal = Path(f"{path}-wal")
        assert wal.stat().st_size > 2 * db.WAL_KEEP_BYTES  # one transaction: the WAL holds all of it
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        with db.transaction(conn):  # the next write starts the WAL over, and cuts the file back
            conn.execute("INSERT INTO big VALUES (x'00')")
        assert wal.stat().st_size <= db.WAL_KEEP_BYTES
    finally:
        conn.close()


def test_a_cache_write_meeting_a_jobs_write_is_dropped_and_the_connection_keeps_its_patience(tmp_path):
    """A lens cache entry waits WRITE_WAIT_MS, not the jobs' BUSY_TIMEOUT_MS, for a write a job
    holds, then is dropped; the connection keeps its own busy timeout for whatever else it does."""
    path = tmp_path / "site.db"
    job, app = db.writer(path), db.writer(path)
    try:
        statements = []
        app.set_trace_callback(statements.append)
        job.execute("BEGIN IMMEDIATE")
        cache.write(app, cache.DISCOVERY, "https://held.example", {"probes": {}})
        job.execute("ROLLBACK")
        asked = statements.index("BEGIN IMMEDIATE")  # the wait it asked for the write lock with
        assert f"PRAGMA busy_timeout={cache.WRITE_WAIT_MS}" in statements[:asked] and cache.WRITE_WAIT_MS < db.BUSY_TIMEOUT_MS
        assert cache.read(app, cache.DISCOVERY, "https://held.example", 6) is None
        assert app.execute("PRAGMA busy_timeout").fetchone()[0] == db.BUSY_TIMEOUT_MS
        cache.write(app, cache.DISCOVERY, "https://free.example", {"probes": {}})
        assert cache.read(app, cache.DISCOVERY, "https://free.example", 6) == {"probes": {}}
    finally:
        job.close()
        app.close()


def test_a_search_answer_is_one_version_of_site_db_though_a_job_commits_between_its_reads(tmp_path):
    """/search.json reads the total and the rows in two statements: a job committing a matching page
    between them (made to happen there) cannot make the total disagree with the rows."""
    from siteapi import search

    settings = make_settings(tmp_path)
    path = settings.db_path
    writer = db.writer(path)
    page = {"title": "Plover", "description": "A plover page.", "kind": "page", "date": None, "body": "plover",
            "text": "A plover on the shore.", "source": "p.md", "tags": "[]"}

    def add(name: str) -> None:
        writer.execute("INSERT INTO pages(path, title, description, kind, date, body, text, hash, source, tags) "
                       "VALUES (:path, :title, :description, :kind, :date, :body, :text, :hash, :source, :tags)",
                       {**page, "path": f"/{name}", "hash": name})

    add("first")
    reader = db.connect(path, readonly=True)
    try:
        def between(statement: str) -> None:  # as the rows' statement starts, a job commits another page
            if statement.lstrip().startswith("SELECT p.path"):
                add("second")
        reader.set_trace_callback(between)
        found = search.rank(reader, ["plover"], 10, settings)
        assert found["total"] == len(found["results"]) == 1
        reader.set_trace_callback(None)
        assert search.rank(reader, ["plover"], 10, settings)["total"] == 2  # the next answer sees it
    finally:
        reader.close()
        writer.close()


def test_the_feeds_snapshot_pins_their_lazy_reader_to_one_version(tmp_path):
    """Coffee, the ledger and tracks read through a LazyReader in two statements: one_snapshot pins
    this thread's connection and reads one version, whatever a job commits between the two."""
    path = tmp_path / "site.db"
    writer = db.writer(path)
    try:
        with db.transaction(writer):
            writer.execute("INSERT INTO coffee_calendar (id, checked_at, checked_ms, busy_count, window_end) "
                           "VALUES (1, 'first', 1, 0, 'later')")
        lazy = db.LazyReader(path)
        with db.one_snapshot(lazy) as snapshot:
            assert snapshot is db.reader(path)
            before = snapshot.execute("SELECT checked_at FROM coffee_calendar").fetchone()[0]
            with db.transaction(writer):
                writer.execute("UPDATE coffee_calendar SET checked_at = 'second'")
            assert snapshot.execute("SELECT checked_at FROM coffee_calendar").fetchone()[0] == before == "first"
        assert lazy.execute("SELECT checked_at FROM coffee_calendar").fetchone()[0] == "second"
        # the last good file's connection, shared by threads: one already in its snapshot
        shared = db.connect(path, readonly=True)
        with db.one_snapshot(shared), db.one_snapshot(shared) as inner:
            assert inner.execute("SELECT checked_at FROM coffee_calendar").fetchone()[0] == "second"
        assert not shared.in_transaction
        shared.close()
    finally:
        writer.close()
