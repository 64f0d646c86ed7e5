"""Rate limits on the real server: exact under 8 concurrent threads, the 429's headers, and a
second caller unaffected. Callers are told apart by X-Forwarded-For from the trusted proxy."""
import dataclasses
import os
import re
import shutil
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from app import make_app
from conftest import ROOT
from servers import serve_wsgi
from siteapi.config import RatePolicy, load_settings
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
        checked = len(checker.checked)
        checker.validate("GET", "/search.json", refused)  # the 429 body is the documented Error
        assert checker.checked[checked:] == [("/search.json", 429)]
        body = refused.json()
        assert body["code"] == "rate_limited" and "25 per 60 seconds" in body["error"]
        assert 1 <= int(refused.headers["Retry-After"]) <= 60
        assert refused.headers["RateLimit-Policy"] == '"read";q=25;w=60'
        assert refused.headers["RateLimit"].startswith('"read";r=0;t=')
        assert refused.headers["Cache-Control"] == "no-store"  # unlike the route's other 4xx, never kept

        other = requests.get(base + "/search.json?q=garage", headers={"X-Forwarded-For": "198.51.100.9"}, timeout=30)
        assert other.status_code == 200 and other.headers["RateLimit"].startswith('"read";r=24;')


def test_a_refusal_keeps_the_fields_of_the_endpoints_errors(site_settings, checker):
    """API.md 2.1: `ok: false` where the endpoint has an ok flag, `tracks: []` on /rn/tracks."""
    settings = dataclasses.replace(site_settings, rates={**site_settings.rates, "read": RatePolicy("read", 1, 60),
                                                         "compare": RatePolicy("compare", 1, 60)})
    with serve_wsgi(make_app(settings).wsgi) as base:
        for path, expected in (("/lens/compare.json", {"ok": False}), ("/ledger.json", {"ok": False}),
                               ("/rn/tracks", {"tracks": []})):
            refused = [requests.get(base + path, headers={"X-Forwarded-For": "203.0.113.60"}, timeout=30)
                       for _ in range(2)][-1]
            assert refused.status_code == 429 and refused.json().items() >= expected.items(), path
            checker.validate("GET", path, refused)


# RFC 9651 for the fields' members: an sf-string, then parameters whose values are sf-integers.
SF_MEMBER = re.compile(r'"(?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\["\\])*"(;[a-z*][a-z0-9_.*-]*=-?[0-9]{1,15})*')


def test_headers_at_the_window_boundary_are_structured_fields(site_settings):
    settings = dataclasses.replace(site_settings, rates={**site_settings.rates, "read": RatePolicy("read", 3, 60)})
    with serve_wsgi(make_app(settings).wsgi) as base:
        answers = [requests.get(base + "/robots.txt", headers={"X-Forwarded-For": "203.0.113.50"}, timeout=30)
                   for _ in range(4)]
    assert [r.status_code for r in answers] == [200, 200, 200, 429]
    for n, r in enumerate(answers):
        assert SF_MEMBER.fullmatch(r.headers["RateLimit-Policy"]) and SF_MEMBER.fullmatch(r.headers["RateLimit"])
        params = dict(p.split("=") for p in r.headers["RateLimit"].split(";")[1:])
        assert int(params["r"]) == max(0, 2 - n) and 1 <= int(params["t"]) <= 60  # the third request leaves r=0
    assert answers[3].headers["Retry-After"] == params["t"] and answers[3].json()["retry_after"] == int(params["t"])



