"""Coffee slots: the owner's calendar (an ICS feed) read into busy intervals, and the bookable slots.

The job (every 5 minutes) fetches the feed at `SITE_CALENDAR_ICS_URL` (an http(s) address, the
webcal:// one calendar apps publish, which means https://, or a file:// path on this machine: a
calendar a sync tool keeps on disk, and make run's demo week, DEMO_CALENDAR; any other scheme is
refused), expands
recurring events (RRULE, EXDATE, RECURRENCE-ID overrides) with recurring-ical-events, skips
cancelled and transparent (free) events, and stores only start/end instants, never titles. All-day
events block their whole UTC day (REFERENCE.md); floating times are read in the calendar's
X-WR-TIMEZONE when it names one (as recurring-ical-events reads them), else in coffee_timezone.
An event whose rule is broken, whose times lie too near year 1 or 9999 to move between zones, or
that gives two values for a property it may give once (two DTSTARTs, say: which is meant cannot
be known; the same value twice is read once) is skipped; the rest of the calendar still counts.
However long an event lasts (since 2000 until 4100, say), it blocks what it overlaps.
The expansion runs in a child process under a time limit (`[feeds] calendar_expand_seconds`, 30)
and a memory limit (`calendar_expand_mb`, 512): dateutil spends seconds on each rule that never
matches or is hourly since centuries ago, and an event repeated thousands of times can take
gigabytes. Past either limit the child is stopped and the calendar refused like any broken feed.
The reader fails closed: a calendar older than 15 minutes, or never read, offers no slots. A
calendar that comes back empty while busy times lie ahead is believed only on the next read too.
Slots are laid out on the local wall clock, so a daylight-saving change between days shifts their
UTC instants but never drops or doubles one; where the clocks change inside the owner's hours, a
slot still lasts its real length and never overlaps the one before.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import json
import math
import resource
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit
from urllib.request import url2pathname
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import icalendar
import recurring_ical_events
import requests
import urllib3

from siteapi import db
from siteapi.config import ROOT, SettingsError
from siteapi.feeds import FeedError, option, read_capped, session, time_limit
from siteapi.web import ApiError

SCHEMA = """
CREATE TABLE IF NOT EXISTS coffee_busy (
    start_ms INTEGER NOT NULL,
    end_ms INTEGER NOT NULL,
    start_utc TEXT NOT NULL,
    end_utc TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS coffee_busy_end ON coffee_busy(end_ms);
CREATE TABLE IF NOT EXISTS coffee_calendar (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    checked_at TEXT NOT NULL,
    checked_ms INTEGER NOT NULL,
    busy_count INTEGER NOT NULL,
    window_end TEXT NOT NULL,
    empty_reads INTEGER NOT NULL DEFAULT 0
);
"""
ADDED_COLUMNS = {"coffee_calendar": {"empty_reads": "INTEGER NOT NULL DEFAULT 0"}}

MAX_FEED_BYTES = 10_000_000
MAX_BUSY = 5_000
DEMO_CALENDAR = ROOT / "siteapi" / "demo_calendar.ics"  # a week of recurring events, so it never runs out
EXPAND_MARGIN = dt.timedelta(days=2)  # busy intervals are kept a little past the booking horizon
FRESH_SECONDS = 360  # one job interval plus a minute of slack
# What the expansion and this module read of an event. Every occurrence is a copy of its event, so
# an event's other properties (a thousand X- lines, say) would be copied for each of them.
EVENT_PROPERTIES = frozenset({"UID", "DTSTART", "DTEND", "DURATION", "RRULE", "RDATE", "EXDATE", "RECURRENCE-ID",
                              "SEQUENCE", "STATUS", "TRANSP"})
ONCE_ONLY = EVENT_PROPERTIES - {"RRULE", "RDATE", "EXDATE"}  # RFC 5545 lets an event give these once
WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
UTC = dt.timezone.utc
# The expansion moves times between zones (UTC ones into the calendar's X-WR-TIMEZONE, EXDATEs into
# their event's zone) and this module moves them to UTC: within a day of year 1 or of the end of
# 9999 that overflows, failing the whole calendar or, inside the expansion, silently dropping a
# whole series. No booking window comes near, so an RDATE or EXDATE there is dropped, and an event
# that starts, ends or was moved there is skipped (an override then leaves its occurrence where the
# series puts it).
EARLIEST = dt.datetime.min.replace(tzinfo=UTC) + dt.timedelta(days=2)
LATEST = dt.datetime.max.replace(tzinfo=UTC) - dt.timedelta(days=2)


def rules(settings) -> dict:
    """The slot rules from `[feeds]`, REFERENCE.md's values as defaults."""
    name = option(settings, "coffee_timezone", "America/New_York")
    try:
        zone = ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise SettingsError(f"Setting [feeds] coffee_timezone must be an IANA zone such as America/New_York, not {name!r}.") from None
    days = [str(d).strip().lower()[:3] for d in option(settings, "coffee_days", ["mon", "tue", "wed", "thu", "fri"])]
    if not days or any(d not in WEEKDAYS for d in days):
        raise SettingsError("Setting [feeds] coffee_days must list weekday names such as mon, tue, wed.")

    def clock(key, default):
        raw = option(settings, key, default)
        try:
            return dt.time.fromisoformat(raw)
        except ValueError:
            raise SettingsError(f"Setting [feeds] {key} must be a time like {default}, not {raw!r}.") from None

    return {
        "zone": zone,
        "days": {WEEKDAYS.index(d) for d in days},
        "day_start": clock("coffee_day_start", "09:00"),
        "day_end": clock("coffee_day_end", "18:00"),
        "slot": dt.timedelta(minutes=option(settings, "coffee_slot_minutes", 30, 5, 480)),
        "buffer": dt.timedelta(minutes=option(settings, "coffee_buffer_minutes", 15, 0, 240)),
        "notice": dt.timedelta(hours=option(settings, "coffee_notice_hours", 24, 0, 8760)),
        "horizon": dt.timedelta(days=option(settings, "coffee_horizon_days", 14, 1, 366)),
        "per_day": option(settings, "coffee_max_per_day", 3, 0, 1000),
        "per_week": option(settings, "coffee_max_per_week", 5, 0, 1000),
        "max_age": option(settings, "coffee_max_age_seconds", 900, 60, 86400),
        "booking_url": option(settings, "booking_url", settings.url("/coffee")),
        "timeout": option(settings, "calendar_timeout", 10.0, 0.1, 60),
        "expand_seconds": option(settings, "calendar_expand_seconds", 30.0, 0.1, 600),
        "expand_mb": option(settings, "calendar_expand_mb", 512, 64, 65536),
    }


def _instant(value, zone: ZoneInfo) -> dt.datetime:
    if isinstance(value, dt.datetime):
        return (value if value.tzinfo else value.replace(tzinfo=zone)).astimezone(UTC)
    # A date: an all-day event, blocking UTC days; its DTEND is already exclusive (the next day).
    return dt.datetime.combine(value, dt.time(0), tzinfo=UTC)


def _out_of_reach(value, zone: ZoneInfo) -> bool:
    """Whether a date, a time or a PERIOD (a start and an end or a duration) reaches before EARLIEST
    or past LATEST. A value of any other type is broken: the expansion skips its event."""
    if isinstance(value, tuple) and isinstance(value[0], dt.date):
        start, end = value
        try:
            end = start + end if isinstance(end, dt.timedelta) else end
        except OverflowError:
            return True
        return _out_of_reach(start, zone) or _out_of_reach(end, zone)
    if not isinstance(value, dt.date):
        return False
    try:
        return not EARLIEST <= _instant(value, zone) <= LATEST
    except OverflowError:
        return True


def _event_out_of_reach(event, zone: ZoneInfo) -> bool:
    """Whether an event starts, ends or was moved from (RECURRENCE-ID) out of reach."""
    start, duration = (getattr(event.get(name), "dt", None) for name in ("DTSTART", "DURATION"))
    values = [getattr(event.get(name), "dt", None) for name in ("DTSTART", "DTEND", "RECURRENCE-ID")]
    if isinstance(duration, dt.timedelta):
        values.append((start, duration))
    return any(_out_of_reach(value, zone) for value in values)


def _one_value_each(event) -> bool:
    """Whether an event gives each ONCE_ONLY property one value; the same value repeated (some
    exporters repeat DTSTART) is kept once. icalendar hands a property given twice back as a list,
    on which the expansion fails the whole calendar."""
    for name in ONCE_ONLY:
        values = event.get(name)
        if isinstance(values, list):
            if any(value != values[0] for value in values):
                return False
            event[name] = values[0]
    return True


def _drop_dates_out_of_reach(event, zone: ZoneInfo) -> None:
    for name in ("RDATE", "EXDATE"):
        lists = event.get(name, [])
        for dates in lists if isinstance(lists, list) else [lists]:
            if hasattr(dates, "dts"):  # not a broken value
                dates.dts = [date for date in dates.dts if not _out_of_reach(date.dt, zone)]


def _until_the_whole_day(event) -> None:
    """A DATE UNTIL on a series of DATE-TIME starts (RFC 5545 forbids the mix) ends the series after
    that whole day, as calendar apps read it, rather than at its 00:00, which dropped its last
    occurrence and so opened a slot over it."""
    try:
        start = event["DTSTART"].dt
        rules = event.get("RRULE")
        if not isinstance(start, dt.datetime):
            return
        for rule in rules if isinstance(rules, list) else [rules] if rules is not None else []:
            until = rule.get("UNTIL") or [None]
            if isinstance(until[0], dt.date) and not isinstance(until[0], dt.datetime):
                last = dt.datetime.combine(until[0], dt.time(23, 59, 59))
                rule["UNTIL"] = [last.replace(tzinfo=start.tzinfo).astimezone(UTC) if start.tzinfo else last]
    except Exception:  # a broken property raises on any access; the expansion skips its series
        return


def _repeats_within_the_hour(event) -> bool:
    """True when one of an event's RRULEs (there may be several) repeats more than once an hour: by
    FREQ=SECONDLY or MINUTELY, or by listing several BYSECOND or BYMINUTE values (a daily rule that
    lists every second takes minutes to expand). False for a rule that does not parse, which the
    expansion then skips as a bad series."""
    rules = event.get("RRULE")
    try:
        return any({str(f).upper() for f in rule.get("FREQ", [])} & {"SECONDLY", "MINUTELY"}
                   or len(rule.get("BYSECOND", [])) > 1 or len(rule.get("BYMINUTE", [])) > 1
                   for rule in (rules if isinstance(rules, list) else [rules] if rules is not None else []))
    except Exception:  # icalendar hands back a broken property that raises on any access
        return False


class _SkipBrokenSeries(recurring_ical_events.CalendarQuery):
    """With skip_bad_series, also skip a series whose rule dateutil cannot compute (BYHOUR=25 in an
    hourly rule raises TypeError) or whose dates overflow, instead of failing the whole calendar."""

    suppressed_errors = [*recurring_ical_events.CalendarQuery.suppressed_errors, ValueError, TypeError, OverflowError]


class _LongEventSeries(recurring_ical_events.Series):
    """A series that looks back no further than EARLIEST for occurrences still running into the window.
    recurring-ical-events looks back one event's length (`_subtract_from_start`): past year 1 for an
    event longer than the some 2,000 years since, an OverflowError that skipped the event. Nothing
    starts before EARLIEST (such an event is skipped first), so looking back to it misses nothing."""

    def rrule_between(self, span_start, span_stop):
        self._subtract_from_start = min(self._subtract_from_start, span_start - EARLIEST)
        return super().rrule_between(span_start, span_stop)


def busy_intervals(ics: bytes, zone: ZoneInfo, start: dt.datetime, end: dt.datetime) -> list[tuple[int, int]]:
    """Busy (start_ms, end_ms) pairs between `start` and `end`, merged and sorted. Raises FeedError.

    Unbounded in time and memory: the job calls it through `expand`."""
    try:
        calendar = icalendar.Calendar.from_ical(ics)
    except Exception:  # icalendar raises ValueError, KeyError, IndexError... on broken input
        raise FeedError("The calendar feed is not a valid iCalendar (ICS) document.") from None
    if calendar.name != "VCALENDAR":
        raise FeedError("The calendar feed is not a VCALENDAR.")
    if any(_repeats_within_the_hour(event) for event in calendar.walk("VEVENT")):
        raise FeedError("The calendar feed has an event repeating more than once an hour (every second or minute); "
                        "it is refused.")
    # An event without a start has no time to block, and recurring_ical_events fails the whole feed on it.
    for component in calendar.walk():
        component.subcomponents = [c for c in component.subcomponents if c.name != "VEVENT" or (
            _one_value_each(c) and c.get("DTSTART") is not None and not _event_out_of_reach(c, zone))]
        if component.name == "VEVENT":
            for name in set(component) - EVENT_PROPERTIES:
                del component[name]
            _drop_dates_out_of_reach(component, zone)
            _until_the_whole_day(component)
            component.subcomponents = []  # alarms
    spans = []
    try:
        events = [recurring_ical_events.ComponentsWithName("VEVENT", series=_LongEventSeries)]
        for event in recurring_ical_events.of(calendar, components=events, skip_bad_series=True,
                                              calendar_query=_SkipBrokenSeries).between(start, end):
            if str(event.get("STATUS", "")).upper() == "CANCELLED":
                continue
            if str(event.get("TRANSP", "OPAQUE")).upper() == "TRANSPARENT":
                continue
            first = event["DTSTART"].dt
            last = event["DTEND"].dt if event.get("DTEND") is not None else None
            if last is None:  # no DTEND: a DURATION, else a day for dates and an instant for times
                last = first + (event["DURATION"].dt if event.get("DURATION") is not None
                                else dt.timedelta(days=1) if not isinstance(first, dt.datetime) else dt.timedelta(0))
            a, b = _instant(first, zone), _instant(last, zone)
            if b > a:
                spans.append((int(a.timestamp() * 1000), int(b.timestamp() * 1000)))
            if len(spans) > MAX_BUSY:
                raise FeedError(f"The calendar feed expands to more than {MAX_BUSY} events before the booking horizon.")
    except FeedError:
        raise
    except Exception as exc:
        raise FeedError(f"The calendar feed could not be expanded ({exc.__class__.__name__}).") from None
    merged: list[list[int]] = []
    for a, b in sorted(spans):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return [(a, b) for a, b in merged]


def expand(ics: bytes, zone: ZoneInfo, start: dt.datetime, end: dt.datetime, seconds: float,
           max_mb: int) -> list[tuple[int, int]]:
    """busy_intervals in a child process (`python -m siteapi.feeds.coffee`), killed past `seconds` and
    held to `max_mb` MB of address space. Raises FeedError, also when a limit is passed.

    A process of its own, not a thread: dateutil cannot be stopped from outside. A new interpreter,
    not a fork of the job's threaded one, and not multiprocessing, which re-imports the job's
    __main__ in every child."""
    command = [sys.executable, "-m", __name__, zone.key, start.isoformat(), end.isoformat(), str(max_mb), str(seconds)]
    with subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                          cwd=ROOT) as child:
        try:
            out, _ = child.communicate(ics, timeout=seconds)
        except subprocess.TimeoutExpired:
            child.kill()
            child.communicate()
            raise FeedError(f"The calendar feed took longer than {seconds:g} s to expand; it is refused.") from None
    try:
        answer = json.loads(out)
    except ValueError:
        raise FeedError(f"The calendar feed could not be expanded (the expansion ended without an answer, "
                        f"exit status {child.returncode}).") from None
    if "error" in answer:
        raise FeedError(answer["error"])
    return [(a, b) for a, b in answer["busy"]]


