"""Durability under real faults: "faults keep the last good data; nothing is lost or half-written".

Each job runs as its own process (`python jobs.py run NAME`) on a scratch site of its own. To kill
one in the middle of its write, a small hook on the standard library pauses it at a chosen point (a
sqlite3 trace callback at a statement inside its transaction, `os.replace` after its commit,
`os.fsync` with half a file written) and says so in a file; the test then sends SIGKILL and
looks at what is left: site.db, the image folders, job_runs, the app's answers, the next run.
The other faults are real too: site.db deleted, emptied, replaced, restored from a backup or made
read-only under the running app, a WAL left beside a missing site.db, two job processes at once, a
full disk (a small tmpfs; root only), a read held open while a job writes.
"""
from __future__ import annotations

import contextlib
import fcntl
import io
import json
import os
import pwd
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

import jobs
from app import make_app
from conftest import ROOT, build_site, make_settings
from feeds_servers import FirmServer, IcsServer, SpotifyServer, _toml_value
from servers import accepts, running, serve_wsgi
from test_stack_e2e import free_port
from siteapi import db, demo_photos, exif, ingest, photos, ranker
from siteapi.config import load_settings

HANG_GUARD_S = 120  # only a child that never reaches its pause waits this long; nothing is timed

HOOK = r'''
import os, pathlib, sqlite3, sys, time

sys.path[:0] = [os.environ["ROOT"], os.path.join(os.environ["ROOT"], "tests")]
os.chdir(os.environ["ROOT"])


def pause():
    """Say so in READY, then wait until READY.resume exists (most tests kill the process instead)."""
    ready = pathlib.Path(os.environ["READY"])
    ready.write_text(str(os.getpid()))
    while not pathlib.Path(f"{ready}.resume").exists():
        time.sleep(0.05)


if os.environ.get("PAUSE_SQL"):  # the n-th statement that starts so, inside the job's transaction
    prefix, _, nth = os.environ["PAUSE_SQL"].partition("#")
    seen = [0]
    connect = sqlite3.connect

    def traced(*args, **kwargs):
        conn = connect(*args, **kwargs)

        def trace(sql):
            if sql.lstrip().upper().startswith(prefix.upper()):
                seen[0] += 1
                if seen[0] == int(nth or 1):
                    pause()
        conn.set_trace_callback(trace)
        return conn
    sqlite3.connect = traced

if os.environ.get("PAUSE_REPLACE"):  # before the first rename onto a name that contains this
    replace = os.replace

    def paused_replace(src, dst, *args, **kwargs):
        if os.environ["PAUSE_REPLACE"] in str(dst):
            pause()
        return replace(src, dst, *args, **kwargs)
    os.replace = paused_replace

if os.environ.get("PAUSE_UNLINK"):  # before the first deletion of a file whose path contains this
    unlink = os.unlink

    def paused_unlink(path, *args, **kwargs):
        if os.environ["PAUSE_UNLINK"] in str(path):
            pause()
        return unlink(path, *args, **kwargs)
    os.unlink = paused_unlink

if os.environ.get("PAUSE_WRITE"):  # a file whose path contains this, cut to half before it reaches the disk
    fsync = os.fsync

    def half_written(fd):
        path = os.readlink(f"/proc/self/fd/{fd}")
        if os.environ["PAUSE_WRITE"] in path and os.path.isfile(path):
            os.ftruncate(fd, os.fstat(fd).st_size // 2)
            pause()
        return fsync(fd)
    os.fsync = half_written

import jobs  # noqa: E402
SEAMS = {}
exec(os.environ.get("SEAM", ""))  # what jobs.run_job lets a caller hand the job (a loopback fetcher)
sys.exit(jobs.main(sys.argv[1:], **SEAMS))
'''

# Jobs that reach outside services are handed loopback seams in the child, as the feed tests do.
AROUND_SEAM = """
from test_feeds_around import loopback_fetcher
from siteapi.config import load_settings
SEAMS = {"fetcher": loopback_fetcher(load_settings())}
"""
CENSUS_SEAM = """
from siteapi.lens.discovery import DnsClient
from siteapi.lens.fetch import AddressPolicy, Fetcher
port, dns_port = int(os.environ["WEB_PORT"]), int(os.environ["DNS_PORT"])
SEAMS = {"fetcher": Fetcher(policy=AddressPolicy(allow=frozenset({("127.0.0.1", port)})),
                            resolve=lambda host, t: ["127.0.0.1"], timeout_s=3.0),
         "dns": DnsClient(["127.0.0.1"], dns_port)}
"""


@dataclass
class Site:
    """A scratch site in `root`: its own site.toml, content, originals, access log and, unless the
    site.toml puts them elsewhere, site.db and images."""
    root: Path
    env: dict

    @property
    def settings(self):
        return load_settings(self.root / "site.toml")

    @property
    def db(self) -> Path:
        return self.settings.db_path

    @property
    def images(self) -> Path:
        return self.settings.images_dir

    def run(self, name: str, user: str | None = None, **env) -> subprocess.CompletedProcess:
        """`python jobs.py run NAME` to its end."""
        command = [sys.executable, str(self.root / "hook.py"), "run", name]
        if user:
            command = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *command]
        return subprocess.run(command, cwd=ROOT, env={**self.env, **env}, capture_output=True, text=True,
                              timeout=HANG_GUARD_S)

    def start_paused(self, name: str, **env) -> subprocess.Popen:
        """`python jobs.py run NAME`, returned once it is paused where `env` says."""
        ready = self.root / "paused"
        ready.unlink(missing_ok=True)
        proc = subprocess.Popen([sys.executable, str(self.root / "hook.py"), "run", name], cwd=ROOT,
                                env={**self.env, **env, "READY": str(ready)},
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + HANG_GUARD_S
        while not ready.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise AssertionError(f"{name} ended before its pause ({env}): {proc.communicate()[0][-800:]}")
            time.sleep(0.02)
        return proc

    def kill_paused(self, name: str, **env) -> None:
        proc = self.start_paused(name, **env)
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
        assert proc.returncode == -signal.SIGKILL

    def rows(self, *tables: str) -> dict:
        with sqlite3.connect(f"file:{self.db}?mode=ro", uri=True) as conn:
            return {t: conn.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall() for t in tables}

    def query(self, sql: str, params=()) -> list:
        conn = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True)
        try:
            return conn.execute(sql, params).fetchall()
        finally:
            conn.close()

    def integrity(self) -> str:
        return self.query("PRAGMA integrity_check")[0][0]


