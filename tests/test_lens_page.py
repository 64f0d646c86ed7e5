"""The page pass and /lens/fetch's service function against the loopback web: a rich page read
field by field, and every hostile page answered in bounded time with what could be read."""
from __future__ import annotations

import dataclasses
import json
from types import MappingProxyType

import pytest

import lens_web
from siteapi.config import load_settings
from siteapi.lens import cost, page
from siteapi.lens.observe import inspect
from siteapi.web import ApiError


@pytest.fixture(scope="module")
def web():
    # The compression bombs take about a second of CPU to build (more on a busy machine): built here,
    # not by the first /bomb/ request inside a fetch whose 2 s deadline they would eat into.
    lens_web.bomb("gzip")
    server, thread = lens_web.start()
    yield server
    lens_web.stop(server, thread)


@pytest.fixture(scope="module")
def settings():
    base = load_settings()
    lens = {"parse_kb": 256, "timeout_s": 8, "max_redirects": 5, "raw_cap_kb": 2048, "rates_checked": "2026-11-01",
            "rates": [{"model": "Model A", "usdPerMtok": 2.5}]}
    return dataclasses.replace(base, sections=MappingProxyType({**base.sections, "lens": MappingProxyType(lens)}))


def look(web, settings, path, **limits):
    return inspect(web.url(path), settings, phases="page", fetcher=lens_web.loopback_fetcher(web, **limits))


def test_rich_page_observation(web, settings):
    seen = look(web, settings, "/rich")
    assert seen["ok"] is True and seen["status"] == 200 and not seen["redirected"] and not seen["binary"]
    assert seen["url"] == seen["finalUrl"] == web.url("/rich")
    assert seen["fetchedBy"] == "AadharshBot/1.0 (+https://aadhar.sh/bot)"
    assert seen["phases"] == {"page": True, "discovery": False, "botViews": False}
    for absent in ("discovery", "wire", "terms", "agent", "botViews", "readiness", "bodyUnreadable"):
        assert absent not in seen
    assert seen["headers"]["content-type"] == "text/html; charset=utf-8"
    assert all(name == name.lower() for name in seen["headers"])
    assert seen["framable"] is False and seen["frameReason"] == "X-Frame-Options: DENY"

    anatomy = seen["anatomy"]
    assert anatomy["rawBytes"] == anatomy["parsedBytes"] == len(lens_web.RICH_PAGE.encode())
    assert anatomy["parseTruncated"] is False and anatomy["rawHtml"].startswith("<!doctype html>")
    assert "Hello machine readers" in anatomy["text"] and "notJsonLd" not in anatomy["text"]
    assert "display: none" not in anatomy["text"]
    assert anatomy["imgTotal"] == 3 and anatomy["imgNoAlt"] == 1
    assert anatomy["headings"] == [{"level": 1, "text": "Main heading"}, {"level": 2, "text": "An entry"},
                                   {"level": 3, "text": "Third level"}]
    assert anatomy["wordCount"] == len(anatomy["text"].split())

    s = seen["structured"]
    assert s["title"] == "Rich fixture page"
    assert s["meta"]["description"].startswith("A page with")
    assert s["og"] == {"og:title": "Rich OG title", "og:type": "article"}
    assert s["twitter"] == {"twitter:card": "summary_large_image", "twitter:site": "@fixture"}
    valid = [b for b in s["jsonld"] if b["valid"]]
    broken = [b for b in s["jsonld"] if not b["valid"]]
    assert len(s["jsonld"]) == 3 and len(valid) == 2 and len(broken) == 1
    assert broken[0]["error"] and broken[0]["raw"].startswith('{"@context"')
    assert valid[0]["types"] == ["Organization"] and json.loads(valid[0]["json"])["name"] == "Fixture"
    assert valid[1]["types"] == ["WebSite", "WebPage", "FAQPage"]  # @graph members
    assert s["microdata"] == {"itemtypes": ["https://schema.org/Product", "https://schema.org/Offer"],
                              "props": ["name", "offers", "price"]}
    assert s["rdfa"]["typeof"] == ["Person"] and {"name", "jobTitle"} <= set(s["rdfa"]["properties"])
    assert s["microformats"] == ["h-entry", "h-card", "vcard"]
    rels = {(link["rel"], link["href"]) for link in s["relLinks"]}
    assert ("canonical", web.url("/rich")) in rels
    assert ("service-desc", "https://shop.test/openapi.json") in rels  # from the Link header
    feed = next(link for link in s["relLinks"] if link["rel"] == "alternate")
    assert feed["type"] == "application/rss+xml" and feed["title"] == "Feed"

    ai = seen["ai"]
    assert ai["markdown"].startswith("# Main heading") and "Hello machine readers" in ai["markdown"]
    assert ai["llmsTxtPresent"] is True
    assert ai["directives"] == {"metaRobots": "index, follow", "xRobotsTag": "claudebot: noai", "namesAiCrawlers": True}

    priced = seen["cost"]
    assert priced["tokenizer"] == "o200k_base" and priced["checked"] == "2026-11-01"
    assert priced["rates"] == [{"model": "Model A", "usdPerMtok": 2.5}]
    tiers = {t["key"]: t for t in priced["tiers"]}
    assert set(tiers) == {"html", "text", "markdown", "outline", "raw"}
    assert tiers["text"]["tokens"] == cost.count_tokens(anatomy["text"]) > 0
    assert tiers["outline"]["tokens"] < tiers["text"]["tokens"] < tiers["html"]["tokens"]
    assert "partial" not in priced


