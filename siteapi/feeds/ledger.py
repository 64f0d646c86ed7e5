"""The AI-crawler ledger: the site's own Caddy JSON access log, read incrementally, as daily counts.

The job remembers where it stopped (offset plus a fingerprint of the file's first bytes, which
survives renames and gzip; before any complete line was read, the file's inode, which survives the
rename, trusted only while no roll has come since: a new log may have the same inode). When Caddy
rolls the log (`access.log` becomes `access-<time>.log`, later `.log.gz`, and a new `access.log`
starts) the job first finishes the rolled file from its offset, then reads any later rolled files
whole, then the new log: nothing lost, nothing counted twice. Should that file be gone (deleted
after more rolls than Caddy keeps, or the log replaced or emptied by hand), the rolled files whose
names say they rolled after the last run began reading are read whole, and only the rest of the lost
file is missing. Only complete lines are consumed, and counts and the new position are written in
one transaction, so a failed run changes nothing, and a run that finds another one committed first
while it read (a hand-started run beside the scheduler's) changes nothing. Responses below 400 whose
User-Agent the crawler registry knows (our own AadharshBot excepted) are counted per UTC day,
crawler and path as the site routed it (`routed_path`), except Datasette's under /data/ however the
path is spelled. The reader prices the last 30 days at `[feeds] ledger_rate_usd` a page (one cent
unless set), as commentary, and keeps its answer until the job's next run.
"""
from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import json
import os
import posixpath
import re
import sqlite3
import zlib
from pathlib import Path
from urllib.parse import unquote, urlsplit

from siteapi import db
from siteapi.config import DATASETTE_PATH
from siteapi.feeds import FeedError, option
from siteapi.feeds.crawlers import BY_KEY, counts_in_ledger, match_user_agent
from siteapi.web import ApiError

SCHEMA = """
CREATE TABLE IF NOT EXISTS ledger_hits (
    day TEXT NOT NULL,              -- UTC date, YYYY-MM-DD
    bot TEXT NOT NULL,              -- crawler registry key
    path TEXT NOT NULL,
    hits INTEGER NOT NULL,
    PRIMARY KEY (day, bot, path)
);
CREATE TABLE IF NOT EXISTS ledger_state (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    log_path TEXT NOT NULL,
    offset INTEGER NOT NULL,        -- bytes consumed (decompressed, for a gzip-rolled file)
    fingerprint TEXT NOT NULL,      -- SHA-256 of the file's first fingerprint_len bytes; with 0, "inode DEV:INO"
    fingerprint_len INTEGER NOT NULL,
    read_at TEXT NOT NULL,
    lines_total INTEGER NOT NULL,
    counted_total INTEGER NOT NULL,
    malformed_total INTEGER NOT NULL
);
"""

FINGERPRINT_BYTES = 1024
KEEP_DAYS = 400
PATH_CAP = 300
WINDOW_DAYS = 30
TOP_PATHS = 5
_SLASHES = re.compile(r"/{2,}")
_ROLLED_AT = re.compile(r"-(\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d)(?:\.\d+)?\.[^-]*$")


def _open(path: Path):
    """The file; a plain rolled copy that Caddy's roller has compressed since it was listed is read
    from its .gz, which holds the same lines (the roller deletes the plain copy once that is whole)."""
    if path.suffix == ".gz":
        return gzip.open(path, "rb")
    try:
        return open(path, "rb")
    except FileNotFoundError:
        gzipped = path.with_name(path.name + ".gz")
        if not gzipped.exists():
            raise
        return gzip.open(gzipped, "rb")


def _fingerprint(path: Path, length: int) -> str | None:
    try:
        with _open(path) as f:
            head = f.read(length)
    except (OSError, EOFError):
        return None  # gone, or a gzip file still being written by Caddy's roller
    return hashlib.sha256(head).hexdigest() if len(head) == length else None


def _identity(stat) -> str:
    return f"inode {stat.st_dev}:{stat.st_ino}"


def _same_file(path: Path, fingerprint: str, length: int) -> bool:
    # The bytes of an empty head match every file; the inode follows the file through Caddy's rename.
    if length:
        return _fingerprint(path, length) == fingerprint
    try:
        return _identity(path.stat()) == fingerprint
    except OSError:
        return False


