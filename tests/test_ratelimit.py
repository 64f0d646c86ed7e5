"""Rate limits on the real server: exact under 8 concurrent threads, the 429's headers, and a
second caller unaffected. Callers are told apart by X-Forwarded-For from the trusted proxy."""
import dataclasses
import os
import shutil
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from app import make_app
from servers import serve_wsgi
from siteapi.config import RatePolicy
from siteapi.ratelimit import RateLimiter
from test_stack_e2e import free_port


def test_quota_is_exact_under_concurrency(site_settings, checker):
    settings = dataclasses.replace(site_settings, rates={**site_settings.rates, "read": RatePolicy("read", 25, 60)})
    with serve_wsgi(make_app(settings).wsgi) as base:
        def hit(_):
            return requests.get(base + "/search.json?q=garage", headers={"X-Forwarded-For": "203.0.113.7"}, timeout=30)

        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(hit, range(40)))
        codes = [r.status_code for r in answers]
        assert codes.count(200) == 25 and codes.count(429) == 15

        refused = next(r for r in answers if r.status_code == 429)
        checker.validate("GET", "/search.json", refused)  # the 429 body is the documented Error
        assert ("/search.json", 429) in checker.checked
        body = refused.json()
        assert body["code"] == "rate_limited" and "25 per 60 seconds" in body["error"]
        assert 1 <= int(refused.headers["Retry-After"]) <= 60
        assert refused.headers["RateLimit-Policy"] == '"read";q=25;w=60'
        assert refused.headers["RateLimit"].startswith('"read";r=0;t=')

        other = requests.get(base + "/search.json?q=garage", headers={"X-Forwarded-For": "198.51.100.9"}, timeout=30)
        assert other.status_code == 200 and other.headers["RateLimit"].startswith('"read";r=24;')


def test_untrusted_forwarded_for_is_ignored(site_settings):
    settings = dataclasses.replace(site_settings, rates={**site_settings.rates, "read": RatePolicy("read", 2, 60)})
    with serve_wsgi(make_app(settings).wsgi, trusted_proxy=False) as base:
        codes = [requests.get(base + "/robots.txt", headers={"X-Forwarded-For": f"192.0.2.{i}"}, timeout=30).status_code
                 for i in range(3)]
    assert codes == [200, 200, 429]  # spoofed addresses do not buy a fresh budget


def test_memory_windows_move_and_forget_idle_callers(monkeypatch):
    from siteapi import ratelimit

    clock = [1000.0]
    monkeypatch.setattr(ratelimit.time, "monotonic", lambda: clock[0])
    windows = ratelimit.MemoryWindows()
    key = ("read", "203.0.113.1", 60)
    assert [windows.hit(key, 2, 60)[:2] for _ in range(3)] == [(True, 1), (True, 0), (False, 0)]
    clock[0] += 30
    allowed, remaining, reset = windows.hit(key, 2, 60)
    assert (allowed, remaining) == (False, 0) and reset == 30  # the first hit frees a unit at 60 s
    clock[0] += 30
    assert windows.hit(key, 2, 60)[:2] == (True, 1)  # both old hits left the window; this one is in
    clock[0] += 120
    windows.PRUNE_EVERY = 1
    windows.hit(("read", "198.51.100.2", 60), 2, 60)
    assert key not in windows._hits  # an idle caller's history is dropped


@pytest.mark.skipif(shutil.which("redis-server") is None and not os.environ.get("CI"),
                    reason="redis-server is not installed")
def test_several_processes_share_counts_through_redis(tmp_path):
    port = free_port()
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "no", "--dir", str(tmp_path)], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        policies = {"read": RatePolicy("read", 3, 60)}
        one = RateLimiter(policies, f"redis://127.0.0.1:{port}")
        two = RateLimiter(policies, f"redis://127.0.0.1:{port}")  # another app process
        answers = [one.hit("read", "a"), two.hit("read", "a"), one.hit("read", "a"), two.hit("read", "a")]
        assert [d.allowed for d in answers] == [True, True, True, False]
        assert [d.remaining for d in answers[:3]] == [2, 1, 0]
        assert dict(answers[3].headers())["RateLimit"].startswith('"read";r=0;t=') and 1 <= answers[3].reset <= 60
        assert two.hit("read", "b").allowed
    finally:
        server.terminate()
        server.wait(timeout=10)