def test_token_counts_match_tiktoken_reference_values():
    assert cost.encoding().encode_ordinary("hello world") == [24912, 2375]
    text = "The quick brown fox. " * 5000
    assert cost.count_tokens(text) == len(cost.encoding().encode_ordinary(text))


@pytest.mark.parametrize("path, framable, reason", [
    ("/framable", True, None),
    ("/csp-star", True, "Content-Security-Policy frame-ancestors *"),  # CSP overrides X-Frame-Options
    ("/csp-none", False, "Content-Security-Policy frame-ancestors 'none'"),
    ("/sameorigin", False, "X-Frame-Options: SAMEORIGIN"),
])
def test_frame_headers(web, settings, path, framable, reason):
    seen = look(web, settings, path)
    assert (seen["framable"], seen["frameReason"]) == (framable, reason)


def test_frame_ancestors_naming_this_site():
    headers = {"content-security-policy": "frame-ancestors https://*.sh 'self'"}
    assert page.frame_policy(headers, "https://other.example/", "aadhar.sh")[0] is True
    headers = {"content-security-policy": "frame-ancestors https://partner.example"}
    assert page.frame_policy(headers, "https://other.example/", "aadhar.sh")[0] is False


@pytest.mark.parametrize("csp, framable, reason", [
    # A header sent twice arrives comma-joined: every policy is enforced, so one refusal wins.
    ("frame-ancestors *, frame-ancestors 'none'", False, "Content-Security-Policy frame-ancestors 'none'"),
    ("frame-ancestors https://aadhar.sh, default-src 'self', frame-ancestors", False,
     "Content-Security-Policy frame-ancestors 'none'"),
    ("frame-ancestors *, frame-ancestors https://aadhar.sh", True,
     "Content-Security-Policy frame-ancestors *, frame-ancestors https://aadhar.sh"),
    # Within one policy a repeated directive is ignored.
    ("frame-ancestors https://aadhar.sh; frame-ancestors 'none'", True, "Content-Security-Policy frame-ancestors https://aadhar.sh"),
])
def test_frame_ancestors_in_every_policy_must_allow(csp, framable, reason):
    headers = {"content-security-policy": csp, "x-frame-options": "DENY"}
    assert page.frame_policy(headers, "https://other.example/", "aadhar.sh") == (framable, reason)


