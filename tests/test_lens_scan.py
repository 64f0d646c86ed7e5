"""The full lens scan against a loopback sites of fixture sites, compare, and mode=cloudflare against a
loopback MCP scanner."""
from __future__ import annotations

import dataclasses
import json
import time

import jsonschema
import pytest

from lens_sites import DnsServer, site_fetcher, start_scanner
from servers import stop_thread
from siteapi import db
from siteapi.config import load_settings
from siteapi.lens import cache, cloudflare, discovery, scan
from siteapi.lens.fetch import FetchResult
from siteapi.web import ApiError


def with_lens(settings, **values):
    lens = {**settings.section("lens"), **values}
    return dataclasses.replace(settings, sections={**settings.sections, "lens": lens})


@pytest.fixture(scope="module")
def settings():
    return with_lens(load_settings(), scan_timeout_s=4, probe_timeout_s=2)


@pytest.fixture(scope="module")
def run(sites, dns_server, settings):
    cache = {}

    def go(site, **kwargs):
        key = (site, tuple(sorted(kwargs.items())))
        if key not in cache:
            cache[key] = scan.scan(sites.url(site), kwargs.pop("settings", settings), fetcher=site_fetcher(sites),
                                   dns=dns_server.client(), **kwargs)
        return cache[key]
    return go


def test_agent_ready_site_reaches_level_5(run):
    obs = run("ready.test")
    ready = obs["readiness"]
    assert ready["level"] == 5 and ready["levelName"] == "Agent-Native" and ready["overall"] >= 80
    assert obs["phases"] == {"page": True, "discovery": True, "botViews": True, "discoveryCached": False,
                             "subrequestCap": False, "wallCheck": "ok"}
    d = obs["discovery"]
    for key in ("robotsTxt", "sitemapXml", "llmsTxt", "securityTxt", "webBotAuth", "mcpServerCard", "agentSkills",
                "apiCatalog", "openapi", "agentCard"):
        assert d[key]["ok"], (key, d[key])
    assert d["sitemapXml"]["entries"] == 2 and d["agentsMd"]["present"] and d["agentsMd"]["variant"] == "/agents.md"
    assert d["dnsAid"]["found"] and any(r["answers"] for r in d["dnsAid"]["records"])
    assert obs["wire"]["ech"]["observed"] and obs["wire"]["ech"]["recordPresent"]
    a = obs["agent"]
    assert a["mcp"]["verdict"] == "yes" and a["nlweb"]["verdict"] == "likely"
    assert a["mdNegotiation"]["supported"] and a["webmcp"] == {"found": True, "kind": "inline", "marker": "navigator.modelContext"}
    assert a["strategy"]["verdict"] == "agent-native"
    # the site's OpenAPI declares every operation keyless: authority checks do not apply
    assert ready["keyless"] and ready["checks"]["oauthDiscovery"]["status"] == "neutral"
    assert ready["checks"]["authMd"]["notApplicable"] is True
    assert {c["key"] for c in ready["field"]["components"]} == {"identifiedFetch", "sampledBots", "usableBody", "agentDoor"}
    assert ready["field"]["overall"] == 100
    summary = scan.summary(obs)
    assert summary["surfaces"] == {"llms": True, "markdown": True, "mcp": True, "agentCard": True, "apiCatalog": True}
    assert summary["doors"] == 6 and summary["tier"] == "signaled"


def test_content_only_blog_is_not_failed_for_api_checks(run):
    ready = run("blog.test")["readiness"]
    for key in ("apiCatalog", "oauthDiscovery", "oauthProtectedResource", "authMd"):
        assert ready["checks"][key]["status"] == "neutral", key
    assert ready["level"] == 1 and ready["keyless"] is None
    failed = [a["key"] for a in ready["nextActions"]]
    assert "linkHeaders" in failed and "apiCatalog" not in failed and len(failed) <= 5
    assert all(c["detail"] for c in ready["checks"].values())


def test_spa_soft_404s_pass_nothing(run):
    obs = run("spa.test")
    for key in ("robotsTxt", "sitemapXml", "llmsTxt", "llmsFullTxt", "aiTxt", "securityTxt", "openapi", "agentCard",
                "mcpServerCard", "apiCatalog", "authMd", "tdmrep"):
        probe = obs["discovery"][key]
        assert probe["ok"] is False and probe["status"] == 200 and probe["note"], key
    assert obs["discovery"]["agentsMd"]["present"] is False
    assert obs["agent"]["llmsTxt"]["present"] is False and obs["agent"]["mdNegotiation"]["supported"] is False
    assert obs["agent"]["strategy"]["verdict"] == "human-only" and obs["readiness"]["level"] == 0


