"""Every job that writes site.db, in one table.

    python jobs.py              run the scheduler (APScheduler BlockingScheduler) until Ctrl-C or
                                SIGTERM; the runs under way then finish before it exits
    python jobs.py run NAME     run one job now and print its summary (exit 0 ok, 1 failed,
                                75 not run: the job is already running in another process)
    python jobs.py list         list the jobs and their schedules
    python jobs.py status       each job's last run: when, ok or failed, its summary or error; late if none since due

Each job does its network and parsing outside any transaction, writes in one short transaction,
and returns a summary line; a failure is recorded in `job_runs` and leaves the last good data.
When a run leaves site.db a new file (rebuilt where it was missing or emptied), the scheduler runs
every job at once to fill it.

A job runs in one process at a time and the scheduler once per site.db, whoever starts them
(`make run`, systemd, a hand): each holds an exclusive lock on a file beside site.db
(`site.db-job-NAME.lock`, `site.db-scheduler.lock`) that the kernel lets go when the process
ends, however it ends. So a run that finds its job's lock taken does nothing, and a run that finds
an unfinished run of its job in `job_runs` knows that run died, and closes it as failed.
"""
from __future__ import annotations

import contextlib
import logging
import os
import signal
import sqlite3
import sys
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Callable

from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from siteapi import db, files
from siteapi.config import Settings, SettingsError, load_settings
from siteapi.content import run_content
from siteapi.feeds.around import run_around
from siteapi.feeds.coffee import run_calendar
from siteapi.feeds.ledger import run_ledger
from siteapi.feeds.tracks import run_tracks
from siteapi.ingest import run_photos
from siteapi.lens.census import run_census
from siteapi.lens.cache import run_cache_purge
from siteapi.lens.vault import run_snapshot_purge

log = logging.getLogger("jobs")
LATE_AFTER = timedelta(minutes=5)  # past its next fire time, a job with no run recorded is late (status)


@dataclass(frozen=True)
class Job:
    run: Callable[..., str]  # run(settings, **seams) -> its summary line
    trigger: dict  # APScheduler trigger: {"trigger": "interval", "minutes": 5} or cron fields
    about: str


JOBS: dict[str, Job] = {
    "content": Job(run_content, {"trigger": "interval", "minutes": 10}, "index content/ into pages (FTS5)"),
    "photos": Job(run_photos, {"trigger": "interval", "minutes": 15},
                  "ingest new, changed and deleted originals: metadata, recipe cards, thumbnails"),
    "census": Job(run_census, {"trigger": "cron", "day_of_week": "mon", "hour": 8, "minute": 17, "timezone": "UTC"},
                  "inspect the `[lens] census_roster` with the lens (no bot views); one row per site"),
    "tracks": Job(run_tracks, {"trigger": "cron", "minute": 7, "timezone": "UTC"}, "the owner's playlist from the music service"),
    "around": Job(run_around, {"trigger": "cron", "hour": 5, "minute": 41, "timezone": "UTC"},
                  "crawl the venture-firm homepages; record changes"),
    "calendar": Job(run_calendar, {"trigger": "interval", "minutes": 5}, "busy times from the owner's ICS calendar"),
    "ledger": Job(run_ledger, {"trigger": "interval", "minutes": 10}, "count AI-crawler visits in Caddy's access log"),
    "lens-caches": Job(run_cache_purge, {"trigger": "interval", "hours": 1},
                       "forget the lens's cached lookups (origins, URLs) past their window"),
    "snapshots": Job(run_snapshot_purge, {"trigger": "cron", "hour": 3, "minute": 47, "timezone": "UTC"},
                     "forget representation snapshots older than 30 days"),
}
NAME_WIDTH = max(map(len, JOBS))


