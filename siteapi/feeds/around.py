"""The neighborhood: a daily crawl of venture-firm homepages, its latest snapshot and a change radar.

Each firm's robots.txt is asked first (Google's parser, our product token), and the robots.txt of
every origin a redirect leads to before that hop: a 4xx robots.txt allows everything, a 5xx or
unreachable one skips the firm this run. Allowed homepages are
fetched 4 at a time with a 4 s limit and a 200 KB body cap, by the lens's SSRF-safe fetcher (no
private addresses, every redirect hop checked). Per firm and crawl the store keeps head fields, a
SHA-256 of the bounded body and one of its visible text, never the body itself. Change records
between a firm's consecutive observations are computed when a crawl is stored; `content` changes
when the words a visitor reads change, so per-request noise in scripts and attributes (nonces,
tokens) is no change, and `final_url` when the homepage lands somewhere else, not when its redirect
target carries a new session id or cache-buster (`_place`). A run skipped for an unavailable
robots.txt observed nothing, so it is shown in its snapshot but neither compared nor compared
against. Crawls and changes older than 90 days are pruned. A crawl that reached fewer than half of
the firms (the rest failed or had no readable robots.txt) is taken for an outage on our side: it
fails and stores nothing, so the last snapshot stays and the radar stays quiet.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import quote, urljoin, urlsplit, urlunsplit

import robotstxt
from selectolax.lexbor import LexborHTMLParser as HTMLParser

from siteapi import db
from siteapi.config import SettingsError
from siteapi.feeds import FeedError, option
from siteapi.feeds.crawlers import PRODUCT_TOKEN, PRODUCT_USER_AGENT
from siteapi.lens.fetch import (Fetcher, FetchFailed, FetchRefused, FetchResult, Target, fetcher_from_settings,
                                join_url)
from siteapi.lens.page import decode_text, document_title
from siteapi.lens.terms import robots_lines, rule_at
from siteapi.web import ApiError, clamp_int

SCHEMA = """
CREATE TABLE IF NOT EXISTS around_crawls (
    id INTEGER PRIMARY KEY,
    crawled_at TEXT NOT NULL,
    crawled_by TEXT NOT NULL,
    target_count INTEGER NOT NULL,
    elapsed_ms INTEGER NOT NULL,
    signed_with TEXT
);
CREATE TABLE IF NOT EXISTS around_results (
    crawl_id INTEGER NOT NULL REFERENCES around_crawls(id),
    target TEXT NOT NULL,
    name TEXT NOT NULL,
    observed_at TEXT NOT NULL,
    final_url TEXT,
    status INTEGER,
    title TEXT,
    description TEXT,
    og_image TEXT,
    server TEXT,
    last_modified TEXT,
    content_type TEXT,
    body_hash TEXT,
    bytes_read INTEGER,
    truncated INTEGER NOT NULL DEFAULT 0,
    robots TEXT NOT NULL,           -- allow | disallow | unknown
    robots_rule TEXT,
    skipped TEXT,                   -- robots | robots_unavailable
    error TEXT,
    elapsed_ms INTEGER,
    text_hash TEXT,                 -- SHA-256 of the visible text, for HTML; what `content` compares
    PRIMARY KEY (crawl_id, target)
);
CREATE INDEX IF NOT EXISTS around_results_target ON around_results(target, crawl_id);
CREATE TABLE IF NOT EXISTS around_changes (
    id INTEGER PRIMARY KEY,
    crawl_id INTEGER NOT NULL,
    target TEXT NOT NULL,
    name TEXT NOT NULL,
    observed_at TEXT NOT NULL,
    previous_observed_at TEXT NOT NULL,
    severity TEXT NOT NULL,         -- high | medium | low
    changes TEXT NOT NULL           -- JSON array of {field, before, after}; bodies never stored
);
CREATE INDEX IF NOT EXISTS around_changes_observed ON around_changes(observed_at);
"""
# Web Bot Auth and the visible-text hash came after the first crawls
ADDED_COLUMNS = {"around_crawls": {"signed_with": "TEXT"}, "around_results": {"text_hash": "TEXT"}}

# The firms crawled unless site.toml lists its own `[feeds] around_roster`.
ROSTER = (
    ("Paradigm", "https://www.paradigm.xyz/"),
    ("a16z crypto", "https://a16zcrypto.com/"),
    ("Polychain", "https://polychain.capital/"),
    ("Multicoin", "https://multicoin.capital/"),
    ("Variant", "https://variant.fund/"),
    ("Dragonfly", "https://www.dragonfly.xyz/"),
    ("Electric Capital", "https://www.electriccapital.com/"),
    ("1confirmation", "https://www.1confirmation.com/"),
    ("Standard", "https://standardcrypto.vc/"),
    ("USV", "https://www.usv.com/"),
    ("Archetype", "https://www.archetype.fund/"),
    ("Pace", "https://pace.capital/"),
    ("Thrive", "https://thrivecap.com/"),
    ("Sequoia", "https://www.sequoiacap.com/"),
    ("Founders Fund", "https://foundersfund.com/"),
    ("Hummingbird", "https://www.hummingbird.vc/"),
    ("Benchmark", "https://www.benchmark.com/"),
    ("Index Ventures", "https://www.indexventures.com/"),
    ("Ribbit", "https://ribbitcap.com/"),
    ("Topology", "https://topology.vc/"),
)
PAGE_TIMEOUT = 4.0
ROBOTS_TIMEOUT = 3.0
BODY_CAP = 200 * 1024
ROBOTS_CAP = 500 * 1024  # Google's documented robots.txt limit
CONCURRENCY = 4
KEEP_DAYS = 90
TEXT_CAP = 300
COMPARED = ("status", "final_url", "title", "description", "content_type", "robots", "skipped", "error")
# Session ids, tokens, cache-busters and timestamps, new in every answer, that homepages put in the
# URL they redirect a crawler (no cookies) to: a value with a run of 8 digits (a time, a date, a
# random number), or of 16 or more URL characters mixing two of lower case, upper case and digits
# (hex, base64, a UUID). Words and short numbers (lang=en, page=2) are not, nor is anything in the
# path but a `;name=value` parameter (jsessionid), so a homepage that lands on another host, path or
# page is still a move. The fetcher's final URL has no fragment to compare.
DIGIT_RUN = re.compile(r"\d{8}")
TOKEN = re.compile(r"[\w\-+/=.~%]{16,}", re.ASCII)
PENDING_NOTE = "no snapshot yet; no crawl has succeeded so far"


def _get(fetcher: Fetcher, url: str, timeout: float, max_bytes: int, headers: dict) -> FetchResult:
    """The final answer after redirects, body bounded; FeedError with the fetcher's sentence."""
    try:
        return fetcher.fetch(url, headers, cap_bytes=max_bytes, deadline=time.monotonic() + timeout)
    except (FetchRefused, FetchFailed) as exc:
        raise FeedError(str(exc)) from None


