"""Now playing: the owner's playlist read from the Spotify Web API into site.db, served as /rn/tracks.

The job takes a client-credentials token (`SITE_SPOTIFY_CLIENT_ID` / `_SECRET`), reads the
playlist object and follows its item pages (`next`), looks up the artists' pictures (playlist items
carry artists without images; Get Several Artists takes 50 ids a call), and replaces the stored copy
in one transaction. A picture is kept 30 days (`[feeds] artist_cache_days`) before its artist is looked
up again. A 401 means the cached token expired: it is refreshed once and the call retried.
A failed artists call does not fail the refresh: its artists keep their last stored picture (or none).
Spotify's answers are outside input, stored only in the shape /openapi.json promises: a track
without an id or a name (Tracks requires both) is skipped and the rest of the playlist kept, unless
no track at all is usable (then the API's shape has changed and the last copy stays); a field of the
wrong type, an over-long text or a URL that is not http(s) becomes null. Every call has its time
limit (`[feeds] spotify_timeout`), and the whole read one more (`spotify_run_seconds`).
The reader serves the stored copy and the exact error cases of API.md §4.8 (the route keeps
`tracks: []` in every error body, its 405 and 429 too).
"""
from __future__ import annotations

import datetime as dt
import json
import re
import sqlite3
import threading
import time
from contextlib import closing
from urllib.parse import urlencode, urlsplit

import requests

from siteapi import db
from siteapi.feeds import FeedError, option, read_capped, session, time_limit
from siteapi.web import ApiError

SCHEMA = """
CREATE TABLE IF NOT EXISTS tracks_playlists (
    playlist_id TEXT PRIMARY KEY,
    playlist_name TEXT NOT NULL,
    playlist_url TEXT,
    track_count INTEGER NOT NULL,
    fetched_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS tracks (
    playlist_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    id TEXT NOT NULL,
    title TEXT NOT NULL,
    artists_text TEXT NOT NULL,
    artists TEXT NOT NULL,          -- JSON array of {id, name, spotify_url, image_url}
    album TEXT,
    spotify_url TEXT,
    song_link_url TEXT NOT NULL,
    duration_ms INTEGER,
    preview_url TEXT,
    is_explicit INTEGER NOT NULL,
    image_url TEXT,
    added_at TEXT,
    PRIMARY KEY (playlist_id, position)
);
CREATE TABLE IF NOT EXISTS tracks_artists (
    id TEXT PRIMARY KEY,
    image_url TEXT,                 -- the largest picture; NULL when the artist has none
    looked_up TEXT NOT NULL         -- when Spotify last answered for this artist
);
"""

MAX_RESPONSE_BYTES = 5_000_000
ARTISTS_PER_CALL = 50  # the API's limit for Get Several Artists
MAX_PLAYLIST_ITEMS = 10_000  # the most items Spotify lets a playlist hold
MAX_ARTIST_CALLS = 20  # 1,000 artists a run; any past that keep their stored picture
# Bounds on what one answer can make us store (and serve): Spotify's names run to a few hundred
# characters, its URLs to about a hundred, its tracks to a few dozen artists.
MAX_TEXT = 1_000
MAX_URL = 2_048
MAX_ARTISTS = 50  # per track; the first ones are kept
MAX_STORED_CHARS = 20_000_000  # the whole stored copy, as JSON
SPOTIFY_ID = re.compile(r"[0-9A-Za-z]{1,64}")  # 22 base-62 characters; it goes into song.link's path
URL = re.compile(r"[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]+")  # the characters RFC 3986 allows
DATE_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)")  # RFC 3339
_token_lock = threading.Lock()
_token_cache: dict[tuple[str, str], tuple[str, float]] = {}