def rolled_files(log: Path) -> list[Path]:
    """Caddy's rolled copies of `log`, oldest first (their names carry the roll time)."""
    candidates = list(log.parent.glob(log.stem + "-*"))
    gzipped = {p.name[:-3]: p for p in candidates if p.name.endswith(log.suffix + ".gz")}
    plain = {p.name: p for p in candidates if p.name.endswith(log.suffix)}
    # While the roller compresses, both copies exist: the plain one is complete, the .gz may not be.
    merged = {**gzipped, **plain}
    return [merged[name] for name in sorted(merged)]


def _plan(log: Path, state) -> tuple[list[tuple[Path, int, bool]], bool]:
    """[(file, start offset, is the live log)] to read now, and whether earlier lines were lost."""
    if state is None or state["log_path"] != str(log):
        return [(log, 0, True)], False
    fp, fp_len, offset = state["fingerprint"], state["fingerprint_len"], state["offset"]
    rolled = rolled_files(log)
    read_at = state["read_at"].rstrip("Z").replace(":", "-")
    newer = [p for p in rolled if (_rolled_at(p) or "") > read_at]
    # An inode names the file last read only while nothing has rolled since: a new log may reuse it.
    if _same_file(log, fp, fp_len) and log.stat().st_size >= offset and not (newer and not fp_len):
        return [(log, offset, True)], False
    for i, path in enumerate(rolled):
        if _same_file(path, fp, fp_len):
            return [(path, offset, False)] + [(p, 0, False) for p in rolled[i + 1:]] + [(log, 0, True)], False
    # The file last read is gone: rolled and deleted, or the log replaced or emptied by hand. The
    # rolled files named as rolled after that read hold only lines written since; the rest were read.
    return [(p, 0, False) for p in newer] + [(log, 0, True)], True


def _rolled_at(path: Path) -> str | None:
    """When Caddy rolled `path`, from its name (access-2026-11-20T01-00-00.000.log: UTC, to the second)."""
    match = _ROLLED_AT.search(path.name)
    return match[1] if match else None


def routed_path(uri: str) -> str:
    """The path of a logged request URI as Caddy and the app route it: the authority of an
    absolute-form URI, the query and fragment dropped, %-escapes decoded, runs of slashes and dot
    segments resolved (a trailing slash kept), cut to PATH_CAP. So /%61bout, //about and
    /writing/../about, all answered as /about, count as /about: the spellings of one page are
    countless, and each had been a row of its own that every /ledger.json then read."""
    if not uri.startswith("/"):
        uri = urlsplit(uri).path or "/"
    path = unquote(uri.split("?", 1)[0].split("#", 1)[0], errors="replace")
    resolved = posixpath.normpath(_SLASHES.sub("/", path))
    if path.endswith("/") and resolved != "/":
        resolved += "/"
    return resolved[:PATH_CAP]


def parse_line(line: bytes) -> tuple[str, str, str] | None | bool:
    """(day, bot key, path) for a counted crawler hit; None for a line not counted; False if malformed."""
    try:
        entry = json.loads(line)
    except (ValueError, RecursionError):  # RecursionError: brackets nested past Python's stack
        return False
    if not isinstance(entry, dict):
        return False
    if not str(entry.get("logger", "")).startswith("http.log.access"):
        return None  # Caddy's other log lines (startup, TLS) share the file
    request, status, ts = entry.get("request"), entry.get("status"), entry.get("ts")
    if not isinstance(request, dict) or not isinstance(status, int) or not isinstance(ts, (int, float)):
        return False
    headers = request.get("headers") if isinstance(request.get("headers"), dict) else {}
    agents = headers.get("User-Agent") or []
    crawler = match_user_agent(" ".join(a for a in agents if isinstance(a, str)) if isinstance(agents, list) else "")
    if not counts_in_ledger(crawler) or not 100 <= status < 400:
        return None
    path = routed_path(str(request.get("uri") or "/"))
    if path.casefold() == DATASETTE_PATH.rstrip("/") or path.casefold().startswith(DATASETTE_PATH):
        # Not the site's own answers (REFERENCE counts the worker's), and Datasette redirects any
        # path it is sent, which put whatever text a spoofed crawler wrote into the public ledger.
        # Caddy's `handle /data/*` matches without regard to case, as this does.
        return None
    try:
        day = dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%Y-%m-%d")
    except (OverflowError, OSError, ValueError):
        return False
    return day, crawler["key"], path