def roster(settings) -> list[dict]:
    """The firms to crawl: `[[feeds.around_roster]]` {name, url} tables, else the original's 20 (ROSTER)."""
    firms = []
    for entry in option(settings, "around_roster", [{"name": n, "url": u} for n, u in ROSTER]):
        url = entry.get("url") if isinstance(entry, dict) else None
        try:
            usable = isinstance(entry.get("name"), str) and urlsplit(url).scheme in ("http", "https")
        except (AttributeError, TypeError, ValueError):  # not a table, no url, or a URL urlsplit refuses
            usable = False
        if not usable:
            raise SettingsError(f"Setting [feeds] around_roster lists {entry!r}; each entry needs a name and an "
                                'http(s) url, such as { name = "USV", url = "https://www.usv.com/" }.')
        if any(firm["url"] == url for firm in firms):  # one row per URL and crawl: a repeat fails every run
            raise SettingsError(f"Setting [feeds] around_roster lists {url} twice; keep one entry per URL.")
        firms.append({"name": entry["name"], "url": url})
    return firms


def _robots_verdict(fetcher: Fetcher, url: str,
                    files: dict[str, FetchResult | None]) -> tuple[str, str | None, str | None]:
    """(robots, rule, skipped) for our product token at `url`; `files` keeps each robots.txt read
    (None: unreachable) for the other URLs of its origin."""
    robots_url = urljoin(url, "/robots.txt")
    if robots_url not in files:
        try:
            files[robots_url] = _get(fetcher, robots_url, ROBOTS_TIMEOUT, ROBOTS_CAP, {"User-Agent": PRODUCT_USER_AGENT})
        except Exception:
            files[robots_url] = None
    got = files[robots_url]
    if got is None or got.status >= 500:
        return "unknown", None, "robots_unavailable"
    if got.status >= 400:
        return "allow", f"robots.txt answered {got.status}: everything allowed", None
    if got.status >= 300:  # a redirect the fetcher did not follow: RFC 9309 says treat as unavailable
        return "unknown", None, "robots_unavailable"
    text = got.body.decode("utf-8", "replace")
    matcher = robotstxt.RobotsMatcher()
    allowed = matcher.is_allowed(text, PRODUCT_TOKEN, url)
    rule = rule_at(robots_lines(text), matcher.matching_line)
    return ("allow" if allowed else "disallow"), rule, (None if allowed else "robots")


