"""Every job that writes site.db, in one table.

    python jobs.py              run the scheduler (APScheduler BlockingScheduler) until Ctrl-C
    python jobs.py run NAME     run one job now and print its summary
    python jobs.py list         list the jobs and their schedules

Each job does its network and parsing outside any transaction, writes in one short transaction,
and returns a summary line; a failure is recorded in `job_runs` and leaves the last good data.
"""
from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable

from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from siteapi import db
from siteapi.config import Settings, SettingsError, load_settings
from siteapi.content import run_content
from siteapi.feeds.around import run_around
from siteapi.feeds.coffee import run_calendar
from siteapi.feeds.ledger import run_ledger
from siteapi.feeds.tracks import run_tracks
from siteapi.ingest import run_photos
from siteapi.lens.census import run_census
from siteapi.lens.scan import run_cache_purge

log = logging.getLogger("jobs")


@dataclass(frozen=True)
class Job:
    run: Callable[[Settings], str]
    trigger: dict  # APScheduler trigger: {"trigger": "interval", "minutes": 5} or cron fields
    about: str


JOBS: dict[str, Job] = {
    "content": Job(run_content, {"trigger": "interval", "minutes": 10}, "index content/ into pages (FTS5)"),
    "photos": Job(run_photos, {"trigger": "interval", "minutes": 15},
                  "ingest new, changed and deleted originals: metadata, recipe cards, thumbnails"),
    "census": Job(run_census, {"trigger": "cron", "day_of_week": "mon", "hour": 8, "minute": 17, "timezone": "UTC"},
                  "inspect the 16-site roster with the lens (no bot views); one row per site"),
    "tracks": Job(run_tracks, {"trigger": "cron", "minute": 7, "timezone": "UTC"}, "the owner's playlist from the music service"),
    "around": Job(run_around, {"trigger": "cron", "hour": 5, "minute": 41, "timezone": "UTC"},
                  "crawl the venture-firm homepages; record changes"),
    "calendar": Job(run_calendar, {"trigger": "interval", "minutes": 5}, "busy times from the owner's ICS calendar"),
    "ledger": Job(run_ledger, {"trigger": "interval", "minutes": 10}, "count AI-crawler visits in Caddy's access log"),
    "lens-caches": Job(run_cache_purge, {"trigger": "interval", "hours": 1},
                       "forget the lens's cached lookups (origins, URLs) past their window"),
}


def run_job(settings: Settings, name: str) -> tuple[bool, str]:
    """Run one job, recording it in job_runs; returns (ok, summary or error)."""
    conn = db.writer(settings.db_path)
    try:
        run_id = db.start_job_run(conn, name)
        started = time.monotonic()
        try:
            summary = JOBS[name].run(settings)
        except Exception as exc:  # any failure is recorded; the job's last good data stays
            log.error("job %s failed: %s", name, exc)
            log.debug("job %s traceback", name, exc_info=True)
            db.finish_job_run(conn, run_id, False, error=f"{type(exc).__name__}: {exc}")
            return False, str(exc)
        summary = f"{summary} ({time.monotonic() - started:.1f}s)"
        db.finish_job_run(conn, run_id, True, summary=summary)
        return True, summary
    finally:
        conn.close()


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
    due = trigger.get_next_fire_time(None, datetime.fromisoformat(finished))
    return due is not None and due <= now


def schedule(settings: Settings) -> None:
    from apscheduler.schedulers.blocking import BlockingScheduler

    scheduler = BlockingScheduler(job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": 300})
    now = datetime.now(timezone.utc)
    conn = db.writer(settings.db_path)
    try:
        for name, job in JOBS.items():
            trigger = build_trigger(job.trigger)
            # Interval jobs also run once at start, so a deploy never serves data an interval old.
            at_start = isinstance(trigger, IntervalTrigger) or overdue(conn, name, trigger, now)
            scheduler.add_job(run_job, trigger, args=(settings, name), id=name, name=name,
                              **({"next_run_time": now} if at_start else {}))
            if at_start:
                log.info("%s runs now, then %s", name, trigger)
    finally:
        conn.close()
    log.info("scheduling %s", ", ".join(JOBS))
    try:
        scheduler.start()
    except (KeyboardInterrupt, SystemExit):
        pass


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        settings = load_settings()
    except SettingsError as exc:
        print(f"jobs: {exc}", file=sys.stderr)
        return 2
    if not argv:
        schedule(settings)
        return 0
    if argv[0] == "list":
        for name, job in JOBS.items():
            print(f"{name:10} {job.trigger}  {job.about}")
        return 0
    if argv[0] == "run" and len(argv) == 2 and argv[1] in JOBS:
        ok, summary = run_job(settings, argv[1])
        print(f"{argv[1]}: {'ok' if ok else 'FAILED'}: {summary}")
        return 0 if ok else 1
    print(f"usage: python jobs.py [list | run {'|'.join(JOBS)}]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
