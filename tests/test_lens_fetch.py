"""The safe fetcher: the production address policy on its own, URL rules, every redirect hop,
DNS rebinding, deadlines, caps and decoding, against a real loopback server."""
from __future__ import annotations

import time

import pytest

import lens_web
from siteapi.lens import agent, page
from siteapi.lens.discovery import Subrequests
from siteapi.lens.fetch import (PRODUCTION_POLICY, AddressPolicy, Fetcher, FetchFailed, FetchRefused,
                                classify_address, decode_body, parse_target)

DENIED = {
    "loopback": ["127.0.0.1", "127.255.255.254", "::1"],
    "private": ["10.0.0.1", "172.16.5.4", "172.31.255.255", "192.168.1.1", "fc00::1", "fd12:3456::1", "fec0::1"],
    "link-local": ["169.254.1.1", "fe80::1"],
    "cgnat": ["100.64.0.1", "100.127.255.254"],
    "this-network": ["0.0.0.0", "0.1.2.3", "::"],
    "ietf-192.0.0": ["192.0.0.8", "192.0.0.170"],
    "benchmark": ["198.18.0.1", "198.19.255.254"],
    "documentation": ["192.0.2.1", "198.51.100.2", "203.0.113.3", "2001:db8::1", "3fff::1", "3fff:fff:ffff::1"],
    "multicast": ["224.0.0.1", "239.255.255.250", "ff02::1"],
    "reserved": ["240.0.0.1", "250.1.2.3"],
    "broadcast": ["255.255.255.255"],
    "mapped/compatible": ["::ffff:127.0.0.1", "::ffff:10.0.0.1", "::ffff:8.8.8.8", "::127.0.0.1"],
    "nat64": ["64:ff9b::7f00:1", "64:ff9b::a00:1", "64:ff9b:1::1"],
    "6to4": ["2002:7f00:1::1", "2002:c0a8:101::1"],
    "teredo": ["2001:0:4136:e378:8000:63bf:3fff:fdd2"],
    "metadata": ["169.254.169.254", "169.254.170.2", "168.63.129.16", "100.100.100.200", "fd00:ec2::254", "192.0.0.192"],
}
PUBLIC = ["93.184.216.34", "1.1.1.1", "8.8.8.8", "2606:4700:4700::1111", "2a00:1450:4001:81b::200e"]


@pytest.mark.parametrize("address", [a for group in DENIED.values() for a in group])
def test_production_policy_refuses_every_non_public_class(address):
    assert classify_address(address) is not None
    assert PRODUCTION_POLICY.refusal(address, 443) is not None


def test_metadata_addresses_are_named_as_such():
    for address in DENIED["metadata"]:
        assert classify_address(address) == "a cloud metadata address"


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_pass_on_80_and_443_only(address):
    assert PRODUCTION_POLICY.refusal(address, 443) is None
    assert PRODUCTION_POLICY.refusal(address, 80) is None
    assert PRODUCTION_POLICY.refusal(address, 8080) is not None