def make_site(folder: Path, feeds: dict | None = None, lens: dict | None = None, photos: int = 0,
              env: dict | None = None, model: bool = False) -> Site:
    """A site.toml with no ask model unless `model` (no vectors: every job stays quick), five
    content pages and `photos` demo originals."""
    folder.mkdir(parents=True, exist_ok=True)
    feeds = dict(feeds or {})
    roster = feeds.pop("around_roster", [])
    lines = ['site_name = "aadhar.sh"', 'site_host = "aadhar.sh"', 'public_base_url = "https://aadhar.sh"',
             'content_dir = "content"', 'db_path = "site.db"', 'photos_dir = "originals"', 'images_dir = "images"',
             'access_log = "access.log"', 'bot_key_file = "bot-key.pem"',
             "[rate]", "read_q = 1000000", "read_w = 60", "inspect_q = 1000", "inspect_w = 60",
             "[ask]", *([] if model else ['model_path = "no-model.onnx"']),
             "[feeds]", *(f"{k} = {_toml_value(v)}" for k, v in feeds.items()),
             "[lens]", *(f"{k} = {_toml_value(v)}" for k, v in (lens or {}).items())]
    for firm in roster:
        lines += ["[[feeds.around_roster]]", *(f"{k} = {_toml_value(v)}" for k, v in firm.items())]
    (folder / "site.toml").write_text("\n".join(lines) + "\n")
    (folder / "hook.py").write_text(HOOK)
    pages = folder / "content" / "pages"
    pages.mkdir(parents=True, exist_ok=True)
    for name in ("about.md", "colophon.md", "garage.md", "now.md", "uses.md"):
        shutil.copy(ROOT / "content" / "pages" / name, pages / name)
    shutil.copy(ROOT / "content" / "resume.json", folder / "content" / "resume.json")
    (folder / "access.log").touch()
    if photos:
        demo_photos.generate(folder / "originals", count=photos)
    else:
        (folder / "originals").mkdir(exist_ok=True)
    child_env = {**os.environ, "ROOT": str(ROOT), "SITE_CONFIG": str(folder / "site.toml"), **(env or {})}
    child_env = {k: v for k, v in child_env.items() if not k.startswith("SITE_") or k == "SITE_CONFIG"
                 or k in (env or {})}
    return Site(folder, child_env)


def mark_pages(site: Site, word: str) -> None:
    """Give every content page a new paragraph with `word`."""
    for page in (site.root / "content" / "pages").glob("*.md"):
        page.write_text(page.read_text() + f"\n\nA {word} paragraph.\n")