def _limit(kind: int, soft: int, hard: int) -> None:
    _, ceiling = resource.getrlimit(kind)
    if ceiling != resource.RLIM_INFINITY:
        soft, hard = min(soft, ceiling), min(hard, ceiling)
    with contextlib.suppress(ValueError, OSError):  # macOS refuses an address-space limit
        resource.setrlimit(kind, (soft, hard))


def _expand_child(zone: str, start: str, end: str, max_mb: str, seconds: str) -> None:
    """The child of `expand`: the ICS on stdin, {"busy": [[start_ms, end_ms], ...]} or {"error": sentence}
    on stdout. It limits itself too: a CPU-time limit just past the parent's ends it should the job
    be killed before it."""
    _limit(resource.RLIMIT_AS, int(max_mb) * 2**20, int(max_mb) * 2**20)
    _limit(resource.RLIMIT_CPU, math.ceil(float(seconds)) + 1, math.ceil(float(seconds)) + 2)
    ics = sys.stdin.buffer.read()
    try:
        answer = {"busy": busy_intervals(ics, ZoneInfo(zone), dt.datetime.fromisoformat(start),
                                         dt.datetime.fromisoformat(end))}
    except (FeedError, MemoryError) as exc:
        cause = exc
        while cause is not None and not isinstance(cause, MemoryError):  # icalendar turns it into a ValueError
            cause = cause.__context__
        answer = {"error": str(exc) if cause is None else
                  f"The calendar feed needs more than {max_mb} MB to expand; it is refused."}
    sys.stdout.write(json.dumps(answer))