@pytest.mark.parametrize("url, words", [
    ("ftp://example.com/", "http and https"),
    ("file:///etc/passwd", "http and https"),
    ("gopher://example.com/", "http and https"),
    ("https://user:pw@example.com/", "credentials"),
    ("https://user@example.com/", "credentials"),
    ("https://example.com:8443/", "ports 80 and 443"),
    ("http://example.com:22/", "ports 80 and 443"),
    ("https://example.com:99999/", "port"),
    ("http://example.com:0/", "ports 80 and 443"),
    ("example.com:8080/x", "ports 80 and 443"),
    ("localhost:3000", "ports 80 and 443"),
    ("mailto:someone@example.com", "not mailto URLs"),
    ("javascript:alert(1)", "not javascript URLs"),
    ("data:text/html,hello", "not data URLs"),
    ("tel:+15551234567", "not tel URLs"),
    ("urn:isbn:0451450523", "not urn URLs"),
    ("http://localhost/", ".localhost"),
    ("http://printer.local/", ".local"),
    ("http://db.internal/", ".internal"),
    ("http://abc.onion/", ".onion"),
    ("http://2130706433/", "non-standard"),
    ("http://0x7f.1/", "non-standard"),
    ("http://017700000001/", "non-standard"),
    ("http://[fe80::1%25eth0]/", "zone"),
    ("http://０ｘ７ｆ.１/", "non-standard"),  # full-width digits map onto an address in disguise
    ("http://example.0x7f/", "numeric address in a non-standard form"),  # the last label is read, as
    ("http://a.017700000001/", "numeric address in a non-standard form"),  # WHATWG reads an IPv4 host
    ("http://a.b.2130706433./", "numeric address in a non-standard form"),
    ("[]", "IPv6 address is not valid"),
    ("http://[::1", "IPv6 address is not valid"),
    ("http://[abc]/", "IPv6 address is not valid"),
    ("]", "cannot be read"),
    ("http://a\u2100b/", "cannot be read"),  # ℀ becomes a/c under NFKC: a delimiter in the host
    ("", "url"),
    ("https://exa mple.com/\x00", "control"),
    ("https:///path-only", "host"),
    ("http://-a_.example.com/", "valid internet name"),
    ("http://a..b.example/", "valid internet name"),
    ("http://a_b.localhost/", ".localhost"),
])
def test_url_rules_refuse_with_a_sentence(url, words):
    with pytest.raises(FetchRefused) as refused:
        parse_target(url)
    assert words in str(refused.value)
    assert str(refused.value).endswith(".")


@pytest.mark.parametrize("url", ["http://１２７.０.０.１/", "http://127。0。0。1/", "http://１０．０．０．１/"])
def test_full_width_and_ideographic_addresses_are_addresses(url):
    target = parse_target(url)
    assert target.literal and classify_address(target.host) is not None and "." in target.host


def test_url_normalisation():
    assert parse_target("example.com").url == "https://example.com/"
    assert parse_target("//example.com/a b").url == "https://example.com/a%20b"
    assert parse_target("HTTP://Example.COM:80/x?q=1#frag").url == "http://example.com/x?q=1"
    assert parse_target("https://bücher.example/").host == "xn--bcher-kva.example"
    assert parse_target("https://[2606:4700::1]/").url == "https://[2606:4700::1]/"
    assert parse_target("http:example.com").url == "http://example.com/"  # as WHATWG reads it
    # underscores, as DNS and browsers allow them, where IDNA 2008 alone would refuse the name
    assert parse_target("https://Sub_Domain.example.com/").host == "sub_domain.example.com"
    assert parse_target("https://a_b.bücher.ch/").host == "a_b.xn--bcher-kva.ch"
    assert parse_target("https:/example.com/x").url == "https://example.com/x"
    # `--` in positions 3-4 of an ASCII label, as DNS and browsers allow, where IDNA 2008 refuses it
    # (unicode_audit24 M4); the label must still be letters, digits and inner hyphens
    assert parse_target("https://R3---sn-abc.googlevideo.com/").host == "r3---sn-abc.googlevideo.com"
    assert parse_target("https://ab--c.bücher.ch/").host == "ab--c.xn--bcher-kva.ch"
    # a name whose first label is digits is a name (163.com, 360.cn): only a numeric last label is an address
    for url, host in (("https://163.com/", "163.com"), ("https://123.example.com/", "123.example.com"),
                      ("https://0x7f.example.com/", "0x7f.example.com"), ("https://360.cn/", "360.cn")):
        target = parse_target(url)
        assert target.host == host and not target.literal, url
    for url in ("https://-ab.example.com/", "https://ab-.example.com/", "https://xn--abc.example.com/",
                f"https://{'a' * 64}.example.com/", "https://a!b.example.com/"):
        with pytest.raises(FetchRefused):
            parse_target(url)


