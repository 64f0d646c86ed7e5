"""One deadline for a whole feed call (siteapi.feeds.session and time_limit), proved on the calendar
job against loopback servers: every redirect hop, the name lookup and connect of each hop, and
calls made through the proxy that HTTP_PROXY or HTTPS_PROXY names (which the playlist job uses too)."""
from __future__ import annotations

import datetime as dt
import os
import shutil
import subprocess
import sys
import time

import pytest

from siteapi.config import ROOT
from siteapi.feeds import FeedError
from siteapi.feeds.coffee import run_calendar
from siteapi.feeds.tracks import run_tracks
from test_feeds_coffee import NOW, OWNER_CALENDAR, settings_for, stored_busy
from feeds_servers import (BlackHole, ForwardProxy, IcsServer, SilentNameServer, SpotifyServer, feeds_settings,
                                 trusted_tls_ics)

LIMIT = 2.0  # the calendar call's time limit in these tests
# Past the limit: the job's own work after the cut, on a busy machine. Each fault below holds the
# job for 10 s or more without the limit.
SLACK = 4.0


@pytest.fixture
def feed(monkeypatch):
    server = IcsServer(OWNER_CALENDAR)
    monkeypatch.setenv("SITE_CALENDAR_ICS_URL", server.feed_url)
    yield server
    server.close()


