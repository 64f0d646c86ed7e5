"""Coffee slots: the calendar job against a loopback ICS feed, the slot rules, DST, fail-closed."""
from __future__ import annotations

import datetime as dt
import os
import pathlib
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from zoneinfo import ZoneInfo

import pytest

from siteapi import db
from siteapi.config import ROOT
from siteapi.feeds import FeedError
from siteapi.feeds.coffee import DEMO_CALENDAR, availability, open_slots, rules, run_calendar
from siteapi.web import ApiError
from feeds_servers import IcsServer, feeds_settings, trusted_tls_ics

NY = ZoneInfo("America/New_York")
UTC = dt.timezone.utc
# Wednesday 10 March 2027, 12:00 UTC; clocks in New York spring forward on Sunday 14 March.
NOW = dt.datetime(2027, 3, 10, 12, 0, tzinfo=UTC)
GRID = ["09:00", "09:45", "10:30", "11:15", "12:00", "12:45", "13:30", "14:15", "15:00", "15:45", "16:30", "17:15"]

VTIMEZONE = """BEGIN:VTIMEZONE
TZID:America/New_York
X-LIC-LOCATION:America/New_York
BEGIN:DAYLIGHT
TZOFFSETFROM:-0500
TZOFFSETTO:-0400
TZNAME:EDT
DTSTART:19700308T020000
RRULE:FREQ=YEARLY;BYMONTH=3;BYDAY=2SU
END:DAYLIGHT
BEGIN:STANDARD
TZOFFSETFROM:-0400
TZOFFSETTO:-0500
TZNAME:EST
DTSTART:19701101T020000
RRULE:FREQ=YEARLY;BYMONTH=11;BYDAY=1SU
END:STANDARD
END:VTIMEZONE"""


def calendar(*events: str) -> str:
    body = "\n".join(["BEGIN:VCALENDAR", "PRODID:-//Google Inc//Google Calendar 70.9054//EN", "VERSION:2.0",
                      "CALSCALE:GREGORIAN", "METHOD:PUBLISH", "X-WR-CALNAME:Aadharsh", "X-WR-TIMEZONE:America/New_York",
                      VTIMEZONE, *events, "END:VCALENDAR"])
    return body.replace("\n", "\r\n") + "\r\n"


def event(uid: str, *lines: str) -> str:
    return "\n".join(["BEGIN:VEVENT", f"UID:{uid}@google.com", "DTSTAMP:20270301T000000Z", *lines,
                      "SUMMARY:private", "END:VEVENT"])


OWNER_CALENDAR = calendar(
    # Standup Mon/Wed/Fri 10:00-11:00 New York time, on both sides of the DST change.
    event("standup", "DTSTART;TZID=America/New_York:20270301T100000", "DTEND;TZID=America/New_York:20270301T110000",
          "RRULE:FREQ=WEEKLY;BYDAY=MO,WE,FR", "EXDATE;TZID=America/New_York:20270317T100000"),
    # Friday 19 March's standup moved to 14:00-15:00.
    event("standup", "RECURRENCE-ID;TZID=America/New_York:20270319T100000",
          "DTSTART;TZID=America/New_York:20270319T140000", "DTEND;TZID=America/New_York:20270319T150000"),
    event("cancelled", "DTSTART;TZID=America/New_York:20270311T090000", "DTEND;TZID=America/New_York:20270311T100000",
          "STATUS:CANCELLED"),
    event("free", "DTSTART;TZID=America/New_York:20270311T120000", "DTEND;TZID=America/New_York:20270311T130000",
          "TRANSP:TRANSPARENT"),
    event("offsite", "DTSTART;VALUE=DATE:20270316", "DTEND;VALUE=DATE:20270317"),
    event("utc-call", "DTSTART:20270318T150000Z", "DTEND:20270318T160000Z"),
)


@pytest.fixture
def feed(monkeypatch):
    server = IcsServer(OWNER_CALENDAR)
    monkeypatch.setenv("SITE_CALENDAR_ICS_URL", server.feed_url)
    yield server
    server.close()


def settings_for(tmp_path, **feeds):
    # A loopback feed answers in milliseconds, but a busy machine can stall for longer than a short
    # limit: runs that must succeed get a generous one; the slow and dripping feeds get their own.
    return feeds_settings(tmp_path, {"booking_url": "https://aadhar.sh/coffee/book", "calendar_timeout": 10.0, **feeds})


def read(settings, now):
    return availability(db.connect(settings.db_path, readonly=True), settings, now=now)


def by_day(slots) -> dict[str, list[str]]:
    days: dict[str, list[str]] = {}
    for slot in slots:
        local = dt.datetime.fromisoformat(slot["start"])
        days.setdefault(local.date().isoformat(), []).append(local.strftime("%H:%M"))
    return days