def _refused_without_network(resolver):
    fetcher = Fetcher(resolve=resolver, timeout_s=2)
    with pytest.raises(FetchRefused) as refused:
        fetcher.fetch("https://victim.example/")
    return str(refused.value)


@pytest.mark.parametrize("address", [a for group in DENIED.values() for a in group])
def test_names_resolving_to_any_denied_class_are_refused(address):
    sentence = _refused_without_network(lambda host, timeout: [address])
    assert "public internet addresses" in sentence
    assert address not in sentence  # the internal address is never echoed


def test_one_private_answer_among_public_ones_is_refused():
    _refused_without_network(lambda host, timeout: ["93.184.216.34", "10.0.0.5"])


def test_literal_private_addresses_are_refused_before_any_connection():
    fetcher = Fetcher(resolve=lambda host, timeout: pytest.fail("no lookup for a literal"))
    for url in ("http://127.0.0.1/", "http://[::1]/", "http://169.254.169.254/latest/meta-data/",
                "http://[::ffff:127.0.0.1]/", "http://100.64.1.1/"):
        with pytest.raises(FetchRefused):
            fetcher.fetch(url)


def test_unresolvable_name_is_a_failure():
    with pytest.raises(FetchFailed, match="does not resolve"):
        Fetcher(resolve=lambda host, timeout: []).fetch("https://nowhere.example/")


@pytest.fixture(scope="module")
def web():
    # The compression bombs take about a second of CPU to build (more on a busy machine): built here,
    # not by the first /bomb/ request inside a fetch whose 2 s deadline they would eat into.
    lens_web.bomb("gzip")
    server, thread = lens_web.start()
    yield server
    lens_web.stop(server, thread)


def test_the_test_policy_allows_only_its_own_port(web):
    policy = AddressPolicy(allow=frozenset({("127.0.0.1", web.port)}))
    assert policy.refusal("127.0.0.1", web.port) is None
    assert policy.refusal("127.0.0.1", web.port + 1) is not None
    assert policy.refusal("10.0.0.1", web.port) is not None


def test_fetch_sends_the_name_as_host_and_the_product_user_agent(web):
    result = lens_web.loopback_fetcher(web).fetch(web.url("/rich"))
    assert result.status == 200 and b"Rich" in result.body
    path, headers = web.seen[-1]
    assert headers["Host"] == f"shop.test:{web.port}"
    assert headers["User-Agent"].startswith("AadharshBot/1.0 (+https://")
    assert "br" in headers["Accept-Encoding"] and "zstd" in headers["Accept-Encoding"]
    assert result.headers["x-frame-options"] == "DENY"


def test_a_name_with_an_underscore_is_fetched_under_that_name(web):
    resolver = lens_web.StubResolver({"under_score.test": ["127.0.0.1"]})
    result = lens_web.loopback_fetcher(web, resolver).fetch(f"http://Under_Score.test:{web.port}/rich")
    assert result.status == 200 and web.seen[-1][1]["Host"] == f"under_score.test:{web.port}"


def test_a_name_with_a_double_hyphen_is_fetched_under_that_name_and_checked(web):
    resolver = lens_web.StubResolver({"ab--c.test": ["127.0.0.1"], "r3---sn-x.test": ["10.0.0.7"]})
    fetcher = lens_web.loopback_fetcher(web, resolver)
    result = fetcher.fetch(f"http://AB--c.test:{web.port}/rich")
    assert result.status == 200 and web.seen[-1][1]["Host"] == f"ab--c.test:{web.port}"
    with pytest.raises(FetchRefused) as refused:
        fetcher.fetch(f"http://r3---sn-x.test:{web.port}/rich")
    assert "public internet addresses" in str(refused.value)


