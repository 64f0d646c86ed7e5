"""Robots verdicts checked against Google's parser on tricky groups, Content-Signal lines and the spectrum."""
from __future__ import annotations

from robotstxt import RobotsMatcher

from siteapi.feeds.crawlers import CRAWLERS
from siteapi.lens import terms

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
    odd = terms.tdmrep([{"tdm-reservation": 1, "location": 5, "tdm-policy": [1]}], probe, {}, {})
    assert odd["location"] is None and odd["policy"] is None and odd["reserved"] is True
    kept = terms.tdmrep([{"location": "/", "tdm-policy": "https://site.test/p.json"}], probe, {}, {})
    assert kept["location"] == "/" and kept["policy"] == "https://site.test/p.json"
