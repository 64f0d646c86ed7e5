"""/rn/tracks: the Spotify playlist job (tracks and artist pictures) against a loopback Web API, and the
reader's §4.8 errors."""
from __future__ import annotations

import dataclasses
import sqlite3
import time
from urllib.parse import parse_qs, urlsplit

import pytest

from app import make_app
from conftest import Client
from servers import serve_wsgi
from siteapi import db
from siteapi.feeds import FeedError
from siteapi.feeds.tracks import now_playing, run_tracks
from siteapi.web import ApiError
from feeds_servers import SpotifyServer, feeds_settings


@pytest.fixture
def spotify(monkeypatch):
    server = SpotifyServer()
    monkeypatch.setenv("SITE_SPOTIFY_CLIENT_ID", SpotifyServer.CLIENT[0])
    monkeypatch.setenv("SITE_SPOTIFY_CLIENT_SECRET", SpotifyServer.CLIENT[1])
    yield server
    server.close()


def settings_for(tmp_path, server, **extra):
    # A loopback API answers in milliseconds, but a busy machine can stall for longer than a short
    # limit: runs that must succeed get a generous one; the slow and dripping servers get their own.
    return feeds_settings(tmp_path, {"spotify_api_base": server.api_base, "spotify_token_url": server.url + "/api/token",
                                    "playlist_id": server.playlist_id, "spotify_timeout": 10.0, **extra})


def error_of(settings) -> ApiError:
    """The reader's error; the route adds `tracks: []` (test_feeds_http checks it over HTTP)."""
    with pytest.raises(ApiError) as caught:
        now_playing(settings)
    return caught.value


def test_reads_every_page_and_serves_the_tracks(tmp_path, spotify):
    settings = settings_for(tmp_path, spotify)
    assert "5 tracks" in run_tracks(settings)
    pages = [p for _, p, _ in spotify.requests if "/tracks?" in p]
    assert len(pages) == 2  # items 0-1 came inside the playlist; 2-3 and 4-5 are followed via `next`
    body = now_playing(settings)
    assert body["playlist_name"] == "rn" and body["count"] == 5
    assert body["playlist_id"] == spotify.playlist_id and body["fetched_at"].endswith("Z")
    first = body["tracks"][0]
    assert first["title"] == "Song 0" and first["artists_text"] == "Artist 0, Guest"
    assert first["song_link_url"] == f"https://song.link/s/{first['id']}"
    assert first["spotify_url"] == f"https://open.spotify.com/track/{first['id']}"
    assert first["duration_ms"] == 180000 and first["preview_url"] == "https://p.scdn.co/mp3-preview/0"
    assert first["image_url"].endswith("ab67616d0000b2730000")  # the 640 px cover
    artist_id = first["artists"][0]["id"]
    assert first["artists"][0] == {"id": artist_id, "name": "Artist 0",
                                   "spotify_url": f"https://open.spotify.com/artist/{artist_id}",
                                   "image_url": "https://i.scdn.co/image/ab6761610000e5eb00640"}  # the largest picture
    assert first["artists"][1]["name"] == "Guest" and first["artists"][1]["image_url"] is None  # has no picture
    looked_up = [p for _, p, _ in spotify.requests if p.startswith("/v1/artists?")]
    assert len(looked_up) == 1  # the 6 distinct artists of 5 tracks in one call
    assert body["tracks"][1]["is_explicit"] is True and first["is_explicit"] is False
    assert body["tracks"][1]["preview_url"] is None
    assert [t["title"] for t in body["tracks"]] == [f"Song {n}" for n in range(5)]  # the removed item is skipped


def test_expired_token_is_refreshed_once(tmp_path, spotify):
    settings = settings_for(tmp_path, spotify)
    run_tracks(settings)
    run_tracks(settings)
    assert spotify.tokens_issued == 1  # the token is reused while valid
    spotify.expire_tokens()
    run_tracks(settings)
    assert spotify.tokens_issued == 2
    assert now_playing(settings)["count"] == 5


