"""Robots verdicts checked against Google's parser on tricky groups, Content-Signal lines and the
spectrum; challenge detection; and full scans where the terms depend on the page (a redirect to
another origin, a page loading challenge.js, a name-prefix group)."""
from __future__ import annotations

import dataclasses

import pytest
from robotstxt import RobotsMatcher

from lens_sites import CHALLENGE, PUZZLE_HOME, site_fetcher
from siteapi.config import load_settings
from siteapi.feeds.crawlers import CRAWLERS
from siteapi.lens import bots, discovery, scan, terms

URL = "https://site.test/docs/page.html"


def board(txt: str, url: str = URL) -> dict:
    return {row["ua"]: row for row in terms.scoreboard(txt, "present", url)}


def google(txt: str, token: str, url: str = URL) -> bool:
    return RobotsMatcher().is_allowed(txt, token, url)


def test_longest_path_wins():
    txt = "User-agent: *\nDisallow: /docs/\nAllow: /docs/page\n"
    rows = board(txt)
    assert rows["GPTBot"]["verdict"] == "allow" == ("allow" if google(txt, "GPTBot") else "block")
    assert rows["GPTBot"]["rule"] == "Allow: /docs/page" and rows["GPTBot"]["matchedUa"] == "*"


def test_named_group_replaces_star():
    txt = "User-agent: *\nDisallow: /\n\nUser-agent: GPTBot\nAllow: /docs/\n"
    rows = board(txt)
    assert rows["GPTBot"]["verdict"] == "allow" and rows["GPTBot"]["matchedUa"] == "GPTBot"
    assert rows["ClaudeBot"]["verdict"] == "block" and rows["ClaudeBot"]["rule"] == "Disallow: /"
    # the named group does not inherit *'s Disallow, exactly as Google's parser says
    for crawler in CRAWLERS:
        expected = "allow" if google(txt, crawler["token"]) else "block"
        assert rows[crawler["token"]]["verdict"] == expected, crawler["token"]


def test_allow_wins_a_tie():
    txt = "User-agent: GPTBot\nDisallow: /docs\nAllow: /docs\n"
    rows = board(txt)
    assert rows["GPTBot"]["verdict"] == "allow" and google(txt, "GPTBot")
    assert rows["Googlebot"]["verdict"] == "allow" and rows["Googlebot"]["rule"] is None


def test_grouped_user_agents_and_case():
    txt = "user-agent: gptbot\nUSER-AGENT: CCBot\ndisallow: /docs/\n"
    rows = board(txt)
    assert rows["GPTBot"]["verdict"] == rows["CCBot"]["verdict"] == "block"
    assert rows["GPTBot"]["matchedUa"] == "gptbot" and rows["CCBot"]["matchedUa"] == "CCBot"
    assert rows["ClaudeBot"]["verdict"] == "allow"


@pytest.mark.parametrize("status", [300, 302, 304, 307, 399])
def test_a_robots_txt_whose_final_answer_is_a_3xx_is_unknown(status):
    """The fetcher follows redirects, so a 3xx left at the end (a 302 with no Location, a 304, a 300)
    holds no rules: its body, often an HTML stub, read as robots.txt would allow every crawler."""
    assert terms.robots_state(status, False, "<html>moved</html>") == ("unknown", f"robots.txt answered {status}")
    board = terms.scoreboard("<html>moved</html>", terms.robots_state(status, False, "<html>moved</html>")[0], URL)
    assert {row["verdict"] for row in board} == {"unknown"}


def test_states_4xx_allow_5xx_unknown():
    assert terms.robots_state(404, False, None) == ("absent", None)
    assert terms.robots_state(503, False, None)[0] == "unknown"
    assert terms.robots_state(None, True, None)[0] == "unknown"
    assert terms.robots_state(200, False, None)[0] == "unknown"  # a binary body
    assert terms.robots_state(200, False, "# comments only\nHost: site.test\n") == ("present", None)
    assert {r["verdict"] for r in terms.scoreboard(None, "absent", URL)} == {"allow"}
    assert {r["verdict"] for r in terms.scoreboard(None, "unknown", URL, "x")} == {"unknown"}