def test_header_values_in_raw_utf8_are_read_as_utf8(web):
    """unicode_audit24 M3: http.client reads header bytes as ISO-8859-1, so a raw `Location: /café`
    led to /caf%C3%83%C2%A9 (a 404) and a Link to /café was shown as /cafÃ©."""
    fetcher = lens_web.loopback_fetcher(web, lens_web.StubResolver({"shop.test": ["127.0.0.1"]}))
    result = fetcher.fetch(web.url("/to-cafe"))
    assert result.status == 200 and result.final_url == web.url("/caf%C3%A9")
    result = fetcher.fetch(web.url("/utf8-link"))
    assert result.headers["link"] == '</café>; rel="alternate"; type="text/markdown"'
    assert result.headers["x-note"] == "déjà vu" and result.headers["x-latin-1"] == "caf\xe9"  # not UTF-8: as sent
    assert page.parse_link_header(result.headers["link"], result.final_url)[0]["href"] == web.url("/café")


def test_a_name_that_resolves_public_then_private_is_connected_to_the_checked_address(web):
    resolver = lens_web.StubResolver({"shop.test": [["127.0.0.1"], ["10.9.9.9"]]})
    result = lens_web.loopback_fetcher(web, resolver).fetch(web.url("/rich"))
    assert result.status == 200
    assert resolver.calls == ["shop.test"]  # resolved once, then the checked address was used


def test_every_redirect_hop_is_checked_again(web):
    resolver = lens_web.StubResolver({"shop.test": ["127.0.0.1"], "rebind.test": ["10.1.2.3"]})
    fetcher = lens_web.loopback_fetcher(web, resolver)
    for path, words in (("/to-private", "private network"), ("/to-metadata", "cloud metadata"),
                        ("/to-rebind", "private network"), ("/to-other-port", "ports 80 and 443"),
                        ("/to-ftp", "http and https")):
        with pytest.raises(FetchFailed) as failed:
            fetcher.fetch(web.url(path))
        assert words in str(failed.value) and "redirected" in str(failed.value)
    assert "rebind.test" in resolver.calls


def test_a_redirect_back_to_a_name_that_now_resolves_private_is_refused(web):
    resolver = lens_web.StubResolver({"shop.test": [["127.0.0.1"], ["192.168.0.10"]]})
    with pytest.raises(FetchFailed, match="private network"):
        lens_web.loopback_fetcher(web, resolver).fetch(web.url("/to-rich"))


def test_redirects_are_followed_by_hand_up_to_the_limit(web):
    fetcher = lens_web.loopback_fetcher(web)
    result = fetcher.fetch(web.url("/chain/5"))
    assert result.status == 200 and result.redirected and len(result.redirects) == 5
    with pytest.raises(FetchFailed, match="more than 5 times"):
        fetcher.fetch(web.url("/chain/6"))
    with pytest.raises(FetchFailed, match="loop"):
        fetcher.fetch(web.url("/loop-a"))


def test_a_redirect_to_a_malformed_url_is_a_failure_with_a_sentence(web):
    with pytest.raises(FetchFailed, match=r"redirected to a malformed URL \('http://\[YOUR-DOMAIN\]/'\)"):
        lens_web.loopback_fetcher(web).fetch(web.url("/to-template-host"))


def test_interim_answers_are_skipped_for_the_final_one(web):
    result = lens_web.loopback_fetcher(web).fetch(web.url("/early-hints"))
    assert result.status == 200 and result.body == b"<title>after the hints</title>"


def test_a_stream_held_open_is_kept_as_far_as_it_came_only_when_asked(web):
    fetcher = lens_web.loopback_fetcher(web)
    result = fetcher.fetch(web.url("/held-stream"), deadline=time.monotonic() + 1, keep_partial=True)
    assert result.status == 200 and result.content_type == "text/event-stream" and result.truncated
    assert result.body.startswith(b"event: message\ndata:")
    with pytest.raises(FetchFailed, match=r"\(1s timeout\)"):  # the deadline it had, not the fetcher's 8 s
        fetcher.fetch(web.url("/held-stream"), deadline=time.monotonic() + 1)