def test_refused_credentials_fail_and_nothing_stored_is_a_502(tmp_path, spotify, monkeypatch):
    monkeypatch.setenv("SITE_SPOTIFY_CLIENT_SECRET", "wrong")
    settings = settings_for(tmp_path, spotify)
    with pytest.raises(FeedError, match="token endpoint answered HTTP 400"):
        run_tracks(settings)
    with pytest.raises(sqlite3.OperationalError):  # the job never got as far as creating site.db: the app's 503
        now_playing(settings)
    monkeypatch.delenv("SITE_SPOTIFY_CLIENT_SECRET")
    with pytest.raises(FeedError, match="SITE_SPOTIFY_CLIENT_SECRET"):
        run_tracks(settings)


@pytest.mark.parametrize("fault,message", [
    ("500", "HTTP 500"), ("slow", "could not be reached|time limit"), ("malformed", "not JSON"), ("huge", "more than"), ("schema", "unexpected shape"),
    ("loop", "back at a page it already sent"), ("endless", "empty page"),
])
def test_faults_keep_the_last_good_copy(tmp_path, spotify, fault, message):
    settings = settings_for(tmp_path, spotify)
    run_tracks(settings)
    before = now_playing(settings)
    spotify.fault = fault
    # the slow server answers after 1.5 s: a limit well under that fails it however busy the machine is
    faulty = settings_for(tmp_path, spotify, spotify_timeout=0.5) if fault == "slow" else settings
    with pytest.raises(FeedError, match=message):
        run_tracks(faulty)
    assert now_playing(settings) == before


@pytest.mark.parametrize("fault", ["drip", "drip-headers"])
def test_a_server_that_drips_is_left_at_the_time_limit(tmp_path, spotify, fault):
    """A read timeout starts again with every byte: dripped headers used to hold the job for as long
    as the server went on (a hundred lines of 64 KB)."""
    settings = settings_for(tmp_path, spotify)
    run_tracks(settings)
    spotify.fault = fault
    dripping = settings_for(tmp_path, spotify, spotify_timeout=2.0)  # well under the 10 s the whole body takes
    with pytest.raises(FeedError, match="took longer than its time limit"):
        run_tracks(dripping)
    assert spotify.dripped < 100  # the job hung up before the server had sent the body
    assert now_playing(settings)["count"] == 5


def test_service_down_keeps_the_copy_and_empty_store_answers_502(tmp_path, spotify):
    settings = settings_for(tmp_path, spotify)
    run_tracks(settings)
    spotify.close()
    with pytest.raises(FeedError, match="could not be reached"):
        run_tracks(settings)
    assert now_playing(settings)["count"] == 5
    (tmp_path / "other").mkdir()
    other = feeds_settings(tmp_path / "other", {"playlist_id": "another", "spotify_api_base": spotify.api_base})
    db.writer(other.db_path).close()  # storage exists, but the playlist was never read
    err = error_of(other)
    assert err.status == 502 and err.body["code"] == "upstream_failed"


def test_artist_pictures_take_one_call_per_50_artists(tmp_path, spotify):
    server = SpotifyServer(track_count=120)  # 121 distinct artists: 3 calls
    try:
        settings = settings_for(tmp_path, server)
        assert "121 artists looked up" in run_tracks(settings)
        calls = [parse_qs(urlsplit(p).query)["ids"][0].split(",") for _, p, _ in server.requests
                 if p.startswith("/v1/artists?")]
        assert [len(ids) for ids in calls] == [50, 50, 21]
        artists = [a for t in now_playing(settings)["tracks"] for a in t["artists"] if a["name"] != "Guest"]
        assert len(artists) == 120 and all(a["image_url"] for a in artists)
    finally:
        server.close()


def test_artist_pictures_are_kept_30_days(tmp_path, spotify):
    settings = settings_for(tmp_path, spotify)

    def artist_calls() -> int:
        return sum(1 for _, p, _ in spotify.requests if p.startswith("/v1/artists?"))

    assert "6 artists looked up, 0 pictures younger than 30 days kept" in run_tracks(settings)
    pictures = now_playing(settings)["tracks"]
    assert "0 artists looked up, 6 pictures younger than 30 days kept" in run_tracks(settings)
    assert artist_calls() == 1 and now_playing(settings)["tracks"] == pictures
    spotify.items.append({"added_at": "2026-01-09T10:00:00Z", "track": {**spotify.items[0]["track"], "id": "newtrack",
                          "artists": [{"id": "newcomer", "name": "Newcomer", "type": "artist"}]}})
    assert "1 artists looked up, 6 pictures" in run_tracks(settings)  # only the artist not seen before
    assert parse_qs(urlsplit([p for _, p, _ in spotify.requests if p.startswith("/v1/artists?")][-1]).query)["ids"] == ["newcomer"]
    conn = db.writer(settings.db_path)
    with db.transaction(conn):
        conn.execute("UPDATE tracks_artists SET looked_up = '2026-01-01T00:00:00Z' WHERE id != 'newcomer'")
    conn.close()
    assert "6 artists looked up, 1 pictures younger than 30 days kept" in run_tracks(settings)  # the others aged out
    assert artist_calls() == 3