def test_slots_follow_the_calendar_and_survive_dst(tmp_path, feed):
    settings = settings_for(tmp_path, coffee_max_per_day=99, coffee_max_per_week=99)
    assert "busy intervals" in run_calendar(settings, now=NOW)
    body = read(settings, NOW + dt.timedelta(minutes=2))
    assert body["available"] is True and body["stale"] is False and body["source"] == "fresh"
    assert body["timezone"] == "America/New_York" and body["bookingUrl"] == "https://aadhar.sh/coffee/book"
    days = by_day(body["slots"])
    assert sorted(days) == ["2027-03-11", "2027-03-12", "2027-03-15", "2027-03-17", "2027-03-18", "2027-03-19",
                            "2027-03-22", "2027-03-23"]  # weekdays only; the 16th is all-day busy; the 24th is past 14 days
    free_all_day = [g for g in GRID]
    assert days["2027-03-11"] == free_all_day  # cancelled and transparent events block nothing
    standup_day = [g for g in GRID if g not in ("09:45", "10:30")]
    assert days["2027-03-12"] == standup_day  # EST
    assert days["2027-03-15"] == standup_day  # EDT: same local times after the change
    assert days["2027-03-17"] == free_all_day  # EXDATE removed that standup
    assert days["2027-03-19"] == [g for g in GRID if g != "14:15"]  # the moved occurrence
    assert days["2027-03-18"] == [g for g in GRID if g != "11:15"]  # 15:00Z = 11:00 EDT
    first_est = next(s for s in body["slots"] if s["start"].startswith("2027-03-12T09:00"))
    first_edt = next(s for s in body["slots"] if s["start"].startswith("2027-03-15T09:00"))
    assert first_est["start"].endswith("-05:00") and first_edt["start"].endswith("-04:00")
    assert first_est["startMs"] == int(dt.datetime(2027, 3, 12, 14, tzinfo=UTC).timestamp() * 1000)
    assert first_edt["startMs"] == int(dt.datetime(2027, 3, 15, 13, tzinfo=UTC).timestamp() * 1000)
    assert all(s["endMs"] - s["startMs"] == 30 * 60_000 and s["durationMinutes"] == 30 for s in body["slots"])
    assert len({s["startMs"] for s in body["slots"]}) == len(body["slots"])


def test_fall_back_week_has_every_slot_once(tmp_path, feed):
    feed.ics = calendar()
    now = dt.datetime(2026, 10, 28, 12, tzinfo=UTC)  # clocks fall back on Sunday 1 November 2026
    settings = settings_for(tmp_path, coffee_max_per_day=99, coffee_max_per_week=99)
    run_calendar(settings, now=now)
    days = by_day(read(settings, now)["slots"])
    assert all(times == GRID for times in days.values()) and len(days) == 9  # 29 Oct to 10 Nov
    assert "2026-10-30" in days and "2026-11-02" in days


def test_caps_notice_and_horizon(tmp_path, feed):
    settings = settings_for(tmp_path)
    run_calendar(settings, now=NOW)
    slots = read(settings, NOW)["slots"]
    assert all(s["startMs"] >= (NOW + dt.timedelta(hours=24)).timestamp() * 1000 for s in slots)
    assert all(s["startMs"] <= (NOW + dt.timedelta(days=14)).timestamp() * 1000 for s in slots)
    days = by_day(slots)
    assert all(len(times) <= 3 for times in days.values())
    weeks: dict = {}
    for day, times in days.items():
        week = dt.date.fromisoformat(day).isocalendar()[:2]
        weeks[week] = weeks.get(week, 0) + len(times)
    assert max(weeks.values()) == 5 and days["2027-03-11"] == ["09:00", "09:45", "10:30"]
    assert days["2027-03-12"] == ["09:00", "11:15"]


def test_fails_closed_when_never_read_or_stale(tmp_path, feed):
    settings = settings_for(tmp_path)
    db.writer(settings.db_path).close()
    with pytest.raises(ApiError) as caught:
        read(settings, NOW)
    err = caught.value
    assert err.status == 503 and err.headers["Retry-After"] == "60"
    assert err.body["slots"] == [] and err.body["available"] is False and err.body["source"] == "none"
    assert err.body["bookingUrl"] == "https://aadhar.sh/coffee/book"
    run_calendar(settings, now=NOW)
    body = read(settings, NOW + dt.timedelta(minutes=10))
    assert body["stale"] is True and body["source"] == "stale" and body["slots"]
    with pytest.raises(ApiError) as caught:
        read(settings, NOW + dt.timedelta(minutes=16))
    assert caught.value.status == 503 and caught.value.body["slots"] == [] and caught.value.body["ageSeconds"] == 960


def test_unreadable_storage_fails_closed(tmp_path, feed):
    settings = settings_for(tmp_path)
    settings.db_path.write_bytes(b"garbage" * 200)
    with pytest.raises(ApiError) as caught:
        availability(sqlite3.connect(settings.db_path), settings, now=NOW)
    assert caught.value.status == 503 and caught.value.body["slots"] == []


MINUTELY = calendar(event("spam", "DTSTART:20270301T100000Z", "DTEND:20270301T100100Z", "RRULE:FREQ=MINUTELY"))
# Every minute and every half minute without saying MINUTELY or SECONDLY: by BY lists. The same with
# 60 BYSECOND values takes minutes to expand before the 5,000-event cap can refuse it.
EVERY_MINUTE = calendar(event("spam", "DTSTART:20270301T000000Z", "DTEND:20270301T000100Z",
                              "RRULE:FREQ=DAILY;BYHOUR=" + ",".join(map(str, range(24)))
                              + ";BYMINUTE=" + ",".join(map(str, range(60)))))
TWICE_A_MINUTE = calendar(event("spam", "DTSTART:20270301T000000Z", "DTEND:20270301T000001Z",
                                "RRULE:FREQ=HOURLY;BYSECOND=0,30"))


