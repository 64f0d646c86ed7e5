"""The scheduler's start: which cron jobs run at once because their schedule fired while the stack
was down (or they never succeeded), and which wait for their next fire time."""
from datetime import datetime, timezone

import pytest

import jobs
from siteapi import db, files


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc)


@pytest.fixture
def conn(tmp_path):
    conn = db.writer(tmp_path / "site.db")
    yield conn
    conn.close()


def record(conn, name: str, finished: str, ok: bool) -> None:
    with db.transaction(conn):
        conn.execute("INSERT INTO job_runs(name, started, finished, ok) VALUES (?, ?, ?, ?)",
                     (name, finished, finished, int(ok)))


def test_a_job_that_never_succeeded_runs_at_start(conn):
    census = jobs.build_trigger(jobs.JOBS["census"].trigger)
    assert jobs.overdue(conn, "census", census, at("2026-11-24T12:00:00"))
    record(conn, "census", "2026-11-23T08:17:40Z", ok=False)  # Monday's run failed
    assert jobs.overdue(conn, "census", census, at("2026-11-24T12:00:00"))


def test_a_weekly_job_waits_until_its_schedule_fires_again(conn):
    census = jobs.build_trigger(jobs.JOBS["census"].trigger)  # Mondays 08:17 UTC
    record(conn, "census", "2026-11-23T08:17:40Z", ok=True)
    record(conn, "census", "2026-11-24T09:00:00Z", ok=False)  # a later failure does not undo the success
    assert not jobs.overdue(conn, "census", census, at("2026-11-24T12:00:00"))
    assert not jobs.overdue(conn, "census", census, at("2026-11-30T08:16:59"))
    assert jobs.overdue(conn, "census", census, at("2026-11-30T08:17:00"))  # missed while down
    around = jobs.build_trigger(jobs.JOBS["around"].trigger)
    assert jobs.overdue(conn, "around", around, at("2026-11-24T12:00:00"))  # census's runs are not around's


def test_an_hourly_job_missed_by_a_restart_runs_at_start(conn):
    tracks = jobs.build_trigger(jobs.JOBS["tracks"].trigger)  # every hour at :07
    record(conn, "tracks", "2026-11-24T10:07:03Z", ok=True)
    assert not jobs.overdue(conn, "tracks", tracks, at("2026-11-24T11:06:00"))
    assert jobs.overdue(conn, "tracks", tracks, at("2026-11-24T11:08:00"))


@pytest.fixture
def settings(tmp_path):
    from conftest import make_settings

    return make_settings(tmp_path)


def test_a_job_held_by_another_run_is_not_run_again(settings):
    settings.access_log.touch()
    held = files.try_lock(files.lock_path(settings.db_path, "job-lens-caches"))  # as another process's run holds it
    try:
        ok, error = jobs.run_job(settings, "lens-caches")
        assert not ok and "lens-caches is already running" in error and "did nothing" in error
        assert jobs.run_job(settings, "ledger")[0]  # each job has its own lock
    finally:
        held.close()
    assert jobs.run_job(settings, "lens-caches")[0]
    conn = db.connect(settings.db_path, readonly=True)
    assert [r[0] for r in conn.execute("SELECT name FROM job_runs ORDER BY id")] == ["ledger", "lens-caches"]
    conn.close()


def test_an_unfinished_run_is_closed_as_failed_by_the_next_run_of_its_job(settings):
    conn = db.writer(settings.db_path)
    with db.transaction(conn):  # runs whose processes died: nothing else can hold their job's lock now
        conn.executemany("INSERT INTO job_runs(name, started) VALUES (?, ?)",
                         [("lens-caches", db.now_iso(3600)), ("photos", db.now_iso(3600))])
    assert jobs.run_job(settings, "lens-caches")[0]
    rows = conn.execute("SELECT name, finished IS NOT NULL, ok, error FROM job_runs ORDER BY id").fetchall()
    conn.close()
    assert [tuple(r) for r in rows] == [("lens-caches", 1, 0, jobs.ABANDONED), ("photos", 0, None, None),
                                        ("lens-caches", 1, 1, None)]


def test_a_jobs_runs_older_than_its_history_are_forgotten_when_it_starts(settings):
    conn = db.writer(settings.db_path)
    kept, old = db.now_iso((jobs.JOB_HISTORY_DAYS - 1) * 86400), db.now_iso((jobs.JOB_HISTORY_DAYS + 1) * 86400)
    with db.transaction(conn):
        conn.executemany("INSERT INTO job_runs(name, started, finished, ok) VALUES (?, ?, ?, 1)",
                         [("lens-caches", old, old), ("lens-caches", kept, kept), ("photos", old, old)])
    assert jobs.run_job(settings, "lens-caches")[0]
    rows = conn.execute("SELECT name, started FROM job_runs ORDER BY id").fetchall()
    conn.close()
    assert [tuple(r) for r in rows[:2]] == [("lens-caches", kept), ("photos", old)] and len(rows) == 3