def test_content_signals_keep_their_group():
    txt = ("User-agent: *\nContent-Signal: search=yes, ai-train=no\nAllow: /\n\n"
           "User-agent: GPTBot\nUser-agent: CCBot\nContent-Signal: ai-input=no # comment\n")
    found = terms.content_signals(txt)
    assert found[0]["agents"] == ["*"] and found[0]["parsed"] == {"search": "yes", "ai-train": "no"}
    assert found[1]["agents"] == ["GPTBot", "CCBot"] and found[1]["parsed"] == {"ai-input": "no"}
    # the user-agent spellings Google's parser forgives start a group here too, as they do for verdicts
    forgiven = terms.content_signals("User agent: GPTBot\nUseragent: CCBot\nContent-Signal: ai-train=no\n")
    assert forgiven[0]["agents"] == ["GPTBot", "CCBot"]
    gptbot = next(r for r in terms.scoreboard("User agent: GPTBot\nDisallow: /\n", "present", URL) if r["ua"] == "GPTBot")
    assert gptbot["verdict"] == "block" and gptbot["matchedUa"] == "GPTBot"


def test_spectrum_takes_the_strongest_tier():
    open_board = [{"ua": "GPTBot", "verdict": "allow"}]
    quiet = {"http402": False, "crawlerHeaders": {}, "x402": None}
    calm = {"status": 200, "challenged": False, "blocked": False}
    none = {"noai": False}
    assert terms.spectrum(open_board, "present", [], quiet, calm, none, {"present": False})["tier"] == "open"
    signals = [{"agents": ["*"], "raw": "", "parsed": {"ai-train": "no"}}]
    assert terms.spectrum(open_board, "present", signals, quiet, calm, none, {"present": False})["tier"] == "signaled"
    found = terms.spectrum(open_board, "present", signals, quiet, {"status": 403, "challenged": False, "blocked": True},
                           none, {"present": False})
    assert found["tier"] == "enforced" and len(found["reasons"]) == 2
    paid = {"http402": True, "crawlerHeaders": {}, "x402": None}
    assert terms.spectrum(open_board, "present", [], paid, calm, none, {"present": False})["tier"] == "paid"


def test_paid_and_directives():
    body = b'{"x402Version": 1, "accepts": []}'
    assert terms.paid(402, {"crawler-price": "1"}, body)["x402"]
    assert terms.paid(402, {}, b"<html>")["x402"] is None
    assert terms.directives({"directives": {"metaRobots": "noai, noimageai", "xRobotsTag": None}})["noai"] is True
    assert terms.directives({})["noai"] is False


def test_tdmrep_keeps_strings_only():
    probe = {"ok": True, "body": "[]"}
    odd = terms.tdmrep_file([{"tdm-reservation": 1, "location": 5, "tdm-policy": [1]}], probe)
    assert odd["location"] is None and odd["policy"] is None and odd["reserved"] is True
    kept = terms.tdmrep_file([{"location": "/", "tdm-policy": "https://site.test/p.json"}], probe)
    assert kept["location"] == "/" and kept["policy"] == "https://site.test/p.json"


def test_an_empty_tdmrep_file_reserves_nothing():
    empty = terms.tdmrep_file([], {"ok": True, "body": "[]"})
    assert empty["present"] and empty["rules"] == 0 and empty["reserved"] is None
    board = [{"ua": "GPTBot", "verdict": "allow"}]
    calm, none, paid = {"challenged": False, "status": 200}, {"noai": False}, {"http402": False, "crawlerHeaders": {}}
    assert terms.spectrum(board, "present", [], paid, calm, none, empty)["tier"] == "open"
    reserving = terms.tdmrep_file([{"tdm-reservation": 1}], {"ok": True})
    assert terms.spectrum(board, "present", [], paid, calm, none, reserving)["tier"] == "signaled"


# --- which group gave the verdict: product tokens match whole, groups run past blank lines ---------