@pytest.mark.parametrize("fault,ics,message", [
    ("500", None, "HTTP 500"),
    ("slow", None, "could not be reached|time limit"),
    ("huge", None, "larger than"),
    (None, "BEGIN:VCALENDAR\r\nthis is not ics\r\nEND:VCALENDAR\r\n", "not a valid iCalendar"),
    (None, "<!doctype html><title>Sign in</title>", "not a valid iCalendar"),
    (None, "BEGIN:VCARD\r\nVERSION:4.0\r\nFN:Someone\r\nEND:VCARD\r\n", "not a VCALENDAR"),
    (None, MINUTELY, "every second or minute"),
    (None, EVERY_MINUTE, "every second or minute"),
    (None, TWICE_A_MINUTE, "every second or minute"),
])
def test_faults_keep_the_last_busy_list(tmp_path, feed, fault, ics, message):
    settings = settings_for(tmp_path, coffee_max_per_day=99, coffee_max_per_week=99)
    run_calendar(settings, now=NOW)
    before = read(settings, NOW)
    feed.fault, feed.ics = fault, ics or feed.ics
    # the slow feed answers after 1.5 s: a limit well under that fails it however busy the machine is
    faulty = settings_for(tmp_path, calendar_timeout=0.5) if fault == "slow" else settings
    with pytest.raises(FeedError, match=message):
        run_calendar(faulty, now=NOW + dt.timedelta(minutes=5))
    assert read(settings, NOW) == before


@pytest.mark.parametrize("fault", ["drip", "drip-headers"])
def test_a_feed_that_drips_is_left_at_the_time_limit(tmp_path, feed, fault):
    """A read timeout starts again with every byte: dripped headers used to hold the job for as long
    as the server went on (a hundred lines of 64 KB)."""
    settings = settings_for(tmp_path)
    run_calendar(settings, now=NOW)
    before = read(settings, NOW)
    feed.fault = fault
    dripping = settings_for(tmp_path, calendar_timeout=2.0)  # well under the 10 s the whole body takes
    with pytest.raises(FeedError, match="took longer than its time limit"):
        run_calendar(dripping, now=NOW + dt.timedelta(minutes=5))
    assert feed.dripped < 100  # the job hung up before the server had sent the body
    assert read(settings, NOW) == before


def test_feed_down_or_unset(tmp_path, feed, monkeypatch):
    settings = settings_for(tmp_path)
    feed.close()
    with pytest.raises(FeedError, match="could not be reached"):
        run_calendar(settings, now=NOW)
    monkeypatch.delenv("SITE_CALENDAR_ICS_URL")
    with pytest.raises(FeedError, match="SITE_CALENDAR_ICS_URL"):
        run_calendar(settings, now=NOW)


def test_only_instants_are_stored(tmp_path, feed):
    settings = settings_for(tmp_path)
    run_calendar(settings, now=NOW)
    conn = db.connect(settings.db_path, readonly=True)
    columns = {row[1] for row in conn.execute("PRAGMA table_info(coffee_busy)")}
    assert columns == {"start_ms", "end_ms", "start_utc", "end_utc"}
    assert b"private" not in settings.db_path.read_bytes()


def test_an_event_with_a_broken_rule_is_skipped_and_the_rest_kept(tmp_path, feed):
    settings = settings_for(tmp_path, coffee_max_per_day=99, coffee_max_per_week=99)
    feed.ics = calendar(
        event("broken", "DTSTART:20270311T150000Z", "DTEND:20270311T160000Z", "RRULE:FREQ=WEEKLY;UNTIL=2027"),
        event("two-rules", "DTSTART:20270312T150000Z", "DTEND:20270312T160000Z",
              "RRULE:FREQ=WEEKLY;COUNT=2", "RRULE:FREQ=MINUTELY;COUNT=2"),
        event("good", "DTSTART;TZID=America/New_York:20270311T120000", "DTEND;TZID=America/New_York:20270311T130000"))
    with pytest.raises(FeedError, match="every second or minute"):  # a second RRULE is read too
        run_calendar(settings, now=NOW)
    feed.ics = feed.ics.replace("RRULE:FREQ=MINUTELY;COUNT=2\r\n", "")
    assert "3 busy intervals" in run_calendar(settings, now=NOW)  # two weekly + the good one
    days = by_day(read(settings, NOW)["slots"])
    assert "12:00" not in days["2027-03-11"] and "10:00" not in days["2027-03-12"]
    assert "09:45" in days["2027-03-11"]  # the broken rule's 10:00-11:00 holds nothing


def test_an_event_without_a_start_is_skipped_and_the_rest_kept(tmp_path, feed):
    """An event with no DTSTART has no time to block; it must not cost the owner every other event."""
    settings = settings_for(tmp_path, coffee_max_per_day=99, coffee_max_per_week=99)
    feed.ics = calendar(event("startless", "DTEND:20270311T160000Z"),
                        event("good", "DTSTART;TZID=America/New_York:20270311T120000",
                              "DTEND;TZID=America/New_York:20270311T130000"))
    assert "1 busy intervals" in run_calendar(settings, now=NOW)
    assert "12:00" not in by_day(read(settings, NOW)["slots"])["2027-03-11"]