def test_blocking_site_by_robots_and_challenge(run):
    obs = run("blocked.test")
    verdicts = {row["ua"]: row for row in obs["terms"]["scoreboard"]}
    assert len(verdicts) >= 15
    assert verdicts["GPTBot"]["verdict"] == "block" and verdicts["GPTBot"]["rule"] == "Disallow: /"
    assert verdicts["GPTBot"]["matchedUa"] == "GPTBot" and verdicts["Googlebot"]["verdict"] == "allow"
    assert obs["terms"]["enforcement"] == {"status": 403, "challenged": True, "blocked": True}
    assert obs["terms"]["spectrum"]["tier"] == "enforced"
    views = {v["key"]: v for v in obs["botViews"]}
    assert len(views) == 10 and {v["role"] for v in views.values()} == {"control", "search", "train", "answers"}
    assert views["gptbot"]["blocked"] and views["gptbot"]["challenge"] and views["gptbot"]["status"] == 403
    # the CSP names the vendor; that alone is not a challenge
    assert views["chrome"]["blocked"] is False and views["chrome"]["challenge"] is False
    assert views["gptbot"]["wall"]["p"] > 0.8 > views["chrome"]["wall"]["p"]
    assert views["gptbot"]["wall"]["model"].startswith("minilm")
    assert obs["readiness"]["field"]["components"][1]["score"] == 50


def test_pay_per_crawl_site(run):
    terms = run("paid.test")["terms"]
    assert terms["paid"]["http402"] and terms["paid"]["crawlerHeaders"] == {"crawler-price": "USD 0.01"}
    assert json.loads(terms["paid"]["x402"])["x402Version"] == 1
    assert terms["spectrum"]["tier"] == "paid"


def test_robots_503_leaves_every_verdict_unknown(run):
    obs = run("robots503.test")
    assert obs["terms"]["robotsUnknown"] and "503" in obs["terms"]["robotsError"]
    assert {row["verdict"] for row in obs["terms"]["scoreboard"]} == {"unknown"}
    assert obs["readiness"]["checks"]["robotsTxt"]["status"] == "unknown"
    assert scan.summary(obs)["tier"] == "unknown"


def test_content_signal_and_tdmrep(run):
    terms = run("signals.test")["terms"]
    assert terms["signals"] == [{"agents": ["*"], "raw": "Content-Signal: search=yes, ai-train=no",
                                 "parsed": {"search": "yes", "ai-train": "no"}}]
    assert terms["tdmrep"]["present"] and terms["tdmrep"]["reserved"] is True and terms["tdmrep"]["rules"] == 1
    assert terms["spectrum"]["tier"] == "signaled"
    assert any("TDMRep" in r for r in terms["spectrum"]["reasons"])


def test_hanging_probes_do_not_outlast_the_deadline(sites, dns_server, settings):
    fast = with_lens(settings, scan_timeout_s=1.5, probe_timeout_s=20)
    started = time.monotonic()
    obs = scan.scan(sites.url("hang.test"), fast, fetcher=site_fetcher(sites), dns=dns_server.client(), bot_views=False)
    assert time.monotonic() - started < 10  # each probe alone would wait its 20 s (hang.test holds 30)
    assert obs["ok"] and obs["discovery"]["robotsTxt"]["ok"] is False and "error" in obs["discovery"]["robotsTxt"]
    assert obs["agent"]["mcp"]["verdict"] == "unknown"
    assert obs["readiness"]["checks"]["robotsTxt"]["status"] == "unknown"


def test_huge_binary_robots_and_sitemap_bomb(run, sites):
    sites.sitemap_bomb()  # built before the scan, not by its request inside the 2 s probe deadline
    big = run("bigrobots.test", bot_views=False)
    assert big["discovery"]["robotsTxt"]["truncated"] and big["terms"]["robotsPresent"]
    assert {r["verdict"] for r in big["terms"]["scoreboard"]} == {"allow"}
    binary = run("binrobots.test", bot_views=False)
    assert binary["terms"]["robotsUnknown"] and binary["discovery"]["robotsTxt"]["ok"] is False
    bomb = run("bomb.test", bot_views=False)
    assert bomb["discovery"]["sitemapXml"]["truncated"] and bomb["phases"]["discovery"]


