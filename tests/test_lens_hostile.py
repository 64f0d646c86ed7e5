"""Fetched content built to make the lens do far more work than its size warrants, against the
loopback webs: text on which a backtracking regex takes quadratic time (robots.txt, security.txt,
a Link header, page HTML), stacked Content-Encodings, JSON-LD that grows when re-indented, and
discovery results too big to keep in site.db.

Work that must stay linear runs on inputs at the size the lens accepts (512 KB) in a child process
held to conftest.CPU_LIMIT_S of CPU: the quadratic code it replaced took from minutes to half an hour."""
from __future__ import annotations

import dataclasses
import json

from urllib.parse import urlsplit

import pytest
from robotstxt import RobotsMatcher

import lens_web
from conftest import held_to_cpu
from lens_sites import FAT_DOCS, site_fetcher
from siteapi import db
from siteapi.config import load_settings
from siteapi.feeds.crawlers import CRAWLERS
from siteapi.lens import agent, cache, discovery, page, scan, terms
from siteapi.lens.fetch import FetchResult
from siteapi.lens.observe import inspect

HOSTILE_CHARS = 512 * 1024  # the robots.txt cap; no fetched text the lens reads whole is longer
LONG_PATH_URL = "https://x.test/" + "a" * 2000


def _security_txt(text: str) -> dict:
    body = text.encode()
    url = "https://x.test/.well-known/security.txt"
    result = FetchResult(url=url, final_url=url, status=200, headers={"content-type": "text/plain"}, body=body,
                         raw_bytes=len(body), truncated=False, elapsed_ms=1)
    return discovery.probe_result("securityTxt", result.url, result)