def feed_url(settings) -> str:
    """SITE_CALENDAR_ICS_URL, a webcal:// address read as https://. Raises FeedError when it is unset
    or has another scheme (the message leaves the address out: it is a secret)."""
    url = settings.secret("CALENDAR_ICS_URL")
    if not url:
        raise FeedError("Set SITE_CALENDAR_ICS_URL to the calendar's ICS feed address.")
    scheme, _, rest = url.partition("://")
    if scheme.lower() == "webcal":
        return "https://" + rest
    if scheme.lower() not in ("http", "https") and url[:5].lower() != "file:":  # read_ics_file checks the rest
        raise FeedError("SITE_CALENDAR_ICS_URL must be an https://, http://, webcal:// or file:// address.")
    return url


_stalled_reader: threading.Thread | None = None


def read_ics_file(url: str, timeout: float) -> bytes:
    """The calendar at a file:// address: a regular file by its absolute path on this machine (no
    other host), read within `timeout` seconds. The read runs in a thread of its own: a stalled
    mount would otherwise hold the job, and its lock, for good."""
    global _stalled_reader
    parts = urlsplit(url)
    path = Path(url2pathname(parts.path))
    if parts.netloc.lower() not in ("", "localhost") or not path.is_absolute():
        raise FeedError("SITE_CALENDAR_ICS_URL names a file by its absolute path on this machine, "
                        "e.g. file:///home/owner/calendar.ics.")
    outcome: dict = {}

    def read() -> None:
        try:
            # before opening: a FIFO's open would wait for a writer
            if not stat.S_ISREG(path.stat().st_mode):
                raise FeedError("SITE_CALENDAR_ICS_URL names something other than a file; name the calendar file.")
            with path.open("rb") as ics:
                outcome["body"] = ics.read(MAX_FEED_BYTES + 1)
        except FeedError as exc:
            outcome["error"] = exc
        except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
            outcome["error"] = FeedError(f"The calendar file could not be read: {exc.__class__.__name__}.")

    if _stalled_reader is not None and _stalled_reader.is_alive():
        # one thread waits on a stalled mount, not one more every run
        raise FeedError("The calendar file's last read has not returned yet; is its disk or mount stalled?")
    reader = threading.Thread(target=read, name="calendar-file", daemon=True)
    reader.start()
    reader.join(timeout)
    if reader.is_alive():
        _stalled_reader = reader
        raise FeedError(f"The calendar file was not read within {timeout:g} s; is its disk or mount stalled?")
    if "error" in outcome:
        raise outcome["error"]
    if len(outcome["body"]) > MAX_FEED_BYTES:
        raise FeedError(f"The calendar file is larger than {MAX_FEED_BYTES} bytes.")
    return outcome["body"]


