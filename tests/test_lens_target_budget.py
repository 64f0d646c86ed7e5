"""The lens's per-target budget on the real server: one site is scanned afresh at most
`[lens] target_scans` times per `target_window_s` for every caller together, over /lens/fetch (every
phase and mode), /lens/compare.json (each side), a redirect's host and the MCP lens and snapshot
tools; past it a 429 `rate_limited` (`limit` lens_target) with Retry-After comes before any request to that host
(counted at the loopback sites), and answers from the lens caches spend nothing. Each test runs
its own app, so its own budget; the window is an hour, so no test depends on how long it takes."""
import dataclasses
import json
import os
import re
import shutil
from contextlib import contextmanager

import pytest
import requests

from app import make_app
from conftest import ROOT, Client, build_site, make_settings
from lens_sites import site_fetcher
from servers import accepts, running, serve_wsgi
from siteapi.config import SettingsError, load_settings
from siteapi.lens.fetch import Target
from siteapi.lens.targets import TargetSpent, Visits, site_of
from siteapi.ratelimit import RatePolicy, TargetBudget, lens_target_budget
from test_stack_e2e import free_port

BUDGET = 3
REFUSAL = "fresh scans of {host} and its subdomains it makes in 3600 seconds for all its callers together"


@pytest.fixture(scope="module")
def settings(tmp_path_factory, dns_server, scanner):
    base = make_settings(tmp_path_factory.mktemp("lens-target-budget"))
    # one caller may spend the whole budget here; test_one_caller_has_a_share_of_a_site sets a share
    lens = {**base.section("lens"), "scan_timeout_s": 4, "probe_timeout_s": 2, "target_scans": BUDGET,
            "target_scans_per_caller": 10_000,
            "target_window_s": 3600, "dns_nameservers": [f"127.0.0.1#{dns_server.port}"],
            "cloudflare_scanner_url": f"http://127.0.0.1:{scanner.server_address[1]}/mcp"}
    settings = dataclasses.replace(base, sections={**base.sections, "lens": lens})
    build_site(settings)
    return settings


@contextmanager
def lens_app(settings, sites, checker, **lens):
    """A fresh app (so a fresh budget) aimed at the loopback sites, with `lens` settings changed."""
    if lens:
        settings = dataclasses.replace(settings, sections={**settings.sections,
                                                           "lens": {**settings.section("lens"), **lens}})
    with serve_wsgi(make_app(settings, fetcher=site_fetcher(sites)).wsgi) as base:
        yield Client(base, checker)


def fetch(api, url: str, caller: str, **params) -> requests.Response:
    return api.get("/lens/fetch", params={"url": url, **params}, headers={"X-Forwarded-For": caller})


def assert_refused(response: requests.Response, host: str) -> None:
    body = response.json()
    assert response.status_code == 429, response.text[:500]
    assert body["code"] == "rate_limited" and body["limit"] == "lens_target" and body["ok"] is False
    assert REFUSAL.format(host=host) in body["error"]
    retry = int(response.headers["Retry-After"])
    assert 1 <= retry <= 60 and body["retry_after"] == retry
    # RateLimit names the refusing limit with nothing left; RateLimit-Policy lists it after the caller's own
    assert response.headers["RateLimit"] == f'"lens_target";r=0;t={retry}'
    assert re.fullmatch(r'"(inspect|compare)";q=\d+;w=60, "lens_target";q=\d+;w=\d+', response.headers["RateLimit-Policy"])


def tool_call(api, name: str, arguments: dict, caller: str) -> dict:
    r = api.request("POST", "/mcp", headers={"X-Forwarded-For": caller, "Content-Type": "application/json",
                                             "Accept": "application/json, text/event-stream",
                                             "MCP-Protocol-Version": "2025-06-18"},
                    data=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                     "params": {"name": name, "arguments": arguments}}))
    assert r.status_code == 200, r.text
    return r.json()["result"]


def test_one_host_is_scanned_afresh_at_most_the_budget_for_all_callers(settings, sites, checker):
    with lens_app(settings, sites, checker) as api:
        scans = [fetch(api, sites.url("blog.test"), f"203.0.113.{n}") for n in range(BUDGET)]
        assert [r.status_code for r in scans] == [200] * BUDGET
        assert scans[-1].json()["phases"]["discoveryCached"] is True  # still the page and bot views: it spends
        before = sites.hosts["blog.test"]
        for params in ({}, {"phases": "page"}, {"botViews": "0"}):
            assert_refused(fetch(api, sites.url("blog.test", "/other"), "198.51.100.1", **params), "blog.test")
        assert sites.hosts["blog.test"] == before  # refused before any request
        assert fetch(api, sites.url("ready.test"), "198.51.100.1", phases="page").status_code == 200  # per host