@pytest.fixture
def proxy(monkeypatch):
    """The proxy every HTTP client of the process now uses: its `requests` may list other callers."""
    server = ForwardProxy()
    for name in ("NO_PROXY", "no_proxy", "http_proxy", "https_proxy", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", server.url)
    monkeypatch.setenv("HTTPS_PROXY", server.url)
    yield server
    server.close()


def timed_run(settings) -> tuple[str, float]:
    started = time.monotonic()
    with pytest.raises(FeedError) as caught:
        run_calendar(settings, now=NOW)
    return str(caught.value), time.monotonic() - started


def test_thirty_slow_redirect_hops_share_one_deadline(tmp_path, feed):
    """Each hop is a new request, with a socket read timeout of its own: the limit is the call's."""
    feed.redirect_to, feed.redirect_delay = "/calendar.ics", 0.5  # 30 hops, 15 s
    message, elapsed = timed_run(settings_for(tmp_path, calendar_timeout=LIMIT))
    assert "took longer than its time limit" in message
    assert elapsed < LIMIT + SLACK and len(feed.requests) <= 5


def test_a_hop_whose_connect_hangs_gets_only_the_time_left(tmp_path, feed):
    """A connecting socket is no socket the watchdog can shut down yet: the second hop's connect
    used to wait its own full timeout past the call's deadline (3 + 4 s for a 4 s limit)."""
    hole = BlackHole()
    try:
        feed.redirect_to, feed.redirect_delay = hole.url, 3.0
        message, elapsed = timed_run(settings_for(tmp_path, calendar_timeout=4.0))
    finally:
        hole.close()
    assert "took longer than its time limit" in message
    assert elapsed < 4.0 + SLACK


# The calendar job in a child, printing how long it took and the FeedError it raised.
CALENDAR_JOB = """
import sys, time
from siteapi.config import load_settings
from siteapi.feeds import FeedError
from siteapi.feeds.coffee import run_calendar

started = time.monotonic()
try:
    run_calendar(load_settings(sys.argv[1]))
except FeedError as exc:
    print(f"{time.monotonic() - started:.2f} {exc}")
"""


def can_bind_mount_in_a_namespace() -> bool:
    """Root with unshare(1), in a container that lets it make a mount namespace."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    probe = subprocess.run(["unshare", "--mount", "sh", "-c", "mount --bind /etc/resolv.conf /etc/resolv.conf"],
                           capture_output=True, timeout=60)
    return probe.returncode == 0


@pytest.mark.skipif(not can_bind_mount_in_a_namespace(),
                    reason="a child gets its own /etc/resolv.conf in a mount namespace: root, unshare(1) and a "
                           "container that allows it")
def test_a_name_lookup_that_hangs_gets_only_the_time_left(tmp_path):
    """getaddrinfo can be neither interrupted nor given a timeout, and a name server that never
    answers holds it for resolv.conf's timeout times its attempts, per server and search domain: the
    job was held for all of that past its 2 s limit (20 s here; 10 s with glibc's defaults and one
    server). It runs in a child whose /etc/resolv.conf names a loopback server that never answers."""
    dns = SilentNameServer()
    resolv_conf = tmp_path / "resolv.conf"
    resolv_conf.write_text(f"nameserver {dns.address}\noptions timeout:20 attempts:1\n")
    settings_for(tmp_path, calendar_timeout=LIMIT)  # writes tmp_path / "site.toml"
    env = {name: value for name, value in os.environ.items() if "proxy" not in name.lower()}
    env["SITE_CALENDAR_ICS_URL"] = "http://calendar.feeds.test/calendar.ics"
    try:
        child = subprocess.run(["unshare", "--mount", "sh", "-c", 'mount --bind "$0" /etc/resolv.conf && exec "$@"',
                                resolv_conf, sys.executable, "-c", CALENDAR_JOB, tmp_path / "site.toml"],
                               env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    finally:
        dns.close()
    assert child.returncode == 0, child.stderr
    elapsed, _, message = child.stdout.strip().partition(" ")
    assert "took longer than its time limit" in message
    assert float(elapsed) < LIMIT + SLACK
    assert "calendar.feeds.test" in dns.names  # the lookup was a real one, asked of the silent server


def test_calls_go_through_the_proxy_the_environment_names(tmp_path, feed, proxy):
    settings = settings_for(tmp_path)
    assert "8 busy intervals" in run_calendar(settings, now=NOW)
    assert ("GET", feed.feed_url) in proxy.requests
    assert stored_busy(settings)


def test_the_playlist_job_goes_through_the_proxy_too(tmp_path, monkeypatch, proxy):
    spotify = SpotifyServer()
    monkeypatch.setenv("SITE_SPOTIFY_CLIENT_ID", SpotifyServer.CLIENT[0])
    monkeypatch.setenv("SITE_SPOTIFY_CLIENT_SECRET", SpotifyServer.CLIENT[1])
    try:
        settings = feeds_settings(tmp_path, {"spotify_api_base": spotify.api_base, "spotify_timeout": 10.0,
                                            "spotify_token_url": spotify.url + "/api/token",
                                            "playlist_id": spotify.playlist_id})
        assert "5 tracks" in run_tracks(settings)
    finally:
        spotify.close()
    assert ("POST", spotify.url + "/api/token") in proxy.requests  # the form and credentials went along
    assert ("GET", f"{spotify.api_base}/playlists/{spotify.playlist_id}") in proxy.requests


@pytest.mark.parametrize("fault", ["drip-headers", "slow-redirects"])
def test_calls_through_a_proxy_keep_their_deadline(tmp_path, feed, proxy, fault):
    """The proxy's connections came from urllib3's own pools, which nothing watched: a feed that
    dripped its headers held the job for all of its 10 s, 30 slow redirects for 15 s."""
    if fault == "slow-redirects":
        feed.redirect_to, feed.redirect_delay = "/calendar.ics", 0.5
    else:
        feed.fault = fault
    message, elapsed = timed_run(settings_for(tmp_path, calendar_timeout=LIMIT))
    assert "took longer than its time limit" in message
    assert elapsed < LIMIT + SLACK and feed.dripped < 100 and len(feed.requests) <= 5
    assert ("GET", feed.feed_url) in proxy.requests


def test_https_through_a_proxy_tunnel_keeps_its_deadline(tmp_path, monkeypatch, proxy):
    with trusted_tls_ics(monkeypatch, OWNER_CALENDAR) as server:
        monkeypatch.setenv("SITE_CALENDAR_ICS_URL", server.feed_url)
        assert "8 busy intervals" in run_calendar(settings_for(tmp_path), now=NOW - dt.timedelta(minutes=5))
        server.fault = "drip-headers"
        message, elapsed = timed_run(settings_for(tmp_path, calendar_timeout=LIMIT))
    assert "took longer than its time limit" in message
    assert elapsed < LIMIT + SLACK and server.dripped < 100
    port = server.url.rsplit(":", 1)[1]
    assert proxy.requests.count(("CONNECT", f"127.0.0.1:{port}")) == 2
