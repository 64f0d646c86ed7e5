"""The census job over a roster of loopback fixture sites, and its reader."""
from __future__ import annotations

import dataclasses
import sqlite3

import pytest

from lens_sites import site_fetcher
from siteapi import db
from siteapi.config import load_settings
from siteapi.lens import census
from siteapi.web import ApiError


def settings_for(tmp_path, roster):
    base = load_settings()
    lens = {**base.section("lens"), "census_roster": roster, "scan_timeout_s": 4, "probe_timeout_s": 2}
    return dataclasses.replace(base, db_path=tmp_path / "site.db", sections={**base.sections, "lens": lens})


def test_census_runs_store_rows_and_read_back(sites, dns_server, tmp_path):
    roster = [sites.url("ready.test"), {"host": "blog", "url": sites.url("blog.test")}, sites.url("nowhere.test")]
    settings = settings_for(tmp_path, roster)
    line = census.run_census(settings, fetcher=site_fetcher(sites), dns=dns_server.client())
    assert line == "census: 2 of 3 sites scanned; failed: nowhere.test"
    census.run_census(settings, fetcher=site_fetcher(sites), dns=dns_server.client())
    conn = db.connect(settings.db_path, readonly=True)
    assert conn.execute("SELECT COUNT(*) FROM lens_census").fetchone()[0] == 6
    body = census.census(conn, settings)
    assert body["ok"] and body["snapshots"] == 2 and body["roster"] == ["ready.test", "blog", "nowhere.test"]
    sites = {s["host"]: s for s in body["sites"]}
    ready = sites["ready.test"]
    assert body["sites"][0]["host"] == "ready.test"  # highest score first
    assert ready["level"] == 5 and ready["tier"] == "signaled" and ready["doors"] == 6 and ready["delta"] == 0
    assert ready["surfaces"]["mcp"] is True and len(ready["series"]) == 2
    assert sites["blog"]["level"] == 1 and sites["blog"]["series"][0]["tier"] == "open"
    assert sites["nowhere.test"]["score"] is None and sites["nowhere.test"]["error"]


def test_a_run_where_everything_fails_writes_nothing(sites, tmp_path):
    settings = settings_for(tmp_path, [sites.url("nowhere.test")])
    with pytest.raises(RuntimeError, match="all 1 sites failed"):
        census.run_census(settings, fetcher=site_fetcher(sites))
    conn = db.connect(settings.db_path)
    conn.executescript(census.SCHEMA)
    assert conn.execute("SELECT COUNT(*) FROM lens_census").fetchone()[0] == 0


def test_unreadable_storage_is_503(tmp_path):
    conn = sqlite3.connect(tmp_path / "empty.db")
    with pytest.raises(ApiError) as failed:
        census.census(conn)
    assert failed.value.status == 503 and failed.value.body["code"] == "storage_unavailable"


def test_default_roster_has_sixteen_sites():
    hosts = [host for host, _ in census.roster(None)]
    assert len(hosts) == 16 and "wikipedia.org" in hosts and hosts[0] == "aadhar.sh"