def test_the_subdomains_of_a_domain_are_one_site(settings, sites, checker):
    """A server that answers every name under its domain is not scanned the budget once per name."""
    with lens_app(settings, sites, checker) as api:
        names = [f"x{n}.blog.test" for n in range(BUDGET)]
        assert [fetch(api, sites.url(name), "203.0.113.70", phases="page").status_code for name in names] == [200] * BUDGET
        before = dict(sites.hosts)
        for name in ("blog.test", "www.blog.test", "a.b.c.blog.test"):
            assert_refused(fetch(api, sites.url(name), "203.0.113.71", phases="page"), "blog.test")
        assert dict(sites.hosts) == before
        assert fetch(api, sites.url("ready.test"), "203.0.113.71", phases="page").status_code == 200


@pytest.mark.parametrize("host, site", [
    ("blog.test", "blog.test"), ("x1.blog.test", "blog.test"), ("WWW.Example.com", "example.com"),
    ("a.b.example.co.uk", "example.co.uk"),          # co.uk is a public suffix: the company is the site
    ("alice.github.io", "alice.github.io"),          # so is github.io (the list's private section)
    ("github.io", "github.io"), ("localhost", "localhost"),
    ("93.184.215.14", "93.184.215.14"),              # an IPv4 address alone
    ("2001:db8:7:1::5", "2001:db8:7:1::/64"),        # an IPv6 address by its /64
])
def test_what_one_site_is(host, site):
    assert site_of(host) == site


def test_the_addresses_of_one_ipv6_slash_64_are_one_site():
    budget = TargetBudget(RatePolicy("lens_target", 1, 3600))
    first_scan, second_scan = Visits(budget), Visits(budget)
    def hop(address):
        return Target("http", address, 80, "/", literal=True)

    first_scan(hop("2001:db8:7:1::5"))
    first_scan(hop("2001:db8:7:1:ffff::9"))  # the same scan at the same site again rides on its unit
    with pytest.raises(TargetSpent, match=r"fresh scans of the addresses in 2001:db8:7:1::/64 it makes"):
        second_scan(hop("2001:db8:7:1:ffff::9"))
    second_scan(hop("2001:db8:7:2::5"))  # the next /64 is another site


def test_answers_from_the_lens_caches_spend_nothing(settings, sites, checker, scanner):
    with lens_app(settings, sites, checker) as api:
        levels = [fetch(api, sites.url("blog.test", "/levels"), "203.0.113.20", mode="cloudflare") for _ in range(5)]
        assert [r.json()["fromCache"] for r in levels] == [False, True, True, True, True]
        for _ in range(BUDGET - 1):
            assert fetch(api, sites.url("blog.test"), "203.0.113.21", phases="page").status_code == 200
        assert_refused(fetch(api, sites.url("blog.test"), "203.0.113.21", phases="page"), "blog.test")
        assert fetch(api, sites.url("blog.test", "/levels"), "203.0.113.22", mode="cloudflare").json()["fromCache"]
        calls = len(scanner.calls)
        assert_refused(fetch(api, sites.url("blog.test", "/new"), "203.0.113.22", mode="cloudflare"), "blog.test")
        assert len(scanner.calls) == calls  # not forwarded to the scanner either


def test_the_cdn_scanner_is_asked_at_most_the_budget_for_all_callers(settings, sites, checker, scanner):
    """mode=cloudflare sends the target to a third party: its own site has a budget like any other."""
    with lens_app(settings, sites, checker) as api:
        for n, site in enumerate(("blog.test", "ready.test", "spa.test")):
            assert fetch(api, sites.url(site, "/scanner"), f"203.0.113.6{n}", mode="cloudflare").json()["available"]
        calls = len(scanner.calls)
        r = fetch(api, sites.url("paid.test", "/scanner"), "203.0.113.69", mode="cloudflare")
        assert r.status_code == 429 and r.json()["code"] == "rate_limited" and r.json()["ok"] is False
        assert r.json()["limit"] == "lens_target"
        assert (f"has made the {BUDGET} requests to the agent-readiness scanner at 127.0.0.1 it makes in 3600 seconds"
                in r.json()["error"])
        assert r.headers["RateLimit"] == f'"lens_target";r=0;t={r.headers["Retry-After"]}'
        assert len(scanner.calls) == calls  # not asked