def search_total(base: str, word: str) -> int:
    r = requests.get(f"{base}/search.json", params={"q": word}, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()["total"]


def build(site: Site, *names: str) -> None:
    """Set-up runs, in this process (a child costs half a second of imports)."""
    for name in names:
        done, summary = jobs.run_job(site.settings, name)
        assert done, summary


def ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def failed_cleanly(result: subprocess.CompletedProcess) -> str:
    """A failed run: exit 1, one sentence, no traceback."""
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert "Traceback" not in out, out
    return out


# -- a job killed in the middle of its write ---------------------------------------------------------


def test_content_killed_mid_write_leaves_the_old_pages_whole_and_the_next_run_recovers(tmp_path):
    """Killed with two pages written, or with every page written and their vectors going in: the
    pages and their vectors are one transaction, so neither is left ahead of the other."""
    site = make_site(tmp_path, model=True)
    build(site, "content")
    before = site.rows("pages", "site_files", "page_vectors")
    with serve_wsgi(make_app(site.settings).wsgi) as base:
        mark_pages(site, "plover")
        ((built,),) = site.query("SELECT max(id) FROM job_runs WHERE name = 'content'")
        for pause in ("INSERT INTO pages#3", "INSERT INTO page_vectors"):
            site.kill_paused("content", PAUSE_SQL=pause)
            assert site.integrity() == "ok"
            assert site.rows("pages", "site_files", "page_vectors") == before, pause
            assert search_total(base, "plover") == 0 and search_total(base, "colophon") > 0
        ok(site.run("content"))
        deadline = time.monotonic() + HANG_GUARD_S  # the app's per-thread cache rereads within a second
        while search_total(base, "plover") != 5:
            assert time.monotonic() < deadline
            time.sleep(0.1)
    ran = site.query("SELECT ok, error FROM job_runs WHERE name = 'content' AND id > ? ORDER BY id", (built,))
    assert ran == [(0, jobs.ABANDONED), (0, jobs.ABANDONED), (1, None)]  # killed runs are closed as failed
    assert site.query("SELECT count(*) FROM pages p JOIN page_vectors v ON v.path = p.path AND v.hash = p.hash "
                      "AND v.model = ?", (ranker.PAGE_REPRESENTATION,)) == site.query("SELECT count(*) FROM pages")


def referenced_thumbnails(site: Site) -> set[str]:
    names = set()
    for row in site.query("SELECT thumb_avif, thumb_jpg, thumb_small, thumb_xs FROM photos"):
        names |= set(row)
    return names


def assert_published_whole(site: Site) -> None:
    """Every thumbnail a row names is on disk, and no temporary file is left."""
    images = site.images
    on_disk = {p.name for p in images.iterdir() if p.is_file()}
    assert referenced_thumbnails(site) <= on_disk
    leftovers = [p.name for p in (*images.iterdir(), *(images / "full").iterdir()) if p.name.endswith(".tmp")]
    assert leftovers == []


def edit(original: Path, turn: int) -> None:
    """The owner re-edits a photo: new pixels, the same EXIF."""
    from PIL import Image

    with Image.open(original) as image:
        exif = image.info.get("exif")
        turned = image.rotate(turn)
    turned.save(original, quality=88, **({"exif": exif} if exif else {}))


def test_photos_killed_mid_transaction_or_after_its_commit_recovers(tmp_path):
    site = make_site(tmp_path, photos=3)
    build(site, "photos")
    stem = sorted(p.stem for p in (site.root / "originals").glob("*.jpg"))[0]
    original, copy = site.root / "originals" / f"{stem}.jpg", site.images / "full" / f"{stem}.jpg"
    before = site.rows("photos")
    with serve_wsgi(make_app(site.settings).wsgi) as base:
        manifest = requests.get(f"{base}/images/manifest.json", timeout=30).json()

        # 1. inside the transaction: the old rows, their thumbnails and copies stay as they were
        edit(original, 7)
        site.kill_paused("photos", PAUSE_SQL="INSERT OR REPLACE INTO photos")
        assert site.integrity() == "ok" and site.rows("photos") == before
        assert requests.get(f"{base}/images/manifest.json", timeout=30).json() == manifest
        for photo in manifest["photos"]:  # every image the answer names is served whole
            for key in ("thumb_jpg", "full"):
                path = photo[key].removeprefix("https://aadhar.sh")
                assert requests.get(base + path, timeout=30).status_code == 200, path
        ok(site.run("photos"))
        assert site.rows("photos") != before
        assert copy.read_bytes() == exif.public_original(original.read_bytes())  # the public copy is the new one
        assert_published_whole(site)

        # 2. at the public copy's rename, before the commit: no row is committed ahead of its copy
        edited = site.rows("photos")
        edit(original, 9)
        site.kill_paused("photos", PAUSE_REPLACE=f"/full/{stem}.jpg")
        assert site.rows("photos") == edited
        assert copy.read_bytes() != exif.public_original(original.read_bytes())
        ok(site.run("photos"))
        assert copy.read_bytes() == exif.public_original(original.read_bytes())
        assert_published_whole(site)

        # 3. after the commit that removes a photo, at its thumbnails' deletion: its public copy is
        # gone with the next run's start, even when that run fails at once (no originals mounted);
        # the thumbnails of a photo replaced in that run were dated before the commit, so the sweep
        # keeps them their grace for the cached answers that still name them
        removed = sorted(p for p in (site.root / "originals").glob("*.jpg"))[-1]
        removed.unlink()
        (thumb,) = site.query("SELECT thumb_jpg FROM photos WHERE stem = ?", (removed.stem,))[0]
        replaced = set(site.query("SELECT thumb_avif, thumb_jpg, thumb_small, thumb_xs FROM photos WHERE stem = ?",
                                  (stem,))[0])
        long_ago = time.time() - 2 * ingest.SUPERSEDED_GRACE_S  # photos ingested long ago
        for image in site.images.iterdir():
            os.utime(image, (long_ago, long_ago))
        edit(original, 11)
        site.kill_paused("photos", PAUSE_UNLINK=thumb)
        assert all((site.images / name).stat().st_mtime > long_ago + 60 for name in replaced)
        assert site.query("SELECT count(*) FROM photos WHERE stem = ?", (removed.stem,)) == [(0,)]
        assert (site.images / "full" / removed.name).exists()
        kept = sorted(p.name for p in (site.root / "originals").glob("*.jpg"))
        for other in (site.root / "originals").glob("*.jpg"):
            other.rename(site.root / other.name)
        failed_cleanly(site.run("photos"))
        assert sorted(p.name for p in (site.images / "full").glob("*.jpg")) == kept
        for name in kept:
            (site.root / name).rename(site.root / "originals" / name)
        ok(site.run("photos"))
        assert_published_whole(site)
        assert site.integrity() == "ok"
    ran = site.query("SELECT ok, error FROM job_runs WHERE name = 'photos' ORDER BY id")
    assert ran[:5] == [(1, None)] + [(0, jobs.ABANDONED), (1, None)] * 2
    assert [r[0] for r in ran[5:]] == [0, 0, 1] and ran[5][1] == jobs.ABANDONED


def test_a_photos_commit_that_fails_leaves_the_copies_and_thumbnails_as_they_were(tmp_path):
    """The commit refused (here by a trigger; a full disk or a lock held past the busy timeout alike)
    after the new copies were renamed into place: the replaced copy is put back, the new photo's
    copy and the run's thumbnails go, and the next run that commits publishes both."""
    site = make_site(tmp_path, photos=2)
    build(site, "photos")
    first, second = sorted((site.root / "originals").glob("*.jpg"))
    copy, before = site.images / "full" / first.name, site.rows("photos")
    published, images = copy.read_bytes(), sorted(p.name for p in site.images.iterdir())
    edit(first, 7)
    newcomer = site.root / "originals" / "DSCF0999.jpg"
    shutil.copy(second, newcomer)
    edit(newcomer, 3)
    with contextlib.closing(sqlite3.connect(site.db)) as conn:
        conn.execute("CREATE TRIGGER refused BEFORE INSERT ON photos BEGIN SELECT RAISE(ABORT, 'disk I/O error'); END")
        conn.commit()
    failed_cleanly(site.run("photos"))
    assert site.rows("photos") == before
    assert copy.read_bytes() == published and not (site.images / "full" / newcomer.name).exists()
    assert sorted(p.name for p in site.images.iterdir()) == images
    assert_published_whole(site)
    with contextlib.closing(sqlite3.connect(site.db)) as conn:
        conn.execute("DROP TRIGGER refused")
        conn.commit()
    ok(site.run("photos"))
    assert copy.read_bytes() == exif.public_original(first.read_bytes())
    assert (site.images / "full" / newcomer.name).read_bytes() == exif.public_original(newcomer.read_bytes())
    assert_published_whole(site)


def crawler_lines(log: Path, count: int) -> None:
    with log.open("a") as f:
        for i in range(count):
            f.write(json.dumps({
                "level": "info", "ts": time.time(), "logger": "http.log.access", "msg": "handled request",
                "request": {"remote_ip": "203.0.113.5", "method": "GET", "host": "aadhar.sh", "uri": f"/p{i % 3}",
                            "headers": {"User-Agent": ["Mozilla/5.0 (compatible; GPTBot/1.2; +https://openai.com/gptbot)"]}},
                "status": 200, "size": 10}) + "\n")


def test_ledger_killed_mid_write_counts_every_line_once(tmp_path):
    site = make_site(tmp_path)
    log = site.root / "access.log"
    crawler_lines(log, 100)
    build(site, "ledger")
    with serve_wsgi(make_app(site.settings).wsgi) as base:
        crawler_lines(log, 50)
        site.kill_paused("ledger", PAUSE_SQL="INSERT OR REPLACE INTO ledger_state")  # counts in, offset not yet
        assert site.query("SELECT sum(hits) FROM ledger_hits") == [(100,)]
        assert requests.get(f"{base}/ledger.json", timeout=30).json()["total_hits"] == 100
        # Caddy rolls the log before the next run, which finishes the rolled file from the old offset
        log.rename(site.root / "access-2026-11-21T10-00-00.000.log")
        crawler_lines(log, 20)
        ok(site.run("ledger"))
        assert site.query("SELECT sum(hits) FROM ledger_hits") == [(170,)]
        deadline = time.monotonic() + HANG_GUARD_S
        while requests.get(f"{base}/ledger.json", timeout=30).json()["total_hits"] != 170:
            assert time.monotonic() < deadline
            time.sleep(0.1)


def ics(*events: tuple[str, str]) -> str:
    body = "".join(f"BEGIN:VEVENT\r\nUID:{start}\r\nDTSTART:{start}\r\nDTEND:{end}\r\nSUMMARY:busy\r\nEND:VEVENT\r\n"
                   for start, end in events)
    return f"BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//test//EN\r\n{body}END:VCALENDAR\r\n"


def soon(days: int, hour: int) -> str:
    return time.strftime(f"%Y%m%dT{hour:02d}0000Z", time.gmtime(time.time() + days * 86400))


@pytest.fixture
def feed_site(tmp_path, request, monkeypatch):
    """(name, site, its first run (in this process), a change at the outside service, the feed's
    tables, its endpoint, where to pause)."""
    name = request.param
    servers = []
    first = None
    if name == "tracks":
        spotify = SpotifyServer()
        servers.append(spotify)
        site = make_site(tmp_path, {"spotify_api_base": spotify.api_base, "spotify_token_url": spotify.url + "/api/token",
                                    "playlist_id": spotify.playlist_id},
                         env={"SITE_SPOTIFY_CLIENT_ID": SpotifyServer.CLIENT[0],
                              "SITE_SPOTIFY_CLIENT_SECRET": SpotifyServer.CLIENT[1]})
        monkeypatch.setenv("SITE_SPOTIFY_CLIENT_ID", SpotifyServer.CLIENT[0])
        monkeypatch.setenv("SITE_SPOTIFY_CLIENT_SECRET", SpotifyServer.CLIENT[1])
        change = lambda: spotify.items.pop()  # noqa: E731
        case = (("tracks", "tracks_playlists", "tracks_artists"), "/rn/tracks", {"PAUSE_SQL": "DELETE FROM tracks"})
    elif name == "calendar":
        server = IcsServer(ics((soon(2, 15), soon(2, 16))))
        servers.append(server)
        site = make_site(tmp_path, {"calendar_timeout": 10.0}, env={"SITE_CALENDAR_ICS_URL": server.feed_url})
        monkeypatch.setenv("SITE_CALENDAR_ICS_URL", server.feed_url)

        def change():
            server.ics = ics((soon(2, 15), soon(2, 16)), (soon(3, 14), soon(3, 17)))
        case = (("coffee_busy",), "/coffee/availability.json", {"PAUSE_SQL": "INSERT INTO coffee_busy"})
    elif name == "around":
        firms = [FirmServer("Alpha Ventures"), FirmServer("Beta Capital")]
        servers += firms
        site = make_site(tmp_path, {"around_roster": [{"name": f"Firm {i}", "url": f.url + "/"}
                                                      for i, f in enumerate(firms)]}, env={"SEAM": AROUND_SEAM})
        from siteapi.feeds.around import run_around
        from test_feeds_around import loopback_fetcher

        def first():
            run_around(site.settings, fetcher=loopback_fetcher(site.settings))

        def change():
            firms[0].title = "Alpha Ventures II"
        case = (("around_crawls", "around_results", "around_changes"), "/around/json",
                {"PAUSE_SQL": "INSERT INTO around_results#2"})
    elif name == "census":
        from lens_sites import DnsServer, start_web, stop_web

        web, thread = start_web()
        dns = DnsServer()
        servers.append(type("Stop", (), {"close": lambda self: (stop_web(web, thread), dns.stop())})())
        site = make_site(tmp_path, lens={"census_roster": [web.url("ready.test")],
                                         "scan_timeout_s": 6, "probe_timeout_s": 3},
                         env={"SEAM": CENSUS_SEAM, "WEB_PORT": str(web.port), "DNS_PORT": str(dns.port)})
        from lens_sites import site_fetcher
        from siteapi.lens.census import run_census

        def first():
            run_census(site.settings, fetcher=site_fetcher(web), dns=dns.client())
        change = lambda: None  # noqa: E731 - a later run the same day replaces the day's rows
        case = (("lens_census",), "/lens/census.json", {"PAUSE_SQL": "INSERT INTO lens_census"})
    else:  # lens-caches: lookups past their window are deleted
        site = make_site(tmp_path)

        def change():
            with sqlite3.connect(site.db) as conn:
                conn.execute("INSERT INTO lens_discovery_cache VALUES ('https://old.example', 1.0, '{}')")
                conn.execute("INSERT INTO lens_mode_cache VALUES ('https://old.example/', 1.0, '{}')")
        case = (("lens_discovery_cache", "lens_mode_cache"), None, {"PAUSE_SQL": "DELETE FROM lens_mode_cache"})
    yield (name, site, first or (lambda: build(site, name)), change, *case)
    for server in servers:
        server.close()


@pytest.mark.parametrize("feed_site", ["tracks", "calendar", "around", "census", "lens-caches"], indirect=True)
def test_a_feed_killed_mid_write_keeps_its_last_data_and_the_next_run_replaces_it(feed_site):
    name, site, first, change, tables, endpoint, pause = feed_site
    first()
    change()
    before = site.rows(*tables)
    with serve_wsgi(make_app(site.settings).wsgi) as base:
        answer = endpoint and requests.get(base + endpoint, timeout=30)
        site.kill_paused(name, **pause)
        assert site.integrity() == "ok"
        assert site.rows(*tables) == before
        if endpoint:
            again = requests.get(base + endpoint, timeout=30)
            assert again.status_code == answer.status_code == 200, again.text
            if name != "calendar":  # slots move with the clock
                assert again.json() == answer.json()
    ok(site.run(name))
    assert site.rows(*tables) != before
    assert site.query("SELECT ok, error FROM job_runs WHERE name = ? ORDER BY id", (name,))[-2:] == [
        (0, jobs.ABANDONED), (1, None)]


# -- two job processes, two schedulers ---------------------------------------------------------------


def lock_held(path: Path) -> bool:
    with open(path, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
        return False


def test_a_job_runs_in_one_process_at_a_time_and_a_killed_runs_half_file_goes(tmp_path):
    site = make_site(tmp_path, photos=2)
    build(site, "photos")
    original = next((site.root / "originals").glob("*.jpg"))
    edit(original, 5)
    # halfway through a thumbnail, before its transaction: it holds the job, not site.db
    first = site.start_paused("photos", PAUSE_WRITE=f"{site.images}/.")
    try:
        second = site.run("photos")  # by hand beside the scheduler's run: not run, to try again later
        assert second.returncode == os.EX_TEMPFAIL and "Traceback" not in second.stdout + second.stderr
        assert "photos: not run: photos is already running" in second.stdout
        assert site.query("SELECT count(*) FROM job_runs WHERE name = 'photos'") == [(2,)]  # the second left no row
        assert ok(site.run("ledger"))  # another job is not held up
    finally:
        first.send_signal(signal.SIGKILL)
        first.communicate()
    assert not lock_held(Path(f"{site.db}-job-photos.lock"))  # the kernel let go of the killed run's lock
    assert [p for p in site.images.glob(".*.tmp")]  # the half file (never served: not an image name)
    edit(original, 9)  # edited again, so no later run writes that name again
    ok(site.run("photos"))
    assert_published_whole(site)


def test_a_second_scheduler_on_the_same_site_db_does_not_start(tmp_path):
    # Rosters that fail at once: the scheduler runs the overdue census and crawl at its start.
    site = make_site(tmp_path, {"around_roster": [{"name": "Nowhere", "url": "http://127.0.0.1:9/"}]},
                     lens={"census_roster": ["http://127.0.0.1:9/"]})
    scheduler = subprocess.Popen([sys.executable, str(site.root / "hook.py")], cwd=ROOT, env=site.env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        for line in scheduler.stderr:  # logged once it holds the scheduler's lock
            if "scheduling" in line:
                break
        assert scheduler.poll() is None
        second = subprocess.run([sys.executable, str(site.root / "hook.py")], cwd=ROOT, env=site.env,
                                capture_output=True, text=True, timeout=HANG_GUARD_S)
        assert second.returncode == 1 and "another scheduler" in second.stderr, second.stderr
        assert "Traceback" not in second.stderr and scheduler.poll() is None
    finally:
        scheduler.kill()
        scheduler.communicate()


# -- site.db itself: deleted, emptied, replaced, read-only, a WAL left behind ---------------------------


def poll(base: str, path: str, until, seen: list) -> None:
    """GET `path` until `until(response)`; every answer is kept in `seen`."""
    deadline = time.monotonic() + HANG_GUARD_S
    while True:
        response = requests.get(base + path, timeout=30)
        seen.append(response.status_code)
        if until(response):
            return
        assert time.monotonic() < deadline, (response.status_code, response.text[:300])
        time.sleep(0.05)


class OneWorker:
    """The app driven through its WSGI callable from this one thread: one waitress worker, whose
    reader of site.db every request here goes through (a server's requests land on any thread)."""

    def __init__(self, settings):
        self.app = make_app(settings).wsgi

    def get(self, path: str) -> tuple[int, dict | str]:
        path, _, query = path.partition("?")
        environ = {"REQUEST_METHOD": "GET", "PATH_INFO": path, "QUERY_STRING": query, "SERVER_NAME": "127.0.0.1",
                   "SERVER_PORT": "80", "REMOTE_ADDR": "127.0.0.1", "HTTP_ACCEPT": "application/json",
                   "wsgi.url_scheme": "http", "wsgi.input": io.BytesIO(), "wsgi.errors": sys.stderr}
        status = []
        body = b"".join(self.app(environ, lambda s, h, e=None: status.append(int(s[:3]))))
        text = body.decode()
        return status[0], json.loads(text) if text.startswith("{") else text


def wait_for(worker: OneWorker, path: str, until) -> tuple[int, dict | str]:
    """GET `path` until `until(status, body)` (the reader looks at the path once a second)."""
    deadline = time.monotonic() + HANG_GUARD_S
    while not until(*(answer := worker.get(path))):
        assert time.monotonic() < deadline, answer
        time.sleep(0.05)
    return answer


def test_a_deleted_or_emptied_site_db_is_served_until_the_jobs_rebuild_it(tmp_path):
    site = make_site(tmp_path, photos=3)  # a larger file than the rebuilt one: its pages lie elsewhere
    build(site, "photos")
    build(site, "content")
    worker = OneWorker(site.settings)
    status, before = worker.get("/search.json?q=colophon")
    assert status == 200 and before["total"] > 0
    site.db.unlink()  # its -wal and -shm stay, held by the app's reader
    assert worker.get("/search.json?q=colophon") == (200, before)  # the last good file
    mark_pages(site, "avocet")
    ok(site.run("content"))
    assert site.integrity() == "ok"
    photos_before = worker.get("/photos/query.json")
    assert photos_before[0] == 200 and photos_before[1]["total"] == 3
    # pages but no photos yet: the rebuilt file would answer an empty archive, so it is not served
    # (a reader looks at the path once a second: the last good file is served past two looks)
    looked = time.monotonic()
    while time.monotonic() - looked < 2.5 * db.REOPEN_CHECK_S:
        assert worker.get("/photos/query.json") == photos_before
        assert worker.get("/search.json?q=avocet")[1]["total"] == 0
        time.sleep(0.05)
    ok(site.run("photos"))
    wait_for(worker, "/search.json?q=avocet", lambda status, body: status == 200 and body["total"] == 5)
    assert worker.get("/resume.json")[0] == 200 and worker.get("/photos/query.json")[1]["total"] == 3

    site.db.write_bytes(b"")  # truncated in place, under the app's reader and its locks
    mark_pages(site, "dunlin")
    ok(site.run("content"))
    assert site.integrity() == "ok"
    wait_for(worker, "/search.json?q=dunlin", lambda status, body: status == 200 and body["total"] == 5)


def test_a_rebuilt_site_db_whose_photos_job_fails_is_served_once_that_run_ends(tmp_path, caplog):
    """The originals drive is not mounted when site.db is rebuilt: the photos job fails there, and
    the app must not keep the deleted file (and hold back every page change) until it succeeds."""
    site = make_site(tmp_path, photos=2)
    build(site, "photos", "content")
    worker = OneWorker(site.settings)
    assert worker.get("/photos/query.json")[1]["total"] == 2
    site.db.unlink()
    (site.root / "originals").rename(site.root / "unmounted")
    mark_pages(site, "godwit")
    ok(site.run("content"))
    looked = time.monotonic()
    while time.monotonic() - looked < 2.5 * db.REOPEN_CHECK_S:  # the last good file, while no photos run has ended
        assert worker.get("/search.json?q=godwit")[1]["total"] == 0
        time.sleep(0.05)
    assert sum("no photos yet" in r.getMessage() for r in caplog.records) == 1  # said once, not every look
    assert "does not exist" in failed_cleanly(site.run("photos"))
    wait_for(worker, "/search.json?q=godwit", lambda status, body: status == 200 and body["total"] == 5)
    assert worker.get("/photos/query.json")[1]["total"] == 0


def test_a_lens_request_does_not_replace_an_emptied_site_db_with_an_empty_one(tmp_path, monkeypatch):
    """The lens opens site.db for its caches as a writer, and a writer builds a new site.db where it
    finds none: after one /lens/fetch the site served an empty index (200, total 0) where it said
    503 until the jobs rebuild it."""
    monkeypatch.setattr(db, "REOPEN_CHECK_S", 0)  # each request looks at the path again
    site = make_site(tmp_path)
    build(site, "content")
    with serve_wsgi(make_app(site.settings).wsgi) as base:
        assert search_total(base, "colophon") > 0
        site.db.write_bytes(b"")
        assert requests.get(f"{base}/search.json?q=colophon", timeout=30).status_code == 503
        assert requests.get(f"{base}/lens/fetch", timeout=30).status_code == 400  # no url: refused after the cache opened
        assert site.db.stat().st_size == 0
        assert requests.get(f"{base}/search.json?q=colophon", timeout=30).status_code == 503


def test_a_wal_left_beside_a_missing_site_db_is_not_replayed_into_the_new_one(tmp_path):
    site = make_site(tmp_path)
    ok(site.run("content"))
    # A writer commits and dies before any checkpoint: its WAL holds committed pages of this file.
    subprocess.run([sys.executable, "-c", f"""
import os, sqlite3
conn = sqlite3.connect({str(site.db)!r}, isolation_level=None)
conn.execute("PRAGMA wal_autocheckpoint=0")
conn.execute("UPDATE pages SET body = body || ' more'")
conn.execute("CREATE TABLE extra AS SELECT * FROM pages")
os.kill(os.getpid(), 9)
"""], check=False)
    assert Path(f"{site.db}-wal").stat().st_size > 0
    site.db.unlink()
    build(site, "content")
    assert site.integrity() == "ok"
    assert site.query("SELECT count(*) FROM pages") == [(5,)]
    assert len(list(site.root.glob("site.db-wal-orphaned-*"))) == 1  # kept aside, not replayed


def test_garbage_in_site_db_fails_the_jobs_with_a_sentence(tmp_path):
    site = make_site(tmp_path)
    build(site, "content")
    with site.db.open("r+b") as f:
        f.write(b"not a database" * 8)
    out = failed_cleanly(site.run("ledger"))
    assert "file is not a database" in out and "restore a backup" in out


def test_a_reader_keeps_the_last_good_file_until_the_path_holds_another_database(tmp_path, monkeypatch):
    monkeypatch.setattr(db, "REOPEN_CHECK_S", 0)  # check the path at every use, not once a second
    site = make_site(tmp_path)
    build(site, "content")
    result = {}

    def read():  # a thread of its own: readers are per thread
        conn = db.reader(site.db)
        result["before"] = conn.execute("SELECT count(*) FROM pages").fetchone()[0]
        garbage = site.root / "garbage"
        garbage.write_bytes(os.urandom(20_000))
        garbage.replace(site.db)  # replaced by something that is no database
        result["garbage"] = db.reader(site.db).execute("SELECT count(*) FROM pages").fetchone()[0]
        site.db.unlink()
        result["deleted"] = db.reader(site.db).execute("SELECT count(*) FROM pages").fetchone()[0]
        ok(site.run("ledger"))  # rebuilds it, every table empty
        result["rebuilding"] = db.reader(site.db).execute("SELECT count(*) FROM pages").fetchone()[0]
        ok(site.run("content"))  # fills it
        with sqlite3.connect(site.db) as conn:
            conn.execute("DELETE FROM pages WHERE path = '/now'")
        result["rebuilt"] = db.reader(site.db).execute("SELECT count(*) FROM pages").fetchone()[0]

    thread = threading.Thread(target=read)
    thread.start()
    thread.join()
    assert result == {"before": 5, "garbage": 5, "deleted": 5, "rebuilding": 5, "rebuilt": 4}


# The scheduler's seams: the ledger every second (the "next job" that finds site.db gone), and
# the jobs that would reach outside services as quick runs.
QUICK_SCHEDULER_SEAM = """
import dataclasses
jobs.JOBS["ledger"] = dataclasses.replace(jobs.JOBS["ledger"], trigger={"trigger": "interval", "seconds": 1})
for outside in ("census", "around", "tracks", "calendar"):
    jobs.JOBS[outside] = dataclasses.replace(jobs.JOBS[outside], run=lambda s: "stood in for by the test")
"""


def test_a_stopped_scheduler_lets_the_runs_under_way_finish_and_records_them(tmp_path):
    """SIGTERM (systemctl stop, a deploy) while the content job writes: the run is not cut off and
    closed as failed by a later one; the scheduler starts nothing new and exits 0 once it ends."""
    site = make_site(tmp_path)
    ready, log = site.root / "paused", site.root / "scheduler.log"
    with log.open("w") as out:
        scheduler = subprocess.Popen([sys.executable, str(site.root / "hook.py")], cwd=ROOT, stdout=out,
                                     stderr=subprocess.STDOUT, env={**site.env, "SEAM": QUICK_SCHEDULER_SEAM,
                                                                    "PAUSE_SQL": "INSERT INTO pages", "READY": str(ready)})
    try:
        deadline = time.monotonic() + HANG_GUARD_S
        while not ready.exists():
            assert scheduler.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.02)
        scheduler.send_signal(signal.SIGTERM)
        # the other jobs at start may be under way too, waiting for the lock the paused write holds
        while not re.search(r"stopping once the runs under way end: .*\bcontent\b", log.read_text()):
            assert scheduler.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.02)
        Path(f"{ready}.resume").touch()
        assert scheduler.wait(timeout=HANG_GUARD_S) == 0, log.read_text()
    finally:
        if scheduler.poll() is None:
            scheduler.kill()
    assert site.query("SELECT ok, error FROM job_runs WHERE name = 'content'") == [(1, None)]
    assert site.query("SELECT count(*) FROM pages") == [(5,)]
    assert site.query("SELECT count(*) FROM job_runs WHERE finished IS NULL") == [(0,)]


def finished_jobs(site: Site) -> set[str]:
    try:
        return {name for (name,) in site.query("SELECT name FROM job_runs WHERE finished IS NOT NULL")}
    except sqlite3.Error:  # missing, or not yet in place
        return set()


def test_a_site_db_rebuilt_under_the_scheduler_is_filled_by_every_job_at_once(tmp_path):
    """The next job rebuilds a missing site.db with empty tables: the scheduler then runs every job
    at once (content every 10 minutes, the census weekly), and the app's readers keep the last good
    file until the rebuilt one has its pages."""
    site = make_site(tmp_path)
    scheduler = subprocess.Popen([sys.executable, str(site.root / "hook.py")], cwd=ROOT,
                                 env={**site.env, "SEAM": QUICK_SCHEDULER_SEAM},
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + HANG_GUARD_S
        while finished_jobs(site) != set(jobs.JOBS) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert finished_jobs(site) == set(jobs.JOBS)
        with serve_wsgi(make_app(site.settings).wsgi) as base:
            assert search_total(base, "colophon") > 0
            site.db.unlink()
            rebuilt_at = time.monotonic()
            while finished_jobs(site) != set(jobs.JOBS) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert finished_jobs(site) == set(jobs.JOBS), "every job ran again on the rebuilt site.db"
            assert time.monotonic() - rebuilt_at < 60  # not the content job's 10 minutes
            assert search_total(base, "colophon") > 0
    finally:
        scheduler.terminate()
        out = scheduler.communicate(timeout=60)[0]
    assert "is a new file: every job runs now to fill it" in out and "executed successfully" not in out


def test_a_thread_that_never_opened_a_deleted_site_db_reads_the_last_good_one(tmp_path):
    """Worker threads open their readers at their first request: deleted just after a start, site.db
    had been a 503 on every thread that had not served one yet."""
    site = make_site(tmp_path)
    build(site, "content")
    counts = []

    def count():  # a thread of its own: readers are per thread
        counts.append(db.reader(site.db).execute("SELECT count(*) FROM pages").fetchone()[0])

    for step in ("first", "deleted", "rebuilding"):
        thread = threading.Thread(target=count)
        thread.start()
        thread.join()
        if step == "first":
            site.db.unlink()
        elif step == "deleted":
            ok(site.run("ledger"))  # a new site.db, every table empty
    assert counts == [5, 5, 5]


def copy_database(source: Path, target: Path) -> None:
    """SQLite's online backup from `source` into `target`: what `sqlite3 TARGET ".restore SOURCE"` does
    (the file keeps its inode; the pages go through SQLite, so open readers see the new rows)."""
    with contextlib.closing(sqlite3.connect(source)) as src, contextlib.closing(sqlite3.connect(target)) as dst:
        src.backup(dst)


def test_a_backup_restored_under_the_running_app_is_what_the_photo_query_serves(tmp_path):
    """The app keeps an in-memory index of the photos per process. The backup and the site.db it
    replaces were each made by the first ingest of their file, so a counted ingest generation
    (1 in both) could not tell them apart, and the old index was served until the next ingest."""
    site = make_site(tmp_path, photos=3)
    build(site, "photos")
    backup = tmp_path / "backup.db"
    copy_database(site.db, backup)
    # the owner moves site.db aside, one original goes, and the jobs build a new site.db
    for name in (site.db, Path(f"{site.db}-wal"), Path(f"{site.db}-shm")):
        name.unlink(missing_ok=True)
    gone = sorted((site.root / "originals").glob("*.jpg"))[0]
    gone.unlink()
    build(site, "photos")
    with serve_wsgi(make_app(site.settings).wsgi) as base:
        assert requests.get(f"{base}/photos/query.json", timeout=30).json()["total"] == 2
        copy_database(backup, site.db)
        # new parameters: answers the app has not cached, so they come from the index
        after = requests.get(f"{base}/photos/query.json", params={"limit": 50}, timeout=30).json()
        assert [photo["stem"] for photo in after["photos"]] == [stem for (stem,) in site.query(
            f"SELECT stem FROM photos {photos.ORDER_SQL}")] and after["total"] == 3
        found = requests.get(f"{base}/photos/query.json", params={"q": gone.stem}, timeout=30).json()
        assert [photo["stem"] for photo in found["photos"]] == [gone.stem]



def test_a_backup_restored_under_the_running_app_is_what_ask_ranks(tmp_path):
    """The app keeps the /ask page matrix in memory per process. Both files below were built from
    empty by one content run over three pages, so they hold as many vectors under the same highest
    id, and the old matrix would be served until the next content change."""
    def lineage(name: str, third: tuple[str, str]):
        content = tmp_path / name / "content"
        content.mkdir(parents=True)
        pages = {"coffee": ("/coffee", "Book a coffee", "Pick a slot and we meet for espresso in Greenpoint."),
                 "privacy": ("/privacy", "Privacy", "The server keeps an access log and sets no cookies."),
                 third[0]: (f"/{third[0]}", third[0].title(), third[1])}
        for stem, (path, title, text) in pages.items():
            (content / f"{stem}.md").write_text(f"---\ntitle: {title}\ndescription: {title}.\nkind: page\n"
                                                f"path: {path}\n---\n\n{text}\n", encoding="utf-8")
        settings = make_settings(tmp_path / name, content_dir=content)
        build_site(settings)
        return settings

    backup = lineage("backup", ("garage", "I rebuilt the four carburetors of the Honda CB550 with new jets."))
    current = lineage("current", ("sourdough", "My starter, the flour I use and how long the dough proofs."))
    question = {"query": "how did the motorcycle carburetor rebuild go", "streaming": "0"}
    with serve_wsgi(make_app(current).wsgi) as base:
        before = requests.get(f"{base}/ask", params=question, timeout=30).json()
        assert before["_meta"]["ranking"] == "model:minilm-l6-v2-int8"
        assert not any(r["url"].endswith("/garage") for r in before["results"])
        copy_database(backup.db_path, current.db_path)
        after = requests.get(f"{base}/ask", params=question, timeout=30).json()
        assert after["_meta"]["ranking"] == "model:minilm-l6-v2-int8"
        assert after["results"][0]["url"] == "https://aadhar.sh/garage"


def test_a_read_only_site_db_fails_the_jobs_and_they_recover_once_it_is_writable():
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root, to run the app's reader and the jobs as another user (root writes read-only files)")
    folder = Path(tempfile.mkdtemp(prefix="site-ro-"))
    try:
        site = make_site(folder)
        user = str(pwd.getpwnam("nobody").pw_uid)
        subprocess.run(["chown", "-R", f"{user}:{user}", str(folder)], check=True)
        folder.chmod(0o755)
        ok(site.run("content", user=user))
        site.db.chmod(0o444)
        # The app, reading as the same user, makes -wal and -shm as read-only as site.db, and holds them.
        reader = subprocess.Popen(["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", sys.executable,
                                   "-c", f"import sqlite3, sys; c = sqlite3.connect('file:{site.db}?mode=ro', uri=True);"
                                   "c.execute('SELECT count(*) FROM pages').fetchone(); print('ready', flush=True);"
                                   "sys.stdin.read()"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert reader.stdout.readline().strip() == "ready"
            out = failed_cleanly(site.run("content", user=user))
            assert "readonly" in out and "writable" in out
            site.db.chmod(0o644)
            ok(site.run("content", user=user))
        finally:
            reader.stdin.close()
            reader.wait(timeout=HANG_GUARD_S)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_datasette_reading_as_another_user_starts_beside_the_scheduler():
    """Datasette's unit may not write site.db's folder (ReadOnlyPaths), and a read-only reader opens
    a WAL database only while its -shm exists, which SQLite removes with the last connection: at
    boot, before the app's first request, Datasette failed to start at all. The scheduler holds
    site.db open for its life."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root, to run Datasette as a user who cannot write the folder")
    folder = Path(tempfile.mkdtemp(prefix="site-ds-"))
    try:
        site = make_site(folder, {"around_roster": [{"name": "Nowhere", "url": "http://127.0.0.1:9/"}]},
                         lens={"census_roster": ["http://127.0.0.1:9/"]})
        build(site, "content")
        subprocess.run(["chmod", "-R", "a+rX,go-w", str(folder)], check=True)
        scheduler = subprocess.Popen([sys.executable, str(site.root / "hook.py")], cwd=ROOT, env=site.env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            finished = 0
            for line in scheduler.stderr:  # every job runs at start; then no job holds site.db
                finished += re.search(r" jobs (INFO|ERROR) job [\w-]+( failed)?: ", line) is not None
                if finished == len(jobs.JOBS):
                    break
            assert finished == len(jobs.JOBS) and scheduler.poll() is None
            nobody = str(pwd.getpwnam("nobody").pw_uid)
            port = free_port()
            command = ["setpriv", f"--reuid={nobody}", f"--regid={nobody}", "--clear-groups", sys.executable, "-m",
                       "datasette", "serve", str(site.db), "--host", "127.0.0.1", "--port", str(port)]
            with running(command, lambda: accepts(port), "Datasette as nobody", timeout=HANG_GUARD_S, cwd=ROOT):
                answer = requests.get(f"http://127.0.0.1:{port}/site/pages.json?_shape=array", timeout=30)
                assert answer.status_code == 200 and len(answer.json()) == 5
        finally:
            scheduler.kill()
            scheduler.communicate()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# -- a full disk -----------------------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MB tmpfs, mounted for the test and unmounted after it."""
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(folder: Path) -> Path:
    """Take every free block of the disk."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        for chunk in (1 << 16, 512):
            try:
                while True:
                    os.write(fd, b"\0" * chunk)
            except OSError:
                pass
    finally:
        os.close(fd)
    return filler


def test_a_full_disk_fails_the_jobs_cleanly_keeps_the_last_good_data_and_recovers(tmp_path, small_disk):
    site = make_site(tmp_path, photos=2)
    toml = site.root / "site.toml"  # site.db and the images on the small disk; their sources beside the test
    toml.write_text(toml.read_text().replace('db_path = "site.db"', f'db_path = "{small_disk}/site.db"')
                    .replace('images_dir = "images"', f'images_dir = "{small_disk}/images"'))
    build(site, "content")
    build(site, "photos")
    pages, photos = site.rows("pages"), site.rows("photos")
    with serve_wsgi(make_app(site.settings).wsgi) as base:
        assert search_total(base, "colophon") > 0  # the app holds its reader (and the -shm) before the disk fills
        mark_pages(site, "sanderling")
        edit(next((site.root / "originals").glob("*.jpg")), 3)
        filler = fill(small_disk)
        for name in ("content", "photos"):
            result = site.run(name)
            assert result.returncode == 1, result.stdout  # a full disk fails the run, not photo by photo
            failed_cleanly(result)
        assert site.integrity() == "ok"
        assert site.rows("pages") == pages and site.rows("photos") == photos
        assert not [p for p in site.images.rglob("*.tmp")]  # no part of a file takes the space
        assert search_total(base, "sanderling") == 0 and search_total(base, "colophon") > 0
        assert requests.get(f"{base}/images/manifest.json", timeout=30).status_code == 200
        filler.unlink()
        for name in ("content", "photos"):
            ok(site.run(name))
        assert site.rows("photos") != photos
        poll(base, "/search.json?q=sanderling", lambda r: r.json()["total"] == 5, [])
        assert_published_whole(site)


def test_a_full_image_disk_fails_the_photos_run_and_keeps_the_archive(tmp_path, small_disk):
    """site.db has room; only the thumbnails' disk is full: the run fails with the disk's sentence
    instead of reporting the photos it reached as failed in a run recorded as ok."""
    site = make_site(tmp_path, photos=2)
    toml = site.root / "site.toml"
    toml.write_text(toml.read_text().replace('images_dir = "images"', f'images_dir = "{small_disk}/images"'))
    build(site, "photos")
    photos = site.rows("photos")
    edit(next((site.root / "originals").glob("*.jpg")), 5)
    filler = fill(small_disk)
    assert "No space left on device" in failed_cleanly(site.run("photos"))
    assert site.rows("photos") == photos and not list(site.images.rglob("*.tmp"))
    filler.unlink()
    ok(site.run("photos"))
    assert site.rows("photos") != photos
    assert_published_whole(site)


# -- reads that overlap writes ---------------------------------------------------------------------------


def test_a_read_held_open_across_a_job_and_the_apps_readers_never_see_busy(tmp_path):
    site = make_site(tmp_path)
    build(site, "content")
    long_read = sqlite3.connect(f"file:{site.db}?mode=ro", uri=True, isolation_level=None)
    long_read.execute("BEGIN")
    snapshot = long_read.execute("SELECT count(*), group_concat(hash) FROM pages").fetchone()
    seen: list[int] = []
    stop = threading.Event()
    with serve_wsgi(make_app(site.settings).wsgi) as base:
        def hammer():
            with requests.Session() as session:
                while not stop.is_set():
                    for path in ("/search.json?q=colophon", "/resume.json", "/photos/query.json", "/lens/census.json"):
                        seen.append(session.get(base + path, timeout=30).status_code)

        threads = [threading.Thread(target=hammer) for _ in range(4)]
        for thread in threads:
            thread.start()
        try:
            mark_pages(site, "knot")
            ok(site.run("content"))
        finally:
            stop.set()
            for thread in threads:
                thread.join()
        poll(base, "/search.json?q=knot", lambda r: r.json()["total"] == 5, seen)
    # the long read still sees the file as it began (Datasette's queries are such reads)
    assert long_read.execute("SELECT count(*), group_concat(hash) FROM pages").fetchone() == snapshot
    long_read.execute("COMMIT")
    long_read.close()
    assert seen and set(seen) == {200}


def test_a_commit_that_fails_leaves_no_transaction_open(tmp_path):
    conn = db.connect(tmp_path / "site.db")
    conn.isolation_level = None
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
    conn.execute("CREATE TABLE child (parent INTEGER REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED)")
    with pytest.raises(sqlite3.IntegrityError):
        with db.transaction(conn):
            conn.execute("INSERT INTO child VALUES (7)")  # checked only at COMMIT, which fails
    assert not conn.in_transaction
    with db.transaction(conn):  # the connection goes on working
        conn.execute("INSERT INTO parent VALUES (7)")
        conn.execute("INSERT INTO child VALUES (7)")
    assert conn.execute("SELECT count(*) FROM child").fetchone()[0] == 1
    conn.close()


@contextlib.contextmanager
def full_disk(folder: Path, size: str = "4m"):
    """A small tmpfs at `folder`, filled by whatever is put there and then `fill()`; unmounted after."""
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True)
    if mounted.returncode:
        pytest.skip("a tmpfs cannot be mounted here (it takes root and the mount capability)")

    def fill():
        with open(folder / "filler", "wb") as filler, contextlib.suppress(OSError):
            while True:
                filler.write(b"\0" * 65536)
                filler.flush()

    try:
        yield fill
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def test_an_app_started_on_a_full_disk_serves_site_db_as_it_stands(tmp_path, caplog, capsys):
    """After a restart on a full disk, with no process holding site.db open, SQLite cannot make the
    WAL index a reader needs: every route answered 503 though site.db was whole (ops_audit23 #3).
    A site.db whose WAL holds nothing is read as it stands on disk, said once in the log, and once
    the disk has room the readers follow the jobs' writes again. `jobs.py status`, which the owner
    runs just then, reads it the same way."""
    content = tmp_path / "content"
    shutil.copytree(ROOT / "content", content)
    built = make_settings(tmp_path / "built", content_dir=content)
    (tmp_path / "built").mkdir()
    build_site(built)
    with full_disk(tmp_path / "disk") as fill:
        settings = make_settings(tmp_path / "disk", content_dir=content)
        with contextlib.closing(sqlite3.connect(built.db_path)) as source, \
                contextlib.closing(sqlite3.connect(settings.db_path)) as copy:
            source.backup(copy)  # whole, its WAL checkpointed into it
        assert not Path(f"{settings.db_path}-wal").exists()
        fill()
        with serve_wsgi(make_app(settings).wsgi) as base:
            found = requests.get(base + "/search.json?q=carburetor", timeout=30)
            assert found.status_code == 200 and found.json()["results"], found.text[:300]
            assert requests.get(base + "/about", timeout=30).status_code == 200
            told = [r.getMessage() for r in caplog.records if "as it stands on disk" in r.getMessage()]
            assert len(told) == 1 and "check the disk: full" in told[0], told
            capsys.readouterr()
            assert jobs.status(settings) == 0
            assert re.search(r"^content +ok \S+: ", capsys.readouterr().out, re.M)
            (tmp_path / "disk" / "filler").unlink()  # room again: the jobs write, the readers follow
            (content / "pages" / "zebra.md").write_text("---\ntitle: Zebra crossing\nkind: page\npath: /zebra\n---\n"
                                                        "Striped quagga notes.\n")
            assert jobs.run_job(settings, "content")[0]
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if requests.get(base + "/search.json?q=quagga", timeout=30).json()["results"]:
                    break
                time.sleep(0.2)
            else:
                pytest.fail("the app kept reading site.db as it stood after the disk had room again")