def test_a_name_prefix_does_not_name_the_longer_token():
    txt = "User-agent: Applebot\nUser-agent: *\nAllow: /\n"
    rows = board(txt)
    matcher = RobotsMatcher()
    matcher.is_allowed(txt, "Applebot-Extended", URL)
    assert matcher.ever_seen_specific_agent is False  # Google's parser: Applebot-Extended is matched by `*`
    assert rows["Applebot-Extended"]["matchedUa"] == "*" and rows["Applebot"]["matchedUa"] == "Applebot"
    rows = board("User-agent: Claude\nUser-agent: Google\nUser-agent: *\nDisallow: /\n")
    for token in ("ClaudeBot", "Claude-User", "Claude-SearchBot", "Google-Extended", "Googlebot"):
        assert rows[token]["verdict"] == "block" and rows[token]["matchedUa"] == "*", token


def test_group_runs_past_blank_lines_comments_and_other_fields():
    for between in ("\n", "# c\n", "Sitemap: https://site.test/sitemap.xml\n", "Crawl-delay: 5\n"):
        txt = f"User-agent: GPTBot\n{between}User-agent: ClaudeBot\nDisallow: /\n"
        rows = board(txt)
        assert not google(txt, "GPTBot"), between
        assert rows["GPTBot"]["verdict"] == "block" and rows["GPTBot"]["matchedUa"] == "GPTBot", between
        assert rows["ClaudeBot"]["matchedUa"] == "ClaudeBot" and rows["CCBot"]["verdict"] == "allow", between
    # a rule ends the group: the next user-agent line starts another
    rows = board("User-agent: GPTBot\nDisallow: /private/\nUser-agent: ClaudeBot\nDisallow: /\n")
    assert rows["GPTBot"]["verdict"] == "allow" and rows["ClaudeBot"]["matchedUa"] == "ClaudeBot"


def test_matched_ua_agrees_with_googles_matcher():
    texts = ("User-agent: GPTBot/1.2\nUser-agent: *\nDisallow: /docs/\n",
             "User-agent: *\nDisallow: /\n\nUser-agent: gptbot # ours\n\nUser agent: CCBot\nAllow: /docs/\n",
             "User-agent: Applebot\nUser-agent: Google\nDisallow: /\n\nUser-agent: *\nDisallow: /docs/\n")
    for txt in texts:
        rows = board(txt)
        for crawler in CRAWLERS:
            token, row = crawler["token"], rows[crawler["token"]]
            matcher = RobotsMatcher()
            matcher.is_allowed(txt, token, URL)
            if matcher.ever_seen_specific_agent:
                assert row["matchedUa"].split("/")[0].lower() == token.lower(), (txt, token, row)
            else:
                assert row["matchedUa"] == ("*" if matcher.matching_line else None), (txt, token, row)
    assert board(texts[0])["GPTBot"]["matchedUa"] == "GPTBot/1.2"
    assert board(texts[1])["GPTBot"]["matchedUa"] == "gptbot" and board(texts[1])["CCBot"]["matchedUa"] == "CCBot"


# --- challenge pages: the interstitials themselves, not a script's file name ------------------------

AWS_WAF_CHALLENGE = b"""<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title></title>
<script>window.awsWafCookieDomainList = [];
window.gokuProps = {"key": "AQIDAHjcYu", "iv": "D549jwCmGg", "context": "x"};</script>
<script src="https://3b9d3a4c5f6e.us-east-1.token.awswaf.com/3b9d3a4c5f6e/1a2b3c4d5e6f/challenge.js"></script>
</head><body><div id="challenge-container"></div></body></html>"""


def test_challenge_js_alone_is_not_a_challenge():
    assert bots.is_challenge({}, AWS_WAF_CHALLENGE)
    assert bots.is_challenge({}, CHALLENGE.encode()) and bots.is_challenge({"cf-mitigated": "challenge"}, b"")
    assert not bots.is_challenge({}, PUZZLE_HOME.encode())
    assert not bots.is_challenge({}, b'<html><head><script src="https://cdn.site.test/challenge.js"></script></head>')