def test_a_site_db_that_cannot_be_used_fails_the_run_with_a_sentence(settings):
    settings.db_path.write_bytes(b"this is no SQLite database, only text " * 100)
    ok, error = jobs.run_job(settings, "lens-caches")
    assert not ok
    assert error.startswith(f"site.db ({settings.db_path}) could not be used: file is not a database;")
    assert settings.db_path.read_bytes().startswith(b"this is no SQLite")  # left as it was found


def test_status_shows_each_jobs_last_run(settings, capsys):
    settings.access_log.touch()
    assert jobs.run_job(settings, "ledger")[0]
    conn = db.writer(settings.db_path)
    with db.transaction(conn):  # a run whose process died, and a failure
        conn.execute("INSERT INTO job_runs(name, started) VALUES ('photos', '2026-11-21T08:00:00Z')")
        conn.execute("INSERT INTO job_runs(name, started, finished, ok, error) VALUES ('calendar', "
                     "'2026-11-21T08:00:00Z', '2026-11-21T08:00:01Z', 0, 'FeedError: no calendar')")
        conn.execute("INSERT INTO job_runs(name, started) VALUES ('around', '2026-11-21T08:00:00Z')")
    conn.close()
    with files.try_lock(files.lock_path(settings.db_path, "job-around")):  # a run of around still alive
        assert jobs.status(settings) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert set(lines) == set(jobs.JOBS)
    assert " ok " in lines["ledger"] and "crawler hits" in lines["ledger"]
    assert "FAILED 2026-11-21T08:00:01Z: FeedError: no calendar" in lines["calendar"]
    assert "not finished: its process died" in lines["photos"] and "never run" in lines["census"]
    assert lines["around"].endswith("started 2026-11-21T08:00:00Z, running now")


def test_status_says_when_a_job_has_recorded_no_run_since_one_was_due(settings, capsys):
    """A run that cannot record itself (site.db's disk full) leaves the last recorded one on show:
    status says when the next was due and has left no trace."""
    conn = db.writer(settings.db_path)
    with db.transaction(conn):
        conn.executemany("INSERT INTO job_runs(name, started, finished, ok, summary) VALUES (?, ?, ?, 1, 'fine')", [
            ("content", db.now_iso(3600), db.now_iso(3590)),  # every 10 minutes: late
            ("photos", db.now_iso(60), db.now_iso(50)),  # every 15 minutes: not yet due
            ("census", db.now_iso(8 * 86400), db.now_iso(8 * 86400 - 10)),  # Mondays: a Monday has passed since
            ("lens-caches", db.now_iso(3600 + 240), db.now_iso(3600 + 230)),  # hourly: within five minutes of due
            # a first photos-like run longer than its interval: due a whole interval after it ended, not before
            ("calendar", db.now_iso(3600), db.now_iso(120)),
        ])
    conn.close()
    assert jobs.status(settings) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert "ok " in lines["content"] and "| no run recorded since, though one was due " in lines["content"]
    assert "can it write site.db?" in lines["content"]
    assert "no run recorded" not in lines["photos"] + lines["lens-caches"] + lines["calendar"]
    assert "no run recorded since, though one was due" in lines["census"]
    with db.transaction(conn := db.writer(settings.db_path)):  # an owner's hand edit, with no zone
        conn.execute("UPDATE job_runs SET finished = ? WHERE name = 'content'", (db.now_iso(3590).rstrip("Z"),))
    conn.close()
    assert jobs.status(settings) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert "| no run recorded since, though one was due " in lines["content"]
    due = jobs.next_due("census", datetime(2026, 11, 18, 9, 0, tzinfo=timezone.utc))  # a Wednesday
    assert due == datetime(2026, 11, 23, 8, 17, tzinfo=timezone.utc)  # the Monday after, 08:17 UTC


def test_status_of_a_site_db_that_cannot_be_read_is_a_sentence(settings, capsys):
    settings.db_path.write_bytes(b"this is no SQLite database, only text " * 100)
    assert jobs.status(settings) == 1
    assert "could not be used" in capsys.readouterr().err


def test_list_lines_up_its_columns(capsys):
    assert jobs.main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == list(jobs.JOBS)
    assert len({line.index(" {'trigger'") for line in lines}) == 1, lines  # lens-caches is the widest name