def _clip(text: str | None) -> str | None:
    text = " ".join((text or "").split())
    return text[:TEXT_CAP] or None


def _page_fields(body: bytes, content_type: str | None, base_url: str) -> dict:
    if "html" not in (content_type or "html").lower():
        return {"title": None, "description": None, "og_image": None, "text_hash": None}
    tree = HTMLParser(decode_text(body, content_type or "", sniff_meta=True)[0])

    def meta(*selectors):
        for sel in selectors:
            node = tree.css_first(sel)
            if node is not None and node.attributes.get("content"):
                return node.attributes["content"]
        return None

    title_node = document_title(tree)  # a <title> inside an inline SVG names a drawing
    og_image = meta('meta[property="og:image"]', 'meta[name="og:image"]', 'meta[name="twitter:image"]')
    return {
        "title": _clip(title_node.text() if title_node else meta('meta[property="og:title"]')),
        "description": _clip(meta('meta[name="description"]', 'meta[property="og:description"]')),
        "og_image": _image_url(base_url, og_image) if og_image else None,
        "text_hash": _text_hash(tree),
    }


def _text_hash(tree: HTMLParser) -> str | None:
    """SHA-256 of the words a visitor reads (None without a body): scripts, styles and attributes
    are left out, so a nonce, a challenge token or an obfuscated e-mail link that changes with
    every request is no change of content."""
    tree.strip_tags(["script", "style", "noscript", "template"])
    if tree.body is None:
        return None
    return hashlib.sha256(" ".join(tree.body.text(separator=" ").split()).encode()).hexdigest()


def _image_url(base_url: str, written: str) -> str | None:
    """The og:image as an absolute http(s) URI, spaces and the like percent-encoded as browsers send
    them; None when it cannot be one or is too long to keep whole."""
    url = join_url(base_url, written.strip())
    if url is None or urlsplit(url).scheme not in ("http", "https"):
        return None
    url = quote(url, safe="%:/?#[]@!$&'()*+,;=")
    return url if len(url) <= TEXT_CAP else None


class _RedirectDisallowed(Exception):
    """A redirect of the homepage led to a URL its own origin's robots.txt keeps us from."""

    def __init__(self, url: str, verdict: tuple[str, str | None, str | None]):
        super().__init__(url)
        self.url, self.verdict = url, verdict


def crawl_firm(fetcher: Fetcher, firm: dict) -> dict:
    """One firm's row: robots first, then the homepage when allowed, each redirect hop asked of its
    own origin's robots.txt before it is opened (a vanity domain's robots.txt says nothing about the
    site it sends us to). Never raises."""
    started = time.monotonic()
    row = {"target": firm["url"], "name": firm["name"], "observed_at": db.now_iso(), "final_url": None,
           "status": None, "title": None, "description": None, "og_image": None, "server": None,
           "last_modified": None, "content_type": None, "body_hash": None, "bytes_read": None,
           "truncated": 0, "robots_rule": None, "skipped": None, "error": None, "text_hash": None}
    robots_files: dict[str, FetchResult | None] = {}
    row["robots"], row["robots_rule"], row["skipped"] = _robots_verdict(fetcher, firm["url"], robots_files)

    def obey_robots(hop: Target) -> None:
        verdict = _robots_verdict(fetcher, hop.url, robots_files)
        if verdict[2]:
            raise _RedirectDisallowed(hop.url, verdict)

    if not row["skipped"]:
        try:
            got = _get(fetcher.visiting(obey_robots), firm["url"], PAGE_TIMEOUT, BODY_CAP,
                       {"User-Agent": PRODUCT_USER_AGENT, "Accept": "text/html,*/*;q=0.5"})
            ctype = got.headers.get("content-type")
            row.update(status=got.status, final_url=got.final_url, server=_clip(got.headers.get("server")),
                       last_modified=_clip(got.headers.get("last-modified")), content_type=_clip(ctype),
                       body_hash=hashlib.sha256(got.body).hexdigest(), bytes_read=len(got.body),
                       truncated=int(got.truncated), **_page_fields(got.body, ctype, got.final_url))
        except _RedirectDisallowed as hop:
            row["final_url"] = hop.url
            row["robots"], row["robots_rule"], row["skipped"] = hop.verdict
        except Exception as exc:
            row["error"] = _clip(str(exc) or exc.__class__.__name__) if isinstance(exc, FeedError) else \
                f"{exc.__class__.__name__}: the homepage could not be fetched"
    row["elapsed_ms"] = int((time.monotonic() - started) * 1000)
    return row


