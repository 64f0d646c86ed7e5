"""The weekly census: the lens run over a roster of sites (16 as shipped), one row per site per day, and its reader.

`run_census` scans each roster site (no bot views) four at a time, outside any transaction, then
writes the run in one transaction; a run where every site failed raises and writes nothing. A later
run on the same day replaces that day's rows, except that a site which fails after a good scan that
day keeps the good values and only gains the error. `census(conn, settings)` answers `/lens/census.json`: each
site's latest good score, tier, level, doors and surfaces, the change since its previous census day
(`delta`), its series of one point per day, and the `error` of its latest scan if that failed.

`surfaces` is the census's own record (REFERENCE §2), not the compare summary's: llms.txt, Markdown
negotiation, an MCP server, AGENTS.md, JSON-LD on the page, a Web Bot Auth key directory.
"""
from __future__ import annotations

import json
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

from .. import db
from ..config import SettingsError, option
from ..web import ApiError
from .discovery import DnsClient
from .fetch import Fetcher
from .scan import scan, summary, surfaces as summary_surfaces

SCHEMA = """
CREATE TABLE IF NOT EXISTS lens_census (
    id INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL,
    ts TEXT NOT NULL,
    ymd TEXT NOT NULL,
    host TEXT NOT NULL,
    url TEXT NOT NULL,
    tier TEXT,
    score INTEGER,
    level INTEGER,
    doors INTEGER,
    verdict TEXT,
    surfaces TEXT,
    error TEXT,
    UNIQUE (host, ymd)
);
CREATE INDEX IF NOT EXISTS lens_census_host ON lens_census(host, ts);
"""

# The sites scanned unless site.toml lists its own `[lens] census_roster`, in the form it takes.
DEFAULT_ROSTER = (
    "https://aadhar.sh/", "https://stripe.com/", "https://www.shopify.com/", "https://vercel.com/",
    "https://www.cloudflare.com/", "https://github.com/", "https://www.anthropic.com/", "https://openai.com/",
    "https://www.perplexity.ai/", "https://www.nytimes.com/", "https://www.wsj.com/", "https://www.theverge.com/",
    "https://www.reddit.com/", "https://daringfireball.net/",
    {"host": "wikipedia.org", "url": "https://en.wikipedia.org/wiki/Semantic_Web"}, "https://example.com/",
)


def roster(settings) -> list[tuple[str, str]]:
    """(host, url) pairs from `[lens] census_roster`: URLs, or {host, url} tables; DEFAULT_ROSTER when
    the key is absent, none when it is an empty list (no census)."""
    out = []
    for entry in option(settings, "lens", "census_roster", list(DEFAULT_ROSTER)):
        url = entry.strip() if isinstance(entry, str) else entry.get("url") if isinstance(entry, dict) else None
        url = url if not isinstance(url, str) or "://" in url else "https://" + url
        try:
            host = urlsplit(url).hostname if isinstance(url, str) else None
        except ValueError:  # a bracketed host that is not an IPv6 address
            host = None
        named = entry.get("host") if isinstance(entry, dict) else None
        if not host or not (named is None or isinstance(named, str)):
            raise SettingsError(f"Setting [lens] census_roster lists {entry!r}; list URLs, or tables such as "
                                '{ host = "wikipedia.org", url = "https://en.wikipedia.org/" }.')
        out.append((named or host.removeprefix("www."), url))
    return out


SURFACES = ("llms", "md", "mcp", "agents", "jsonld", "webBotAuth")
# Rows written before the census kept its own surfaces hold the compare summary's keys: llms and mcp
# mean the same, markdown is md, agentCard and apiCatalog are dropped, and agents, jsonld and
# webBotAuth, never measured then, read as null.
OLD_SURFACE_NAMES = {"markdown": "md"}


def surfaces(obs: dict) -> dict:
    """The census's surfaces of one full observation."""
    seen = summary_surfaces(obs)
    jsonld = (obs.get("structured") or {}).get("jsonld") or []
    return {"llms": seen["llms"], "md": seen["markdown"], "mcp": seen["mcp"],
            "agents": bool(obs["discovery"]["agentsMd"].get("present")),
            "jsonld": any(block["valid"] for block in jsonld),
            "webBotAuth": bool(obs["discovery"]["webBotAuth"].get("ok"))}


def stored_surfaces(text: str | None) -> dict | None:
    """A row's surfaces JSON as the six census keys, whichever version of the census wrote it."""
    if not text:
        return None
    stored = {OLD_SURFACE_NAMES.get(key, key): value for key, value in json.loads(text).items()}
    return {key: stored.get(key) for key in SURFACES}


