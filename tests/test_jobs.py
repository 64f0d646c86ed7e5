"""The scheduler's start: which cron jobs run at once because their schedule fired while the stack
was down (or they never succeeded), and which wait for their next fire time."""
from datetime import datetime, timezone

import pytest

import jobs
from siteapi import db


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