def _generated(value: str) -> bool:
    kinds = sum(bool(re.search(kind, value)) for kind in ("[a-z]", "[A-Z]", "[0-9]"))
    return bool(DIGIT_RUN.search(value)) or (kinds >= 2 and TOKEN.fullmatch(value) is not None)


def _meaningful(parameter: str) -> bool:
    name, has_value, value = parameter.partition("=")
    return not _generated(value if has_value else name)


def _place(url: str | None) -> str | None:
    """A final URL without the parameters that are noise: what the radar compares, never shows."""
    if url is None:
        return None
    parts = urlsplit(url)
    path = "/".join(";".join([name, *filter(_meaningful, parameters)])
                    for name, *parameters in (segment.split(";") for segment in parts.path.split("/")))
    query = "&".join(filter(_meaningful, parts.query.split("&")))
    return urlunsplit((parts.scheme, parts.netloc, path, query, ""))


def _live(row) -> bool:
    return not row["skipped"] and not row["error"] and bool(row["body_hash"])


def _same_content(before, after) -> bool:
    """The visible texts when both rows have one (rows stored before it compare their bodies)."""
    if before["text_hash"] and after["text_hash"]:
        return before["text_hash"] == after["text_hash"]
    return before["body_hash"] == after["body_hash"]


def diff(before, after) -> tuple[str, list[dict]] | None:
    """(severity, field changes) between two rows of one firm, or None when nothing changed.
    A content change is shown as the two body hashes, the ones /around/json reports."""
    changes = [{"field": f, "before": before[f], "after": after[f]} for f in COMPARED
               if (_place(before[f]) != _place(after[f]) if f == "final_url" else before[f] != after[f])]
    if _live(before) and _live(after) and not _same_content(before, after):
        changes.append({"field": "content", "before": before["body_hash"], "after": after["body_hash"]})
    if not changes:
        return None
    fields = {c["field"] for c in changes}
    if fields & {"status", "error"}:
        severity = "high"
    elif fields & {"content", "title", "description", "final_url", "robots", "skipped"} or after["truncated"]:
        severity = "medium"
    else:
        severity = "low"
    return severity, changes


def run_around(settings, fetcher: Fetcher | None = None) -> str:
    """Job (daily): crawl the roster, store the snapshot and its changes, prune old history.
    Raises FeedError, storing nothing, when more than half of the firms could not be reached."""
    firms = roster(settings)
    if not firms:
        return "around_roster is empty; nothing crawled, the last snapshot stays"
    fetcher = fetcher or fetcher_from_settings(settings)
    signed_with = fetcher.signer.key_id if fetcher.signer is not None else None
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=CONCURRENCY) as pool:
        rows = list(pool.map(lambda firm: crawl_firm(fetcher, firm), firms))
    # A robots.txt that disallows us, or any homepage answer, means the firm was reached. Most firms
    # unreached at once says more of our network than of theirs: storing it would record a change
    # for each firm that day and another on recovery.
    unreached = sum(1 for row in rows if row["error"] or row["skipped"] == "robots_unavailable")
    if rows and unreached * 2 > len(rows):
        reached = len(rows) - unreached
        raise FeedError(f"The crawl reached {f'only {reached}' if reached else 'none'} of the {len(rows)} firms "
                        "(robots.txt unavailable or the homepage failed for the rest); the last snapshot stays.")
    crawled_at = db.now_iso()
    cutoff = db.now_iso(ago_s=KEEP_DAYS * 86400)
    conn = db.writer(settings.db_path)
    changed = 0
    try:
        with db.transaction(conn):
            crawl_id = conn.execute(
                "INSERT INTO around_crawls (crawled_at, crawled_by, target_count, elapsed_ms, signed_with)"
                " VALUES (?, ?, ?, ?, ?)",
                (crawled_at, PRODUCT_USER_AGENT, len(rows), int((time.monotonic() - started) * 1000), signed_with)).lastrowid
            for row in rows:
                previous = conn.execute(
                    "SELECT * FROM around_results WHERE target = ? AND skipped IS NOT 'robots_unavailable'"
                    " ORDER BY crawl_id DESC LIMIT 1", (row["target"],)).fetchone()
                conn.execute(f"INSERT INTO around_results (crawl_id, {', '.join(row)}) VALUES (?, {', '.join('?' * len(row))})",
                             (crawl_id, *row.values()))
                found = previous and row["skipped"] != "robots_unavailable" and diff(previous, row)
                if found:
                    changed += 1
                    conn.execute(
                        "INSERT INTO around_changes (crawl_id, target, name, observed_at, previous_observed_at, severity,"
                        " changes) VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (crawl_id, row["target"], row["name"], row["observed_at"], previous["observed_at"],
                         found[0], json.dumps(found[1])))
            old = "SELECT id FROM around_crawls WHERE crawled_at < ? AND id != ?"
            conn.execute(f"DELETE FROM around_results WHERE crawl_id IN ({old})", (cutoff, crawl_id))
            conn.execute("DELETE FROM around_changes WHERE observed_at < ?", (cutoff,))
            conn.execute("DELETE FROM around_crawls WHERE crawled_at < ? AND id != ?", (cutoff, crawl_id))
    finally:
        conn.close()
    live = sum(1 for r in rows if _live(r))
    skipped = sum(1 for r in rows if r["skipped"])
    return f"crawled {len(rows)} firms: {live} read, {skipped} skipped by robots, {len(rows) - live - skipped} failed; {changed} changed"