def config(settings) -> dict:
    """The [feeds] settings the playlist job reads."""
    return {
        "api_base": option(settings, "spotify_api_base", "https://api.spotify.com/v1").rstrip("/"),
        "token_url": option(settings, "spotify_token_url", "https://accounts.spotify.com/api/token"),
        "playlist_id": option(settings, "playlist_id", "").strip(),
        "timeout": option(settings, "spotify_timeout", 10.0, 0.1, 60),
        "max_tracks": option(settings, "max_tracks", 500, 1, 10_000),
        "artist_cache_days": option(settings, "artist_cache_days", 30, 0, 3650),
        "run_seconds": option(settings, "spotify_run_seconds", 300.0, 1, 3600),
    }


def _get_json(http, cfg: dict, url: str, what: str, **kwargs):
    """One call, within its own time limit and the whole read's (`cfg["deadline"]`); (status, JSON)."""
    timeout = cfg["timeout"]
    deadline = min(time.monotonic() + timeout, cfg["deadline"])
    try:
        with time_limit(deadline, what), \
                http.request(kwargs.pop("method", "GET"), url, timeout=timeout, stream=True, **kwargs) as resp:
            body, truncated = read_capped(resp, MAX_RESPONSE_BYTES, deadline, what)
            status = resp.status_code
    except requests.RequestException as exc:
        raise FeedError(f"{what} could not be reached: {exc.__class__.__name__}.") from None
    if truncated:
        raise FeedError(f"{what} answered more than {MAX_RESPONSE_BYTES} bytes.")
    if status == 401:
        return 401, None
    if status != 200:
        raise FeedError(f"{what} answered HTTP {status}.")
    try:
        return 200, json.loads(body)
    except ValueError:
        raise FeedError(f"{what} answered something that is not JSON.") from None


def _token(http, cfg: dict, client_id: str, secret: str, refresh: bool = False) -> str:
    key = (cfg["token_url"], client_id)
    with _token_lock:
        cached = _token_cache.get(key)
        if cached and not refresh and cached[1] > time.time() + 30:
            return cached[0]
        status, data = _get_json(http, cfg, cfg["token_url"], "The Spotify token endpoint",
                                 method="POST", data={"grant_type": "client_credentials"}, auth=(client_id, secret))
        if status == 401:
            raise FeedError("The Spotify token endpoint refused the client id and secret (HTTP 401).")
        token = data.get("access_token") if isinstance(data, dict) else None
        if not isinstance(token, str) or not token:
            raise FeedError("The Spotify token endpoint answered without an access_token.")
        expires_in = data.get("expires_in") if isinstance(data.get("expires_in"), (int, float)) else 3600
        _token_cache[key] = (token, time.time() + expires_in)
        return token


def _api(http, cfg: dict, creds: tuple[str, str], url: str, what: str):
    """GET an API URL with the bearer token; on 401 refresh the token once and retry."""
    for attempt in range(2):
        token = _token(http, cfg, *creds, refresh=attempt == 1)
        status, data = _get_json(http, cfg, url, what, headers={"Authorization": f"Bearer {token}"})
        if status == 200:
            return data
    raise FeedError(f"{what} refused a freshly issued token (HTTP 401).")


def _paging(obj, what: str) -> dict:
    if not isinstance(obj, dict) or not isinstance(obj.get("items"), list):
        raise FeedError(f"{what} has an unexpected shape: no items list.")
    return obj


def _text(value) -> str | None:
    return value if isinstance(value, str) and len(value) <= MAX_TEXT else None


def _url(value) -> str | None:
    """An absolute http(s) URL, else None: it is served as `format: uri` and shown as a link."""
    if not isinstance(value, str) or len(value) > MAX_URL or not URL.fullmatch(value):
        return None
    parts = urlsplit(value)
    return value if parts.scheme in ("http", "https") and parts.netloc else None


def _date_time(value) -> str | None:
    if not isinstance(value, str) or not DATE_TIME.fullmatch(value):
        return None
    try:
        dt.datetime.fromisoformat(value.replace("Z", "+00:00"))  # 2026-13-45T... matches the pattern
    except ValueError:
        return None
    return value


def _list(value) -> list:
    return value if isinstance(value, list) else []