def test_report_only_csp_does_not_decide_framing():
    only_reported = {"content-security-policy-report-only": "frame-ancestors 'none'"}
    assert page.frame_policy(only_reported, "https://other.example/", "aadhar.sh") == (True, None)
    reported_allow = {"content-security-policy-report-only": "frame-ancestors *", "x-frame-options": "DENY"}
    assert page.frame_policy(reported_allow, "https://other.example/", "aadhar.sh") == (False, "X-Frame-Options: DENY")


@pytest.mark.parametrize("declaration", [
    '<meta charset="utf-16">', "<meta charset=UTF-16LE>", '<meta charset="utf-16be">', '<meta charset="utf-32">',
    '<meta http-equiv="Content-Type" content="text/html; charset=utf-16">',
])
def test_meta_declared_utf16_is_read_as_utf8(declaration):
    body = f"<html><head>{declaration}<title>Hello there café</title></head><body><p>Two words</p></body></html>"
    analysed = page.analyse(body.encode(), "text/html", {}, "https://x.example/")
    assert analysed.structured["title"] == "Hello there café" and analysed.anatomy["text"] == "Two words"


def test_only_a_bom_or_the_header_selects_utf16():
    html = '<meta charset="utf-16"><title>Hello</title>'
    assert page.decode_text(html.encode("utf-16-le"), "text/html; charset=utf-16le", True) == (html, "utf-16-le")
    assert page.decode_text(html.encode("utf-16"), "text/html", True) == (html, "utf-16")
    assert page.decode_text(html.encode(), "text/html; charset=rot13", True) == (html, "utf-8")
    user_defined = b'<meta charset="x-user-defined"><title>caf\xe9</title>'
    assert page.decode_text(user_defined, "text/html", True) == ('<meta charset="x-user-defined"><title>café</title>',
                                                                "windows-1252")


CAFE = "Café “quoted” — dash €"


@pytest.mark.parametrize("body, content_type", [
    (CAFE.encode("cp1252"), "text/html; charset=iso-8859-1"),  # the web reads latin-1 and ASCII as windows-1252
    (CAFE.encode("cp1252"), "text/html; charset=us-ascii"),
    (CAFE.encode("cp1252"), "text/html"),                       # unlabelled, not UTF-8: windows-1252
    (CAFE.encode("cp1252"), "text/html; charset=unicode_escape"),  # not a web label: ignored
    (CAFE.encode("utf-16-le"), "text/html; charset=utf-16le"),    # no BOM, NUL bytes, yet text
    (CAFE.encode("utf-16-le"), "text/html; charset=utf-16"),
    (b'<?xml version="1.0" encoding="windows-1252"?>' + CAFE.encode("cp1252"), "application/xhtml+xml"),
    (b"<meta charset=iso-8859-1>" + CAFE.encode("cp1252"), "text/html"),
])
def test_charsets_are_read_as_the_encoding_standard_reads_them(body, content_type):
    analysed = page.analyse(body, content_type, {}, "https://x.example/")
    assert analysed.binary is False and CAFE in analysed.anatomy["text"]


def test_gb2312_is_read_as_gbk():
    text = "中文 镕"  # 镕 is in GBK, not in GB2312
    body = f'<meta charset="gb2312"><p>{text}</p>'.encode("gbk")
    assert page.analyse(body, "text/html", {}, "https://x.example/").anatomy["text"] == text


def test_unlabelled_utf8_with_a_broken_byte_stays_utf8():
    assert page.decode_text("café \xff".encode() + b"\xff", "text/html", True) == ("café ÿ\ufffd", "utf-8")


def test_a_label_of_an_unsafe_encoding_decodes_to_one_replacement_character():
    assert page.decode_text(b"\x1b$)Cabc", "text/html; charset=iso-2022-kr", True) == ("\ufffd", "replacement")