# dateutil steps through every hour since 1700 (12 s of CPU), and searches to the year 9999 for a
# 30 February that never comes (5 such events: 27 s); a time limit bounds any such calendar.
HOURLY_SINCE_1700 = calendar(event("old", "DTSTART:17000101T100000Z", "DTEND:17000101T103000Z", "RRULE:FREQ=HOURLY"))
NEVER_MATCHES = calendar(*[event(f"never{n}", "DTSTART:20000101T100000Z", "DTEND:20000101T103000Z",
                                 "RRULE:FREQ=HOURLY;BYMONTH=2;BYMONTHDAY=30") for n in range(5)])


@pytest.mark.parametrize("ics", [HOURLY_SINCE_1700, NEVER_MATCHES], ids=["hourly-since-1700", "never-matches"])
def test_an_expansion_past_its_time_limit_is_refused_and_the_last_list_kept(tmp_path, feed, ics):
    settings = settings_for(tmp_path, coffee_max_per_day=99, coffee_max_per_week=99)
    run_calendar(settings, now=NOW)
    before = read(settings, NOW)
    feed.ics = ics
    started = time.monotonic()
    with pytest.raises(FeedError, match="took longer than 1 s to expand"):
        run_calendar(settings_for(tmp_path, calendar_expand_seconds=1), now=NOW + dt.timedelta(minutes=5))
    assert time.monotonic() - started < 8  # the child was killed at its limit, not waited for
    assert read(settings, NOW) == before


def test_an_expansion_past_its_memory_limit_is_refused_and_the_last_list_kept(tmp_path, feed):
    settings = settings_for(tmp_path)
    run_calendar(settings, now=NOW)
    before = read(settings, NOW)
    feed.ics = "BEGIN:VCALENDAR\r\n" + "BEGIN:VEVENT\r\nEND:VEVENT\r\n" * 300_000 + "END:VCALENDAR\r\n"  # 7.8 MB
    with pytest.raises(FeedError, match="needs more than 100 MB to expand"):  # icalendar takes some 300 MB
        run_calendar(settings_for(tmp_path, calendar_expand_mb=100), now=NOW + dt.timedelta(minutes=5))
    assert read(settings, NOW) == before


def test_an_event_with_thousands_of_properties_costs_only_its_times(tmp_path, feed):
    """Every occurrence is a copy of its event: 2,000 occurrences of an event with 2,000 other
    properties were 4 million copied properties (over 500 MB) until only the ones read were kept."""
    settings = settings_for(tmp_path, calendar_expand_mb=256)
    start = dt.datetime(2027, 3, 11, 15, tzinfo=UTC)
    times = ",".join((start + dt.timedelta(seconds=n)).strftime("%Y%m%dT%H%M%SZ") for n in range(2000))
    feed.ics = calendar(event("busy", "DTSTART:20270311T150000Z", "DTEND:20270311T150001Z", "RDATE:" + times,
                              *[f"X-NOTE-{n}:note {n}" for n in range(2000)]))
    assert "1 busy intervals" in run_calendar(settings, now=NOW)  # 15:00:00 to 15:33:20 UTC, merged
    conn = db.connect(settings.db_path, readonly=True)
    assert [tuple(row) for row in conn.execute("SELECT start_utc, end_utc FROM coffee_busy")] == [
        ("2027-03-11T15:00:00Z", "2027-03-11T15:33:20Z")]


def test_a_rule_dateutil_cannot_compute_is_skipped_and_the_rest_kept(tmp_path, feed):
    settings = settings_for(tmp_path, coffee_max_per_day=99, coffee_max_per_week=99)
    feed.ics = calendar(
        event("impossible", "DTSTART:20200101T150000Z", "DTEND:20200101T160000Z", "RRULE:FREQ=HOURLY;BYHOUR=25"),
        event("good", "DTSTART;TZID=America/New_York:20270311T120000", "DTEND;TZID=America/New_York:20270311T130000"))
    assert "1 busy intervals" in run_calendar(settings, now=NOW)  # dateutil raised TypeError on the whole feed
    days = by_day(read(settings, NOW)["slots"])
    assert "12:00" not in days["2027-03-11"] and "11:15" in days["2027-03-11"]


def test_a_webcal_address_is_read_over_https(tmp_path, monkeypatch):
    """Calendar apps publish webcal://host/path, which means https://host/path."""
    with trusted_tls_ics(monkeypatch, OWNER_CALENDAR) as server:
        monkeypatch.setenv("SITE_CALENDAR_ICS_URL", server.feed_url.replace("https://", "webcal://"))
        settings = settings_for(tmp_path)
        assert "8 busy intervals" in run_calendar(settings, now=NOW)
    assert [path for _, path, _ in server.requests] == ["/calendar.ics"]
    assert read(settings, NOW)["slots"]


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/calendar.ics", "127.0.0.1/calendar.ics",
                                 "webcal:/127.0.0.1/calendar.ics"])
def test_other_schemes_are_refused_without_showing_the_address(tmp_path, monkeypatch, url):
    monkeypatch.setenv("SITE_CALENDAR_ICS_URL", url)
    with pytest.raises(FeedError, match="must be an https://, http://, webcal:// or file:// address") as caught:
        run_calendar(settings_for(tmp_path), now=NOW)
    assert "127.0.0.1" not in str(caught.value)


