"""The lens endpoints on the real server (waitress), aimed through the fetcher seam at the loopback
fixture webs: /lens/fetch (page phase, full scan, mode=cloudflare), /lens/compare.json with its own
budget, /lens/census.json. Every JSON answer is validated against /openapi.json."""
import dataclasses

import re

import pytest

import lens_web
from app import make_app
from conftest import Client, build_site, make_settings
from lens_sites import site_fetcher
from servers import serve_wsgi
from siteapi.config import RatePolicy
from siteapi.lens import census
from siteapi.lens.fetch import fetcher_from_settings


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


@pytest.fixture(scope="module")
def shop_api(settings, checker):
    """The app aimed at the hostile loopback web of tests/lens_web.py (shop.test), with the
    fetcher's own default limits."""
    web, thread = lens_web.start()
    try:
        with serve_wsgi(make_app(settings, fetcher=lens_web.loopback_fetcher(web)).wsgi) as base:
            yield Client(base, checker), web
    finally:
        lens_web.stop(web, thread)


def full_scan(api, url, bot_views=False) -> dict:
    r = api.get("/lens/fetch", params={"url": url, **({} if bot_views else {"botViews": "0"})})
    assert r.status_code == 200, r.text
    return r.json()


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
    ({"url": "https://example.com:99999/"}, "url"), ({"url": "https://-bad-.example/"}, "url"),
    ({"url": "http://[zz::1]/"}, "url"), ({"url": "http://[1::2::3]/"}, "url"), ({"url": "https://2001:db8::1/"}, "url"),
])
def test_bad_lens_input_is_a_400_naming_the_parameter(lens_api, params, parameter):
    r = lens_api.get("/lens/fetch", params=params)
    assert r.status_code == 400, r.text
    assert r.json()["parameter"] == parameter and r.json()["error"]
    if parameter == "url" and params.get("url", "").strip():
        assert r.json()["code"] == "url_refused"
        # what was wrong, then what to send instead
        assert re.search(r"; (send|leave|write|the lens only fetches)\b", r.json()["error"]), r.json()["error"]
        if "::" in params["url"]:  # an IPv6 address, in brackets or not, is shown how to write one
            assert "https://[2606:4700::1]/" in r.json()["error"], r.json()["error"]


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
    neither = lens_api.get("/lens/compare.json", headers={"X-Forwarded-For": "198.51.100.21"}).json()
    assert neither["parameter"] == "left" and "both addresses" in neither["error"] and "right=" in neither["error"]
    refused = lens_api.get("/lens/compare.json", params={"left": "ftp://example.com/", "right": "example.org"},
                           headers={"X-Forwarded-For": "198.51.100.21"}).json()["error"]
    assert refused.startswith("The left URL is refused: only http and https URLs"), refused
    refused = lens_api.get("/lens/compare.json", params={"left": "http://u:p@example.com/", "right": "example.org"},
                           headers={"X-Forwarded-For": "198.51.100.22"}).json()["error"]
    assert refused.startswith("The left URL is refused: URLs with credentials"), refused
    codes = [lens_api.get("/lens/compare.json", params={"left": "x", "right": ""},
                          headers={"X-Forwarded-For": "198.51.100.20"}).status_code for _ in range(3)]
    assert codes == [400, 400, 429]


def test_a_summary_carries_each_crawlers_verdict_and_the_next_actions(lens_api, sites):
    """LensSummary, which the MCP lens tools answer, says which AI crawler robots.txt lets in and what
    would raise the score, so an MCP-only agent can answer "is GPTBot blocked" (agent_audit23 #1)."""
    r = lens_api.get("/lens/compare.json", params={"left": sites.url("ready.test"), "right": sites.url("blocked.test")},
                     headers={"X-Forwarded-For": "198.51.100.30"})
    assert r.status_code == 200, r.text
    left, right = r.json()["left"], r.json()["right"]
    observed = full_scan(lens_api, sites.url("blocked.test"))
    assert right["crawlers"] == [{"ua": c["ua"], "verdict": c["verdict"], "role": c.get("role")}
                                 for c in observed["terms"]["scoreboard"]]
    assert {c["verdict"] for c in right["crawlers"]} >= {"block"} and {c["verdict"] for c in left["crawlers"]} == {"allow"}
    assert right["nextActions"] == observed["readiness"]["nextActions"] and right["nextActions"]