def read_new_lines(log: Path, state) -> dict:
    """Read everything written since `state`; counts plus the position to remember. Raises FeedError."""
    if not log.exists():
        raise FeedError(f"The access log {log} does not exist; check the access_log setting and Caddy's log output.")
    plan, lost = _plan(log, state)
    counts: dict[tuple[str, str, str], int] = {}
    lines = malformed = 0
    end_offset = 0
    for path, start, live in plan:
        try:
            with _open(path) as f:
                f.seek(start)
                consumed = start
                try:
                    for line in f:
                        if live and not line.endswith(b"\n"):
                            break  # Caddy is still writing it; read it next run
                        consumed += len(line)
                        if not line.strip():
                            continue
                        lines += 1
                        parsed = parse_line(line)
                        if parsed is False:
                            malformed += 1
                        elif parsed:
                            counts[parsed] = counts.get(parsed, 0) + 1
                except (EOFError, gzip.BadGzipFile, zlib.error):
                    if live:
                        raise
                    # A rolled .gz cut short or damaged stays so: its readable lines count, the rest is
                    # reported lost, and the later files are read instead of failing every run from now on.
                    lost = True
                if live:  # fingerprint from the same handle: the file may be rolled right after
                    fp_len = min(FINGERPRINT_BYTES, consumed)
                    f.seek(0)
                    fingerprint = (hashlib.sha256(f.read(fp_len)).hexdigest() if fp_len
                                   else _identity(os.fstat(f.fileno())))
        except (OSError, EOFError, zlib.error) as exc:
            raise FeedError(f"The access log {path} could not be read: {exc.__class__.__name__}.") from None
        end_offset = consumed
    return {"counts": counts, "lines": lines, "malformed": malformed, "lost": lost, "files": len(plan),
            "offset": end_offset, "fingerprint": fingerprint, "fingerprint_len": fp_len}


def run_ledger(settings) -> str:
    """Job (every 10 minutes): count new crawler hits from the access log into ledger_hits."""
    log = settings.access_log
    if log is None:
        return "no access log configured (access_log); nothing to read"
    conn = db.writer(settings.db_path)
    try:
        state = conn.execute("SELECT * FROM ledger_state WHERE id = 1").fetchone()
        read_at = db.now_iso()  # before reading: a file rolled while this run reads is newer (_plan)
        got = read_new_lines(Path(log), state)
        cutoff = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=KEEP_DAYS)).strftime("%Y-%m-%d")
        totals = (state["lines_total"], state["counted_total"], state["malformed_total"]) if state else (0, 0, 0)
        with db.transaction(conn):
            if tuple(state or ()) != tuple(conn.execute("SELECT * FROM ledger_state WHERE id = 1").fetchone() or ()):
                raise FeedError("Another ledger run counted these lines while this one read them; this run changed nothing.")
            conn.executemany(
                "INSERT INTO ledger_hits (day, bot, path, hits) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (day, bot, path) DO UPDATE SET hits = hits + excluded.hits",
                [(*key, n) for key, n in got["counts"].items()])
            conn.execute("DELETE FROM ledger_hits WHERE day < ?", (cutoff,))
            conn.execute(
                "INSERT OR REPLACE INTO ledger_state VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?)",
                (str(log), got["offset"], got["fingerprint"], got["fingerprint_len"], read_at,
                 totals[0] + got["lines"], totals[1] + sum(got["counts"].values()), totals[2] + got["malformed"]))
    finally:
        conn.close()
    summary = (f"read {got['lines']} log lines from {got['files']} file(s): "
               f"{sum(got['counts'].values())} crawler hits, {got['malformed']} malformed lines skipped")
    if got["lost"]:
        summary += "; the file last read was gone (rolled and deleted), so lines written after that read may be missing"
    return summary


def _body(rate: float) -> dict:
    note = (f"Every identified AI-crawler page view of the last {WINDOW_DAYS} days, priced at ${rate:g} a page "
            "as commentary; nobody is billed.")
    return {"window_days": WINDOW_DAYS, "rate_usd": rate, "note": note, "line_items": [],
            "total_hits": 0, "total_usd": 0.0,
            "cost": {"available": False, "reason": "this deployment reports no hosting spend"}}