def test_artist_pictures_over_http(tmp_path, spotify, checker):
    settings = settings_for(tmp_path, spotify)
    run_tracks(settings)
    with serve_wsgi(make_app(settings).wsgi) as base:
        r = Client(base, checker).get("/rn/tracks")  # validated against /openapi.json
    assert r.status_code == 200
    assert [a["image_url"] for a in r.json()["tracks"][0]["artists"]] == [
        "https://i.scdn.co/image/ab6761610000e5eb00640", None]


def test_fields_of_the_wrong_type_are_dropped_and_the_rest_served(tmp_path, spotify, checker):
    """Spotify's answers are outside input: a field of an unexpected type becomes null instead of
    failing the refresh or reaching clients in a shape /openapi.json does not promise."""
    settings = settings_for(tmp_path, spotify)
    track = spotify.items[0]["track"]
    track["external_urls"] = "https://open.spotify.com/track/x"
    track["duration_ms"] = True
    track["album"] = {"name": 7, "images": 640}
    track["artists"][0].update(id=12345, external_urls={"spotify": ["https://open.spotify.com/artist/x"]})
    assert "5 tracks" in run_tracks(settings)
    with serve_wsgi(make_app(settings).wsgi) as base:
        r = Client(base, checker).get("/rn/tracks")  # validated against /openapi.json
    first = r.json()["tracks"][0]
    assert first["title"] == "Song 0" and first["spotify_url"] == f"https://open.spotify.com/track/{first['id']}"
    assert (first["duration_ms"], first["album"], first["image_url"]) == (None, None, None)
    assert {k: first["artists"][0][k] for k in ("id", "name", "spotify_url")} == {"id": None, "name": "Artist 0",
                                                                                  "spotify_url": None}


@pytest.mark.parametrize("fault", ["500", "malformed"])
def test_a_failed_artists_call_keeps_the_refresh_and_the_last_pictures(tmp_path, spotify, fault):
    settings = settings_for(tmp_path, spotify, artist_cache_days=0)  # every run looks every artist up
    spotify.artists_fault = fault
    assert "5 tracks, 0 artists looked up" in run_tracks(settings)  # never looked up: no picture yet
    assert all(a["image_url"] is None for t in now_playing(settings)["tracks"] for a in t["artists"])
    spotify.artists_fault = None
    run_tracks(settings)
    pictures = {a["id"]: a["image_url"] for t in now_playing(settings)["tracks"] for a in t["artists"]}
    assert pictures["feat"] is None and sum(1 for url in pictures.values() if url) == 5
    spotify.artists_fault = fault
    spotify.items[0]["track"]["name"] = "Song 0 (Remastered)"
    run_tracks(settings)
    body = now_playing(settings)
    assert body["tracks"][0]["title"] == "Song 0 (Remastered)"  # the tracks still updated
    assert {a["id"]: a["image_url"] for t in body["tracks"] for a in t["artists"]} == pictures


def test_long_playlists_stop_at_max_tracks(tmp_path, spotify):
    settings = settings_for(tmp_path, spotify, max_tracks=3)
    assert "3 tracks" in run_tracks(settings)
    assert [t["title"] for t in now_playing(settings)["tracks"]] == ["Song 0", "Song 1", "Song 2"]


def test_next_page_outside_the_api_is_refused(tmp_path, spotify):
    settings = settings_for(tmp_path, spotify)
    spotify.PAGE = 1
    original = spotify.page
    spotify.page = lambda offset: {**original(offset), "next": "http://evil.example/v1/x"}
    with pytest.raises(FeedError, match="outside the API"):
        run_tracks(settings)