def run_job(settings: Settings, name: str, **seams) -> tuple[bool | None, str]:
    """Run one job, recording it in job_runs; returns (ok, summary or error). A job already
    running elsewhere is not run again (ok None: nothing ran); a site.db that cannot be used fails the run with a
    sentence (recorded when site.db can still take it). `seams` reach the job's function: the
    `fetcher` (and the census's `dns`) a test hands it, since the production ones refuse loopback."""
    try:
        lock = files.try_lock(files.lock_path(settings.db_path, f"job-{name}"))
    except OSError as exc:
        return _failed(name, db.storage_problem(settings.db_path, exc))
    if lock is None:
        log.warning("job %s not run: already running in another process", name)
        return None, (f"{name} is already running on {settings.db_path} in another process (the scheduler "
                      f"or another `python jobs.py run {name}`); this run did nothing.")
    with lock:
        try:
            conn = db.writer(settings.db_path)
        except (sqlite3.Error, OSError) as exc:
            return _failed(name, db.storage_problem(settings.db_path, exc))
        try:
            return _run_recorded(settings, name, conn, seams)
        finally:
            conn.close()


def _run_recorded(settings: Settings, name: str, conn, seams: dict) -> tuple[bool, str]:
    try:
        run_id = start_job_run(conn, name)
    except sqlite3.Error as exc:
        return _failed(name, db.storage_problem(settings.db_path, exc))
    started = time.monotonic()
    try:
        summary = JOBS[name].run(settings, **seams)
    except Exception as exc:  # any failure is recorded; the job's last good data stays
        log.debug("job %s traceback", name, exc_info=True)
        error = db.storage_problem(settings.db_path, exc) if isinstance(exc, sqlite3.Error) else str(exc)
        _record(settings, conn, run_id, False, error=f"{type(exc).__name__}: {error}")
        return _failed(name, error)
    summary = f"{summary} ({time.monotonic() - started:.1f}s)"
    _record(settings, conn, run_id, True, summary=summary)
    return True, summary


def _failed(name: str, error: str) -> tuple[bool, str]:
    log.error("job %s failed: %s", name, error)
    return False, error


def _record(settings: Settings, conn, run_id: int, ok: bool, summary: str = "", error: str | None = None) -> None:
    """The run's end in job_runs; a site.db that cannot take it (disk full) leaves the run
    unfinished there, which the job's next run closes as failed."""
    try:
        finish_job_run(conn, run_id, ok, summary=summary, error=error)
    except sqlite3.Error as exc:
        log.error("the end of this run could not be recorded in job_runs: %s", db.storage_problem(settings.db_path, exc))


ABANDONED = ("The run stopped before it recorded its end (its process was killed or the machine went down); "
             "what it had not committed was rolled back.")


JOB_HISTORY_DAYS = 90  # runs of a job older than this are forgotten when it starts again (~700 runs a day)


def start_job_run(conn: sqlite3.Connection, name: str) -> int:
    """Record a run of `name` as started. The caller holds the job's lock (run_job), so a run of
    `name` left unfinished can only be one that died: it is closed as failed (ABANDONED)."""
    with db.transaction(conn):
        conn.execute("DELETE FROM job_runs WHERE name = ? AND started < ?",
                     (name, db.now_iso(JOB_HISTORY_DAYS * 86400)))
        conn.execute("UPDATE job_runs SET finished = ?, ok = 0, error = ? WHERE name = ? AND finished IS NULL",
                     (db.now_iso(), ABANDONED, name))
        cur = conn.execute("INSERT INTO job_runs(name, started) VALUES (?, ?)", (name, db.now_iso()))
    return cur.lastrowid


def finish_job_run(conn: sqlite3.Connection, run_id: int, ok: bool, summary: str = "", error: str | None = None) -> None:
    with db.transaction(conn):
        conn.execute(
            "UPDATE job_runs SET finished = ?, ok = ?, summary = ?, error = ? WHERE id = ?",
            (db.now_iso(), int(ok), summary, error, run_id),
        )


def build_trigger(spec: dict):
    fields = dict(spec)
    kind = fields.pop("trigger")
    return (IntervalTrigger if kind == "interval" else CronTrigger)(**fields)


def overdue(conn, name: str, trigger: CronTrigger, now: datetime) -> bool:
    """True when the job never succeeded or its schedule fired since it last did: a stack started
    on Tuesday then runs the Monday census at once instead of serving nothing for six days."""
    (finished,) = conn.execute("SELECT max(finished) FROM job_runs WHERE name = ? AND ok = 1", (name,)).fetchone()
    if finished is None:
        return True
    due = trigger.get_next_fire_time(None, db.parse_iso(finished))
    return due is not None and due <= now


