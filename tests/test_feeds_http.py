"""The five feed endpoints on the real server: the documented errors before any job has run, and
the stored data after the jobs read loopback servers speaking each outside protocol."""
import dataclasses
import json
import time

import pytest
from jsonschema import Draft202012Validator

import jobs
from app import make_app
from conftest import Client, build_site
from servers import serve_wsgi
from siteapi import db
from siteapi.config import RatePolicy
from siteapi.feeds.around import run_around
from test_feeds_around import loopback_fetcher
from test_feeds_coffee import OWNER_CALENDAR
from test_mcp import tool_call, tools_by_name
from feeds_servers import FirmServer, IcsServer, SpotifyServer, feeds_settings


def test_errors_before_any_job_ran(api, checker):
    tracks = api.get("/rn/tracks")
    assert tracks.status_code == 503 and tracks.json()["code"] == "no_playlist" and tracks.json()["tracks"] == []
    pending = api.get("/around/json")
    assert pending.status_code == 503 and pending.headers["Retry-After"] == "86400" and pending.json()["pending"]
    coffee = api.get("/coffee/availability.json")
    assert coffee.status_code == 503 and coffee.headers["Retry-After"] == "60" and coffee.json()["slots"] == []
    # empty lists that say why, so that an agent does not read "nothing changed" (agent_audit23 #11)
    changes, census = api.get("/around/changes.json").json(), api.get("/lens/census.json").json()
    assert changes["available"] is False and changes["changes"] == [] and "No crawl has succeeded yet" in changes["note"]
    assert census["snapshots"] == 0 and census["sites"] == [] and "No census has been stored yet" in census["note"]
    assert "bookingUrl" in coffee.json()
    ledger = api.get("/ledger.json")
    assert ledger.status_code == 502 and ledger.json()["code"] == "upstream_failed"
    # every field of these bodies is one the document names (Pending's `docs` included)
    assert "docs" in pending.json()
    for path, r in (("/rn/tracks", tracks), ("/around/json", pending), ("/coffee/availability.json", coffee),
                    ("/ledger.json", ledger)):
        assert checker.unnamed("GET", path, r) == [], path


def test_feeds_answer_in_their_own_shape_before_site_db_exists(tmp_path, checker):
    log = tmp_path / "access.log"
    log.write_text("")
    settings = feeds_settings(tmp_path, {"playlist_id": "abc"}, access_log=str(log))
    assert not settings.db_path.exists()  # the app started before the first job
    with serve_wsgi(make_app(settings).wsgi) as base:
        client = Client(base, checker)  # validates every answer against /openapi.json
        answers = {path: client.get(path) for path in
                   ("/coffee/availability.json", "/ledger.json", "/around/json", "/around/changes.json", "/rn/tracks")}
    coffee = answers["/coffee/availability.json"]
    assert coffee.status_code == 503 and coffee.json()["code"] == "calendar_unavailable"
    assert coffee.headers["Retry-After"] == "60" and coffee.json()["slots"] == [] and "bookingUrl" in coffee.json()
    ledger = answers["/ledger.json"]
    assert ledger.status_code == 502 and ledger.json()["code"] == "upstream_failed" and ledger.json()["ok"] is False
    changes = answers["/around/changes.json"]
    assert changes.status_code == 503 and changes.json()["changes"] == [] and changes.json()["available"] is False
    assert changes.json()["ok"] is False
    assert answers["/around/json"].status_code == 503 and answers["/around/json"].json()["code"] == "storage_unavailable"
    tracks = answers["/rn/tracks"]
    assert tracks.status_code == 503 and tracks.json()["code"] == "storage_unavailable" and tracks.json()["tracks"] == []
    assert tracks.headers["Retry-After"] == "60"


def test_tracks_without_a_folder_for_site_db_is_storage_not_configured(tmp_path, checker):
    """The one 500 of API.md §7: site.db's folder is missing, so no job could ever build it."""
    settings = dataclasses.replace(feeds_settings(tmp_path, {"playlist_id": "abc"}), db_path=tmp_path / "nowhere" / "site.db")
    with serve_wsgi(make_app(settings).wsgi) as base:
        tracks = Client(base, checker).get("/rn/tracks")
    assert (tracks.status_code, tracks.json()["code"], tracks.json()["tracks"]) == (500, "storage_not_configured", [])
    assert checker.checked[-1] == ("/rn/tracks", 500)


def test_error_bodies_keep_their_route_fields(tmp_path, checker):
    """The readers leave `tracks: []` and `ok: false` to their routes (API.md 2.1 and 4.8)."""
    settings = feeds_settings(tmp_path, {"playlist_id": "abc"})  # no access log
    db.writer(settings.db_path).close()  # storage, but nothing read yet
    with serve_wsgi(make_app(settings).wsgi) as base:
        client = Client(base, checker)
        tracks, ledger = client.get("/rn/tracks"), client.get("/ledger.json")
    assert (tracks.status_code, tracks.json()["code"], tracks.json()["tracks"]) == (502, "upstream_failed", [])
    assert (ledger.status_code, ledger.json()["code"], ledger.json()["ok"]) == (503, "not_configured", False)
    assert ledger.json()["line_items"] == [] and ledger.json()["window_days"] == 30


def test_coffee_answers_get_and_head_only(api):
    assert api.request("HEAD", "/coffee/availability.json").status_code == 503
    for method in ("OPTIONS", "POST", "DELETE"):
        r = api.request(method, "/coffee/availability.json")
        assert r.status_code == 405 and r.headers["Allow"] == "GET, HEAD", method


