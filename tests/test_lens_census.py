"""The census job over a roster of loopback fixture sites, and its reader."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import sqlite3
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from app import make_app
from conftest import Client, OpenApiChecker
from lens_sites import site_fetcher
from servers import serve_wsgi, start_thread, stop_thread, write_response
from siteapi import db, openapi
from siteapi.config import load_settings
from siteapi.lens import census
from siteapi.lens.fetch import AddressPolicy, Fetcher


def settings_for(tmp_path, roster):
    base = load_settings()
    lens = {**base.section("lens"), "census_roster": roster, "scan_timeout_s": 4, "probe_timeout_s": 2}
    return dataclasses.replace(base, db_path=tmp_path / "site.db", sections={**base.sections, "lens": lens})


def test_census_runs_store_rows_and_read_back(sites, dns_server, tmp_path):
    roster = [sites.url("ready.test"), {"host": "blog", "url": sites.url("blog.test")}, sites.url("nowhere.test")]
    settings = settings_for(tmp_path, roster)
    line = census.run_census(settings, fetcher=site_fetcher(sites), dns=dns_server.client())
    assert line == "census: 2 of 3 sites scanned; failed: nowhere.test"
    conn = db.connect(settings.db_path, readonly=True)
    assert conn.execute("SELECT COUNT(*) FROM lens_census").fetchone()[0] == 3
    # the first job to create site.db gives it every area's tables, so no endpoint meets a missing one
    assert conn.execute("SELECT COUNT(*) FROM pages").fetchone()[0] == 0
    body = census.census(conn, settings)
    assert body["ok"] and body["snapshots"] == 1 and body["roster"] == ["ready.test", "blog", "nowhere.test"]
    sites = {s["host"]: s for s in body["sites"]}
    ready = sites["ready.test"]
    assert body["sites"][0]["host"] == "ready.test"  # highest score first
    assert ready["level"] == 5 and ready["tier"] == "signaled" and ready["doors"] == 6 and ready["delta"] is None
    assert ready["surfaces"] == {"llms": True, "md": True, "mcp": True, "agents": True, "jsonld": False,
                                 "webBotAuth": True} and len(ready["series"]) == 1
    assert sites["blog"]["surfaces"] == dict.fromkeys(census.SURFACES, False)
    assert sites["blog"]["level"] == 1 and sites["blog"]["series"][0]["tier"] == "open"
    assert sites["nowhere.test"]["score"] is None and sites["nowhere.test"]["error"]


def backdate(settings, ymd: str, score_change: int = 0) -> None:
    """Move every stored row to an earlier day, as if that run had happened then."""
    conn = db.writer(settings.db_path)
    with db.transaction(conn):
        conn.execute("UPDATE lens_census SET ymd = ?, ts = ? || 'T08:17:00Z', score = score + ?",
                     (ymd, ymd, score_change))
    conn.close()


def one_utc_day_ahead(seconds: float) -> None:
    """Return once the UTC date will stay the same for `seconds`, waiting past midnight if it would not."""
    left = 86400 - time.time() % 86400
    if left < seconds:
        time.sleep(left + 1)


def test_one_row_per_site_and_day(sites, dns_server, tmp_path):
    """A later run the same day replaces that day's rows; a site failing then keeps the day's good values."""
    roster = [sites.url("ready.test"), {"host": "blog", "url": sites.url("blog.test")}, sites.url("nowhere.test")]
    settings = settings_for(tmp_path, roster)
    census.run_census(settings, fetcher=site_fetcher(sites), dns=dns_server.client())
    backdate(settings, "2026-01-05", score_change=-7)
    one_utc_day_ahead(60)  # the three runs below stamp rows with today's date: all on the same day
    for _ in range(2):
        census.run_census(settings, fetcher=site_fetcher(sites), dns=dns_server.client())
    down = settings_for(tmp_path, [sites.url("ready.test"), {"host": "blog", "url": sites.url("nowhere.test")}])
    assert census.run_census(down, fetcher=site_fetcher(sites), dns=dns_server.client()).endswith("failed: blog")
    conn = db.connect(settings.db_path, readonly=True)
    days = conn.execute("SELECT host, COUNT(*) AS n FROM lens_census GROUP BY host, ymd").fetchall()
    assert len(days) == 6 and {d["n"] for d in days} == {1}
    body = census.census(conn, settings)
    assert body["snapshots"] == 2 and body["firstYmd"] == "2026-01-05" and body["lastYmd"] > "2026-01-05"
    found = {s["host"]: s for s in body["sites"]}
    ready, blog = found["ready.test"], found["blog"]
    assert [p["ymd"] for p in ready["series"]] == [body["firstYmd"], body["lastYmd"]]
    assert ready["delta"] == 7 and ready["series"][1]["score"] - ready["series"][0]["score"] == 7
    assert "error" not in ready
    assert blog["lastYmd"] == body["lastYmd"] and blog["level"] == 1 and blog["score"] is not None
    assert len(blog["series"]) == 2 and blog["delta"] == 7 and blog["error"]  # good values kept, failure noted
    assert found["nowhere.test"]["series"] == [] and found["nowhere.test"]["error"]


def test_an_older_site_db_with_several_rows_a_day_reads_as_one_a_day(sites, dns_server, tmp_path):
    """Before the one-row-per-day rule, each run added rows: the reader shows each day's last good scan."""
    settings = settings_for(tmp_path, [sites.url("ready.test")])
    with contextlib.closing(sqlite3.connect(settings.db_path)) as old:
        old.executescript(census.SCHEMA.replace(",\n    UNIQUE (host, ymd)", ""))  # the table as it was
    for ymd, change in (("2026-01-04", -9), ("2026-01-05", -5), ("2026-01-05", -7)):
        census.run_census(settings, fetcher=site_fetcher(sites), dns=dns_server.client())
        writer = db.writer(settings.db_path)
        with db.transaction(writer):
            writer.execute("UPDATE lens_census SET ymd = ?, ts = ? || 'T08:17:00Z', score = score + ? WHERE ymd > ?",
                           (ymd, ymd, change, "2026-01-05"))
            writer.execute("INSERT INTO lens_census(run_id, ts, ymd, host, url, surfaces, error) "
                           "VALUES ('old', ? || 'T09:00:00Z', ?, 'ready.test', 'u', NULL, 'timed out')", (ymd, ymd))
        writer.close()
    census.run_census(settings, fetcher=site_fetcher(sites), dns=dns_server.client())
    conn = db.connect(settings.db_path, readonly=True)
    ready = census.census(conn, settings)["sites"][0]
    today = ready["lastYmd"]
    assert [p["ymd"] for p in ready["series"]] == ["2026-01-04", "2026-01-05", today]
    scores = [p["score"] for p in ready["series"]]
    assert scores[1] == scores[2] - 7 and ready["delta"] == 7  # the 5th's later scan, not its first
    assert conn.execute("SELECT COUNT(*) FROM lens_census WHERE ymd = '2026-01-05'").fetchone()[0] == 4