def schedule(settings: Settings) -> int:
    """Run the scheduler until Ctrl-C or SIGTERM; 1 when another one already runs site.db's jobs."""
    try:
        lock = files.try_lock(files.lock_path(settings.db_path, "scheduler"))
    except OSError as exc:
        print(f"jobs: {db.storage_problem(settings.db_path, exc)}", file=sys.stderr)
        return 1
    if lock is None:
        print(f"jobs: another scheduler already runs the jobs of {settings.db_path} (`make run`, or systemd's "
              "site-jobs.service); stop it first, or use `python jobs.py run NAME` for one run.", file=sys.stderr)
        return 1
    with lock:
        Scheduler(settings).run()
    return 0


class Scheduler:
    """Every job on its trigger, for one site.db: the overdue ones and the interval ones at start,
    every one at once when a run leaves site.db a new file, and the runs under way let finish on a stop."""

    def __init__(self, settings: Settings):
        from apscheduler.schedulers.blocking import BlockingScheduler

        self.settings = settings
        self.apscheduler = BlockingScheduler(
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": 300})
        # Held open for the scheduler's life: a reader that may not write site.db's folder (Datasette
        # under ReadOnlyPaths) can open the WAL database only while its -shm exists, and SQLite removes
        # that with the last connection; Datasette would then fail to start at all.
        self.keeper: sqlite3.Connection | None = None
        self.watched = None  # site.db's identity (device, inode) when last looked at
        self.watch_lock = threading.Lock()
        self.stopping, self.under_way = threading.Event(), threading.Condition()
        self.running: set[str] = set()

    def run(self) -> None:
        """Add every job, start, and return once stopped and the runs under way have ended."""
        now = datetime.now(timezone.utc)
        triggers = {name: build_trigger(job.trigger) for name, job in JOBS.items()}
        try:
            self.keeper = db.writer(self.settings.db_path)
            late = {name for name, trigger in triggers.items()
                    if isinstance(trigger, CronTrigger) and overdue(self.keeper, name, trigger, now)}
        except (sqlite3.Error, OSError) as exc:  # every job runs now, and fails with this sentence until it is fixed
            log.error("%s", db.storage_problem(self.settings.db_path, exc))
            late = set(JOBS)
        self.watched = db.identity_of(self.settings.db_path)
        self._add_jobs(triggers, late, now)
        signal.signal(signal.SIGTERM, self._stop)
        try:
            self.apscheduler.start()
        except (KeyboardInterrupt, SystemExit):
            pass
        finally:
            self._drain()

    def _add_jobs(self, triggers: dict, late: set[str], now: datetime) -> None:
        for name, trigger in triggers.items():
            # Interval jobs also run once at start, so a deploy never serves data an interval old.
            at_start = isinstance(trigger, IntervalTrigger) or name in late
            self.apscheduler.add_job(self._run_scheduled, trigger, args=(name,), id=name, name=name,
                                     **({"next_run_time": now} if at_start else {}))
            if at_start:
                log.info("%s runs now, then %s", name, trigger)
        log.info("scheduling %s", ", ".join(JOBS))
        # _run_scheduled says how each run went; APScheduler's "executed successfully" followed failures too
        logging.getLogger("apscheduler.executors.default").setLevel(logging.WARNING)

    def _run_scheduled(self, name: str) -> None:
        """One scheduled run, counted while under way so a stop can let it finish."""
        with self.under_way:
            if self.stopping.is_set():
                return
            self.running.add(name)
        try:
            ok, summary = run_job(self.settings, name)
            if ok:
                log.info("job %s: %s", name, summary)
            self._follow_a_new_file(name)
        finally:
            with self.under_way:
                self.running.discard(name)
                self.under_way.notify_all()

    def _follow_a_new_file(self, ran: str) -> None:
        """A site.db that is a new file after the run of `ran` (rebuilt where it was missing or
        emptied) has every other job run at once, rather than at their next times (the census a
        week away), and the -shm keeper moves to it."""
        with self.watch_lock:
            current = db.identity_of(self.settings.db_path)
            if current is None or current == self.watched:
                return
            first, self.watched = self.watched is None, current
            if first:  # built by this start's first runs, which are every job's anyway
                return
            log.warning("site.db at %s is a new file: every job runs now to fill it", self.settings.db_path)
            for other in JOBS:
                if other != ran:
                    self.apscheduler.modify_job(other, next_run_time=datetime.now(timezone.utc))
            with contextlib.suppress(sqlite3.Error, OSError):
                fresh = db.writer(self.settings.db_path)
                if self.keeper is not None:
                    self.keeper.close()
                self.keeper = fresh

    def _stop(self, signum, frame) -> None:
        """SIGTERM (systemctl stop, a deploy, `make run` ending): no new run starts, and the runs
        under way finish and are recorded, rather than being cut off and closed as failed later."""
        self.stopping.set()
        with contextlib.suppress(Exception):  # already stopping
            self.apscheduler.shutdown(wait=False)

    def _drain(self) -> None:
        """Wait for the runs under way, then let go of site.db."""
        self.stopping.set()
        with self.under_way:
            if self.running:
                log.info("stopping once the runs under way end: %s", ", ".join(sorted(self.running)))
            self.under_way.wait_for(lambda: not self.running)
        if self.keeper is not None:
            self.keeper.close()


def status(settings: Settings) -> int:
    """Print each job's last run from job_runs (private in Datasette): 1 when site.db cannot be read.
    On a full disk it reads site.db as it stands, as the app does: that is when the owner asks."""
    try:
        with contextlib.closing(db.connect(settings.db_path, readonly=True, as_it_stands=True)) as conn:
            last = {row["name"]: row for row in conn.execute(
                "SELECT name, started, finished, ok, error, summary FROM job_runs WHERE id IN "
                "(SELECT max(id) FROM job_runs GROUP BY name)")}
    except sqlite3.Error as exc:
        print(f"jobs: {db.storage_problem(settings.db_path, exc)}", file=sys.stderr)
        return 1
    now = datetime.now(timezone.utc)
    for name in JOBS:
        row = last.get(name)
        if row is None:
            state = "never run"
        elif row["finished"] is None:
            state = f"started {row['started']}, {_unfinished(settings, name)}"
        else:
            state = (f"ok {row['finished']}: {row['summary']}" if row["ok"] else
                     f"FAILED {row['finished']}: {row['error']}")
            # from its end: a run longer than its interval makes the scheduler skip the fires it overlapped
            due = next_due(name, db.parse_iso(row["finished"]))
            if now - due > LATE_AFTER:  # a run that could not record itself (a full disk) leaves no row
                state = (f"{state} | no run recorded since, though one was due {due:%Y-%m-%dT%H:%M:%SZ}: is the "
                         "scheduler running, and can it write site.db?")
        print(f"{name:{NAME_WIDTH}} {state}")
    return 0


def next_due(name: str, ended: datetime) -> datetime:
    """When the scheduler runs `name` at the latest after a run that ended at `ended`."""
    trigger = build_trigger(JOBS[name].trigger)
    if isinstance(trigger, IntervalTrigger):
        return ended + trigger.interval
    return trigger.get_next_fire_time(None, ended + timedelta(seconds=1))


def _unfinished(settings: Settings, name: str) -> str:
    """What an unfinished run is: its job's lock is held only while a run is alive."""
    held = files.lock_held(files.lock_path(settings.db_path, f"job-{name}"))
    if held is None:
        return "not finished (running, or killed: its next run closes it)"
    return "running now" if held else "not finished: its process died (killed or stopped); its next run closes it as failed"


def main(argv: list[str], **seams) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        settings = load_settings()
    except SettingsError as exc:
        print(f"jobs: {exc}", file=sys.stderr)
        return 2
    if not argv:
        return schedule(settings)
    if argv[0] == "list":
        for name, job in JOBS.items():
            print(f"{name:{NAME_WIDTH}} {job.trigger}  {job.about}")
        return 0
    if argv[0] == "status":
        return status(settings)
    if argv[0] == "run" and len(argv) == 2 and argv[1] in JOBS:
        ok, summary = run_job(settings, argv[1], **seams)
        print(f"{argv[1]}: {'ok' if ok else 'not run' if ok is None else 'FAILED'}: {summary}")
        return 0 if ok else os.EX_TEMPFAIL if ok is None else 1
    print(f"usage: python jobs.py [list | status | run {'|'.join(JOBS)}]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