# (what runs, the input for size n, the size of one n): each input has the shape that made the earlier
# code quadratic, a regex backtracking over it or, for the group of many user agents, the list of them
# copied per line
LINEAR = {
    "robots.txt sitemap lines, blank lines": (
        lambda text: discovery.declared_sitemaps(text, "https://x.test"), lambda n: "User-agent: *\n" + "\n" * n, 1),
    "security.txt contact line, blank lines": (
        _security_txt, lambda n: "Expires: 2030-01-01T00:00:00Z\n" + "\n" * n, 1),
    "robots.txt content signals, a key of spaces": (terms.content_signals, lambda n: "A" + " " * n, 1),
    "robots.txt content signals, a group of many user agents": (
        terms.content_signals, lambda n: "User-agent: a\n" * n + "Content-Signal: ai-train=no\n", 14),
    "robots.txt scoreboard, a key of spaces in a group": (
        lambda text: terms.scoreboard(text, "present", "https://x.test/"),
        lambda n: "User-agent: GPTBot\nA" + " " * n + "\nDisallow: /\n", 1),
    # sec_audit24 #1: Google's matcher costs a step per rule character per path position past a `*`
    "robots.txt scoreboard, wildcard rules against a long path": (
        lambda text: terms.scoreboard(text, "present", LONG_PATH_URL),
        lambda n: "User-agent: *\n" + ("Disallow: /" + "*a" * 400 + "b\n") * n, 812),
    "robots.txt scoreboard, anchored wildcard rules against a long path": (
        lambda text: terms.scoreboard(text, "present", LONG_PATH_URL),
        lambda n: "User-agent: *\n" + "Allow: /*a*a*a*a*a*a*a*a*a*a*a*a*a$\n" * n, 38),
    "page HTML, unclosed script tags": (agent.webmcp, lambda n: "<script</b" * n, 10),
    # the tag reader behind the nesting cut: a name running into its attributes, no ">" to end it
    "page HTML, a tag name that never ends": (page.nesting_cut, lambda n: "<a" + "a0:-" * (n // 4), 1),
    "page HTML, a tag of slashes that never ends": (page.nesting_cut, lambda n: "<a" + " /" * (n // 2), 1),
    "Link header of '<'": (lambda value: page.parse_link_header(value, "https://x.test/"), lambda n: "<" * n, 1),
}


def run_at_the_cap(names: list[str]) -> None:
    """In the child: each named case on its hostile input of HOSTILE_CHARS."""
    for name in names:
        work, make, unit = LINEAR[name]
        work(make(HOSTILE_CHARS // unit))


@pytest.mark.parametrize("name", LINEAR)
def test_work_on_fetched_text_stays_linear_at_the_cap(name):
    child = held_to_cpu(f"import test_lens_hostile as t; t.run_at_the_cap({[name]!r})")
    assert child.returncode == 0, f"{name}: {child.returncode} {child.stderr[-1500:]}"


def test_the_linear_readers_read_ordinary_files_as_before():
    robots = "User-agent: *\nDisallow: /x # not here\n  sitemap :  /a.xml  more\nSITEMAP:/b.xml\nSitemap:\n"
    assert discovery.declared_sitemaps(robots, "https://x.test") == ["https://x.test/a.xml", "https://x.test/b.xml"]
    for text, ok in (("Contact: mailto:a@x.test\n", True), ("  CONTACT :https://x.test/\n", True),
                     ("Expires: 2030-01-01T00:00:00Z\r\nContact: a\r\n", True), ("Contacts: a\n", False),
                     ("# Contact: a\n", False)):
        assert _security_txt(text)["ok"] is ok, text
    fields = {line: terms.robots_field(line) for line in (
        "User-agent: GPTBot", "  user agent\t:  ClaudeBot  # ours", "Disallow:", "Content-Signal: a=yes #x",
        "# comment: yes", "9key: v", "User\tagent: x", "Allow /x", "Crawl-delay : 5")}
    assert fields == {"User-agent: GPTBot": ("User-agent", "GPTBot"),
                      "  user agent\t:  ClaudeBot  # ours": ("user agent", "ClaudeBot"),
                      "Disallow:": ("Disallow", ""), "Content-Signal: a=yes #x": ("Content-Signal", "a=yes"),
                      "# comment: yes": None, "9key: v": None, "User\tagent: x": None, "Allow /x": None,
                      "Crawl-delay : 5": ("Crawl-delay", "5")}
    bridge = agent.webmcp('<p>x</p><script type="module" src="https://cdn.x.test/@mcp-b/global.js"></script>')
    assert bridge == {"found": True, "kind": "bridge",
                      "marker": '<script type="module" src="https://cdn.x.test/@mcp-b/global.js"'}
    assert agent.webmcp('<script src="/app.js"></script><img src="/webmcp.png">') == {"found": False}


@pytest.mark.parametrize("html, found", [
    ('<script>navigator.modelContext.registerTool({name: "s"})</script>', "inline"),
    ('<script src="/js/webmcp.min.js"></script>', "bridge"),
    ('<script src="/mcp-b.js?v=2"></script>', "bridge"),
    # a tutorial's code, a plug-in system of the page's own, a script whose name only starts so
    ('<pre><code>navigator.modelContext.registerTool({name: "s"})</code></pre>', None),
    ("<script>function registerTool(t){} registerTool({name: 'x'});</script>", None),
    ('<script src="/assets/mcp-banner.min.js"></script>', None),
    ("<!-- <script>navigator.modelContext.provideContext({})</script> -->", None),
])
def test_webmcp_is_the_page_s_own_script_not_words_about_it(html, found):
    """A tutorial page had become agent-native, with WebMCP's check passed and an agent door scored 100."""
    result = agent.webmcp(f"<html><body><p>About tools.</p>{html}</body></html>")
    assert result.get("kind") == found and result["found"] is (found is not None)
    links = page.parse_link_header('<a>; rel="x", <b>; rel=y; title="t, u", <c>', "https://x.test/")
    assert links == [{"rel": "x", "href": "https://x.test/a"}, {"rel": "y", "href": "https://x.test/b", "title": "t, u"}]


def test_terms_show_a_group_of_many_agents_once_and_cut():
    """Each signal lists its group's agents: a group of thousands, shown in 50 signals, would
    multiply a 512 KiB robots.txt fifty times over."""
    robots = ("User-agent: " + "A" * 600 + "\n" + "User-agent: GPTBot\n" * 20_000 + "Content-Signal: ai-train=no\n" * 60
              + "Disallow: /\n")
    signals = terms.content_signals(robots)
    assert len(signals) == terms.SIGNALS and len(json.dumps(signals)) < 200 * 1024
    assert signals[0]["agents"][:2] == ["A" * terms.AGENT_CHARS, "GPTBot"] and len(signals[0]["agents"]) == terms.SIGNALS
    named = "GPTBot/" + "1" * 600
    rows = {row["ua"]: row for row in terms.scoreboard(f"User-agent: {named}\nDisallow: /\n", "present", "https://x.test/")}
    assert rows["GPTBot"]["verdict"] == "block" and rows["GPTBot"]["matchedUa"] == named[:terms.AGENT_CHARS]


class CountingMatcher:
    """Google's matcher, noting the size of every question: it does at most a step per robots.txt
    character per path position, so the sum of their products bounds the work it was given."""
    asked: list[int] = []

    def __init__(self):
        self._matcher = RobotsMatcher()

    def is_allowed(self, text: str, token: str, url: str) -> bool:
        CountingMatcher.asked.append(len(text) * (len(urlsplit(url).path) + 1))
        return self._matcher.is_allowed(text, token, url)

    def __getattr__(self, name):
        return getattr(self._matcher, name)


@pytest.mark.parametrize("name", [name for name in LINEAR if "wildcard rules against a long path" in name])
def test_the_scoreboard_gives_the_matcher_bounded_work_on_wildcard_rules(name, monkeypatch):
    """sec_audit24 #1: 19 crawlers each asked about 512 KiB of `*a*a…b` rules and a 2,000-character
    path took 11-14 s of CPU per scan, past the scan's deadline."""
    monkeypatch.setattr(terms, "RobotsMatcher", CountingMatcher)
    monkeypatch.setattr(CountingMatcher, "asked", [])
    _, make, unit = LINEAR[name]
    rows = terms.scoreboard(make(HOSTILE_CHARS // unit), "present", LONG_PATH_URL)
    assert sum(CountingMatcher.asked) <= terms.MATCH_WORK
    assert {row["verdict"] for row in rows} == {"unknown"}
    assert all("wildcard (*) rules" in row["note"] for row in rows)


def test_crawlers_reading_the_same_groups_are_matched_once(monkeypatch):
    """Wildcard rules of a realistic size against a long path are still matched, once for the
    crawlers no group names and once for each one named, with Google's verdicts."""
    robots = ("User-agent: GPTBot\nDisallow: /a*a$\n\nUser-agent: CCBot\nAllow: /\n\nUser-agent: *\n"
              + "".join(f"Disallow: /*x{i}*.pdf$\n" for i in range(200)) + "Disallow: /*a*a*a$\n")
    monkeypatch.setattr(terms, "RobotsMatcher", CountingMatcher)
    monkeypatch.setattr(CountingMatcher, "asked", [])
    rows = {row["ua"]: row for row in terms.scoreboard(robots, "present", LONG_PATH_URL)}
    long_questions = [work for work in CountingMatcher.asked if work > len(robots) * 2]
    assert len(long_questions) == 3  # the `*` groups, GPTBot's, CCBot's
    for crawler in CRAWLERS:
        google = RobotsMatcher()
        verdict = "allow" if google.is_allowed(robots, crawler["token"], LONG_PATH_URL) else "block"
        assert rows[crawler["token"]]["verdict"] == verdict, crawler["token"]
    assert rows["GPTBot"]["verdict"] == rows["ClaudeBot"]["verdict"] == "block" and rows["CCBot"]["verdict"] == "allow"


# --- stacked Content-Encodings: decoded as far as curl and urllib3 go, refused beyond ------------

@pytest.fixture(scope="module")
def web():
    server, thread = lens_web.start()
    yield server
    lens_web.stop(server, thread)


def test_more_content_encodings_than_clients_decode_are_refused_undecoded(web):
    fetcher = lens_web.loopback_fetcher(web)
    assert fetcher.fetch(web.url("/stacked/5")).body == b"hello"
    refused = fetcher.fetch(web.url("/stacked/6"))
    assert refused.body == b"" and refused.body_unreadable == {
        "reason": "undecodable-content-encoding", "encoding": "gzip, gzip, gzip, gzip, gzip, gzip"}


# --- JSON-LD: re-indented within a depth and size budget -----------------------------------------

def look(web, path):
    return inspect(web.url(path), load_settings(), phases="page", fetcher=lens_web.loopback_fetcher(web))


def test_jsonld_nested_deeper_than_the_limit_is_shown_raw_not_reindented(web):
    seen = look(web, "/jsonld-indent")
    blocks = seen["structured"]["jsonld"]
    assert len(json.dumps(blocks)) < 64 * 1024
    assert len(blocks) == 20 and {block["valid"] for block in blocks} == {False}
    assert blocks[0]["error"] == f"the JSON nests deeper than {page.JSONLD_DEPTH} levels"
    assert blocks[0]["raw"] == ("[" * 900 + "]" * 900)[:page.RAW_INVALID_CHARS]


def test_jsonld_reindented_is_cut_per_block_and_in_total(web):
    seen = look(web, "/jsonld-wide")
    blocks = seen["structured"]["jsonld"]
    assert len(json.dumps(blocks)) < 256 * 1024
    assert len(blocks) == 20 and {block["valid"] for block in blocks} == {True}
    sizes = [len(block["json"]) for block in blocks]
    assert max(sizes) == page.JSONLD_CHARS and sum(sizes) == page.JSONLD_TOTAL_CHARS
    assert {block["truncated"] for block in blocks} == {True}
    whole = json.dumps(json.loads("[" * 60 + "1," * 5000 + "1" + "]" * 60), indent=2)
    assert whole.startswith(blocks[0]["json"])
    small = page.analyse(b'<script type="application/ld+json">{"@type": "Thing"}</script>', "text/html", {},
                         "https://x.test/").structured["jsonld"]
    assert small == [{"valid": True, "types": ["Thing"], "json": '{\n  "@type": "Thing"\n}'}]


# --- the discovery cache keeps what later passes read, within a size ---------------------------

@pytest.fixture()
def conn(tmp_path):
    connection = db.connect(tmp_path / "site.db")
    connection.executescript(cache.SCHEMA)
    yield connection
    connection.close()


@pytest.fixture(scope="module")
def settings():
    base = load_settings()
    lens = {**base.section("lens"), "scan_timeout_s": 6, "probe_timeout_s": 4}
    return dataclasses.replace(base, sections={**base.sections, "lens": lens})


def _scan(sites, dns_server, settings, conn, site):
    return scan.scan(sites.url(site), settings, fetcher=site_fetcher(sites), dns=dns_server.client(),
                     bot_views=False, conn=conn)


def _stored(conn, sites, site) -> int | None:
    row = conn.execute("SELECT length(payload) FROM lens_discovery_cache WHERE origin = ?",
                       (sites.url(site).rstrip("/"),)).fetchone()
    return row[0] if row else None


def test_whole_documents_are_not_cached_what_was_read_from_them_is(sites, dns_server, settings, conn):
    first = _scan(sites, dns_server, settings, conn, "fatdocs.test")
    assert 0 < _stored(conn, sites, "fatdocs.test") < 128 * 1024
    second = _scan(sites, dns_server, settings, conn, "fatdocs.test")
    assert second["phases"]["discoveryCached"] and not first["phases"]["discoveryCached"]
    for key in ("agentCard", "openapi", "aiPlugin", "apiCatalog"):
        assert first["agent"][key] == second["agent"][key] and first["agent"][key]["present"], key
    assert second["readiness"]["keyless"] == first["readiness"]["keyless"]
    assert "1000 operation(s)" in first["readiness"]["keyless"]
    rules = len(FAT_DOCS["/.well-known/tdmrep.json"])
    assert second["terms"]["tdmrep"] == first["terms"]["tdmrep"]
    assert first["terms"]["tdmrep"]["rules"] == rules and first["terms"]["tdmrep"]["reserved"] is True
    assert second["readiness"] == first["readiness"]


def test_a_discovery_result_over_the_size_cap_is_not_cached(sites, dns_server, settings, conn):
    first = _scan(sites, dns_server, settings, conn, "fatrobots.test")
    assert _stored(conn, sites, "fatrobots.test") is None
    second = _scan(sites, dns_server, settings, conn, "fatrobots.test")
    assert not second["phases"]["discoveryCached"]
    assert first["terms"] == second["terms"] and first["terms"]["robotsPresent"]
    assert {row["verdict"] for row in second["terms"]["scoreboard"]} == {"allow"}


def test_a_discovery_result_with_a_probe_failing_for_now_is_not_cached(sites, dns_server, settings, conn):
    """robots.txt answering 503 says "check again later": cached, every scan for six hours had said it."""
    _scan(sites, dns_server, settings, conn, "robots503.test")
    assert _stored(conn, sites, "robots503.test") is None
    assert not _scan(sites, dns_server, settings, conn, "robots503.test")["phases"]["discoveryCached"]


def test_the_caches_keep_their_newest_rows_only(conn):
    """One caller scanning a new origin each time replaces the oldest rows instead of growing site.db."""
    for n in range(cache.MAX_ROWS + 5):
        cache.write(conn, cache.LEVELS, f"https://n{n}.example/", {"level": n % 6})
    kept = [row[0] for row in conn.execute("SELECT url FROM lens_mode_cache ORDER BY fetched_at")]
    assert len(kept) == cache.MAX_ROWS and kept[0] == "https://n5.example/" and kept[-1] == f"https://n{cache.MAX_ROWS + 4}.example/"
    assert cache.read(conn, cache.LEVELS, kept[-1], hours=1) == {"level": (cache.MAX_ROWS + 4) % 6}


def test_the_cache_bound_is_in_bytes(conn):
    """A robots.txt of emoji: 133,000 characters were 520 KB a row, twice the bound."""
    wide, narrow = "\U0001F600" * 100_000, "x" * 200_000
    cache.write(conn, cache.DISCOVERY, "https://wide.example", {"robots": wide})
    cache.write(conn, cache.DISCOVERY, "https://narrow.example", {"robots": narrow})
    assert cache.read(conn, cache.DISCOVERY, "https://wide.example", hours=1) is None
    assert cache.read(conn, cache.DISCOVERY, "https://narrow.example", hours=1) == {"robots": narrow}


def test_a_cached_result_of_another_shape_is_a_miss(sites, dns_server, settings, conn):
    """Rows written before the cached shape changed are read as no cache, not as a crash."""
    cache.write(conn, cache.DISCOVERY, sites.url("blog.test").rstrip("/"), {"probes": {}, "docs": {}})
    obs = _scan(sites, dns_server, settings, conn, "blog.test")
    assert obs["phases"]["discoveryCached"] is False and obs["readiness"]["level"] == 1