def test_the_roster_is_the_default_unless_site_toml_lists_one(monkeypatch):
    """One list: site.toml names the key only in a comment (two copies had drifted apart)."""
    hosts = [host for host, _ in census.roster(load_settings())]
    assert hosts[:3] == ["aadhar.sh", "stripe.com", "shopify.com"] and hosts[-2:] == ["wikipedia.org", "example.com"]
    monkeypatch.setenv("SITE_LENS_CENSUS_ROSTER", "https://one.example/, two.example")
    assert census.roster(load_settings()) == [("one.example", "https://one.example/"), ("two.example", "https://two.example")]


def test_a_run_where_everything_fails_writes_nothing(sites, tmp_path):
    settings = settings_for(tmp_path, [sites.url("nowhere.test")])
    with pytest.raises(RuntimeError, match="all 1 sites failed"):
        census.run_census(settings, fetcher=site_fetcher(sites))
    conn = db.connect(settings.db_path)
    conn.executescript(census.SCHEMA)
    assert conn.execute("SELECT COUNT(*) FROM lens_census").fetchone()[0] == 0


def test_default_roster_has_sixteen_sites():
    hosts = [host for host, _ in census.roster(None)]
    assert len(hosts) == 16 and "wikipedia.org" in hosts and hosts[0] == "aadhar.sh"


VALID_LD = '<script type="application/ld+json">{"@context": "https://schema.org", "@type": "WebSite"}</script>'
BROKEN_LD = '<script type="application/ld+json">{"@type": "WebSite", </script>'
KEYS = json.dumps({"keys": [{"kty": "OKP", "crv": "Ed25519", "x": "JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs"}]})
# host -> path -> (content type, body); anything else is a 404
SURFACE_SITES = {
    "keys.test": {"/": ("text/html", f"<html><head><title>Keys</title>{BROKEN_LD}{VALID_LD}</head><body>Hi</body></html>"),
                  "/AGENTS.md": ("text/markdown", "# Agents\n\nRead the docs.\n"),
                  "/.well-known/http-message-signatures-directory": ("application/http-message-signatures-directory+json", KEYS)},
    "nokeys.test": {"/": ("text/html", f"<html><head><title>None</title>{BROKEN_LD}</head><body>Hi</body></html>"),
                    "/.well-known/http-message-signatures-directory": ("application/json", json.dumps({"keys": []}))},
}