def test_a_bom_is_skipped_as_readers_skip_it(run):
    obs = run("bom.test", bot_views=False)
    assert obs["agent"]["llmsTxt"]["present"] is True and obs["discovery"]["llmsTxt"]["ok"] is True
    assert obs["agent"]["apiCatalog"]["present"] is True and obs["discovery"]["apiCatalog"]["ok"] is True
    assert obs["discovery"]["robotsTxt"]["ok"] is True


def test_malformed_cards_and_openapi(run):
    obs = run("malformed.test", bot_views=False)
    a = obs["agent"]
    assert a["agentCard"]["present"] is False and "JSON" in a["agentCard"]["note"]
    assert a["openapi"]["present"] is False and a["apiCatalog"]["present"] is False
    assert obs["discovery"]["mcpServerCard"]["ok"] is False and obs["readiness"]["keyless"] is None


def test_json_nested_too_deeply_to_read_is_reported_as_not_json(run):
    obs = run("deep.test", bot_views=False)
    a = obs["agent"]
    assert a["agentCard"]["present"] is False and a["openapi"]["present"] is False
    assert a["mcp"]["verdict"] in ("maybe", "no") and obs["discovery"]["mcpServerCard"]["ok"] is False
    assert obs["terms"]["paid"]["http402"] is True and obs["terms"]["paid"]["x402"] is None


def test_dns_failures_are_reported_not_raised(sites, settings):
    failing = DnsServer(servfail=(".",))
    try:
        obs = scan.scan(sites.url("blog.test"), settings, fetcher=site_fetcher(sites), dns=failing.client(), bot_views=False)
    finally:
        failing.stop()
    assert obs["discovery"]["dnsAid"]["ok"] is False and obs["discovery"]["dnsAid"]["error"]
    assert obs["wire"]["ech"]["observed"] is False and obs["wire"]["ech"]["error"]
    assert obs["readiness"]["checks"]["dnsAid"]["status"] == "unknown"


def test_subrequest_cap_cuts_probes(sites, dns_server, settings):
    obs = scan.scan(sites.url("ready.test"), with_lens(settings, subrequest_cap=6), fetcher=site_fetcher(sites),
                    dns=dns_server.client())
    assert obs["phases"]["subrequestCap"] is True
    assert any("cap" in (p.get("error") or "") for p in obs["discovery"].values() if isinstance(p, dict))


def test_discovery_cache_answers_the_second_scan(sites, dns_server, settings, tmp_path):
    conn = db.connect(tmp_path / "site.db")
    conn.executescript(cache.SCHEMA)
    first = scan.scan(sites.url("ready.test"), settings, fetcher=site_fetcher(sites), dns=dns_server.client(),
                      bot_views=False, conn=conn)
    before = sites.requests
    second = scan.scan(sites.url("ready.test"), settings, fetcher=site_fetcher(sites), dns=dns_server.client(),
                       bot_views=False, conn=conn)
    assert not first["phases"]["discoveryCached"] and second["phases"]["discoveryCached"]
    assert sites.requests - before == 2  # the page and the markdown check
    assert second["readiness"]["level"] == first["readiness"]["level"] == 5


def test_the_hourly_job_forgets_lookups_past_their_window(sites, dns_server, settings, tmp_path):
    import jobs

    settings = dataclasses.replace(settings, db_path=tmp_path / "site.db")
    conn = db.writer(settings.db_path)
    scan.scan(sites.url("ready.test"), settings, fetcher=site_fetcher(sites), dns=dns_server.client(),
              bot_views=False, conn=conn)
    seven_hours_ago = time.time() - 7 * 3600
    with db.transaction(conn):
        conn.execute("INSERT INTO lens_discovery_cache VALUES ('https://old.example', ?, '{}')", (seven_hours_ago,))
        conn.execute("INSERT INTO lens_mode_cache VALUES ('https://old.example/?token=1', ?, '{}')", (seven_hours_ago,))
        conn.execute("INSERT INTO lens_mode_cache VALUES ('https://new.example/', ?, '{}')", (time.time(),))
    ok, summary = jobs.run_job(settings, "lens-caches")
    assert ok and summary.startswith("1 discovery results and 1 CDN levels past their window deleted")
    assert [r[0] for r in conn.execute("SELECT origin FROM lens_discovery_cache")] == [sites.url("ready.test").rstrip("/")]
    assert [r[0] for r in conn.execute("SELECT url FROM lens_mode_cache")] == ["https://new.example/"]
    conn.close()