def test_a_calendar_file_on_this_machine_is_read(tmp_path, monkeypatch):
    """A file:// address: a calendar a sync tool keeps on disk, read as the feed is."""
    ics = tmp_path / "owner calendar.ics"
    ics.write_text(OWNER_CALENDAR)
    monkeypatch.setenv("SITE_CALENDAR_ICS_URL", ics.as_uri())  # file:///.../owner%20calendar.ics
    settings = settings_for(tmp_path)
    assert "8 busy intervals" in run_calendar(settings, now=NOW)
    assert read(settings, NOW)["slots"]


def test_the_demo_week_never_runs_out(tmp_path, monkeypatch):
    """make run's calendar (DEMO_CALENDAR) repeats weekly: whatever the date, some slots are taken
    and some are offered."""
    monkeypatch.setenv("SITE_CALENDAR_ICS_URL", DEMO_CALENDAR.as_uri())
    settings = settings_for(tmp_path)
    for now in (NOW, dt.datetime(2031, 12, 24, 15, 0, tzinfo=UTC), dt.datetime.now(UTC)):
        assert "0 busy intervals" not in run_calendar(settings, now=now)
        days = by_day(read(settings, now)["slots"])
        assert days and all("09:30" not in times for times in days.values()), days  # the daily stand-up


def test_a_calendar_address_naming_no_regular_file_is_refused_at_once(tmp_path, monkeypatch):
    """A folder, or a FIFO no one writes to (whose plain open would wait for a writer for ever, the
    job holding its lock), is refused by a sentence; a NUL in the path too. file://LOCALHOST/ is
    this machine."""
    (tmp_path / "private-dir").mkdir()
    os.mkfifo(tmp_path / "private-fifo")
    for target, sentence in (((tmp_path / "private-dir").as_uri(), "something other than a file"),
                             ((tmp_path / "private-fifo").as_uri(), "something other than a file"),
                             ((tmp_path / "private-dir").as_uri() + "/%00.ics", "could not be read: ValueError")):
        monkeypatch.setenv("SITE_CALENDAR_ICS_URL", target)
        started = time.monotonic()
        with pytest.raises(FeedError, match=sentence) as caught:
            run_calendar(settings_for(tmp_path, calendar_timeout=30.0), now=NOW)
        assert time.monotonic() - started < 10 and "private" not in str(caught.value), target
    (tmp_path / "cal.ics").write_text(OWNER_CALENDAR)
    monkeypatch.setenv("SITE_CALENDAR_ICS_URL", "file://LOCALHOST" + str(tmp_path / "cal.ics"))
    assert "8 busy intervals" in run_calendar(settings_for(tmp_path), now=NOW)


def test_a_calendar_file_read_that_stalls_fails_at_the_calendar_timeout(tmp_path, monkeypatch):
    """A stalled disk or mount (here, the file system's read made to hang): the job gives up at its
    timeout, with a sentence, instead of holding its lock for ever."""
    ics = tmp_path / "private.ics"
    ics.write_text(OWNER_CALENDAR)
    real_open, released = pathlib.Path.open, threading.Event()

    def stalled_open(self, *args, **kwargs):
        if self == ics:
            released.wait(30)
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "open", stalled_open)
    monkeypatch.setenv("SITE_CALENDAR_ICS_URL", ics.as_uri())
    started = time.monotonic()
    try:
        with pytest.raises(FeedError, match=r"not read within 1 s; is its disk or mount stalled\?") as caught:
            run_calendar(settings_for(tmp_path, calendar_timeout=1.0), now=NOW)
        # the next runs while it still hangs: told so at once, and no second thread waits beside it
        for _ in range(3):
            with pytest.raises(FeedError, match=r"last read has not returned yet"):
                run_calendar(settings_for(tmp_path, calendar_timeout=1.0), now=NOW)
        assert [t.name for t in threading.enumerate()].count("calendar-file") == 1
    finally:
        released.set()
    assert time.monotonic() - started < 10 and "private" not in str(caught.value)
    for thread in threading.enumerate():
        if thread.name == "calendar-file":
            thread.join(5)
    assert "8 busy intervals" in run_calendar(settings_for(tmp_path), now=NOW)  # the mount answers again


@pytest.mark.parametrize("where, sentence", [("file://calendar.example/private.ics", "absolute path on this machine"),
                                             ("file:private.ics", "absolute path on this machine"),
                                             ("file:///nowhere/private.ics", "could not be read: FileNotFoundError"),
                                             ("file:///etc/passwd", "not a valid iCalendar")])
def test_a_calendar_file_that_cannot_be_read_is_a_sentence_without_its_path(tmp_path, monkeypatch, where, sentence):
    monkeypatch.setenv("SITE_CALENDAR_ICS_URL", where)
    with pytest.raises(FeedError, match=sentence) as caught:
        run_calendar(settings_for(tmp_path), now=NOW)
    assert "private" not in str(caught.value) and "passwd" not in str(caught.value) and "root" not in str(caught.value)


@pytest.mark.parametrize("url", ["https://a..b/secret-token/calendar.ics", "webcal://a..b/secret-token/calendar.ics",
                                 "https://exa mple.com/secret-token/calendar.ics"])