def test_jsonld_types_are_every_nodes_in_document_order_not_the_contexts():
    block = json.dumps({"@context": {"@vocab": "https://schema.org/", "date": {"@type": "xsd:date"}}, "@graph": [
        {"@type": "Organization"}, {"@type": ["WebPage", "ItemPage"], "mainEntity": {
            "@type": "Product", "offers": [{"@type": "Offer"}, {"@type": "Offer"}]}},
        {"@graph": [{"@type": "Person"}]}]})
    body = f'<script type="application/ld+json">{block}</script>'.encode()
    [entry] = page.analyse(body, "text/html", {}, "https://x.example/").structured["jsonld"]
    assert entry["types"] == ["Organization", "WebPage", "ItemPage", "Product", "Offer", "Person"]


@pytest.mark.parametrize("number", ["1e400", "-1e400", "1" + "0" * 400 + ".5"])
def test_jsonld_number_beyond_a_double_is_invalid(number):
    block = f'{{"a": {number}, "@type": "Big"}}'
    body = f'<script type="application/ld+json">{block}</script>'.encode()
    [entry] = page.analyse(body, "text/html", {}, "https://x.example/").structured["jsonld"]
    assert entry["valid"] is False and entry["raw"] == block
    assert entry["error"] == f"the number {number[:40]} does not fit in a double"


def test_jsonld_numbers_that_fit_are_reserialized_as_json():
    block = '{"@type": "Fits", "max": 1.7976931348623157e308, "tiny": 1e-400, "huge": 123456789012345678901234567890}'
    body = f'<script type="application/ld+json">{block}</script>'.encode()
    [entry] = page.analyse(body, "text/html", {}, "https://x.example/").structured["jsonld"]
    assert entry["valid"] is True and entry["types"] == ["Fits"]
    data = json.loads(entry["json"])
    assert json.dumps(data, allow_nan=False) and data["huge"] == 123456789012345678901234567890


@pytest.mark.parametrize("path", ["/gzip-page", "/br-page", "/zstd-page", "/deflate-page"])
def test_compressed_pages_read_the_same(web, settings, path):
    seen = look(web, settings, path)
    assert seen["structured"]["title"] == "Rich fixture page" and seen["anatomy"]["rawBytes"] == len(lens_web.RICH_PAGE.encode())


def test_redirect_is_reported(web, settings):
    seen = look(web, settings, "/to-rich")
    assert seen["redirected"] is True and seen["finalUrl"] == web.url("/rich") and seen["url"] == web.url("/to-rich")


@pytest.mark.parametrize("path", ["/image.png", "/binary-as-html"])
def test_binary_is_flagged_and_not_priced(web, settings, path):
    seen = look(web, settings, path)
    assert seen["binary"] is True and seen["cost"] is None
    assert seen["anatomy"]["text"] == "" and seen["anatomy"]["rawBytes"] > 0 and seen["structured"] == {}


def test_plain_text_is_priced_without_html_tiers(web, settings):
    seen = look(web, settings, "/plain")
    assert seen["binary"] is False and seen["anatomy"]["wordCount"] == 5
    assert {t["key"] for t in seen["cost"]["tiers"]} == {"text", "raw"}
    assert "markdown" not in seen["ai"]


@pytest.mark.parametrize("path, title", [
    ("/invalid-utf8", "café \ufffd\ufffd broken"),
    ("/wrong-charset", "naÃ¯ve cafÃ©"),  # the declared charset is honoured, as a browser would
    ("/bogus-charset", "café"),            # a non-text codec name falls back to UTF-8
    ("/meta-charset", "café"),
])
def test_charsets(web, settings, path, title):
    assert look(web, settings, path)["structured"]["title"] == title


def test_undecodable_body(web, settings):
    seen = look(web, settings, "/bad-gzip")
    assert seen["bodyUnreadable"] == {"reason": "undecodable-content-encoding", "encoding": "gzip"}
    assert seen["cost"] is None and seen["anatomy"]["text"] == ""