def fetch_ics(url: str, timeout: float) -> bytes:
    if url[:5].lower() == "file:":
        return read_ics_file(url, timeout)
    deadline = time.monotonic() + timeout
    try:
        with session() as http, time_limit(deadline, "The calendar feed"), \
                http.get(url, timeout=timeout, stream=True, headers={"Accept": "text/calendar"}) as resp:
            body, truncated = read_capped(resp, MAX_FEED_BYTES, deadline, "The calendar feed")
            status = resp.status_code
    except requests.RequestException as exc:
        raise FeedError(f"The calendar feed could not be reached: {exc.__class__.__name__}.") from None
    except urllib3.exceptions.LocationValueError:  # requests passes some bad hosts on unwrapped, host in the text
        raise FeedError("SITE_CALENDAR_ICS_URL is not a usable address: its host name cannot be parsed.") from None
    if status != 200:
        raise FeedError(f"The calendar feed answered HTTP {status}.")
    if truncated:
        raise FeedError(f"The calendar feed is larger than {MAX_FEED_BYTES} bytes.")
    return body


def run_calendar(settings, now: dt.datetime | None = None) -> str:
    """Job (every 5 minutes): refresh the busy intervals. Raises when it cannot; the old ones stay."""
    url = feed_url(settings)
    r = rules(settings)
    zone = r["zone"]
    now = (now or dt.datetime.now(UTC)).astimezone(UTC)
    window_end = now + r["horizon"] + EXPAND_MARGIN
    spans = expand(fetch_ics(url, r["timeout"]), zone, now - dt.timedelta(days=1), window_end,
                   r["expand_seconds"], r["expand_mb"])
    iso = lambda ms: db.iso_at(ms / 1000)
    now_ms = int(now.timestamp() * 1000)
    conn = db.writer(settings.db_path)
    try:
        with db.transaction(conn):
            ahead = conn.execute("SELECT count(*) FROM coffee_busy WHERE end_ms > ?", (now_ms,)).fetchone()[0]
            state = conn.execute("SELECT empty_reads FROM coffee_calendar WHERE id = 1").fetchone()
            if not spans and ahead and not (state and state[0]):
                conn.execute("UPDATE coffee_calendar SET empty_reads = 1 WHERE id = 1")
                suspect = ahead
            else:
                suspect = 0
                conn.execute("DELETE FROM coffee_busy")
                conn.executemany("INSERT INTO coffee_busy VALUES (?, ?, ?, ?)",
                                 [(a, b, iso(a), iso(b)) for a, b in spans])
                conn.execute("INSERT OR REPLACE INTO coffee_calendar VALUES (1, ?, ?, ?, ?, 0)",
                             (iso(now_ms), now_ms, len(spans), iso(window_end.timestamp() * 1000)))
    finally:
        conn.close()
    if suspect:  # a provider's glitch would open every slot: believed only when read twice in a row
        raise FeedError(f"The calendar feed came back empty where {suspect} busy times lie ahead; they are kept "
                        "until the next read finds it empty too.")
    return f"calendar read: {len(spans)} busy intervals until {iso(window_end.timestamp() * 1000)}"