def test_an_address_that_cannot_be_parsed_is_a_sentence_without_the_address(tmp_path, monkeypatch, url):
    monkeypatch.setenv("SITE_CALENDAR_ICS_URL", url)
    with pytest.raises(FeedError) as caught:
        run_calendar(settings_for(tmp_path), now=NOW)
    assert "secret" not in str(caught.value) and "a..b" not in str(caught.value) and "mple" not in str(caught.value)


def test_the_expansion_child_stops_itself_should_the_job_die(tmp_path):
    """The job kills its child at the time limit; a child whose job was killed first stops at a CPU
    limit of its own instead of running on for as long as the calendar makes it."""
    started = time.monotonic()
    child = subprocess.run([sys.executable, "-m", "siteapi.feeds.coffee", "America/New_York", NOW.isoformat(),
                            (NOW + dt.timedelta(days=16)).isoformat(), "512", "1"],
                           input=HOURLY_SINCE_1700.encode(), capture_output=True, timeout=60, cwd=ROOT)
    assert child.returncode == -signal.SIGXCPU and child.stdout == b""
    assert time.monotonic() - started < 8


def stored_busy(settings) -> list[tuple[str, str]]:
    conn = db.connect(settings.db_path, readonly=True)
    return [tuple(row) for row in conn.execute("SELECT start_utc, end_utc FROM coffee_busy ORDER BY start_ms")]


DAILY = ("DTSTART;TZID=America/New_York:20270301T100000", "DTEND;TZID=America/New_York:20270301T110000",
         "RRULE:FREQ=DAILY")
MOVED = "RECURRENCE-ID;TZID=America/New_York:20270313T100000"  # the series' 13 March occurrence
# Times near year 1 or 9999 that overflow once moved to UTC or another zone (the expansion moves UTC
# times into X-WR-TIMEZONE, New York here), beside a daily series and another event that must still
# count. Each entry: the lines added to the series, and other events.
UNREPRESENTABLE = {
    "override-ending-9999-west": ((), [event("daily", MOVED, "DTSTART;TZID=America/New_York:20270313T100000",
                                             "DTEND;TZID=America/New_York:99991231T230000")]),
    "override-starting-year-1-east": ((), [event("daily", MOVED, "DTSTART;TZID=Asia/Tokyo:00010101T000000",
                                                 "DTEND;TZID=America/New_York:20270313T110000")]),
    "override-lasting-8000-years": ((), [event("daily", MOVED, "DTSTART;TZID=America/New_York:20270313T100000",
                                               "DURATION:P3000000D")]),
    "rdate-period-ending-9999-west": (("RDATE;VALUE=PERIOD;TZID=America/New_York:20270313T120000/99991231T230000",), []),
    "rdate-period-lasting-8000-years": (("RDATE;VALUE=PERIOD:20270313T170000Z/P3000000D",), []),
    "rdate-9999-west": (("RDATE;TZID=America/New_York:99991231T230000",), []),
    "rdate-year-1-east": (("RDATE;TZID=Asia/Tokyo:00010101T000000",), []),
    "exdate-9999-west": (("EXDATE;TZID=America/New_York:99991231T230000",), []),
    "exdate-year-1-utc": (("EXDATE:00010101T000000Z",), []),
    "exdate-year-1-all-day": (("EXDATE;VALUE=DATE:00010101",), []),
    "until-9999": (("RRULE:FREQ=DAILY;UNTIL=99991231T235959Z",), []),
    "event-starting-year-1-utc": ((), [event("old", "DTSTART:00010101T000000Z", "DTEND:00010101T010000Z")]),
    "event-ending-before-year-1": ((), [event("older", "DTSTART:00010101T000000Z", "DURATION:-P1D")]),
    "event-ending-9999-west": ((), [event("late", "DTSTART;TZID=America/New_York:99991231T220000",
                                          "DTEND;TZID=America/New_York:99991231T230000")]),
}


@pytest.mark.parametrize("series_lines,others", UNREPRESENTABLE.values(), ids=UNREPRESENTABLE.keys())
def test_times_that_cannot_be_represented_are_skipped_and_the_rest_kept(tmp_path, feed, series_lines, others):
    """An occurrence ending in year 9999 west of UTC made the whole calendar fail with OverflowError
    (the last busy list stayed); a far EXDATE, or an override or RDATE lasting thousands of years,
    silently dropped its whole series (or the rest of it). Now such a time is skipped alone."""
    settings = settings_for(tmp_path)
    good = event("good", "DTSTART:20270311T170000Z", "DTEND:20270311T173000Z")
    feed.ics = calendar(event("daily", *DAILY), good)
    run_calendar(settings, now=NOW)
    expected = stored_busy(settings)
    assert len(expected) == 18  # the series' 9 to 25 March, and the other event
    replaced = {line.split(":")[0] for line in series_lines if line.startswith("RRULE")}
    series = [line for line in DAILY if line.split(":")[0] not in replaced] + list(series_lines)
    feed.ics = calendar(event("daily", *series), *others, good)
    run_calendar(settings, now=NOW + dt.timedelta(minutes=5))
    assert stored_busy(settings) == expected