# --- full scans of the fixture sites ------------------------------------------------------------------

@pytest.fixture(scope="module")
def scanned(sites, dns_server):
    base = load_settings()
    lens = {**base.section("lens"), "scan_timeout_s": 4, "probe_timeout_s": 2}
    settings = dataclasses.replace(base, sections={**base.sections, "lens": lens})
    return lambda site, path="/": scan.scan(sites.url(site, path), settings, fetcher=site_fetcher(sites),
                                            dns=dns_server.client())


def test_a_page_loading_challenge_js_is_not_enforced(scanned):
    obs = scanned("puzzle.test")
    assert obs["terms"]["enforcement"] == {"status": 200, "challenged": False, "blocked": False}
    assert obs["terms"]["spectrum"]["tier"] == "open"
    assert not any(view["blocked"] or view["challenge"] for view in obs["botViews"])


def test_a_name_prefix_does_not_pass_name_ai_crawlers(scanned):
    obs = scanned("applebot.test")
    rows = {row["ua"]: row for row in obs["terms"]["scoreboard"]}
    assert rows["Applebot-Extended"]["matchedUa"] == "*"
    check = obs["readiness"]["checks"]["robotsTxtAiRules"]
    assert check["status"] == "fail", check


def test_a_robots_txt_answering_a_302_without_location_leaves_every_verdict_unknown(scanned):
    obs = scanned("robots302.test")
    assert obs["terms"]["robotsUnknown"] and "302" in obs["terms"]["robotsError"]
    assert {row["verdict"] for row in obs["terms"]["scoreboard"]} == {"unknown"}


def test_robots_rules_belong_to_their_origin():
    assert terms.rules_url("http://moved.test", "http://moved.test/", "http://moved.test/shop/") == \
        ("http://moved.test/shop/", None)
    assert terms.rules_url("https://moved.test", "https://moved.test/", "https://MOVED.test:443/a")[1] is None
    for final in ("http://landing.test/shop/", "https://moved.test/shop/", "http://moved.test:8080/shop/"):
        url, caveat = terms.rules_url("http://moved.test", "http://moved.test/", final)
        assert url == "http://moved.test/", final
        assert caveat.startswith("robots.txt of http://moved.test read for the asked URL"), final


def test_redirect_to_another_origin_reads_the_rules_for_the_asked_url(scanned, sites):
    obs = scanned("moved.test")  # moved.test's robots.txt blocks /shop/, and / redirects to landing.test/shop/
    assert obs["finalUrl"] == sites.url("landing.test", "/shop/")
    gptbot = {row["ua"]: row for row in obs["terms"]["scoreboard"]}["GPTBot"]
    assert gptbot["verdict"] == "allow" and gptbot["rule"] is None
    assert "read for the asked URL" in gptbot["note"] and "landing.test" in gptbot["note"]
    assert obs["terms"]["spectrum"]["tier"] == "open"
    # a redirect within the origin: the rules are read for the page that answered
    obs = scanned("moved.test", "/stay")
    gptbot = {row["ua"]: row for row in obs["terms"]["scoreboard"]}["GPTBot"]
    assert obs["finalUrl"] == sites.url("moved.test", "/shop/")
    assert gptbot["verdict"] == "block" and gptbot["rule"] == "Disallow: /shop/" and "note" not in gptbot
    assert obs["terms"]["spectrum"]["tier"] == "signaled"


def test_feeds_are_rss_atom_and_json_feeds_not_any_json():
    links = [{"rel": "alternate", "type": "application/rss+xml", "href": "https://wp.test/feed/"},
             {"rel": "alternate", "type": "application/json", "title": "JSON",
              "href": "https://wp.test/wp-json/wp/v2/pages/2"},
             {"rel": "alternate", "type": "application/json", "title": "JSON Feed", "href": "https://wp.test/feed.json"},
             {"rel": "alternate", "type": "application/feed+json", "href": "https://wp.test/f"}]
    assert [link["href"] for link in discovery.feeds(links)] == [
        "https://wp.test/feed/", "https://wp.test/feed.json", "https://wp.test/f"]