@pytest.mark.parametrize("path", ["/big", "/bomb/gzip", "/deep", "/jsonld-flood", "/jsonld-deep"])
def test_hostile_pages_are_read_within_the_caps(web, settings, path):
    """How long the work takes is held by test_lens_hostile's CPU limits; here what is read of it."""
    seen = look(web, settings, path)
    assert seen["ok"] is True
    if path in ("/big", "/jsonld-flood"):
        assert seen["truncated"] is True and seen["anatomy"]["parseTruncated"] is True
        assert seen["anatomy"]["parsedBytes"] == 256 * 1024 and seen["cost"]["partial"]["rawBytes"] == 2 * 1024 * 1024
    if path == "/deep":
        assert seen["anatomy"]["parseTruncated"] is True and seen["anatomy"]["parsedBytes"] < 40_000
    if path == "/jsonld-flood":
        blocks = seen["structured"]["jsonld"]
        assert len(blocks) == page.JSONLD_BLOCKS and seen["structured"]["jsonldTotal"] > 1000
    if path == "/jsonld-deep":
        assert seen["structured"]["jsonld"][0]["valid"] is False
    assert len(seen["anatomy"]["rawHtml"]) <= page.RAW_HTML_CHARS and len(seen["anatomy"]["text"]) <= page.TEXT_CHARS


def test_bad_requests_are_400_or_502_with_sentences(web, settings):
    with pytest.raises(ApiError) as missing:
        inspect(None, settings, phases="page")
    assert missing.value.status == 400 and missing.value.body["parameter"] == "url"
    with pytest.raises(ApiError) as phases:
        inspect("https://example.com/", settings, phases="everything")
    assert phases.value.status == 400 and phases.value.body["parameter"] == "phases"
    with pytest.raises(ApiError) as refused:
        inspect("http://169.254.169.254/latest/meta-data/", settings, phases="page")  # the production fetcher
    assert refused.value.status == 400 and "cloud metadata" in refused.value.body["error"]
    assert "169.254" not in refused.value.body["error"]
    for path, words in (("/slow", "too long"), ("/garbage", "not a valid HTTP"), ("/to-private", "private"),
                        ("/loop-a", "loop"), ("/reset", "reset")):
        with pytest.raises(ApiError) as failed:
            look(web, settings, path, timeout_s=1)
        assert failed.value.status == 502 and words in failed.value.body["error"]
        assert failed.value.body["ok"] is False


def test_markdown_served_pages_price_their_markdown():
    analysed = page.analyse(b"# Title\n\nSome words.", "text/markdown", {}, "https://x.example/")
    assert analysed.strings["markdown"].startswith("# Title")


def test_nesting_cut_leaves_ordinary_pages_alone():
    ordinary = "<ul>" + "<li><p>item<br><img src=x>" * 5000 + "</ul>"
    assert page.nesting_cut(ordinary) is None
    assert page.nesting_cut("<div>" * 3000) == 5 * page.NESTING_LIMIT


def test_an_icon_sprite_is_read_whole():
    """Each <path/> of an inline SVG sprite had counted as an element left open, so a 78 KB page was cut
    at its sprite and reported with no words, headings or JSON-LD."""
    sprite = "<svg hidden>" + "<symbol id=i><path d='M0 0h24'/><path d='M1 1'/><circle r='2'/></symbol>" * 700 + "</svg>"
    chart = "<svg>" + "<rect width='1' height='2'/>" * 3000 + "</svg>"
    body = (f"<html><head><title>Shop</title></head><body>{sprite}<h1>Kettle</h1><p>{'A fine kettle. ' * 30}</p>"
            f"{chart}<!-- {'<div>' * 3000} --><script>{'<div>' * 3000}</script>"
            '<script type="application/ld+json">{"@type": "Product", "name": "Kettle"}</script>'
            "<h2>Reviews</h2></body></html>").encode()
    seen = page.analyse(body, "text/html", {}, "https://shop.example/")
    assert not seen.parse_truncated and seen.parsed_bytes == len(body)
    assert [h["text"] for h in seen.anatomy["headings"]] == ["Kettle", "Reviews"] and seen.anatomy["wordCount"] > 90
    assert seen.structured["jsonld"][0]["types"] == ["Product"]