@pytest.fixture(scope="module")
def fed(tmp_path_factory, monkeypatch_module):
    tmp = tmp_path_factory.mktemp("feeds")
    spotify, ics = SpotifyServer(), IcsServer(OWNER_CALENDAR)
    firms = [FirmServer("Alpha Ventures"), FirmServer("Beta Capital")]
    monkeypatch_module.setenv("SITE_SPOTIFY_CLIENT_ID", SpotifyServer.CLIENT[0])
    monkeypatch_module.setenv("SITE_SPOTIFY_CLIENT_SECRET", SpotifyServer.CLIENT[1])
    monkeypatch_module.setenv("SITE_CALENDAR_ICS_URL", ics.feed_url)
    log = tmp / "access.log"
    day = time.time()
    log.write_text("".join(json.dumps({
        "level": "info", "ts": day - i, "logger": "http.log.access", "msg": "handled request",
        "request": {"remote_ip": "203.0.113.5", "method": "GET", "host": "aadhar.sh", "uri": "/writing/llms-txt",
                    "headers": {"User-Agent": [ua]}}, "status": 200, "size": 1234}) + "\n"
        for i, ua in enumerate(["Mozilla/5.0 (compatible; GPTBot/1.2; +https://openai.com/gptbot)"] * 3
                               + ["Mozilla/5.0 (compatible; ClaudeBot/1.0)", "Mozilla/5.0 Firefox/140.0"])))
    settings = feeds_settings(tmp, {"spotify_api_base": spotify.api_base, "spotify_token_url": spotify.url + "/api/token",
                                   "playlist_id": spotify.playlist_id,
                                   "around_roster": [{"name": f"Firm {i}", "url": s.url + "/"} for i, s in enumerate(firms)]},
                             access_log=str(log))
    settings = dataclasses.replace(settings, content_dir=__import__("conftest").ROOT / "content",
                                   rates={k: RatePolicy(k, 10_000, 60) for k in settings.rates})
    build_site(settings)
    for name in ("tracks", "calendar", "ledger"):
        ok, summary = jobs.run_job(settings, name)
        assert ok, (name, summary)
    run_around(settings, fetcher=loopback_fetcher(settings))
    run_around(settings, fetcher=loopback_fetcher(settings))
    yield settings
    for server in (spotify, ics, *firms):
        server.close()


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


@pytest.fixture(scope="module")
def fed_api(fed, checker):
    with serve_wsgi(make_app(fed).wsgi) as base:
        yield Client(base, checker)


def test_tracks_served_from_the_stored_copy(fed_api):
    r = fed_api.get("/rn/tracks")
    assert r.status_code == 200 and "max-age=3600" in r.headers["Cache-Control"]
    body = r.json()
    assert body["tracks"] and body["playlist_name"] and body["fetched_at"]
    track = body["tracks"][0]
    assert track["song_link_url"] == f"https://song.link/s/{track['id']}"
    assert {"title", "artists_text", "duration_ms", "preview_url", "is_explicit", "image_url"} <= set(track)


def test_neighborhood_and_changes(fed_api):
    report = fed_api.get("/around/json")
    assert report.status_code == 200 and report.json()["count"] == 2
    assert report.headers["X-Robots-Tag"] == "noindex"
    changes = fed_api.get("/around/changes.json?limit=999")
    assert changes.status_code == 200 and changes.json()["ok"] is True and "note" not in changes.json()
    assert "body" not in changes.text.lower().replace("bodyhash", "")


@pytest.mark.parametrize("path", ["/rn/tracks", "/around/json", "/ledger.json", "/lens/census.json"])
def test_feeds_whose_body_stays_between_job_runs_can_be_revalidated(fed_api, path):
    """An ETag, and a 304 with the same Cache-Control for If-None-Match naming it (cache_audit24 L3)."""
    first = fed_api.get(path)
    assert first.status_code == 200 and first.headers["ETag"].startswith('W/"'), first.text[:200]
    again = fed_api.get(path, headers={"If-None-Match": first.headers["ETag"]})
    assert again.status_code == 304 and again.content == b"" and again.headers["ETag"] == first.headers["ETag"]
    assert again.headers["Cache-Control"] == first.headers["Cache-Control"]


def test_coffee_slots_with_booking_url(fed_api):
    r = fed_api.get("/coffee/availability.json")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["available"] is True and body["bookingUrl"] and body["timezone"] == "America/New_York"
    assert all(s["durationMinutes"] == 30 for s in body["slots"])


def test_ledger_counts_ai_crawlers_only(fed_api):
    r = fed_api.get("/ledger.json")
    assert r.status_code == 200, r.text
    body = r.json()
    hits = {item["bot"]: item["hits"] for item in body["line_items"]}
    assert hits.get("gptbot") == 3 and hits.get("claudebot") == 1 and body["total_hits"] == 4
    assert body["total_usd"] == pytest.approx(0.04)


@pytest.mark.parametrize("tool, path, arguments", [
    ("now_playing", "/rn/tracks", {}), ("neighborhood", "/around/json", {}),
    ("change_radar", "/around/changes.json?limit=500", {"limit": 500}),
    ("coffee_availability", "/coffee/availability.json", {}), ("crawl_ledger", "/ledger.json", {}),
])
def test_the_feed_tools_answer_what_their_endpoints_do(fed_api, tool, path, arguments):
    """The MCP tools on a site whose feeds hold data: their outputSchema holds, and they answer as
    the endpoint does (elsewhere they meet only empty feeds, their error path)."""
    listed = tools_by_name(fed_api)[tool]
    result = tool_call(fed_api, tool, arguments).json()["result"]
    assert result["isError"] is False, result
    Draft202012Validator(listed["outputSchema"]).validate(result["structuredContent"])
    assert result["structuredContent"] == fed_api.get(path).json()