def test_compare_spends_for_each_side_before_either_fetches(settings, sites, checker):
    with lens_app(settings, sites, checker) as api:
        for _ in range(BUDGET):
            assert fetch(api, sites.url("blog.test"), "203.0.113.30", phases="page").status_code == 200
        before = dict(sites.hosts)
        r = api.get("/lens/compare.json", params={"left": sites.url("ready.test"), "right": sites.url("blog.test")},
                    headers={"X-Forwarded-For": "203.0.113.31"})
        assert_refused(r, "blog.test")
        assert r.json()["side"] == "right" and r.json()["error"].startswith("The right URL could not be inspected")
        assert dict(sites.hosts) == before  # not even the left side was fetched


def test_a_redirect_spends_the_budget_of_the_host_it_leads_to(settings, sites, checker):
    with lens_app(settings, sites, checker) as api:
        for _ in range(BUDGET):
            assert fetch(api, sites.url("landing.test", "/shop/"), "203.0.113.40", phases="page").status_code == 200
        landing = sites.hosts["landing.test"]
        assert_refused(fetch(api, sites.url("moved.test"), "203.0.113.41", phases="page"), "landing.test")
        assert_refused(fetch(api, sites.url("moved.test"), "203.0.113.41"), "landing.test")
        assert sites.hosts["landing.test"] == landing
        assert fetch(api, sites.url("moved.test", "/stay"), "203.0.113.41", phases="page").status_code == 200


def test_one_caller_has_a_share_of_a_site(settings, sites, checker):
    """The site's budget is everyone's: one caller, whose own inspect budget is larger, had kept a
    site refused to every other caller. Past its share a caller is refused; the others go on."""
    with lens_app(settings, sites, checker, target_scans_per_caller=1) as api:
        assert fetch(api, sites.url("blog.test"), "203.0.113.80", phases="page").status_code == 200
        mine = fetch(api, sites.url("blog.test", "/again"), "203.0.113.80", phases="page")
        assert mine.status_code == 429 and mine.json()["limit"] == "lens_target_caller"
        assert "one caller may have in 3600 seconds" in mine.json()["error"]
        assert mine.headers["RateLimit"] == f'"lens_target_caller";r=0;t={mine.headers["Retry-After"]}'
        assert fetch(api, sites.url("blog.test"), "203.0.113.81", phases="page").status_code == 200  # another caller
        assert fetch(api, sites.url("ready.test"), "203.0.113.80", phases="page").status_code == 200  # another site


def test_the_mcp_lens_and_snapshot_tools_answer_the_refusal(settings, sites, checker):
    with lens_app(settings, sites, checker) as api:
        captured = tool_call(api, "representation_capture", {"url": sites.url("blog.test")}, "203.0.113.50")
        assert captured["isError"] is False
        snapshot_id = captured["structuredContent"]["snapshots"][0]["id"]
        for _ in range(BUDGET - 1):
            assert tool_call(api, "lens_page", {"url": sites.url("blog.test")}, "203.0.113.51")["isError"] is False
        before = sites.hosts["blog.test"]
        for name, arguments in (("lens_page", {"url": sites.url("blog.test")}),
                                ("lens_inspect", {"url": sites.url("blog.test")}),
                                ("lens_compare", {"left": sites.url("blog.test"), "right": sites.url("blog.test")}),
                                ("representation_capture", {"url": sites.url("blog.test")}),
                                ("representation_compare", {"snapshot_id": snapshot_id})):
            result = tool_call(api, name, arguments, "203.0.113.52")
            assert result["isError"] is True and REFUSAL.format(host="blog.test") in result["content"][0]["text"], name
        assert sites.hosts["blog.test"] == before


def test_the_worst_a_victim_receives_is_the_budget_times_one_scan(settings, sites, checker):
    """Discovery never cached (as after its rows are pushed out), full scans with bot views, a new
    caller each time, at the budget site.toml ships per window."""
    shipped = load_settings(ROOT / "site.toml").section("lens")["target_scans"]
    with lens_app(settings, sites, checker, target_scans=shipped, discovery_cache_hours=0) as api:
        first = sites.hosts["ready.test"]
        assert fetch(api, sites.url("ready.test"), "198.51.100.100").status_code == 200
        one_scan = sites.hosts["ready.test"] - first
        answers = [fetch(api, sites.url("ready.test"), f"198.51.100.{n}").status_code for n in range(101, 101 + shipped)]
        assert answers == [200] * (shipped - 1) + [429]
        assert sites.hosts["ready.test"] - first == shipped * one_scan