class SurfaceSite(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        host = (self.headers.get("Host") or "").split(":")[0]
        found = SURFACE_SITES.get(host, {}).get(self.path.split("?")[0])
        if found is None:
            return write_response(self, 404, "not here", "text/plain")
        write_response(self, 200, found[1], found[0])


class SurfaceWeb(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), SurfaceSite)
        self.stopping = threading.Event()


def test_census_records_agents_md_jsonld_and_web_bot_auth(dns_server, tmp_path):
    """REFERENCE §2: the census's surfaces are llms, md, mcp, agents, jsonld and webBotAuth."""
    web, thread = start_thread(SurfaceWeb())
    try:
        port = web.server_address[1]
        fetcher = Fetcher(policy=AddressPolicy(allow=frozenset({("127.0.0.1", port)})), timeout_s=3.0,
                          resolve=lambda host, timeout: ["127.0.0.1"] if host in SURFACE_SITES else [])
        settings = settings_for(tmp_path, [f"http://{host}:{port}/" for host in SURFACE_SITES])
        assert census.run_census(settings, fetcher=fetcher, dns=dns_server.client()) == "census: 2 of 2 sites scanned"
    finally:
        stop_thread(web, thread)
    conn = db.connect(settings.db_path, readonly=True)
    stored = {row["host"]: json.loads(row["surfaces"]) for row in conn.execute("SELECT host, surfaces FROM lens_census")}
    found = {s["host"]: s["surfaces"] for s in census.census(conn, settings)["sites"]}
    assert stored == found
    # AGENTS.md is the fallback name; one valid JSON-LD block is enough; a key directory needs keys
    assert found["keys.test"] == {"llms": False, "md": False, "mcp": False, "agents": True, "jsonld": True,
                                  "webBotAuth": True}
    assert found["nokeys.test"] == dict.fromkeys(census.SURFACES, False)


def test_rows_stored_with_the_summary_surfaces_still_read(tmp_path):
    """Rows from before the census kept its own surfaces carry the compare summary's keys: the live
    /lens/census.json maps what corresponds and leaves the rest null, valid against the OpenAPI schema."""
    settings = settings_for(tmp_path, ["https://old.test/", "https://new.test/", "https://both.test/"])
    conn = db.writer(settings.db_path)
    conn.executescript(census.SCHEMA)
    old = {"llms": True, "markdown": True, "mcp": False, "agentCard": True, "apiCatalog": True}
    new = {"llms": False, "md": False, "mcp": True, "agents": True, "jsonld": True, "webBotAuth": False}
    with db.transaction(conn):
        for host, ymd, surfaces in (("old.test", "2026-01-05", old), ("new.test", "2026-01-12", new),
                                    ("both.test", "2026-01-05", new), ("both.test", "2026-01-12", old),
                                    ("gone.test", "2026-01-12", new)):  # a site the owner took off the roster
            conn.execute("INSERT INTO lens_census(run_id, ts, ymd, host, url, tier, score, level, doors, verdict, surfaces) "
                         "VALUES ('r', ? || 'T08:17:00Z', ?, ?, 'https://' || ? || '/', 'open', 40, 1, 0, 'human-only', ?)",
                         (ymd, ymd, host, host, json.dumps(surfaces)))
    conn.close()
    checker = OpenApiChecker(openapi.document(settings))
    with serve_wsgi(make_app(settings).wsgi) as base:
        response = Client(base, checker).get("/lens/census.json")
    assert response.status_code == 200 and checker.checked == [("/lens/census.json", 200)]
    assert "note" not in response.json()
    found = {s["host"]: s["surfaces"] for s in response.json()["sites"]}
    assert set(found) == {"old.test", "new.test", "both.test"}
    assert found["old.test"] == {"llms": True, "md": True, "mcp": False, "agents": None, "jsonld": None, "webBotAuth": None}
    assert found["new.test"] == new
    assert found["both.test"] == found["old.test"]  # the latest day's row, whichever census wrote it