def test_census_over_http(lens_api, settings, sites, dns_server):
    census.run_census(settings, fetcher=site_fetcher(sites), dns=dns_server.client())
    r = lens_api.get("/lens/census.json")
    assert r.status_code == 200
    body = r.json()
    assert len(body["sites"]) == 2 and body["sites"][0]["score"] >= body["sites"][1]["score"]


def test_rich_page_phase_validates(shop_api):
    api, web = shop_api
    r = api.get("/lens/fetch", params={"url": web.url("/rich"), "phases": "page"})
    assert r.status_code == 200 and r.json()["structured"]["jsonld"]


def test_full_scan_without_bot_views(lens_api, sites):
    r = lens_api.get("/lens/fetch", params={"url": sites.url("blog.test"), "botViews": "0"})
    assert r.status_code == 200
    body = r.json()
    assert body["phases"]["discovery"] is True and body["phases"]["botViews"] is False
    assert body["botViews"] == [] and body["readiness"]["checks"]


# --- URL rules, robots.txt, Markdown negotiation, probes and limits on the real server ---------------

@pytest.mark.parametrize("url, sentence", [
    ("http://blog.test:0/", "Only ports 80 and 443 can be inspected"),
    ("https://blog.test:0/x", "Only ports 80 and 443 can be inspected"),
    ("example.com:8080/x", "Only ports 80 and 443 can be inspected"),
    ("mailto:someone@example.com", "Only http and https URLs can be inspected, not mailto URLs; send one"),
    ("javascript:alert(1)", "Only http and https URLs can be inspected, not javascript URLs; send one"),
    ("data:text/html,hello", "Only http and https URLs can be inspected, not data URLs; send one"),
    ("tel:+15551234567", "Only http and https URLs can be inspected, not tel URLs; send one"),
    ("urn:isbn:0451450523", "Only http and https URLs can be inspected, not urn URLs; send one"),
    ("about:blank", "Only http and https URLs can be inspected, not about URLs; send one"),
])
def test_refusals_name_the_real_reason(lens_api, url, sentence):
    r = lens_api.get("/lens/fetch", params={"url": url, "phases": "page"})
    assert r.status_code == 400 and r.json()["code"] == "url_refused", r.text
    assert r.json()["error"].startswith(sentence), r.json()["error"]


def test_http_without_slashes_is_read_as_the_web_reads_it(lens_api, sites):
    """WHATWG URL parsing: http:host and https:/host are http(s)://host."""
    for url in (sites.url("blog.test").replace("http://", "http:"), sites.url("blog.test").replace("http://", "http:/")):
        r = lens_api.get("/lens/fetch", params={"url": url, "phases": "page"})
        assert r.status_code == 200, r.text
        assert r.json()["url"] == sites.url("blog.test")


def test_empty_phases_is_a_400_like_any_other_value(lens_api, sites):
    for phases in ("", "all"):
        r = lens_api.get("/lens/fetch", params={"url": sites.url("blog.test"), "phases": phases})
        assert r.status_code == 400 and r.json()["code"] == "bad_phases" and r.json()["parameter"] == "phases"
        with_mode = lens_api.get("/lens/fetch", params={"url": sites.url("blog.test"), "phases": phases,
                                                       "mode": "cloudflare"})
        assert with_mode.status_code == 400 and with_mode.json()["code"] == "bad_phases"  # before the scanner is asked


@pytest.mark.parametrize("site, gptbot, robots_check", [
    ("notes.test", "allow", "pass"),         # comments and Host: only: no rules, everything allowed
    ("htmlrobots.test", "block", "fail"),    # the rules count; serving them as text/html is the defect
    ("octetrobots.test", "block", "fail"),
])
def test_any_text_robots_txt_is_read_whatever_its_type(lens_api, sites, site, gptbot, robots_check):
    obs = full_scan(lens_api, sites.url(site))
    terms = obs["terms"]
    assert terms["robotsPresent"] and not terms["robotsUnknown"] and terms["robotsError"] is None
    rows = {row["ua"]: row for row in terms["scoreboard"]}
    assert rows["GPTBot"]["verdict"] == gptbot and rows["Googlebot"]["verdict"] == "allow"
    checks = obs["readiness"]["checks"]
    assert checks["robotsTxt"]["status"] == robots_check
    assert checks["robotsTxtAiRules"]["status"] == ("pass" if gptbot == "block" else "fail")
    assert checks["contentSignals"]["status"] == "fail"
    if robots_check == "fail":
        served = obs["discovery"]["robotsTxt"]["contentType"]
        assert f"served as {served}, not text/plain" in checks["robotsTxt"]["detail"]