def test_a_refusal_under_a_window_over_a_minute_says_t_as_retry_after(site_settings, tmp_path):
    """API.md §8: the refusing policy shows r=0 for up to t=60 seconds, and t is Retry-After
    (1..60), whatever `[rate] <policy>_w` is: under an hour's window a 429 had said t=3599."""
    text = (ROOT / "site.toml").read_text()
    assert "\nread_q = 120\nread_w = 60\n" in text
    (tmp_path / "site.toml").write_text(text.replace("\nread_q = 120\nread_w = 60\n", "\nread_q = 2\nread_w = 3600\n"))
    rates = load_settings(tmp_path / "site.toml").rates
    assert rates["read"] == RatePolicy("read", 2, 3600)
    settings = dataclasses.replace(site_settings, rates={**site_settings.rates, "read": rates["read"]})
    with serve_wsgi(make_app(settings).wsgi) as base:
        answers = [requests.get(base + "/search.json?q=garage", headers={"X-Forwarded-For": "203.0.113.55"}, timeout=30)
                   for _ in range(3)]
    assert [r.status_code for r in answers] == [200, 200, 429]
    assert answers[0].headers["RateLimit"].startswith('"read";r=1;t=')  # an allowed answer's t is the window's reset
    assert int(answers[0].headers["RateLimit"].rsplit("=", 1)[1]) > 60
    refused = answers[2]
    retry = int(refused.headers["Retry-After"])
    assert 1 <= retry <= 60 and refused.json()["retry_after"] == retry
    assert refused.headers["RateLimit"] == f'"read";r=0;t={retry}'
    assert refused.headers["RateLimit-Policy"] == '"read";q=2;w=3600'

def test_callers_are_addresses_in_one_spelling_and_ipv6_by_its_64(site_settings):
    """Caddy's X-Forwarded-For names the client; the hops a client wrote before it are not the caller.
    An IPv6 subscriber holds a whole /64, so stepping through it must not buy a fresh budget."""
    settings = dataclasses.replace(site_settings, rates={**site_settings.rates, "read": RatePolicy("read", 2, 60)})
    with serve_wsgi(make_app(settings).wsgi) as base:
        def codes(*forwarded_for):
            return [requests.get(base + "/robots.txt", headers={"X-Forwarded-For": xff}, timeout=30).status_code
                    for xff in forwarded_for]

        assert codes("2001:db8:7:1::1", "2001:DB8:7:1:ffff:0:0:9", "2001:db8:7:1:abcd::2") == [200, 200, 429]
        assert codes("2001:db8:7:2::1") == [200]  # the next /64 is another subscriber
        assert codes("[::ffff:203.0.113.60]", "203.0.113.60", "203.0.113.60") == [200, 200, 429]  # IPv4-mapped
        assert codes("192.0.2.1, 203.0.113.61", "192.0.2.2, 203.0.113.61", "192.0.2.3, 203.0.113.61") == [200, 200, 429]


def test_an_ipv6_caller_spends_one_budget_over_http_and_mcp(site_settings):
    """An MCP tool runs its endpoint for the caller it was called by: the /64 must stay that caller,
    for the POST's read unit and for the endpoint's own budget (lens_compare: `compare`)."""
    rates = {**site_settings.rates, "read": RatePolicy("read", 4, 60), "compare": RatePolicy("compare", 1, 60)}
    settings = dataclasses.replace(site_settings, rates=rates)
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "lens_compare", "arguments": {"left": "http://10.0.0.1/", "right": "http://10.0.0.2/"}}}
    with serve_wsgi(make_app(settings).wsgi) as base:
        tool = requests.post(base + "/mcp", json=call, timeout=30, headers={
            "X-Forwarded-For": "2001:db8:9:1::1", "MCP-Protocol-Version": "2025-06-18",
            "Accept": "application/json, text/event-stream"})
        assert "public internet addresses" in tool.json()["result"]["content"][0]["text"]  # a read and a compare unit
        codes = [requests.get(base + "/search.json?q=garage", headers={"X-Forwarded-For": xff}, timeout=30).status_code
                 for xff in ("2001:db8:9:1::2", "2001:db8:9:1::3", "2001:db8:9:1::4", "2001:db8:9:1::5")]
        compared = requests.get(base + "/lens/compare.json?left=http://10.0.0.1/&right=http://10.0.0.2/",
                                headers={"X-Forwarded-For": "2001:db8:9:1::6"}, timeout=30)
    assert codes == [200, 200, 200, 429]
    assert compared.status_code == 429 and "compare budget is 1" in compared.json()["error"]