def _result(row) -> dict:
    out = {
        "name": row["name"], "url": row["target"], "finalUrl": row["final_url"], "status": row["status"],
        "title": row["title"], "description": row["description"], "ogImage": row["og_image"],
        "server": row["server"], "lastModified": row["last_modified"], "contentType": row["content_type"],
        "bodyHash": row["body_hash"], "bytesRead": row["bytes_read"], "truncated": bool(row["truncated"]),
        "robots": row["robots"], "elapsedMs": row["elapsed_ms"],
    }
    if row["robots_rule"]:
        out["robotsRule"] = row["robots_rule"]
    if row["skipped"]:
        out["skipped"] = row["skipped"]
    if row["error"]:
        out["error"] = row["error"]
    return out


def report(conn: sqlite3.Connection) -> dict:
    """AroundReport of the latest crawl; ApiError 503 Pending (Retry-After a day) until one has succeeded."""
    pending = ApiError(503, "No neighborhood snapshot exists yet: no crawl has succeeded so far; the crawl runs daily.",
                       code="pending", headers={"Retry-After": "86400"}, pending=True, note=PENDING_NOTE)
    # No file, or one without the tables (emptied), is not a crawl yet to come: the app's 503
    # storage_unavailable (web.Site.serve), not `pending`.
    crawl = conn.execute("SELECT * FROM around_crawls ORDER BY id DESC LIMIT 1").fetchone()
    rows = [] if crawl is None else conn.execute("SELECT * FROM around_results WHERE crawl_id = ?", (crawl["id"],)).fetchall()
    if crawl is None:
        raise pending
    # Fastest first; failed and skipped rows last.
    rows.sort(key=lambda r: (not _live(r), r["elapsed_ms"] if r["elapsed_ms"] is not None else 1 << 30, r["name"]))
    return {"crawledBy": crawl["crawled_by"], "crawledAt": crawl["crawled_at"], "signedWith": crawl["signed_with"],
            "count": len(rows), "results": [_result(r) for r in rows]}


def changes(conn: sqlite3.Connection, limit=50, now: dt.datetime | None = None) -> dict:
    """AroundChanges, newest first; `limit` clamped to 1..100. ApiError 503 when history is unreadable."""
    limit = clamp_int(limit, 50, 1, 100)
    now_ms = (now or dt.datetime.now(dt.timezone.utc)).timestamp() * 1000
    try:
        latest = conn.execute("SELECT crawled_at, target_count FROM around_crawls ORDER BY id DESC LIMIT 1").fetchone()
        rows = conn.execute("SELECT * FROM around_changes ORDER BY observed_at DESC, id DESC LIMIT ?", (limit,)).fetchall()
    except sqlite3.Error:
        raise ApiError(503, "The change history is temporarily unavailable; try again in a minute.",
                       code="storage_unavailable", headers={"Retry-After": "60"}, available=False, changes=[]) from None

    def age(iso: str) -> int:
        return int(now_ms - db.parse_iso(iso).timestamp() * 1000)

    body = {
        "ok": True,
        "available": latest is not None,
        "latestObservedAt": latest["crawled_at"] if latest else None,
        "targetCount": latest["target_count"] if latest else 0,
        "changes": [
            {"target": r["target"], "name": r["name"], "observedAt": r["observed_at"],
             "previousObservedAt": r["previous_observed_at"], "ageMs": age(r["observed_at"]),
             "severity": r["severity"], "changes": json.loads(r["changes"])}
            for r in rows
        ],
    }
    if latest is None:  # an empty list would read as "nothing changed"
        body["note"] = "No crawl has succeeded yet, so no change can be shown; the crawl runs daily."
    return body
