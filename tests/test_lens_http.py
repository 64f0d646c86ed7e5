"""The lens endpoints on the real server (waitress), aimed through the fetcher seam at the loopback
fixture webs: /lens/fetch (page phase, full scan, mode=cloudflare), /lens/compare.json with its own
budget, /lens/census.json. Every JSON answer is validated against /openapi.json."""
import dataclasses

import pytest

import lens_web
from app import make_app
from conftest import Client, build_site, make_settings
from lens_sites import site_fetcher, start_scanner
from servers import serve_wsgi, stop_thread
from siteapi.config import RatePolicy
from siteapi.lens import census


@pytest.fixture(scope="module")
def scanner():
    server, thread = start_scanner()
    yield server
    stop_thread(server, thread)


@pytest.fixture(scope="module")
def settings(tmp_path_factory, sites, dns_server, scanner):
    base = make_settings(tmp_path_factory.mktemp("lens-http"))
    lens = {**base.section("lens"), "scan_timeout_s": 4, "probe_timeout_s": 2,
            "dns_nameservers": [f"127.0.0.1#{dns_server.port}"],
            "cloudflare_scanner_url": f"http://127.0.0.1:{scanner.server_address[1]}/mcp",
            "census_roster": [sites.url("ready.test"), sites.url("blog.test")]}
    settings = dataclasses.replace(base, sections={**base.sections, "lens": lens},
                                   rates={**base.rates, "compare": RatePolicy("compare", 4, 60)})
    build_site(settings)
    return settings


@pytest.fixture(scope="module")
def lens_api(settings, sites, checker):
    with serve_wsgi(make_app(settings, fetcher=site_fetcher(sites)).wsgi) as base:
        yield Client(base, checker)


def test_page_phase_over_http(lens_api, sites):
    r = lens_api.get("/lens/fetch", params={"url": sites.url("blog.test"), "phases": "page"})
    assert r.status_code == 200 and r.headers["Cache-Control"] == "no-store"
    assert r.headers["RateLimit-Policy"].startswith('"inspect";')
    body = r.json()
    assert body["ok"] and body["phases"] == {"page": True, "discovery": False, "botViews": False}
    assert "readiness" not in body and "discovery" not in body  # passes that did not run are absent


def test_full_scan_over_http(lens_api, sites):
    r = lens_api.get("/lens/fetch", params={"url": sites.url("ready.test")})
    assert r.status_code == 200
    body = r.json()
    assert body["phases"]["discovery"] and body["phases"]["botViews"]
    assert body["readiness"]["level"] == 5 and body["agent"]["strategy"]["verdict"] == "agent-native"
    assert len(body["botViews"]) == 10 and body["terms"]["scoreboard"]


@pytest.mark.parametrize("params, parameter", [
    ({}, "url"), ({"url": "  "}, "url"), ({"url": "http://127.0.0.1:22/"}, "url"),
    ({"url": "http://user:pw@example.com/"}, "url"), ({"url": "ftp://example.com/"}, "url"),
    ({"url": "http://169.254.169.254/latest/meta-data"}, "url"), ({"url": "example.com", "phases": "all"}, "phases"),
    ({"url": "example.com", "mode": "akamai"}, "mode"), ({"url": "http://[::1"}, "url"), ({"url": "[]"}, "url"),
    ({"url": "http://a\u2100b/", "phases": "page"}, "url"), ({"url": "http://１２７.０.０.１/", "mode": "cloudflare"}, "url"),
    ({"url": "http://127。0。0。1/", "mode": "cloudflare"}, "url"), ({"url": "http://private.test/", "phases": "page"}, "url"),
    ({"url": "http://private.test/"}, "url"), ({"url": "http://private.test/", "mode": "cloudflare"}, "url"),
])
def test_bad_lens_input_is_a_400_naming_the_parameter(lens_api, params, parameter):
    r = lens_api.get("/lens/fetch", params=params)
    assert r.status_code == 400, r.text
    assert r.json()["parameter"] == parameter and r.json()["error"]
    if parameter == "url" and params.get("url", "").strip():
        assert r.json()["code"] == "url_refused"


def test_cloudflare_mode_over_http(lens_api):
    r = lens_api.get("/lens/fetch", params={"url": "example.com", "mode": "cloudflare"})
    assert r.status_code == 200
    assert r.json()["available"] is True and r.json()["level"] == 3 and r.json()["score"] == 60


def test_compare_and_its_budget(lens_api, sites):
    r = lens_api.get("/lens/compare.json", params={"left": sites.url("ready.test"), "right": sites.url("blog.test")},
                     headers={"X-Forwarded-For": "198.51.100.20"})
    assert r.status_code == 200 and r.headers["RateLimit-Policy"] == '"compare";q=4;w=60'
    body = r.json()
    assert body["left"]["level"] == 5 and {c["field"] for c in body["changes"]} >= {"level"}
    missing = lens_api.get("/lens/compare.json", params={"left": sites.url("blog.test")},
                           headers={"X-Forwarded-For": "198.51.100.20"})
    assert missing.status_code == 400 and missing.json()["parameter"] == "right"
    codes = [lens_api.get("/lens/compare.json", params={"left": "x", "right": ""},
                          headers={"X-Forwarded-For": "198.51.100.20"}).status_code for _ in range(3)]
    assert codes == [400, 400, 429]


def test_census_over_http(lens_api, settings, sites, dns_server):
    census.run_census(settings, fetcher=site_fetcher(sites), dns=dns_server.client())
    r = lens_api.get("/lens/census.json")
    assert r.status_code == 200
    body = r.json()
    assert len(body["sites"]) == 2 and body["sites"][0]["score"] >= body["sites"][1]["score"]


def test_rich_page_phase_validates(tmp_path, checker):
    sites, thread = lens_web.start()
    try:
        settings = make_settings(tmp_path)
        build_site(settings)
        with serve_wsgi(make_app(settings, fetcher=lens_web.loopback_fetcher(sites)).wsgi) as base:
            r = Client(base, checker).get("/lens/fetch", params={"url": sites.url("/rich"), "phases": "page"})
        assert r.status_code == 200 and r.json()["structured"]["jsonld"]
    finally:
        lens_web.stop(sites, thread)


def test_full_scan_without_bot_views(lens_api, sites):
    r = lens_api.get("/lens/fetch", params={"url": sites.url("blog.test"), "botViews": "0"})
    assert r.status_code == 200
    body = r.json()
    assert body["phases"]["discovery"] is True and body["phases"]["botViews"] is False
    assert body["botViews"] == [] and body["readiness"]["checks"]