def test_the_title_is_the_document_s_not_an_icon_s():
    icon = "<svg><title>Search icon</title><path d='M0 0'/></svg>"
    for html, title in ((f"<html><body>{icon}<p>Words.</p></body></html>", ""),
                        (f"<html><head>{icon}<title>Real title</title></head><body>x</body></html>", "Real title")):
        assert page.analyse(html.encode(), "text/html", {}, "https://x.example/").structured["title"] == title


@pytest.mark.parametrize("nested", [
    "<div/>",                          # "/>" closes nothing in HTML
    "<svg><div/>",                     # an HTML tag ends the SVG
    "<svg><foreignObject><path/>",     # HTML again inside foreignObject
    "<svg><title><x-a/>",
    "<math><annotation-xml encoding='text/html'><x/>",
    "<svg><style><g>",                 # an SVG style holds elements, unlike HTML's
    "<div title='<script>'><ol>",     # a quoted value holds no tag
    "<div title=<script>><ol>",       # read as a script that never ends: cut at it
    "<div title=<!--><ol>",           # likewise a comment
    "<!--><ol>",                      # a comment that ends where it starts
    "<!---><ol>",
])
def test_what_nests_in_html_still_counts(nested):
    opener, _, repeated = nested.rpartition("<")
    assert page.nesting_cut(opener + ("<" + repeated) * 3000) is not None


@pytest.mark.parametrize("tag", ["<div a=b'>", "<div '>", '<p x="y"z">'])
def test_a_quote_opens_a_value_only_after_an_equals_sign(tag):
    """Two such tags had hidden every element between them from the count: a value running from one
    quote to the next, across the page."""
    assert page.nesting_cut(tag + "<ol>" * 3000 + tag) is not None


@pytest.mark.parametrize("xfo, framable", [("DENY, SAMEORIGIN", False), ("ALLOWALL, DENY", False),
                                           ("SAMEORIGIN, SAMEORIGIN", True), ("deny, DENY", False)])
def test_conflicting_x_frame_options_values_deny(xfo, framable):
    """HTML: more than one distinct value, any of them deny, sameorigin or allowall, blocks framing."""
    assert page.frame_policy({"x-frame-options": xfo}, "https://aadhar.sh/", "aadhar.sh")[0] is framable


def test_links_that_cannot_be_resolved_are_skipped_not_fatal():
    """Templates leave hosts like [YOUR-DOMAIN] in real pages; urljoin raises on them."""
    html = (b'<html><head><base href="https://[::1"><title>Left over</title>'
            b'<link rel="alternate" href="http://[YOUR-DOMAIN]/feed"><link rel="icon" href="/icon.png"></head>'
            b"<body><p>Words of a page that answered.</p></body></html>")
    headers = {"link": '<http://[bad>; rel="preload", </llms.txt>; rel="llms-txt"'}
    result = page.analyse(html, "text/html", headers, "https://shop.example/a/")
    links = {(link["rel"], link["href"]) for link in result.structured["relLinks"]}
    assert links == {("icon", "https://shop.example/icon.png"), ("llms-txt", "https://shop.example/llms.txt")}
    assert result.anatomy["wordCount"] > 0


def test_chinese_and_japanese_words_are_counted_by_character():
    """They write no spaces between words: 900 characters of Japanese counted as one word, and the
    readiness check "A body with words in it" scored such a page half (unicode_audit24 L3)."""
    body = ("<html><body><p>" + "東京の写真を見てください。" * 3 + "</p><p>Fujifilm X100V — 2024</p></body></html>").encode()
    seen = page.analyse(body, "text/html; charset=utf-8", {}, "https://example.jp/")
    assert seen.anatomy["wordCount"] == 3 * 12 + 3  # each Han or kana, then Fujifilm X100V 2024; 。 and — are no words
    assert page.word_count(["plain", "words,", "—", "a1"]) == 3
    assert page.word_count(["カメラ・レンズ", "ｶﾒﾗ"]) == 6 + 3  # the middle dot is no word; half-width kana are