def open_slots(r: dict, busy: list[tuple[int, int]], now: dt.datetime) -> list[dict]:
    """Bookable slots after `now` under the rules `r`, earliest first."""
    zone = r["zone"]
    earliest, latest = now + r["notice"], now + r["horizon"]
    slots, per_week = [], {}
    day = earliest.astimezone(zone).date()
    while day <= latest.astimezone(zone).date():
        week = day.isocalendar()[:2]
        taken_today = 0
        start_wall = dt.datetime.combine(day, r["day_start"])
        day_end_wall = dt.datetime.combine(day, r["day_end"])
        free_from = None  # the previous slot's end plus the buffer, in UTC
        while day.weekday() in r["days"] and start_wall + r["slot"] <= day_end_wall:
            if taken_today >= r["per_day"] or per_week.get(week, 0) >= r["per_week"]:
                break
            # Starts are laid out on the wall clock (the same local times on both sides of DST); a
            # slot lasts its real length. Where the clocks change inside the owner's hours, a start
            # the clock skips, an end past the day's end or a start before the last slot's end and
            # buffer is no slot.
            start = start_wall.replace(tzinfo=zone).astimezone(UTC)
            end = start + r["slot"]
            start_ms, end_ms = int(start.timestamp() * 1000), int(end.timestamp() * 1000)
            on_the_clock = (start.astimezone(zone).replace(tzinfo=None) == start_wall
                            and end.astimezone(zone).replace(tzinfo=None) <= day_end_wall
                            and (free_from is None or start >= free_from))
            if on_the_clock:
                free_from = end + r["buffer"]
            if on_the_clock and earliest <= start <= latest and not any(a < end_ms and b > start_ms for a, b in busy):
                slots.append({
                    "start": start.astimezone(zone).isoformat(),
                    "end": end.astimezone(zone).isoformat(),
                    "startMs": start_ms,
                    "endMs": end_ms,
                    "durationMinutes": int(r["slot"].total_seconds() // 60),
                })
                taken_today += 1
                per_week[week] = per_week.get(week, 0) + 1
            start_wall += r["slot"] + r["buffer"]
        day += dt.timedelta(days=1)
    return slots


def availability(conn: sqlite3.Connection, settings, now: dt.datetime | None = None) -> dict:
    """The Availability body, or raise ApiError 503 with the same body, `slots: []`, Retry-After 60."""
    r = rules(settings)
    now = (now or dt.datetime.now(UTC)).astimezone(UTC)
    body = {"available": False, "stale": True, "source": "none", "checkedAt": None, "ageSeconds": None,
            "timezone": r["zone"].key, "bookingUrl": r["booking_url"], "slots": []}
    unavailable_headers = {"Retry-After": "60", "Cache-Control": "public, max-age=0, s-maxage=10"}
    try:
        with db.one_snapshot(conn) as snapshot:  # the check's time and the busy times it read
            head = snapshot.execute("SELECT checked_at, checked_ms FROM coffee_calendar WHERE id = 1").fetchone()
            busy = [] if head is None else snapshot.execute(
                "SELECT start_ms, end_ms FROM coffee_busy WHERE end_ms > ? ORDER BY start_ms",
                (int(now.timestamp() * 1000),)).fetchall()
    except sqlite3.Error:
        raise ApiError(503, "The calendar cannot be read right now, so no slots are offered; try again in a minute.",
                       code="calendar_unavailable", headers=unavailable_headers, **body) from None
    if head is None:
        raise ApiError(503, "The calendar has not been read yet, so no slots are offered; try again in a minute.",
                       code="calendar_unavailable", headers=unavailable_headers, **body)
    age = max(0, int(now.timestamp() - head["checked_ms"] / 1000))
    body.update(checkedAt=head["checked_at"], ageSeconds=age, source="stale")
    if age > r["max_age"]:
        raise ApiError(503, "The calendar is out of date, so no slots are offered until it is read again; try again in a minute.",
                       code="calendar_unavailable", headers=unavailable_headers, **body)
    fresh = age <= FRESH_SECONDS
    body.update(available=True, stale=not fresh, source="fresh" if fresh else "stale",
                slots=open_slots(r, [(row[0], row[1]) for row in busy], now))
    return body


if __name__ == "__main__":
    _expand_child(*sys.argv[1:])