def _row(run_id: str, ts: str, host: str, url: str, settings, fetcher, dns) -> dict:
    row = {"run_id": run_id, "ts": ts, "ymd": ts[:10], "host": host, "url": url, "tier": None, "score": None,
           "level": None, "doors": None, "verdict": None, "surfaces": None, "error": None}
    try:
        obs = scan(url, settings, fetcher=fetcher, bot_views=False, dns=dns)
    except ApiError as failed:
        row["error"] = failed.body["error"]
        return row
    except Exception as exc:  # one site's surprise must not sink the other fifteen
        row["error"] = f"the scan failed ({type(exc).__name__})"
        return row
    seen = summary(obs)
    row.update(tier=seen["tier"], score=seen["readiness"], level=seen["level"], doors=seen["doors"],
               verdict=obs["agent"]["strategy"]["verdict"], surfaces=json.dumps(surfaces(obs)))
    return row


def run_census(settings, fetcher: Fetcher | None = None, dns: DnsClient | None = None) -> str:
    """The census job: scan the roster, store one row per site for today."""
    sites = roster(settings)
    if not sites:
        return "census: census_roster is empty; nothing scanned, the stored census stays"
    ts = db.now_iso()
    run_id = ts + f"-{time.monotonic_ns() % 1_000_000:06d}"
    with ThreadPoolExecutor(max_workers=4, thread_name_prefix="census") as pool:
        rows = list(pool.map(lambda site: _row(run_id, ts, site[0], site[1], settings, fetcher, dns), sites))
    failed = [r for r in rows if r["error"]]
    if len(failed) == len(rows):
        raise RuntimeError(f"census: all {len(rows)} sites failed (first: {failed[0]['host']}: {failed[0]['error']})")
    conn = db.writer(settings.db_path)
    try:
        with db.transaction(conn):
            for row in rows:
                if row["error"] and conn.execute(
                        "UPDATE lens_census SET error = :error WHERE host = :host AND ymd = :ymd AND surfaces IS NOT NULL",
                        row).rowcount:
                    continue
                # Not an upsert: a site.db made before the one-row-per-day rule lacks its UNIQUE constraint.
                conn.execute("DELETE FROM lens_census WHERE host = :host AND ymd = :ymd", row)
                conn.execute(
                    "INSERT INTO lens_census(run_id, ts, ymd, host, url, tier, score, level, doors, verdict, surfaces, error) "
                    "VALUES (:run_id, :ts, :ymd, :host, :url, :tier, :score, :level, :doors, :verdict, :surfaces, :error)",
                    row)
    finally:
        conn.close()
    return f"census: {len(rows) - len(failed)} of {len(rows)} sites scanned" + (
        f"; failed: {', '.join(r['host'] for r in failed)}" if failed else "")


def census(conn: sqlite3.Connection, settings) -> dict:
    """The Census body: the roster's sites (one the owner removed keeps its rows, unshown). A
    sqlite3.Error (storage unreadable) is the app's 503 storage_unavailable."""
    hosts = [host for host, _ in roster(settings)]
    rows = [row for row in conn.execute("SELECT ts, ymd, host, url, tier, score, level, doors, verdict, surfaces, "
                                        "error FROM lens_census ORDER BY ts, id") if row["host"] in hosts]
    by_host: dict[str, list] = {}
    for row in rows:
        by_host.setdefault(row["host"], []).append(row)
    sites = []
    for host, history in by_host.items():
        # The day's last good scan, even if a later scan that day failed; a site.db from before the
        # one-row-per-day rule may hold several rows for a day.
        good = list({r["ymd"]: r for r in history if r["surfaces"] is not None}.values())
        latest = history[-1]
        shown = good[-1] if good else latest
        delta = (good[-1]["score"] - good[-2]["score"]) if len(good) >= 2 and None not in (good[-1]["score"], good[-2]["score"]) else None
        site = {"host": host, "url": shown["url"], "tier": shown["tier"], "score": shown["score"],
                "level": shown["level"], "doors": shown["doors"], "verdict": shown["verdict"], "delta": delta,
                "surfaces": stored_surfaces(shown["surfaces"]), "lastYmd": shown["ymd"],
                "series": [{"ymd": r["ymd"], "score": r["score"], "tier": r["tier"], "doors": r["doors"]} for r in good]}
        if latest["error"]:
            site["error"] = latest["error"]
        sites.append(site)
    sites.sort(key=lambda s: (s["score"] is None, -(s["score"] or 0), s["host"]))
    ymds = sorted({r["ymd"] for r in rows})
    body = {"ok": True, "roster": hosts, "snapshots": len(ymds),
            "firstYmd": ymds[0] if ymds else None, "lastYmd": ymds[-1] if ymds else None, "sites": sites}
    if not ymds:  # an empty list would read as a census of nothing
        body["note"] = "No census has been stored yet; the roster is inspected weekly."
    return body