def options(settings) -> tuple[float, int]:
    """(dollars a page, seconds after which a ledger not read is stale) from [feeds]."""
    return option(settings, "ledger_rate_usd", 0.01, 0, 1000), option(settings, "ledger_stale_seconds", 3600, 60, 604_800)


# The last answer's line items and what they were computed from: the rows change only when the
# ledger job runs (every 10 minutes), and reading them costs time in proportion to the paths stored.
# One tuple, replaced whole, so a request thread never reads it half-changed by another.
_ITEMS_CACHE: tuple[tuple, list[dict]] | None = None


def _line_items(conn: sqlite3.Connection, state: tuple, since: str, today: str, rate: float) -> list[dict]:
    """Each crawler's hits from `since` to `today` (a day after it, from a log line written by a clock
    that ran ahead, is not in the window) with its TOP_PATHS paths; cached while `state` (site.db's
    path and its ledger_state row) stays, that is until the ledger job's next run."""
    global _ITEMS_CACHE
    key, cached = (state, since, today, rate), _ITEMS_CACHE
    if cached is not None and cached[0] == key:
        return cached[1]
    rows = conn.execute("SELECT bot, path, SUM(hits) AS hits FROM ledger_hits WHERE day BETWEEN ? AND ? "
                        "GROUP BY bot, path", (since, today)).fetchall()
    per_bot: dict[str, dict] = {}
    for row in rows:
        item = per_bot.setdefault(row["bot"], {"hits": 0, "paths": []})
        item["hits"] += row["hits"]
        item["paths"].append((row["hits"], row["path"]))
    items = []
    for bot, item in per_bot.items():
        entry = BY_KEY.get(bot, {"label": bot, "owner": None, "kind": None, "role": None})
        top = sorted(item["paths"], key=lambda hp: (-hp[0], hp[1]))[:TOP_PATHS]
        items.append({"bot": bot, "label": entry["label"], "owner": entry["owner"], "kind": entry["kind"],
                      "role": entry["role"], "hits": item["hits"], "amountUsd": round(item["hits"] * rate, 2),
                      "top_paths": [{"path": p, "hits": h} for h, p in top]})
    items.sort(key=lambda i: (-i["hits"], i["bot"]))
    _ITEMS_CACHE = (key, items)
    return items


def ledger(conn: sqlite3.Connection, settings, now: dt.datetime | None = None) -> dict:
    """The Ledger body, or ApiError 503 `not_configured` / 502 `upstream_failed` carrying the Ledger body
    without `ok`, which the route sets false on every error."""
    rate, stale_after = options(settings)
    body = _body(rate)
    if settings.access_log is None:
        raise ApiError(503, "The crawler ledger is not configured on this deployment (no access log).",
                       code="not_configured", **body)
    now = now or dt.datetime.now(dt.timezone.utc)
    since = (now - dt.timedelta(days=WINDOW_DAYS - 1)).strftime("%Y-%m-%d")
    unreadable = "The access log behind the crawler ledger could not be read; try again later."
    try:
        with db.one_snapshot(conn) as snapshot:  # the job writes the hits and its state in one transaction
            state = snapshot.execute("SELECT * FROM ledger_state WHERE id = 1").fetchone()
            if state is not None:
                items = _line_items(snapshot, (str(settings.db_path), *state), since, now.strftime("%Y-%m-%d"), rate)
    except sqlite3.Error:
        raise ApiError(502, unreadable, code="upstream_failed", **body) from None
    if state is None:
        raise ApiError(502, "The access log behind the crawler ledger has not been read yet; try again later.",
                       code="upstream_failed", **body)
    read_at = db.parse_iso(state["read_at"])
    if (now - read_at).total_seconds() > stale_after:
        raise ApiError(502, unreadable, code="upstream_failed", read_at=state["read_at"], **body)
    total = sum(i["hits"] for i in items)
    return {"ok": True, **body, "since": since, "updated_at": state["read_at"], "line_items": items,
            "total_hits": total, "total_usd": round(total * rate, 2)}