def test_the_agent_probe_reads_an_mcp_stream_that_stays_open_as_mcp(web):
    sub = Subrequests(lens_web.loopback_fetcher(web), time.monotonic() + 10, cap=5, probe_timeout_s=5)
    answer = agent.fetch_endpoint(sub, web.url("/held-stream"))
    assert answer["status"] == 200 and answer["contentType"] == "text/event-stream"
    assert agent.mcp_verdict(answer, server_card=False)["verdict"] == "yes"
    assert agent.nlweb_verdict(answer)["verdict"] == "likely"


@pytest.mark.parametrize("path, sentence", [
    ("/reset", "reset the connection"),
    ("/garbage", "not a valid HTTP response"),
    ("/hangup", "closed the connection"),
])
def test_broken_servers_fail_with_a_sentence(web, path, sentence):
    with pytest.raises(FetchFailed, match=sentence):
        lens_web.loopback_fetcher(web).fetch(web.url(path))


@pytest.mark.parametrize("path", ["/slow", "/drip"])
def test_one_deadline_covers_the_whole_fetch(web, path):
    started = time.monotonic()
    with pytest.raises(FetchFailed) as failed:
        lens_web.loopback_fetcher(web, timeout_s=1).fetch(web.url(path))
    assert str(failed.value) == "The site took too long to answer (1s timeout)."
    assert time.monotonic() - started < 10  # without the one deadline: 30 s, or never for /drip


def test_a_refused_connection_is_a_failure(web):
    fetcher = Fetcher(policy=AddressPolicy(allow=frozenset({("127.0.0.1", 9)})),
                      resolve=lambda host, timeout: ["127.0.0.1"], timeout_s=2)
    with pytest.raises(FetchFailed, match="refused the connection"):
        fetcher.fetch("http://shop.test:9/")


def test_raw_body_is_capped(web):
    result = lens_web.loopback_fetcher(web).fetch(web.url("/big"))
    assert result.truncated and len(result.body) == 2 * 1024 * 1024 and result.raw_bytes == 2 * 1024 * 1024


@pytest.mark.parametrize("coding", ["gzip", "deflate", "br", "zstd"])
def test_compression_bombs_stop_at_the_decoded_cap(web, coding):
    result = lens_web.loopback_fetcher(web).fetch(web.url(f"/bomb/{coding}"))
    assert result.truncated and len(result.body) == 2 * 1024 * 1024
    assert result.raw_bytes < 100_000


@pytest.mark.parametrize("coding", ["gzip", "deflate", "br", "zstd"])
def test_every_content_encoding_decodes(web, coding):
    result = lens_web.loopback_fetcher(web).fetch(web.url(f"/{coding}-page"))
    assert result.body == lens_web.RICH_PAGE.encode() and not result.truncated


@pytest.mark.parametrize("path, encoding", [("/bad-gzip", "gzip"), ("/unknown-encoding", "x-snappy-frame")])
def test_undecodable_bodies_are_reported_not_raised(web, path, encoding):
    result = lens_web.loopback_fetcher(web).fetch(web.url(path))
    assert result.body == b""
    assert result.body_unreadable == {"reason": "undecodable-content-encoding", "encoding": encoding}


def test_decode_body_tolerates_a_cut_stream_but_not_a_broken_one():
    import gzip
    whole = gzip.compress(b"hello world" * 1000)
    body, capped, unreadable = decode_body(whole[: len(whole) // 2], "gzip", 1 << 20, raw_truncated=True)
    assert unreadable is None and body and b"hello world".startswith(body[:11])
    assert decode_body(b"\x1f\x8bnope", "gzip", 1 << 20, raw_truncated=False)[2]["encoding"] == "gzip"
    assert decode_body(b"plain", "identity", 10, False) == (b"plain", False, None)