def test_a_utc_time_at_the_end_of_year_9999_in_a_calendar_east_of_utc_is_skipped(tmp_path, feed):
    settings = settings_for(tmp_path)
    good = event("good", "DTSTART:20270311T170000Z", "DTEND:20270311T173000Z")
    tokyo = lambda *events: calendar(*events).replace("X-WR-TIMEZONE:America/New_York", "X-WR-TIMEZONE:Asia/Tokyo")
    feed.ics = tokyo(good)
    run_calendar(settings, now=NOW)
    expected = stored_busy(settings)
    feed.ics = tokyo(event("last", "DTSTART:99991231T220000Z", "DTEND:99991231T235959Z"), good)
    run_calendar(settings, now=NOW + dt.timedelta(minutes=5))
    assert stored_busy(settings) == expected == [("2027-03-11T17:00:00Z", "2027-03-11T17:30:00Z")]


@pytest.mark.parametrize("end", ["DTEND;VALUE=DATE:20270317", "DURATION:P1D"])
def test_an_all_day_event_blocks_its_whole_utc_day(tmp_path, feed, end):
    """REFERENCE.md: all-day events block the whole UTC day. 16 March 2027 in UTC is 20:00 on the
    15th to 20:00 on the 16th in New York (EDT); a day running to 23:00 shows the difference."""
    settings = settings_for(tmp_path, coffee_day_end="23:00", coffee_max_per_day=99, coffee_max_per_week=99)
    feed.ics = calendar(event("offsite", "DTSTART;VALUE=DATE:20270316", end))
    run_calendar(settings, now=NOW)
    assert stored_busy(settings) == [("2027-03-16T00:00:00Z", "2027-03-17T00:00:00Z")]
    days = by_day(read(settings, NOW)["slots"])
    evening = ["20:15", "21:00", "21:45", "22:30"]
    assert days["2027-03-15"] == GRID + ["18:00", "18:45", "19:30"]  # the 19:30 slot ends as the UTC day begins
    assert days["2027-03-16"] == evening
    assert days["2027-03-17"] == GRID + ["18:00", "18:45", "19:30"] + evening


GOOD = event("good", "DTSTART:20270311T170000Z", "DTEND:20270311T173000Z")
# An event giving a property it may give once (RFC 5545) two values, beside the GOOD one.
TWO_VALUES = {
    "start": ("DTSTART:20270312T150000Z", "DTSTART:20270312T180000Z", "DTEND:20270312T160000Z"),
    "end": ("DTSTART:20270312T150000Z", "DTEND:20270312T160000Z", "DTEND:20270312T170000Z"),
    "duration": ("DTSTART:20270312T150000Z", "DURATION:PT1H", "DURATION:PT2H"),
    "uid": ("UID:other@google.com", "DTSTART:20270312T150000Z", "DTEND:20270312T160000Z"),
    "status": ("DTSTART:20270312T150000Z", "DTEND:20270312T160000Z", "STATUS:CONFIRMED", "STATUS:CANCELLED"),
}


@pytest.mark.parametrize("lines", TWO_VALUES.values(), ids=TWO_VALUES.keys())
def test_an_event_giving_two_values_for_one_is_skipped_and_the_rest_kept(tmp_path, feed, lines):
    """Some exporters repeat DTSTART. An event with two starts (or ends, durations, UIDs) failed the
    whole calendar, which then kept its last busy list however old (and one with two STATUSes, one
    of them CANCELLED, blocked its time); which value is meant cannot be known, so the event is
    skipped like any other unreadable one."""
    settings = settings_for(tmp_path)
    feed.ics = calendar(event("twice", *lines), GOOD)
    assert "1 busy intervals" in run_calendar(settings, now=NOW)
    assert stored_busy(settings) == [("2027-03-11T17:00:00Z", "2027-03-11T17:30:00Z")]


def test_an_override_moved_from_two_times_is_skipped_and_its_series_kept(tmp_path, feed):
    settings = settings_for(tmp_path)
    feed.ics = calendar(event("daily", *DAILY), GOOD)
    run_calendar(settings, now=NOW)
    expected = stored_busy(settings)
    feed.ics = calendar(event("daily", *DAILY), GOOD,
                        event("daily", MOVED, "RECURRENCE-ID;TZID=America/New_York:20270314T100000",
                              "DTSTART;TZID=America/New_York:20270313T190000",
                              "DTEND;TZID=America/New_York:20270313T200000"))
    run_calendar(settings, now=NOW + dt.timedelta(minutes=5))
    assert stored_busy(settings) == expected  # the 13th and 14th stay where the series puts them


def test_an_event_giving_the_same_start_twice_is_read_once(tmp_path, feed):
    settings = settings_for(tmp_path)
    feed.ics = calendar(event("twice", "DTSTART:20270312T150000Z", "DTSTART:20270312T150000Z",
                              "DTEND:20270312T160000Z", "DTEND:20270312T160000Z"), GOOD)
    run_calendar(settings, now=NOW)
    assert stored_busy(settings) == [("2027-03-11T17:00:00Z", "2027-03-11T17:30:00Z"),
                                     ("2027-03-12T15:00:00Z", "2027-03-12T16:00:00Z")]