@pytest.mark.parametrize("site", ["binrobots.test", "badcoding.test"])
def test_a_robots_txt_that_cannot_be_read_as_text_is_unknown_not_empty(lens_api, sites, site):
    """badcoding.test says Disallow: / under a Content-Encoding it is not in: read as the empty
    stand-in for its body, it had allowed every crawler and passed the check."""
    obs = full_scan(lens_api, sites.url(site))
    terms = obs["terms"]
    assert terms["robotsUnknown"] and "cannot be read as text" in terms["robotsError"]
    assert "HTML" not in terms["robotsError"]
    assert {row["verdict"] for row in terms["scoreboard"]} == {"unknown"}
    assert obs["readiness"]["checks"]["robotsTxt"]["status"] != "pass"


def test_a_bom_does_not_hide_the_first_group(lens_api, sites):
    obs = full_scan(lens_api, sites.url("bom.test"))
    gptbot = next(row for row in obs["terms"]["scoreboard"] if row["ua"] == "GPTBot")
    assert gptbot["verdict"] == "block" and gptbot["matchedUa"] == "GPTBot" and gptbot["rule"] == "Disallow: /"
    assert obs["readiness"]["checks"]["robotsTxtAiRules"]["status"] == "pass"


def test_tdmrep_fields_of_other_types_are_null(lens_api, sites):
    tdm = full_scan(lens_api, sites.url("tdmtypes.test"))["terms"]["tdmrep"]  # the client validates the schema
    assert tdm["present"] and tdm["rules"] == 1 and tdm["location"] is None and tdm["policy"] is None
    kept = full_scan(lens_api, sites.url("signals.test"))["terms"]["tdmrep"]
    assert kept["location"] == "/" and kept["policy"] == "https://signals.test/policy.json"


@pytest.mark.parametrize("site, supported, words", [
    ("mdalways.test", False, "always Markdown"),
    ("novary.test", True, "without Vary: Accept on the Markdown and the HTML answer"),
    ("halfvary.test", True, "without Vary: Accept on the HTML answer"),
])
def test_markdown_without_negotiation_or_vary_does_not_pass(lens_api, sites, site, supported, words):
    obs = full_scan(lens_api, sites.url(site))
    md = obs["agent"]["mdNegotiation"]
    assert md["supported"] is supported and words in md["note"]
    check = obs["readiness"]["checks"]["markdownNegotiation"]
    assert check["status"] == "fail" and words in check["detail"]


def test_negotiating_site_passes_markdown(lens_api, sites):
    obs = full_scan(lens_api, sites.url("ready.test"))
    assert obs["agent"]["mdNegotiation"] == {"supported": True, "contentType": "text/markdown; charset=utf-8",
                                             "status": 200}
    assert obs["readiness"]["checks"]["markdownNegotiation"]["status"] == "pass"


def test_the_scan_counts_an_llms_txt_the_page_does_not_link(lens_api, sites):
    assert full_scan(lens_api, sites.url("ready.test"))["ai"]["llmsTxtPresent"] is True
    page = lens_api.get("/lens/fetch", params={"url": sites.url("ready.test"), "phases": "page"}).json()
    assert page["ai"]["llmsTxtPresent"] is False


def test_a_declared_sitemap_that_is_sitemap_xml_is_that_probe(lens_api, sites):
    d = full_scan(lens_api, sites.url("ready.test"))["discovery"]
    assert d["sitemapDeclared"] == d["sitemapXml"]
    assert d["sitemapDeclared"]["status"] == 200 and d["sitemapDeclared"]["entries"] == 2


def test_a_declared_sitemap_xml_spelt_in_capitals_is_that_probe(lens_api, sites):
    d = full_scan(lens_api, sites.url("smupper.test"))["discovery"]
    assert d["sitemapXml"]["ok"] and d["sitemapDeclared"] == d["sitemapXml"]