def _spotify_url(obj: dict) -> str | None:
    urls = obj.get("external_urls")
    return _url(urls.get("spotify")) if isinstance(urls, dict) else None


def _track_row(entry, position: int) -> dict | None:
    """The stored row of a playlist item; None for one with nothing to show. Raises FeedError for an
    item that should be a track but is unusable, which the caller skips."""
    if not isinstance(entry, dict):
        raise FeedError("A playlist item has an unexpected shape: not an object.")
    track = entry.get("item", entry.get("track"))  # `item` in the 2026 shape, `track` before it
    # Removed tracks come back as null; local files and podcast episodes have no song.link.
    if not isinstance(track, dict) or track.get("type", "track") != "track" or track.get("is_local"):
        return None
    track_id, title = track.get("id"), _text(track.get("name"))
    if not isinstance(track_id, str) or not SPOTIFY_ID.fullmatch(track_id) or title is None:
        raise FeedError("A playlist track has an unexpected shape: no id or name.")
    # Fields of the wrong type are dropped (null), so what is stored always fits the Tracks schema.
    artists = [
        {"id": _text(a.get("id")), "name": a["name"], "spotify_url": _spotify_url(a)}
        for a in _list(track.get("artists")) if isinstance(a, dict) and _text(a.get("name")) is not None
    ][:MAX_ARTISTS]
    album = track.get("album") if isinstance(track.get("album"), dict) else {}
    images = [i["url"] for i in _list(album.get("images")) if isinstance(i, dict) and _url(i.get("url"))]
    duration = track.get("duration_ms")
    return {
        "position": position,
        "id": track_id,
        "title": title,
        "artists_text": ", ".join(a["name"] for a in artists),
        "artists": artists,
        "album": _text(album.get("name")),
        "spotify_url": _spotify_url(track) or f"https://open.spotify.com/track/{track_id}",
        "song_link_url": f"https://song.link/s/{track_id}",
        # a whole number of milliseconds that JavaScript reads exactly (and SQLite can store)
        "duration_ms": duration if type(duration) is int and 0 <= duration < 2**53 else None,
        "preview_url": _url(track.get("preview_url")),
        "is_explicit": int(bool(track.get("explicit"))),
        "image_url": images[0] if images else None,  # Spotify lists the largest first
        "added_at": _date_time(entry.get("added_at")),
    }


def _artist_images(http, cfg: dict, creds: tuple[str, str], ids: list[str]) -> dict[str, str | None]:
    """Picture URL (largest) or None by artist id, for the ids Spotify answered. A failed call ends
    the lookup (the next would most likely fail too), leaving its ids and the later ones out."""
    images: dict[str, str | None] = {}
    for start in range(0, min(len(ids), ARTISTS_PER_CALL * MAX_ARTIST_CALLS), ARTISTS_PER_CALL):
        batch = ids[start: start + ARTISTS_PER_CALL]
        try:
            data = _api(http, cfg, creds, f"{cfg['api_base']}/artists?{urlencode({'ids': ','.join(batch)})}",
                        "Spotify's artists")
        except FeedError:
            break
        found = data.get("artists") if isinstance(data, dict) else None
        for artist in found if isinstance(found, list) else []:
            if isinstance(artist, dict) and artist.get("id") in batch:
                urls = [i["url"] for i in _list(artist.get("images")) if isinstance(i, dict) and _url(i.get("url"))]
                images[artist["id"]] = urls[0] if urls else None
    return images