@pytest.mark.skipif(shutil.which("redis-server") is None and not os.environ.get("CI"),
                    reason="redis-server is not installed (CI installs it)")
def test_app_processes_share_the_budget_through_the_rate_store(settings, sites, checker, tmp_path):
    port = free_port()
    with running(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                  "--dir", str(tmp_path)], lambda: accepts(port), "redis"):
        shared = dataclasses.replace(settings, rate_storage=f"redis://127.0.0.1:{port}")
        with lens_app(shared, sites, checker) as one, lens_app(shared, sites, checker) as two:
            codes = [fetch(api, sites.url("blog.test"), "203.0.113.60", phases="page").status_code
                     for api in (one, two, one)]
            assert codes == [200] * BUDGET
            assert_refused(fetch(two, sites.url("blog.test"), "203.0.113.61", phases="page"), "blog.test")


@pytest.mark.parametrize("line, sentence", [
    ("target_scans = 0", "Setting [lens] target_scans (SITE_LENS_TARGET_SCANS) must be a whole number from 1 to 10000"),
    ("target_window_s = 1.5", "Setting [lens] target_window_s (SITE_LENS_TARGET_WINDOW_S) must be a whole number"),
    ("target_windows = 60", "Setting [lens] target_windows is not one this site reads"),
])
def test_the_budget_is_checked_at_start_up(tmp_path, line, sentence):
    text = (ROOT / "site.toml").read_text()
    key = line.split(" =")[0]
    assert "\n[lens]\n" in text
    text = "\n".join(ln for ln in text.splitlines() if not ln.startswith(key + " "))
    (tmp_path / "site.toml").write_text(text.replace("\n[lens]\n", f"\n[lens]\n{line}\n"))
    with pytest.raises(SettingsError) as refused:
        load_settings(tmp_path / "site.toml")
    assert sentence in str(refused.value)


def without_a_caller_share(settings, **lens):
    """`settings` with `lens` changed and no [lens] target_scans_per_caller: the default share."""
    section = {k: v for k, v in settings.section("lens").items() if k != "target_scans_per_caller"}
    return dataclasses.replace(settings, sections={**settings.sections, "lens": {**section, **lens}})


@pytest.mark.parametrize("scans, share", [(20, 10), (4, 2), (5, 2), (1, 1)])
def test_by_default_one_caller_has_half_of_a_sites_scans(settings, scans, share):
    budget = lens_target_budget(without_a_caller_share(settings, target_scans=scans))
    assert budget.policy.quota == scans and budget.share.quota == share
    assert budget.share.name == "lens_target_caller" and budget.share.window == budget.policy.window == 3600


def test_the_shipped_settings_give_one_caller_half_of_a_sites_scans():
    shipped = load_settings(ROOT / "site.toml")
    assert "target_scans_per_caller" not in shipped.section("lens")  # the default is what production runs with
    budget = lens_target_budget(shipped)
    assert budget.share.quota == budget.policy.quota // 2 == 10


def test_by_default_a_caller_past_half_of_a_sites_scans_is_refused_and_the_others_go_on(settings, sites, checker):
    defaulted = without_a_caller_share(settings, target_scans=4)
    with serve_wsgi(make_app(defaulted, fetcher=site_fetcher(sites)).wsgi) as base:
        api = Client(base, checker)
        assert [fetch(api, sites.url("blog.test", f"/a{n}"), "203.0.113.90", phases="page").status_code
                for n in range(2)] == [200, 200]
        mine = fetch(api, sites.url("blog.test", "/a2"), "203.0.113.90", phases="page")
        assert mine.status_code == 429 and mine.json()["limit"] == "lens_target_caller"
        assert "one caller may have in 3600 seconds" in mine.json()["error"]
        assert mine.headers["RateLimit"] == f'"lens_target_caller";r=0;t={mine.headers["Retry-After"]}'
        assert re.search(r'"lens_target_caller";q=2;w=3600', mine.headers["RateLimit-Policy"]), mine.headers["RateLimit-Policy"]
        assert [fetch(api, sites.url("blog.test", f"/b{n}"), "203.0.113.91", phases="page").status_code
                for n in range(2)] == [200, 200]  # another caller has the other half
        assert_refused(fetch(api, sites.url("blog.test", "/c"), "203.0.113.92", phases="page"), "blog.test")