def test_bad_input_answers_400(settings, sites):
    with pytest.raises(ApiError) as missing:
        scan.scan("  ", settings, fetcher=site_fetcher(sites))
    assert missing.value.status == 400 and missing.value.body["parameter"] == "url"
    with pytest.raises(ApiError) as refused:
        scan.scan("http://10.0.0.1/", settings)
    assert refused.value.status == 400 and "private" in refused.value.body["error"]
    with pytest.raises(ApiError) as unknown_host:
        scan.scan(sites.url("nowhere.test"), settings, fetcher=site_fetcher(sites))
    assert unknown_host.value.status == 502


def test_compare_reports_changes_and_names_the_side(sites, dns_server, settings):
    result = scan.compare(sites.url("blog.test"), sites.url("ready.test"), settings, fetcher=site_fetcher(sites),
                          dns=dns_server.client())
    fields = {c["field"]: c for c in result["changes"]}
    assert fields["level"]["before"] == 1 and fields["level"]["after"] == 5
    assert fields["surfaces.mcp"] == {"field": "surfaces.mcp", "label": "MCP server", "before": False, "after": True}
    assert result["left"]["phases"]["botViews"] is False and result["ok"]
    with pytest.raises(ApiError) as missing:
        scan.compare(sites.url("blog.test"), "", settings, fetcher=site_fetcher(sites))
    assert missing.value.status == 400 and missing.value.body["parameter"] == "right"
    with pytest.raises(ApiError) as refused:
        scan.compare("http://127.0.0.1:22/", sites.url("blog.test"), settings)
    assert refused.value.status == 400 and "left" in refused.value.body["error"]


# --- mode=cloudflare against a loopback MCP scanner ------------------------------------------------

@pytest.fixture
def scanner():
    server, thread = start_scanner()
    yield server
    stop_thread(server, thread)


def test_cloudflare_mode_reads_the_scanner_and_caches(scanner, settings, sites, tmp_path):
    conn = db.connect(tmp_path / "site.db")
    conn.executescript(cache.SCHEMA)
    conf = with_lens(settings, cloudflare_scanner_url=f"http://127.0.0.1:{scanner.server_address[1]}/mcp")
    first = cloudflare.level("example.com", conf, conn, fetcher=site_fetcher(sites))
    assert first == {"ok": True, "available": True, "level": 3, "score": 60, "levelName": "Agent-Readable",
                     "source": cloudflare.SCANNER_SOURCE, "sourceUrl": first["sourceUrl"], "fromCache": False}
    assert "example.com" in first["sourceUrl"] and scanner.calls == ["initialize", "tools/call"]
    second = cloudflare.level("https://example.com/", conf, conn, fetcher=site_fetcher(sites))
    assert second["fromCache"] and second["level"] == 3 and len(scanner.calls) == 2


def test_cloudflare_mode_scanner_answer_nested_too_deeply_is_unavailable(scanner, settings, sites):
    conf = with_lens(settings, cloudflare_scanner_url=f"http://127.0.0.1:{scanner.server_address[1]}/mcp")
    result = cloudflare.level("deep.example", conf, None, fetcher=site_fetcher(sites))
    assert result["ok"] and result["available"] is False and "JSON-RPC" in result["error"]


def test_cloudflare_mode_scanner_redirect_is_not_followed(scanner, settings, sites):
    """Only the URL under test goes through the address policy, so the scanner's own hops must not
    be followed: a 307 could send the POST anywhere, loopback included."""
    conf = with_lens(settings, cloudflare_scanner_url=f"http://127.0.0.1:{scanner.server_address[1]}/moved")
    result = cloudflare.level("example.com", conf, None, fetcher=site_fetcher(sites))
    assert result["available"] is False and result["error"] == "the scanner answered 307 (a redirect, not followed)"
    assert scanner.calls == []


@pytest.mark.parametrize("host, level, name", [
    ("example.com/typed", 2, None),                # levelName 42 is no name
    ("example.com/typed-bool", 3, "Agent-Readable"),  # level true is no level: the text's is read
])
def test_cloudflare_mode_reads_only_fields_of_the_right_types(scanner, settings, sites, host, level, name):
    conf = with_lens(settings, cloudflare_scanner_url=f"http://127.0.0.1:{scanner.server_address[1]}/mcp")
    result = cloudflare.level(host, conf, None, fetcher=site_fetcher(sites))
    assert (result["level"], result["score"], result["levelName"]) == (level, level * 20, name)


@pytest.mark.parametrize("body", [{"ok": True, "level": "banana"}, {"ok": True, "available": True, "level": True,
                                   "score": 20, "source": "x", "sourceUrl": "https://x.example/", "fromCache": False}])