def test_no_playlist_is_503_and_the_job_does_nothing(tmp_path, spotify):
    settings = feeds_settings(tmp_path, {"playlist_id": ""})
    assert "no playlist" in run_tracks(settings)
    err = error_of(settings)
    assert (err.status, err.body["code"]) == (503, "no_playlist")
    assert spotify.requests == []


def test_a_site_db_moved_away_while_running_is_still_served_by_the_reader_that_has_it(tmp_path, spotify):
    """As the other feeds: the thread's reader keeps the file it has open (db.reader)."""
    settings = settings_for(tmp_path, spotify)
    run_tracks(settings)
    served = now_playing(settings)
    settings.db_path.rename(tmp_path / "moved.db")
    try:
        assert now_playing(settings) == served
    finally:
        (tmp_path / "moved.db").rename(settings.db_path)


def test_storage_never_set_up_is_500_and_unreadable_is_503(tmp_path, spotify):
    """500 only where site.db can never be built (its folder is missing); a site.db not built yet,
    emptied or damaged is a sqlite3.Error: the app's 503 storage_unavailable with tracks: []
    (test_feeds_http checks both over HTTP)."""
    settings = settings_for(tmp_path, spotify)
    nowhere = dataclasses.replace(settings, db_path=tmp_path / "no-such-folder" / "site.db")
    err = error_of(nowhere)
    assert (err.status, err.body["code"]) == (500, "storage_not_configured") and "no-such-folder" in err.body["error"]
    with pytest.raises(sqlite3.OperationalError):  # no site.db yet
        now_playing(settings)
    settings.db_path.write_bytes(b"")  # an empty file: SQLite without our tables
    with pytest.raises(sqlite3.OperationalError):
        now_playing(settings)
    (tmp_path / "broken").mkdir()
    broken = settings_for(tmp_path / "broken", spotify)
    broken.db_path.write_bytes(b"this is not a database file" * 100)
    with pytest.raises(sqlite3.DatabaseError):
        now_playing(broken)


def _unnamed(item):
    item["track"]["name"] = None


def _nameless(item):
    del item["track"]["name"]


def _numbered(item):
    item["track"]["name"] = 42


def _endless_title(item):
    item["track"]["name"] = "la " * 2_000


def _no_id(item):
    item["track"]["id"] = None


def _path_for_id(item):
    item["track"]["id"] = "../../evil?x="  # would have made song_link_url another address


@pytest.mark.parametrize("spoil", [_unnamed, _nameless, _numbered, _endless_title, _no_id, _path_for_id])
def test_a_track_without_a_usable_id_or_name_is_skipped_and_the_rest_kept(tmp_path, spotify, checker, spoil):
    """Tracks requires a title and an id: a visitor sees the rest of the playlist, without the one
    track there is nothing to show for, rather than an hours-old copy."""
    settings = settings_for(tmp_path, spotify)
    run_tracks(settings)
    spoil(spotify.items[0])
    spotify.items[3]["track"]["name"] = "Song 2 (Live)"  # items[2] is the removed track
    assert "4 tracks (1 skipped: no id or name)" in run_tracks(settings)
    with serve_wsgi(make_app(settings).wsgi) as base:
        r = Client(base, checker).get("/rn/tracks")  # validated against /openapi.json
    body = r.json()
    assert [t["title"] for t in body["tracks"]] == ["Song 1", "Song 2 (Live)", "Song 3", "Song 4"]
    assert body["count"] == 4 and all(t["song_link_url"] == f"https://song.link/s/{t['id']}" for t in body["tracks"])


def test_an_item_that_is_not_an_object_is_skipped(tmp_path, spotify):
    settings = settings_for(tmp_path, spotify)
    spotify.items.insert(0, "not an item")
    assert "5 tracks (1 skipped" in run_tracks(settings)
    assert [t["title"] for t in now_playing(settings)["tracks"]] == [f"Song {n}" for n in range(5)]


def test_a_playlist_whose_tracks_are_all_unusable_keeps_the_last_copy(tmp_path, spotify):
    """Every track without a name is a change of the API's shape, not a playlist to empty."""
    settings = settings_for(tmp_path, spotify)
    run_tracks(settings)
    before = now_playing(settings)
    for item in spotify.items:
        if item["track"]:
            item["track"]["title"] = item["track"].pop("name")
    with pytest.raises(FeedError, match="none of its 5 tracks has an id and a name"):
        run_tracks(settings)
    assert now_playing(settings) == before