def fetch_playlist(settings, known_artists: frozenset[str] = frozenset()
                   ) -> tuple[dict, list[dict], dict[str, str | None], int]:
    """Read the playlist, all its items and the pictures of its artists not in `known_artists` from
    the API; (playlist row, track rows, picture by artist id for the artists looked up, tracks
    skipped as unusable). Raises FeedError when the playlist fails."""
    cfg = config(settings)
    cfg["deadline"] = time.monotonic() + cfg["run_seconds"]
    client_id, secret = settings.secret("SPOTIFY_CLIENT_ID"), settings.secret("SPOTIFY_CLIENT_SECRET")
    if not client_id or not secret:
        raise FeedError("Set SITE_SPOTIFY_CLIENT_ID and SITE_SPOTIFY_CLIENT_SECRET to read the playlist.")
    creds = (client_id, secret)
    with session() as http:
        playlist = _api(http, cfg, creds, f"{cfg['api_base']}/playlists/{cfg['playlist_id']}", "The Spotify playlist")
        if not isinstance(playlist, dict) or _text(playlist.get("name")) is None:
            raise FeedError("The Spotify playlist has an unexpected shape: no name.")
        page = _paging(playlist.get("items", playlist.get("tracks")), "The Spotify playlist")
        rows, entries, skipped, stored, pages_seen = [], 0, 0, 0, set()
        while True:
            for entry in page["items"]:
                # removed tracks add no rows, so the item count, not the row count, also bounds the reading
                if len(rows) >= cfg["max_tracks"] or entries >= MAX_PLAYLIST_ITEMS:
                    break
                entries += 1
                try:
                    row = _track_row(entry, len(rows))
                except FeedError:
                    skipped += 1
                    continue
                if row:
                    stored += len(json.dumps(row))
                    if stored > MAX_STORED_CHARS:
                        raise FeedError(f"The Spotify playlist is larger than {MAX_STORED_CHARS} characters stored.")
                    rows.append(row)
            next_url = page.get("next")
            if not next_url or len(rows) >= cfg["max_tracks"] or entries >= MAX_PLAYLIST_ITEMS:
                break
            if not isinstance(next_url, str) or not next_url.startswith(cfg["api_base"] + "/"):
                raise FeedError("The Spotify playlist pointed its next page outside the API.")
            if next_url in pages_seen:
                raise FeedError("The Spotify playlist pointed its next page back at a page it already sent.")
            if not page["items"]:  # nothing bounds the paging then: neither rows nor items grow
                raise FeedError("The Spotify playlist sent an empty page that points to yet another page.")
            pages_seen.add(next_url)
            page = _paging(_api(http, cfg, creds, next_url, "A Spotify playlist page"), "A Spotify playlist page")
        if skipped and not rows:
            raise FeedError(f"The Spotify playlist has an unexpected shape: none of its {skipped} tracks has an id "
                            "and a name.")
        ids = list(dict.fromkeys(a["id"] for row in rows for a in row["artists"]
                                 if a["id"] and SPOTIFY_ID.fullmatch(a["id"]) and a["id"] not in known_artists))
        images = _artist_images(http, cfg, creds, ids)
    head = {
        "playlist_id": cfg["playlist_id"],
        "playlist_name": playlist["name"],
        "playlist_url": _spotify_url(playlist),
        "track_count": len(rows),
        "fetched_at": db.now_iso(),
    }
    return head, rows, images, skipped


def _stored_images(conn: sqlite3.Connection, playlist_id: str) -> dict[str, str | None]:
    """Pictures by artist id: those in the stored tracks (a site.db from before tracks_artists), then
    every looked-up one."""
    stored = conn.execute("SELECT artists FROM tracks WHERE playlist_id = ?", (playlist_id,)).fetchall()
    images = {a["id"]: a.get("image_url") for row in stored for a in json.loads(row["artists"]) if a.get("id")}
    return {**images, **{r["id"]: r["image_url"] for r in conn.execute("SELECT id, image_url FROM tracks_artists")}}


def _recent_artists(settings, days: int) -> frozenset[str]:
    """Artists looked up within `days`; none while nothing is stored yet."""
    try:
        with closing(db.connect(settings.db_path, readonly=True)) as conn:
            return frozenset(r["id"] for r in conn.execute("SELECT id FROM tracks_artists WHERE looked_up > ?",
                                                           (db.now_iso(ago_s=days * 86400),)))
    except sqlite3.Error:
        return frozenset()


