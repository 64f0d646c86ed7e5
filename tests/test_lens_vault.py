"""Representation snapshots: capture as several profiles, read back, compare after a change,
refuse bad input, cap what a row stores and forget old rows, against the loopback web and a real
SQLite file."""
from __future__ import annotations

import dataclasses

import pytest

import lens_web
from siteapi import db
from siteapi.config import load_settings
from siteapi.lens import vault
from siteapi.web import ApiError


@pytest.fixture(scope="module")
def web():
    server, thread = lens_web.start()
    yield server
    lens_web.stop(server, thread)


@pytest.fixture()
def conn(tmp_path):
    connection = db.connect(tmp_path / "site.db")
    connection.isolation_level = None
    connection.executescript(vault.SCHEMA)
    yield connection
    connection.close()


def test_capture_default_profiles_one_row_each(web, conn):
    fetcher = lens_web.loopback_fetcher(web)
    out = vault.capture(conn, web.url("/negotiate"), fetcher=fetcher)
    assert out["ok"] and [s["profile"] for s in out["snapshots"]] == ["browser", "markdown", "identity"]
    assert conn.execute("SELECT count(*) FROM representation_snapshots").fetchone()[0] == 3
    by_profile = {s["profile"]: s for s in out["snapshots"]}
    assert by_profile["markdown"]["content_type"].startswith("text/markdown")
    assert by_profile["browser"]["content_type"].startswith("text/html")
    assert by_profile["browser"]["title"] == "Negotiated" and by_profile["browser"]["word_count"] == 3
    assert by_profile["markdown"]["body_hash"] != by_profile["browser"]["body_hash"]
    assert by_profile["browser"]["vary"] == "Accept" and by_profile["browser"]["status"] == 200
    sent = {h.get("Accept-Encoding") for _, h in web.seen[-3:]}
    assert "identity" in sent
    uas = {h.get("User-Agent") for _, h in web.seen[-3:]}
    assert any("Chrome" in ua for ua in uas) and any(ua.startswith("AadharshBot") for ua in uas)


def test_read_returns_the_stored_row(web, conn):
    out = vault.capture(conn, web.url("/rich"), profiles="bot", fetcher=lens_web.loopback_fetcher(web))
    snapshot_id = out["snapshots"][0]["id"]
    row = vault.read(conn, str(snapshot_id))["snapshot"]
    assert row["id"] == snapshot_id and row["profile"] == "bot" and row["title"] == "Rich fixture page"
    assert row["body_hash"].startswith("sha256:") and row["body_bytes"] == len(lens_web.RICH_PAGE.encode())
    assert row["truncated"] == 0 and row["error"] is None


def test_compare_refetches_the_same_profile_and_lists_changes(web, conn):
    fetcher = lens_web.loopback_fetcher(web)
    first = vault.capture(conn, web.url("/changing"), profiles=["identity"], fetcher=fetcher)["snapshots"][0]
    diff = vault.compare(conn, first["id"], fetcher=fetcher)
    assert diff["before"]["id"] == first["id"] and diff["after"]["id"] != first["id"]
    assert diff["after"]["profile"] == "identity" and diff["changed"] is True
    changed = {c["field"] for c in diff["changes"]}
    assert {"etag", "body_hash", "title", "word_count", "body_bytes"} <= changed
    assert "status" not in changed
    assert conn.execute("SELECT count(*) FROM representation_snapshots").fetchone()[0] == 2


def test_a_failing_profile_is_stored_with_its_error(web, conn):
    out = vault.capture(conn, web.url("/reset-markdown"), profiles=["bot", "markdown"],
                        fetcher=lens_web.loopback_fetcher(web))
    answered, failed = out["snapshots"]
    assert answered["status"] == 200 and answered["error"] is None
    assert failed["status"] is None and "reset" in failed["error"]


def test_a_capture_that_no_profile_answered_is_the_fetch_error_and_stores_nothing(web, conn):
    """agent_audit23 #12: rows holding only an error, answered ok, sent agents on to compare nothing;
    the error is the one lens_inspect (/lens/fetch) gives for the same URL."""
    with pytest.raises(ApiError) as raised:
        vault.capture(conn, web.url("/reset"), profiles=["bot", "identity"], fetcher=lens_web.loopback_fetcher(web))
    assert raised.value.status == 502 and raised.value.body["code"] == "upstream_failed"
    assert "reset" in raised.value.body["error"]
    assert conn.execute("SELECT count(*) FROM representation_snapshots").fetchone()[0] == 0