def test_links_dates_and_numbers_out_of_the_schema_become_null(tmp_path, spotify, checker):
    settings = settings_for(tmp_path, spotify)
    item = spotify.items[0]
    track = item["track"]
    item["added_at"] = "last Tuesday"
    track["preview_url"] = "javascript:alert(document.cookie)"
    track["external_urls"] = {"spotify": "not a link"}
    track["album"]["name"] = "A" * 5_000
    track["album"]["images"] = [{"url": "ftp://i.scdn.co/cover"}, {"url": "https://i.scdn.co/image/small"}]
    track["duration_ms"] = 10**30  # more than SQLite's INTEGER holds: the insert raised OverflowError
    track["artists"][0]["external_urls"] = {"spotify": "https://open.spotify.com/artist/<script>"}
    spotify.items[1]["track"]["duration_ms"] = -1
    spotify.items[3]["added_at"] = "2026-13-45T25:61:00Z"
    assert "5 tracks" in run_tracks(settings)
    with serve_wsgi(make_app(settings).wsgi) as base:
        tracks = Client(base, checker).get("/rn/tracks").json()["tracks"]
    first = tracks[0]
    assert (first["added_at"], first["preview_url"], first["album"], first["duration_ms"]) == (None, None, None, None)
    assert first["spotify_url"] == f"https://open.spotify.com/track/{first['id']}"
    assert first["image_url"] == "https://i.scdn.co/image/small"  # the first http(s) picture
    assert first["artists"][0]["spotify_url"] is None
    assert tracks[1]["duration_ms"] is None and tracks[2]["added_at"] is None
    assert tracks[3]["added_at"] == spotify.items[4]["added_at"]  # a real date is kept


def test_a_track_with_hundreds_of_artists_keeps_the_first_50(tmp_path, spotify):
    settings = settings_for(tmp_path, spotify)
    spotify.items[0]["track"]["artists"] = [{"id": f"a{n}", "name": f"Player {n}"} for n in range(500)]
    run_tracks(settings)
    artists = now_playing(settings)["tracks"][0]["artists"]
    assert [a["name"] for a in artists] == [f"Player {n}" for n in range(50)]


def test_a_playlist_too_large_to_store_keeps_the_last_copy(tmp_path, spotify):
    """Each answer is capped at 5 MB, but a playlist is many answers: what would be stored and
    served is capped at 20 million characters."""
    settings = settings_for(tmp_path, spotify)
    run_tracks(settings)
    before = now_playing(settings)
    server = SpotifyServer(playlist_id=spotify.playlist_id, track_count=420)
    server.PAGE = 60
    try:
        for n, item in enumerate(i for i in server.items if i["track"]):  # 50 artists of 990 characters a track
            item["track"]["artists"] = [{"id": f"a{n}x{m}", "name": f"{n}-{m}".ljust(990, "a")} for m in range(50)]
        with pytest.raises(FeedError, match="larger than 20000000 characters"):
            run_tracks(settings_for(tmp_path, server))
        assert not [p for _, p, _ in server.requests if p.startswith("/v1/artists?")]
    finally:
        server.close()
    assert now_playing(settings) == before


def test_the_whole_read_stops_at_its_time_limit(tmp_path, spotify):
    """Each call has a limit, but a playlist of 300 one-track pages answered slowly is 300 calls."""
    settings = settings_for(tmp_path, spotify)
    run_tracks(settings)
    before = now_playing(settings)
    server = SpotifyServer(playlist_id=spotify.playlist_id, track_count=300)
    server.PAGE, server.page_delay = 1, 0.03  # 300 pages: some 10 s, every call well within its own limit
    try:
        started = time.monotonic()
        with pytest.raises(FeedError, match="took longer than its time limit"):
            run_tracks(settings_for(tmp_path, server, spotify_run_seconds=2))
        assert time.monotonic() - started < 6
        assert len([p for _, p, _ in server.requests if "/tracks?" in p]) < 150
    finally:
        server.close()
    assert now_playing(settings) == before