def run_tracks(settings) -> str:
    """Job (hourly): refresh the stored playlist. Raises when it cannot; the old copy stays."""
    if not option(settings, "playlist_id", "").strip():
        return "no playlist set ([feeds] playlist_id); nothing to read"
    days = config(settings)["artist_cache_days"]
    recent = _recent_artists(settings, days)
    head, rows, images, skipped = fetch_playlist(settings, recent)
    kept = len({a["id"] for row in rows for a in row["artists"]} & recent)
    conn = db.writer(settings.db_path)
    try:
        with db.transaction(conn):
            conn.executemany("INSERT OR REPLACE INTO tracks_artists VALUES (?, ?, ?)",
                             [(artist, url, head["fetched_at"]) for artist, url in images.items()])
            known = _stored_images(conn, head["playlist_id"])  # unanswered: the stored picture
            for row in rows:
                row["artists"] = json.dumps([{**a, "image_url": known.get(a["id"])} for a in row["artists"]])
            conn.execute("DELETE FROM tracks WHERE playlist_id = ?", (head["playlist_id"],))
            conn.executemany(
                "INSERT INTO tracks (playlist_id, position, id, title, artists_text, artists, album, spotify_url,"
                " song_link_url, duration_ms, preview_url, is_explicit, image_url, added_at) VALUES"
                " (:playlist_id, :position, :id, :title, :artists_text, :artists, :album, :spotify_url,"
                " :song_link_url, :duration_ms, :preview_url, :is_explicit, :image_url, :added_at)",
                [{**row, "playlist_id": head["playlist_id"]} for row in rows],
            )
            conn.execute(
                "INSERT OR REPLACE INTO tracks_playlists VALUES (:playlist_id, :playlist_name, :playlist_url,"
                " :track_count, :fetched_at)", head)
    finally:
        conn.close()
    return (f"playlist {head['playlist_name']!r}: {len(rows)} tracks"
            + (f" ({skipped} skipped: no id or name)" if skipped else "")
            + f", {len(images)} artists looked up, {kept} pictures younger than {days} days kept")


def now_playing(settings) -> dict:
    """The Tracks body from the stored copy, or raise ApiError with the §4.8 status and code."""
    playlist_id = option(settings, "playlist_id", "").strip()
    if not playlist_id:
        raise ApiError(503, "No playlist is set on this site, so there are no tracks to show.", code="no_playlist")
    if not settings.db_path.parent.is_dir():  # nothing can ever build site.db there: a deployment fault
        raise ApiError(500, f"Track storage is not set up on this deployment: site.db's folder "
                       f"{settings.db_path.parent.name!r} does not exist.", code="storage_not_configured")
    # A site.db not built yet, deleted or emptied is a sqlite3.Error here: the app's 503
    # storage_unavailable (web.Site.serve); a reader that has the file open goes on serving it.
    with db.one_snapshot(db.reader(settings.db_path)) as conn:  # the playlist and its tracks of one version
        head = conn.execute("SELECT * FROM tracks_playlists WHERE playlist_id = ?", (playlist_id,)).fetchone()
        rows = conn.execute("SELECT * FROM tracks WHERE playlist_id = ? ORDER BY position", (playlist_id,)).fetchall()
    if head is None:
        raise ApiError(502, "The playlist could not be read from the music service yet.", code="upstream_failed")
    tracks = [
        {
            "id": r["id"], "title": r["title"], "artists_text": r["artists_text"],
            "spotify_url": r["spotify_url"], "song_link_url": r["song_link_url"], "duration_ms": r["duration_ms"],
            "preview_url": r["preview_url"], "is_explicit": bool(r["is_explicit"]), "image_url": r["image_url"],
            "album": r["album"], "added_at": r["added_at"], "artists": json.loads(r["artists"]),
        }
        for r in rows
    ]
    return {
        "playlist_id": head["playlist_id"],
        "playlist_name": head["playlist_name"],
        "playlist_url": head["playlist_url"],
        "count": len(tracks),
        "tracks": tracks,
        "fetched_at": head["fetched_at"],
    }