def test_bad_input(web, conn):
    fetcher = lens_web.loopback_fetcher(web)
    cases = [
        (lambda: vault.capture(conn, web.url("/rich"), profiles=["browser", "spider"], fetcher=fetcher), 400, "spider"),
        (lambda: vault.capture(conn, web.url("/rich"), profiles=[1, 2], fetcher=fetcher), 400, "list of profile"),
        (lambda: vault.capture(conn, "", fetcher=fetcher), 400, "url"),
        (lambda: vault.capture(conn, "http://10.0.0.1/", fetcher=fetcher), 400, "private"),
        (lambda: vault.read(conn, "abc"), 400, "whole number"),
        (lambda: vault.read(conn, 999), 404, "999"),
        (lambda: vault.compare(conn, 999, fetcher=fetcher), 404, "999"),
        (lambda: vault.read(conn, 2 ** 63), 404, str(2 ** 63)),
        (lambda: vault.compare(conn, "-5", fetcher=fetcher), 404, "-5"),
        (lambda: vault.capture(conn, "http://[::1", fetcher=fetcher), 400, "IPv6 address is not valid"),
    ]
    for call, status, words in cases:
        with pytest.raises(ApiError) as err:
            call()
        assert err.value.status == status and words in err.value.body["error"]
    assert conn.execute("SELECT count(*) FROM representation_snapshots").fetchone()[0] == 0
    assert vault.parse_profiles("bot, markdown,bot") == ["bot", "markdown"]
    assert len(vault.parse_profiles(["browser", "bot", "markdown", "identity"])) == 4


def test_stored_columns_are_capped(web, conn):
    """A response with 8 KB header values and a 5,000-character title stores a row of a few KB."""
    out = vault.capture(conn, web.url("/fat-headers"), profiles=["bot"], fetcher=lens_web.loopback_fetcher(web))
    row = vault.read(conn, out["snapshots"][0]["id"])["snapshot"]
    assert sum(len(str(value)) for value in row.values()) < 4 * 1024
    for column in ("content_type", "cache_control", "vary", "etag", "server"):
        assert len(row[column]) == vault.HEADER_CHARS, column
    assert row["title"] == "T" * vault.TITLE_CHARS and row["word_count"] == 1
    assert out["snapshots"][0] == row


def test_a_url_too_long_to_store_whole_is_refused(web, conn):
    """Normalising writes each non-ASCII letter as up to 12 characters: the stored URL stays whole,
    since compare refetches it, so a longer one is refused before any fetch."""
    seen = len(web.seen)
    with pytest.raises(ApiError) as refused:
        vault.capture(conn, web.url("/" + "\u00e9" * 400), fetcher=lens_web.loopback_fetcher(web))
    assert refused.value.status == 400 and refused.value.body["parameter"] == "url"
    assert "2048" in refused.value.body["error"] and len(web.seen) == seen
    assert conn.execute("SELECT count(*) FROM representation_snapshots").fetchone()[0] == 0


def test_the_table_keeps_the_newest_rows_only(web, conn):
    with db.transaction(conn):
        conn.executemany("INSERT INTO representation_snapshots (url, profile, observed_at) VALUES (?, 'bot', ?)",
                         [(f"https://old.example/{n}", db.now_iso()) for n in range(vault.KEEP_ROWS)])
    out = vault.capture(conn, web.url("/rich"), profiles=["bot", "identity"], fetcher=lens_web.loopback_fetcher(web))
    count, oldest = conn.execute("SELECT count(*), min(id) FROM representation_snapshots").fetchone()
    assert count == vault.KEEP_ROWS and oldest == 3
    assert [vault.read(conn, s["id"])["snapshot"]["url"] for s in out["snapshots"]] == [web.url("/rich")] * 2


def test_the_daily_job_forgets_snapshots_past_their_window(tmp_path):
    settings = dataclasses.replace(load_settings(), db_path=tmp_path / "site.db")
    conn = db.writer(settings.db_path)
    old, recent = db.now_iso(ago_s=(vault.KEEP_DAYS + 1) * 86400), db.now_iso(ago_s=(vault.KEEP_DAYS - 1) * 86400)
    with db.transaction(conn):
        conn.executemany("INSERT INTO representation_snapshots (url, profile, observed_at) VALUES (?, 'bot', ?)",
                         [("https://a.example/", old), ("https://b.example/", old), ("https://c.example/", recent)])
    assert vault.run_snapshot_purge(settings) == f"2 snapshots older than {vault.KEEP_DAYS} days deleted"
    assert [r[0] for r in conn.execute("SELECT url FROM representation_snapshots")] == ["https://c.example/"]
    conn.close()