@pytest.mark.parametrize("site", ["catchjson.test", "catchtext.test"])
def test_a_catch_all_not_found_with_a_200_is_no_document(lens_api, sites, site):
    obs = full_scan(lens_api, sites.url(site))
    d = obs["discovery"]
    for key in ("authMd", "aiTxt", "llmsFullTxt", "llmsTxt", "securityTxt"):
        assert d[key]["ok"] is False and "soft 404" in d[key]["note"], key
    assert d["agentsMd"]["present"] is False and "soft 404" in d["agentsMd"]["note"]
    assert not any(d["commerce"][key]["ok"] for key in ("ucp", "acp", "ap2"))
    assert obs["agent"]["nlweb"]["verdict"] == "no" and obs["agent"]["strategy"]["verdict"] != "agent-native"
    assert obs["readiness"]["checks"]["authMd"]["status"] != "pass"


def test_crawler_roles_agree_with_reference_and_the_bot_views(lens_api, sites):
    obs = full_scan(lens_api, sites.url("ready.test"), bot_views=True)
    roles = {row["ua"]: row["role"] for row in obs["terms"]["scoreboard"]}
    assert {roles[ua] for ua in ("OAI-SearchBot", "ChatGPT-User", "Claude-User", "PerplexityBot", "AadharshBot")} == {"answers"}
    assert roles["Googlebot"] == roles["bingbot"] == "search" and roles["GPTBot"] == "train"
    for view in obs["botViews"]:
        if view["role"] != "control":
            assert roles[view["label"]] == view["role"], view["label"]


def test_a_declared_sitemap_not_fetched_says_so(lens_api, sites):
    d = full_scan(lens_api, sites.url("sitemaps.test"))["discovery"]
    assert d["sitemapXml"]["ok"]
    assert d["sitemapDeclared"] == {"ok": None, "url": sites.url("sitemaps.test", "/sitemap-news.xml"), "skipped": True,
                                    "note": "not fetched: /sitemap.xml is already a valid sitemap"}


def test_redirects_stop_after_five_hops(shop_api, tmp_path):
    """Five, not REFERENCE's four: RFC 9309 asks robots.txt readers to follow at least five, and one
    cap serves every fetch of the lens and the crawls."""
    api, web = shop_api
    assert api.get("/lens/fetch", params={"url": web.url("/chain/5"), "phases": "page"}).status_code == 200
    r = api.get("/lens/fetch", params={"url": web.url("/chain/6"), "phases": "page"})
    assert r.status_code == 502 and r.json()["error"] == "The site redirected more than 5 times."
    # the site.toml shipped, with a signing key of the test's own (building the fetcher makes one)
    assert fetcher_from_settings(make_settings(tmp_path)).max_redirects == 5


def test_a_comparison_whose_side_fails_is_a_502_naming_the_side(settings, checker):
    web, thread = lens_web.start()
    try:
        # A generous time limit: two full scans at once on a busy machine (CI) fail by the redirects
        # alone, not by the default 2 s.
        fetcher = lens_web.loopback_fetcher(web, timeout_s=20.0)
        with serve_wsgi(make_app(settings, fetcher=fetcher).wsgi) as base:
            r = Client(base, checker).get("/lens/compare.json", params={"left": web.url("/chain/5"),
                                                                         "right": web.url("/chain/6")})
    finally:
        lens_web.stop(web, thread)
    assert r.status_code == 502 and r.json()["side"] == "right" and checker.checked[-1] == ("/lens/compare.json", 502)
    assert r.json()["error"] == "The right URL could not be inspected: the site redirected more than 5 times."
    assert checker.unnamed("GET", "/lens/compare.json", r) == []


def test_bot_views_read_two_kilobytes(shop_api):
    api, web = shop_api
    views = full_scan(api, web.url("/big"), bot_views=True)["botViews"]
    assert len(views) == 10 and {v["sampleBytes"] for v in views} == {2048}


def test_the_lens_works_before_site_db_exists_and_does_not_create_it(settings, sites, tmp_path, checker):
    """Its caches are skipped until the jobs build site.db: a connection used to create the file
    empty, after which /photos/query.json and /ask failed on missing tables instead of a 503."""
    early = dataclasses.replace(settings, db_path=tmp_path / "site.db")
    with serve_wsgi(make_app(early, fetcher=site_fetcher(sites)).wsgi) as base:
        api = Client(base, checker)
        assert full_scan(api, sites.url("ready.test"))["url"].startswith(sites.url("ready.test"))
        assert api.get("/lens/fetch", params={"url": sites.url("ready.test"), "mode": "cloudflare"}).status_code == 200
        assert not early.db_path.exists()
        storage = api.get("/photos/query.json")
        assert storage.status_code == 503 and storage.json()["code"] == "storage_unavailable"