LONG_EVENTS = {
    "1500-years": ("DTSTART:20000101T000000Z", "DTEND:35000101T000000Z"),  # shorter than the time since year 1
    "2100-years": ("DTSTART:20000101T000000Z", "DTEND:41000101T000000Z"),
    "2100-years-all-day": ("DTSTART;VALUE=DATE:20000101", "DTEND;VALUE=DATE:41000101"),
    "2100-years-by-duration": ("DTSTART;TZID=America/New_York:20000101T000000", "DURATION:P766000D"),
    "2100-years-every-year": ("DTSTART:20000101T000000Z", "DTEND:41000101T000000Z", "RRULE:FREQ=YEARLY"),
    "since-year-5": ("DTSTART:00050101T000000Z", "DTEND:41000101T000000Z"),
}


@pytest.mark.parametrize("lines", LONG_EVENTS.values(), ids=LONG_EVENTS.keys())
def test_an_event_lasting_thousands_of_years_blocks_every_slot(tmp_path, feed, lines):
    """recurring-ical-events looks back one event's length before the window for an occurrence still
    running into it: past year 1 for an event longer than the some 2,000 years since, and the
    event blocked nothing."""
    settings = settings_for(tmp_path)
    feed.ics = calendar(event("forever", *lines), GOOD)
    assert "1 busy intervals" in run_calendar(settings, now=NOW)
    [(start, end)] = stored_busy(settings)
    assert start < "2000-01-01T05:00:01Z" and end > "3500"
    assert read(settings, NOW)["slots"] == []


@pytest.mark.parametrize("zone, day_start, day_end, now", [
    ("America/New_York", "01:00", "04:30", "2027-03-14T05:00:00+00:00"),  # spring forward, 02:00 -> 03:00
    ("America/New_York", "00:30", "03:00", "2027-11-07T04:00:00+00:00"),  # fall back, 02:00 -> 01:00
    ("Africa/Cairo", "00:00", "02:00", "2027-04-29T21:00:00+00:00"),      # spring forward at midnight, a Friday
])
def test_slots_where_the_clocks_change_inside_the_owners_hours(tmp_path, zone, day_start, day_end, now):
    """Every slot lasts its real length, starts at a wall time that exists, ends by the day's end
    and does not start before the previous one's end and buffer."""
    settings = feeds_settings(tmp_path, {"coffee_timezone": zone, "coffee_day_start": day_start, "coffee_day_end": day_end,
                                        "coffee_days": ["mon", "tue", "wed", "thu", "fri", "sat", "sun"],
                                        "coffee_notice_hours": 0, "coffee_horizon_days": 1, "coffee_max_per_day": 100,
                                        "coffee_max_per_week": 100})
    r = rules(settings)
    slots = open_slots(r, [], dt.datetime.fromisoformat(now))
    assert len(slots) >= 2
    for slot in slots:
        start, end = dt.datetime.fromisoformat(slot["start"]), dt.datetime.fromisoformat(slot["end"])
        assert end - start == dt.timedelta(minutes=slot["durationMinutes"]) == r["slot"]
        assert slot["endMs"] - slot["startMs"] == r["slot"].total_seconds() * 1000
        assert end.replace(tzinfo=None) <= dt.datetime.combine(start.date(), r["day_end"])
    for before, after in zip(slots, slots[1:]):
        assert after["startMs"] >= before["endMs"] + r["buffer"].total_seconds() * 1000


def test_an_empty_calendar_is_believed_when_read_twice_in_a_row(tmp_path, feed):
    """A provider's glitch answering an empty calendar would open every slot: the first empty read
    keeps the busy times (and says so), a second in a row clears them; a full read in between resets."""
    settings = settings_for(tmp_path, coffee_max_per_day=99, coffee_max_per_week=99)
    run_calendar(settings, now=NOW)
    before = read(settings, NOW)
    full, feed.ics = feed.ics, calendar()
    with pytest.raises(FeedError, match="came back empty where .* busy times lie ahead"):
        run_calendar(settings, now=NOW + dt.timedelta(minutes=5))
    assert read(settings, NOW) == before
    feed.ics = full
    run_calendar(settings, now=NOW + dt.timedelta(minutes=10))
    feed.ics = calendar()
    with pytest.raises(FeedError, match="came back empty"):
        run_calendar(settings, now=NOW + dt.timedelta(minutes=15))
    assert "0 busy intervals" in run_calendar(settings, now=NOW + dt.timedelta(minutes=20))
    opened = read(settings, NOW + dt.timedelta(minutes=20))
    assert len(opened["slots"]) > len(before["slots"])
    assert "0 busy intervals" in run_calendar(settings, now=NOW + dt.timedelta(minutes=25))  # nothing ahead to keep


@pytest.mark.parametrize("start", ["DTSTART;TZID=America/New_York:20270311T100000", "DTSTART:20270311T150000Z"])
def test_a_date_until_on_a_timed_series_keeps_its_last_day(tmp_path, feed, start):
    """RFC 5545 forbids a DATE UNTIL with a DATE-TIME start; calendar apps end such a series after
    that whole day, and so does the job (it had ended at 00:00, dropping the 13th)."""
    settings = settings_for(tmp_path, coffee_max_per_day=99, coffee_max_per_week=99)
    feed.ics = calendar(event("daily", start, "DURATION:PT1H", "RRULE:FREQ=DAILY;UNTIL=20270313"))
    run_calendar(settings, now=NOW)
    assert [a for a, _ in stored_busy(settings)] == ["2027-03-11T15:00:00Z", "2027-03-12T15:00:00Z",
                                                     "2027-03-13T15:00:00Z"]