def test_the_served_schema_refuses_a_mode_result_of_the_wrong_shape(checker, body):
    schema = checker.schema_for("/lens/fetch", "GET", 200, "application/json")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator({**schema, "components": checker.doc["components"]}).validate(body)


def test_cloudflare_mode_scanner_too_slow_says_so(scanner, settings, sites):
    conf = with_lens(settings, cloudflare_scanner_url=f"http://127.0.0.1:{scanner.server_address[1]}/mcp",
                     cloudflare_timeout_s=1)
    result = cloudflare.level("example.com/slow", conf, None, fetcher=site_fetcher(sites))
    assert result["available"] is False and result["error"] == "the scanner did not answer within 1 seconds"


def test_cloudflare_mode_scanner_down_is_unavailable(settings, sites):
    down = with_lens(settings, cloudflare_scanner_url="http://127.0.0.1:9/mcp", cloudflare_timeout_s=1)
    result = cloudflare.level("example.com", down, None, fetcher=site_fetcher(sites))
    assert result["ok"] and result["available"] is False and result["error"] and result["level"] is None
    with pytest.raises(ApiError) as refused:
        cloudflare.level("http://192.168.1.1/", down, None)
    assert refused.value.status == 400


def test_cloudflare_mode_sends_the_scanner_no_name_that_leads_inside(scanner, settings, sites):
    """The scanner fetches from its own network, yet the lens's rule holds: a name resolving to a
    private address is refused like a fetch of it, and a name that does not resolve is the site's 502."""
    conf = with_lens(settings, cloudflare_scanner_url=f"http://127.0.0.1:{scanner.server_address[1]}/mcp")
    calls = len(scanner.calls)
    with pytest.raises(ApiError) as refused:
        cloudflare.level("http://private.test/", conf, None, fetcher=site_fetcher(sites))
    assert refused.value.status == 400 and refused.value.body["code"] == "url_refused"
    assert "private" in refused.value.body["error"] and refused.value.body["parameter"] == "url"
    with pytest.raises(ApiError) as unknown:
        cloudflare.level("https://nowhere.test/", conf, None, fetcher=site_fetcher(sites))
    assert unknown.value.status == 502 and "does not resolve" in unknown.value.body["error"]
    assert "check its spelling" in unknown.value.body["error"]
    assert len(scanner.calls) == calls


def test_a_declared_sitemap_that_is_not_a_url_is_skipped():
    robots = "User-agent: *\nSitemap: http://[YOUR-DOMAIN]/sitemap.xml\nSitemap: /real.xml\n"
    assert discovery.declared_sitemaps(robots, "https://shop.example") == ["https://shop.example/real.xml"]


@pytest.mark.parametrize("comment, entries", [(8_000, 2), (70_000, None)])
def test_a_sitemap_is_recognised_past_a_long_leading_comment(comment, entries):
    body = (b'<?xml version="1.0"?><!-- ' + b"x" * comment + b' --><urlset xmlns="http://www.sitemaps.org/schemas/'
            b'sitemap/0.9"><url><loc>https://x.test/a</loc></url><url><loc>https://x.test/b</loc></url></urlset>')
    url = "https://x.test/sitemap.xml"
    result = FetchResult(url=url, final_url=url, status=200, headers={"content-type": "application/xml"}, body=body,
                         raw_bytes=len(body), truncated=False, elapsed_ms=1)
    probe = discovery.probe_result("sitemapXml", url, result)
    assert probe["ok"] is (entries is not None) and probe.get("entries") == entries


@pytest.mark.parametrize("body, content_type", [
    ("\ufeff# Café “notes”\n\n> For agents.\n".encode("utf-16-le"), "text/plain"),  # BOM: UTF-16
    ("# Café “notes”\n\n> For agents.\n".encode("cp1252"), "text/plain; charset=iso-8859-1"),
    ("# Café “notes”\n\n> For agents.\n".encode("cp1252"), "text/plain"),  # not UTF-8: windows-1252
])
def test_a_text_document_is_decoded_by_its_bom_or_charset(body, content_type):
    url = "https://x.test/llms.txt"
    result = FetchResult(url=url, final_url=url, status=200, headers={"content-type": content_type}, body=body,
                         raw_bytes=len(body), truncated=False, elapsed_ms=1)
    probe = discovery.probe_result("llmsTxt", url, result)
    assert probe["ok"] is True and probe["body"].startswith("# Café “notes”")