def test_a_flood_of_callers_seen_once_are_each_counted():
    """Each distinct address has its own counter until the next sweep (what one costs in memory is
    bench_ratelimit.py's figure)."""
    from siteapi import ratelimit

    windows = ratelimit.MemoryWindows()
    callers = 20_000
    for n in range(callers):
        assert windows.hit(("read", f"10.{n >> 16}.{(n >> 8) & 255}.{n & 255}", 60), 120, 60)[:2] == (True, 119)
    assert len(windows._hits) == callers


def test_untrusted_forwarded_for_is_ignored(site_settings):
    settings = dataclasses.replace(site_settings, rates={**site_settings.rates, "read": RatePolicy("read", 2, 60)})
    with serve_wsgi(make_app(settings).wsgi, trusted_proxy=False) as base:
        codes = [requests.get(base + "/robots.txt", headers={"X-Forwarded-For": f"192.0.2.{i}"}, timeout=30).status_code
                 for i in range(3)]
    assert codes == [200, 200, 429]  # spoofed addresses do not buy a fresh budget


def test_the_caller_is_the_forwarded_for_entry_the_trusted_proxy_wrote(site_settings):
    """Only the last X-Forwarded-For entry is the edge's; what the client wrote before it buys no
    fresh budget, should an edge ever append rather than replace (mutation_audit24 M70)."""
    settings = dataclasses.replace(site_settings, rates={**site_settings.rates, "read": RatePolicy("read", 2, 60)})
    with serve_wsgi(make_app(settings).wsgi) as base:
        codes = [requests.get(base + "/robots.txt", headers={"X-Forwarded-For": f"192.0.2.{i}, 203.0.113.9"},
                              timeout=30).status_code for i in range(3)]
        other = requests.get(base + "/robots.txt", headers={"X-Forwarded-For": "192.0.2.1, 203.0.113.10"}, timeout=30)
    assert codes == [200, 200, 429] and other.status_code == 200


def test_memory_windows_move_and_forget_idle_callers():
    from siteapi import ratelimit

    clock = [1000.0]
    windows = ratelimit.MemoryWindows(clock=lambda: clock[0])
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


def test_a_flood_of_new_callers_is_forgotten_as_their_windows_empty():
    """Every hit a new caller (a flood of addresses, /64s, random lens targets): the sweep waited for
    as many hits as there were keys, a count that grew as fast as the hits, so it never came again
    and every key stayed (soak_audit25: ~1 GB in two hours at 500 new /64s a second)."""
    from siteapi import ratelimit

    clock = [1000.0]
    windows = ratelimit.MemoryWindows(clock=lambda: clock[0])
    most = 0
    for n in range(120_000):  # 100 new callers a second for 20 minutes, a 60-second window each
        clock[0] += 0.01
        windows.hit(("read", f"2001:db8:{n:x}::/64", 60), 60, 60)
        most = max(most, len(windows._hits))
    assert most <= 2 * 6_000 + windows.PRUNE_EVERY  # the live minute's callers, twice at most, not 120,000
    for _ in range(3):  # the flood stops; one caller comes back now and then (review25b N3)
        clock[0] += 61
        windows.hit(("read", "198.51.100.9", 60), 60, 60)
    assert len(windows._hits) == 1


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
    # The store gone: each process counts alone again (a 500 on every request before)
    assert [one.hit("read", "a").allowed for _ in range(4)] == [True, True, True, False]
    assert dict(one.hit("read", "a").headers())["RateLimit"].startswith('"read";r=0;t=')


def test_a_refusal_counts_its_wait_in_words():
    """"retry in 1 seconds" was the sentence of every refusal with a second to wait (html_audit25 F6)."""
    limiter = RateLimiter({"tick": RatePolicy("tick", 1, 1), "slow": RatePolicy("slow", 1, 60)}, "memory://")
    for policy, wait in (("tick", r"retry in 1 second\."), ("slow", r"retry in [2-6][0-9] seconds\.")):
        assert limiter.hit(policy, "198.51.100.7").allowed
        refused = limiter.hit(policy, "198.51.100.7")
        assert not refused.allowed and re.search(wait + "$", refused.refusal()), refused.refusal()
