"""The conventions every route shares, on the real server: errors, 404 formats, methods, versions,
headers, and hostile input that must never produce a 500."""
import dataclasses
import html
import http.client
import json
from urllib.parse import urlsplit

import html5lib
import pytest
import requests
from markdown_it import MarkdownIt

from app import make_app
from conftest import make_settings
from servers import serve_wsgi
from siteapi.config import RatePolicy
from test_documents import assert_runs_under_its_policy


def test_unknown_json_path_is_a_json_404_with_suggestions(api):
    r = api.get("/serch.json")
    assert r.status_code == 404
    body = r.json()
    assert body["ok"] is False and body["code"] == "not_found" and body["status"] == 404
    assert "/serch.json" in body["error"] and body["hint"] and body["docs"].endswith("/developers")
    assert body["suggestions"][0].endswith("/developers#searchSite")  # /search.json needs its q
    assert all(u.startswith("https://") for u in body["suggestions"])


def test_a_mistyped_endpoint_is_suggested_with_the_parameters_it_reads(api, site_settings):
    """/serch.json?q=... points at /search.json with that q (and limit), not at the guide; the
    parameters the endpoint does not read are left behind; the query keeps its encoding in every
    format, and followed, the suggestion answers the question that was asked."""
    path = "/serch.json?q=caf%C3%A9+%26+jets&limit=2&colour=red&q=second"
    wanted = f"{site_settings.public_base_url}/search.json?q=caf%C3%A9+%26+jets&limit=2"
    suggestions = api.get(path).json()["suggestions"]
    assert suggestions[0] == wanted, suggestions
    followed = api.get(suggestions[0].removeprefix(site_settings.public_base_url))
    assert followed.status_code == 200 and followed.json()["query"] == "café & jets"
    assert f"<{wanted}>" in api.get(path, headers={"Accept": "text/markdown"}).text
    relative = wanted.removeprefix(site_settings.public_base_url)  # the HTML links it on the stack it came from
    assert f'href="{html.escape(relative)}"' in api.get(path, headers={"Accept": "text/html"}).text
    # without its required q, or with one too long to carry, the endpoint is its section of the guide
    for missing in ("/serch.json?limit=2", "/serch.json?q=" + "x" * 1200):
        assert api.get(missing).json()["suggestions"][0].endswith("/developers#searchSite"), missing
    # an endpoint that needs nothing gets the parameters it reads, and only those
    assert api.get("/around/change.json?limit=1&q=x").json()["suggestions"][0].endswith("/around/changes.json?limit=1")


@pytest.mark.parametrize("path, wanted", [
    ("/ask.json?query=carb", "/ask?query=carb"), ("/coffee.json", "/coffee/availability.json"),
    ("/lens.json?url=https%3A%2F%2Fexample.com%2F", "/lens/fetch?url=https%3A%2F%2Fexample.com%2F"),
    ("/mcp.json", "/developers#callMcp"), ("/photos/search.json?film=Acros", "/photos/query.json?film=Acros"),
    ("/serch.json?q=jets", "/search.json?q=jets"),
])
def test_an_endpoint_guessed_with_json_or_by_its_folder_is_suggested(api, site_settings, path, wanted):
    """Agents guess an endpoint by adding .json to its name or asking its folder: the endpoint is
    among the suggestions (agent_audit23 #6: /ask.json got /around/json, /lens.json /ledger.json)."""
    suggestions = api.get(path).json()["suggestions"]
    assert site_settings.public_base_url + wanted in suggestions, suggestions


def test_the_markdown_404_shows_the_path_asked_for_without_rendering_it(api):
    r = api.get("/%5Bclick%20here%5D(https:%2F%2Fevil.example%2F)**bold**", headers={"Accept": "text/markdown"})
    assert r.status_code == 404
    rendered = MarkdownIt("commonmark").render(r.text)
    assert "evil.example" in rendered and 'href="https://evil.example/"' not in rendered and "<strong>" not in rendered
    assert "Nothing lives at <code>/[click here](https://evil.example/)**bold**</code>." in rendered
    # a bare URL in the path would be a link in GitHub's renderers: it stays in a code span, backticks too
    bare = api.get("/x%20https:%2F%2Fevil.example%2Flogin%60%60.md")
    assert "Nothing lives at ``` /x https://evil.example/login``.md ```." in bare.text
    assert MarkdownIt("commonmark").render(bare.text).count("<code>/x https://evil.example/login``.md</code>") == 1


def test_the_home_pages_twin_is_index_md_alone(api):
    assert api.get("/index.md").status_code == 200
    assert api.get("/.md").status_code == 404


def test_unknown_page_404_follows_accept(api):
    as_html = api.get("/writting/carb", headers={"Accept": "text/html"})
    assert as_html.status_code == 404 and as_html.headers["Content-Type"].startswith("text/html")
    html5lib.HTMLParser(strict=True).parse(as_html.text)
    assert 'rel="canonical"' not in as_html.text  # it named the missing URL as the page's own
    assert_runs_under_its_policy(as_html)
    as_json = api.get("/writting/carb", headers={"Accept": "application/json"})
    assert as_json.status_code == 404 and as_json.json()["suggestions"]
    as_md = api.get("/writting/carb", headers={"Accept": "text/markdown"})
    assert as_md.headers["Content-Type"].startswith("text/markdown") and as_md.text.startswith("# Not found")
    assert int(as_md.headers["x-markdown-tokens"]) > 10
    suggestions = as_json.json()["suggestions"]
    assert all(f"<{url}>" in as_md.text for url in suggestions)
    for url in suggestions:  # each by its path, link and text: a screen reader need not spell out https://
        path = urlsplit(url).path + (f"?{urlsplit(url).query}" if urlsplit(url).query else "")
        assert f'<a href="{html.escape(path)}">{html.escape(path)}</a>' in as_html.text, path
    main = as_html.text[as_html.text.index("<main"):as_html.text.index("</main>")]
    assert main.count("Nothing lives at") == 1  # the lede says it, not the body again (html_audit25 F8)
    assert "/llms.txt" not in as_html.text  # no "Also available as Markdown" link where no twin is
    assert all(r.headers["Vary"] == "Accept" for r in (as_html, as_json, as_md))  # the format follows Accept
    api_like = api.get("/api/v2/things")
    assert api_like.headers["Content-Type"].startswith("application/json")
    assert api.get("/v1/x", headers={"Accept": "text/html"}).headers["Content-Type"].startswith("text/html")


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "BREW"])
def test_unserved_method_is_405_with_allow(api, method):
    r = api.request(method, "/search.json?q=x")
    assert r.status_code == 405
    assert r.headers["Allow"] == "GET, HEAD, OPTIONS"
    assert r.json()["code"] == "method_not_allowed" and r.json()["allow"] == ["GET", "HEAD", "OPTIONS"]


@pytest.mark.parametrize("method", ["POST", "DELETE", "BREW"])
def test_unserved_method_on_a_page_is_405_and_on_nothing_404(api, method):
    for path in ("/about", "/", "/about.md"):
        r = api.request(method, path)
        assert r.status_code == 405 and r.headers["Allow"] == "GET, HEAD, OPTIONS", (method, path)
        assert r.json()["code"] == "method_not_allowed"
    assert api.request(method, "/no-such-page").status_code == 404


def test_every_404_names_the_closest_pages_not_only_the_fallbacks(api):
    """A route that knows a path names nothing (an image, a skill) answers the same 404 as a path no
    route knows: a hint and the closest real pages, in the format asked for."""
    for path in ("/images/nope.json", "/images/full/nope.jpg", "/.well-known/agent-skills/serch_site/SKILL.md"):
        r = api.get(path, headers={"Accept": "application/json"})
        body = r.json()
        assert r.status_code == 404 and body["code"] == "not_found" and body["hint"], path
        assert body["suggestions"] and all(u.startswith("https://") for u in body["suggestions"]), path
        assert r.headers["Cache-Control"] == "no-store", path
        as_md = api.get(path, headers={"Accept": "text/markdown"})
        assert all(f"<{url}>" in as_md.text for url in body["suggestions"]), path
        assert body["suggestions"][0].endswith(("/images/manifest.json", "/.well-known/agent-skills/index.json")), path


BROWSER_PAGE = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
BROWSER_IMAGE = "image/avif,image/webp,image/apng,image/*,*/*;q=0.8"


@pytest.mark.parametrize("path, template, accept, media", [
    ("/images/nope.jpg", "/images/{path}", None, "application/json"),  # no Accept at all
    ("/images/nope.jpg", "/images/{path}", "*/*", "application/json"),
    ("/images/full/nope.jpg", "/images/{path}", BROWSER_IMAGE, "application/json"),  # an <img> tag
    ("/images/nope.jpg", "/images/{path}", BROWSER_PAGE, "text/html"),  # a browser tab
    ("/images/nope.jpg", "/images/{path}", "text/markdown", "text/markdown"),
    ("/.well-known/agent-skills/nope/SKILL.md", "/.well-known/agent-skills/{name}/SKILL.md", None, "text/markdown"),
    ("/.well-known/agent-skills/nope/SKILL.md", "/.well-known/agent-skills/{name}/SKILL.md", "*/*", "text/markdown"),
    ("/.well-known/agent-skills/nope/SKILL.md", "/.well-known/agent-skills/{name}/SKILL.md", "application/json",
     "application/json"),
    ("/.well-known/agent-skills/nope/SKILL.md", "/.well-known/agent-skills/{name}/SKILL.md", BROWSER_PAGE, "text/html"),
])
def test_a_404_comes_in_a_format_openapi_documents_for_its_path(api, checker, path, template, accept, media):
    """An image path answers a program (or an <img> tag) JSON and a SKILL.md answers Markdown like the
    skills themselves; HTML only when a browser asks for a page. Every answer is one /openapi.json
    lists for that path's 404 (and a JSON one is validated against it by `api`)."""
    r = api.get(path, headers={"Accept": accept})
    documented = checker.resolve(checker.doc["paths"][template]["get"]["responses"]["404"])
    assert r.status_code == 404 and r.headers["Content-Type"].split(";")[0] == media
    assert media in documented["content"], (template, media)
    assert ("x-markdown-tokens" in r.headers) == (media == "text/markdown")
    assert "x-markdown-tokens" in documented["headers"]


@pytest.mark.parametrize("path, accept, media", [
    ("/writting/carb", "text/*", "text/html"),  # HTML is a text/*
    ("/writting/carb", "text/html;q=0, */*", "application/json"),  # refused by name: no wildcard brings it back
    ("/writting/carb", "application/xhtml+xml;q=0, text/html;q=0, */*;q=0.5", "application/json"),
    ("/writting/carb", "*/*;q=0", "application/json"),
    ("/writting/carb", "text/*;q=0, */*", "application/json"),
    ("/writting/carb", "application/xhtml+xml;q=0, */*", "text/html"),
    ("/writting/carb", "application/json, text/markdown;q=0.5", "application/json"),  # JSON is preferred
    ("/serch.json", "application/json;q=0.4, text/markdown;q=0.6", "text/markdown"),
    ("/writting/carb", "text/markdown;q=0, */*", "text/html"),
])
def test_a_404_follows_q_values_and_wildcards(api, path, accept, media):
    r = api.get(path, headers={"Accept": accept})
    assert r.status_code == 404 and r.headers["Content-Type"].split(";")[0] == media


def test_every_route_answers_preflight_head_and_unserved_methods(live, site_settings):
    """OPTIONS is a CORS preflight wherever the route serves it (the methods it lists are the ones it
    answers), HEAD carries GET's status without a body, and any other method is a 405 naming them."""
    from app import make_app

    session = requests.Session()
    for rule, route in make_app(site_settings).routes.items():  # the routes `live` serves
        allowed = route.methods
        if "<" in rule:
            continue
        preflight = session.options(live + rule, headers={"Origin": "https://example.org",
                                                          "Access-Control-Request-Method": "GET",
                                                          "Access-Control-Request-Headers": "api-version"}, timeout=30)
        if "OPTIONS" in allowed:
            assert preflight.status_code == 204, rule
            assert preflight.headers["Access-Control-Allow-Methods"].split(", ") == list(allowed), rule
            assert preflight.headers["Access-Control-Allow-Headers"] == "*"
        else:
            assert preflight.status_code == 405 and preflight.headers["Allow"].split(", ") == list(allowed), rule
        assert preflight.headers["Access-Control-Allow-Origin"] == "*", rule
        put = session.put(live + rule, timeout=30)
        refusal = put.json()["error"]["data"] if rule == "/mcp" else put.json()  # /mcp answers in JSON-RPC
        assert put.status_code == 405 and refusal["allow"] == list(allowed) == put.headers["Allow"].split(", ")
        if "HEAD" in allowed:
            head, get = session.head(live + rule, timeout=30), session.get(live + rule, timeout=30)
            assert (head.status_code, head.content) == (get.status_code, b""), rule


def test_every_error_of_a_route_keeps_its_error_fields(api):
    """API.md 2.1: `ok` is false on every error where the endpoint uses an ok flag, and /rn/tracks keeps
    `tracks: []`; the convention errors (405, API-Version) too, not only the endpoint's own (429: test_ratelimit)."""
    fields = {"/lens/fetch": {"ok": False}, "/lens/compare.json": {"ok": False}, "/lens/census.json": {"ok": False},
              "/ledger.json": {"ok": False}, "/around/changes.json": {"ok": False}, "/rn/tracks": {"tracks": []}}
    for path, expected in fields.items():
        for r in (api.request("PUT", path), api.get(path, headers={"API-Version": "2"})):
            assert r.status_code in (400, 405) and r.json().items() >= expected.items(), (path, r.json())
    assert "ok" not in api.request("PUT", "/search.json").json()  # an endpoint without the flag does not gain it


@pytest.mark.parametrize("method", ["OPTIONS", "POST", "DELETE"])
def test_a_path_that_names_nothing_is_404_whatever_the_method(api, method):
    for path in ("/no-such-page", "/api/v9/anything", "/images/nope.jpg", "/.well-known/agent-skills/nope/SKILL.md"):
        r = api.request(method, path, headers={"Accept": "application/json"})
        assert r.status_code == 404 and "Allow" not in r.headers, (method, path, r.status_code)
        assert "Access-Control-Allow-Methods" not in r.headers, (method, path)
    real = api.request(method, "/about")
    assert real.status_code == (204 if method == "OPTIONS" else 405)
    skill = api.request(method, "/.well-known/agent-skills/search_site/SKILL.md")
    assert skill.status_code == (204 if method == "OPTIONS" else 405)


@pytest.mark.parametrize("method", ["GET", "HEAD", "POST"])
@pytest.mark.parametrize("path, location", [("/about/", "/about"), ("/search.json/?q=coffee&limit=2", "/search.json?q=coffee&limit=2"),
                                            ("/writing///", "/writing"), ("/mcp/", "/mcp")])
def test_a_trailing_slash_is_a_permanent_redirect_to_the_path_without_it(api, method, path, location):
    moved = api.request(method, path)
    assert moved.status_code == 308 and moved.headers["Location"] == location and moved.content == b""
    assert moved.headers["Access-Control-Allow-Origin"] == "*" and "Link" in moved.headers
    if method == "GET":
        assert api.get(location).status_code in (200, 405)  # where it leads is served
    assert api.get("/").status_code == 200  # the root keeps its slash


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_a_trailing_slash_on_what_names_nothing_is_its_404(api, method):
    missing = api.request(method, "/no-such-page/", headers={"Accept": "application/json"})
    assert missing.status_code == 404 and missing.json()["code"] == "not_found" and "Location" not in missing.headers


def test_sitemap_lists_each_page_once(api):
    import re
    locs = re.findall(r"<loc>([^<]+)</loc>", api.get("/sitemap.xml").text)
    assert len(locs) == len(set(locs)) and any(u.endswith("/developers") for u in locs)
    assert not [u for u in locs if u.endswith("/") and u.count("/") > 3]  # a trailing slash would be a redirect


def test_a_very_long_unknown_path_is_a_short_404(api):
    r = api.get("/writing/cb550-first-rid" + "e" * 200_000, headers={"Accept": "application/json"})
    assert r.status_code == 404 and r.json()["suggestions"]
    assert len(r.json()["error"]) < 300 and r.json()["error"].endswith("….")


def test_suggestions_are_real_pages_never_route_templates(api, site_settings):
    """Each suggestion, followed with a plain GET, is answered, not refused (no 400, 404 or 405; a
    feed without its data is a 503): never a route template, nor a route that needs a parameter
    (/ask, /lens/compare.json) or has no GET (/mcp), whose guide sections are suggested instead."""
    for path in ("/imags/x.jpg", "/.well-known/agent-skill/x", "/rn/track", "/api", "/nope.json", "/mcpp",
                 "/lens/fetchh", "/lens/compare"):
        suggestions = api.get(path, headers={"Accept": "application/json"}).json()["suggestions"]
        assert suggestions and not any("<" in url for url in suggestions), (path, suggestions)
        for url in suggestions:
            page, _, section = url.removeprefix(site_settings.public_base_url).partition("#")
            followed = api.get(page)
            assert followed.status_code not in (400, 404, 405), (path, url, followed.status_code)
            assert not section or f'id="{section}"' in followed.text, (path, url)
    assert api.get("/mcpp", headers={"Accept": "application/json"}).json()["suggestions"][0].endswith("/developers#callMcp")


@pytest.mark.parametrize("path, other", [("/search.json?q=carburetor", "/search.json?q=carburetor&limit=1"),
                                         ("/photos/query.json?q=harbour", "/photos/query.json?q=harbour&limit=1"),
                                         ("/images/manifest.json", None)])
def test_the_cached_json_answers_can_be_revalidated(api, path, other):
    first = api.get(path)
    etag = first.headers["ETag"]
    assert first.status_code == 200 and etag.startswith('W/"') and api.get(path).headers["ETag"] == etag
    again = api.get(path, headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.content == b"" and again.headers["ETag"] == etag
    assert again.headers["Cache-Control"] == first.headers["Cache-Control"]
    assert api.get(path, headers={"If-None-Match": 'W/"other"'}).status_code == 200
    # RFC 9110 13.1.2: `*` matches any current representation; a list matches when one member does
    for sent in ("*", f'"other", {etag}', f'W/"other",{etag.removeprefix("W/")}'):
        matched = api.get(path, headers={"If-None-Match": sent})
        assert matched.status_code == 304 and matched.content == b"" and matched.headers["ETag"] == etag, sent
    assert other is None or api.get(other).headers["ETag"] != etag


def test_head_has_get_headers_and_no_body(api):
    get = api.get("/search.json?q=carburetor")
    head = api.request("HEAD", "/search.json?q=carburetor")
    assert head.status_code == 200 and head.content == b""
    assert head.headers["Content-Length"] == get.headers["Content-Length"]
    assert head.headers["Content-Type"] == get.headers["Content-Type"]


def test_options_is_a_cors_preflight(api):
    r = api.request("OPTIONS", "/search.json", headers={"Origin": "https://example.org",
                                                         "Access-Control-Request-Method": "GET"})
    assert r.status_code == 204
    assert r.headers["Access-Control-Allow-Origin"] == "*"
    assert "GET" in r.headers["Access-Control-Allow-Methods"]


def test_a_cross_origin_script_can_read_the_headers_it_is_sent(api):
    card = api.get("/mcp/server-card", headers={"Origin": "https://scanner.example"})
    refused = api.request("DELETE", "/search.json", headers={"Origin": "https://scanner.example"})
    pdf = api.get("/resume.pdf", headers={"Origin": "https://scanner.example"})
    keys = api.get("/.well-known/http-message-signatures-directory", headers={"Origin": "https://scanner.example"})
    for r, name in ((card, "ETag"), (refused, "Allow"), (card, "RateLimit"), (refused, "Link"),
                    (pdf, "Content-Disposition"), (keys, "Signature"), (keys, "Signature-Input")):  # cache_audit24
        assert name in r.headers and name in r.headers["Access-Control-Expose-Headers"].split(", "), name
    assert api.get("/mcp/server-card", headers={"If-None-Match": card.headers["ETag"]}).status_code == 304


def test_a_cross_origin_script_can_read_the_headers_of_a_429(site_settings):
    """API.md §8: Retry-After takes precedence over RateLimit; neither is CORS-safelisted, so a
    browser script reads them on a refusal only when Access-Control-Expose-Headers names them."""
    settings = dataclasses.replace(site_settings, rates={**site_settings.rates, "read": RatePolicy("read", 1, 60)})
    with serve_wsgi(make_app(settings).wsgi) as base:
        refused = [requests.get(base + "/search.json?q=garage", timeout=30,
                                headers={"Origin": "https://scanner.example", "X-Forwarded-For": "203.0.113.44"})
                   for _ in range(2)][-1]
    assert refused.status_code == 429 and refused.headers["Access-Control-Allow-Origin"] == "*"
    exposed = refused.headers["Access-Control-Expose-Headers"].split(", ")
    for name in ("Retry-After", "RateLimit", "RateLimit-Policy", "Link"):
        assert name in refused.headers and name in exposed, name


def test_every_200_has_policy_link_cors_and_cache(api):
    for path in ["/search.json?q=motorcycle", "/openapi.json", "/llms.txt", "/", "/sitemap.xml"]:
        r = api.get(path)
        assert r.status_code == 200, path
        assert r.headers["RateLimit-Policy"] == '"read";q=100000;w=60', path
        assert 'rel="service-desc"' in r.headers["Link"] and 'rel="api-catalog"' in r.headers["Link"]
        assert r.headers["Access-Control-Allow-Origin"] == "*"
        assert r.headers["Cache-Control"]


def test_api_version_header(api):
    assert api.get("/search.json?q=garage", headers={"API-Version": "1"}).status_code == 200
    assert api.get("/search.json?q=garage", headers={"API-Version": ""}).status_code == 200  # as if left out
    r = api.get("/search.json?q=garage", headers={"API-Version": "2"})
    assert r.status_code == 400
    assert r.json()["code"] == "unsupported_api_version" and r.json()["supported"] == ["1"]
    for path in ("/about", "/images/" + api.get("/images/manifest.json").json()["photos"][0]["thumb_small"].rsplit("/images/", 1)[1]):
        assert api.get(path, headers={"API-Version": "2", "Accept": "application/json"}).status_code == 400, path
    for path in ("/no-such-page", "/images/nope.jpg", "/.well-known/agent-skills/nope/SKILL.md"):  # 404 wins
        r = api.get(path, headers={"API-Version": "2", "Accept": "application/json"})
        assert r.status_code == 404 and r.json()["code"] == "not_found", path


@pytest.mark.parametrize("path", ["/a/%00b", "/a/%01", "/x/../etc/passwd", "/%2e%2e/site.db",
                                  "/ab%80out", "/search.json%ff?q=carb"])  # not UTF-8: no soft match of /about
def test_hostile_paths_get_a_json_error(live, path):
    host, port = live.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    conn.request("GET", path)  # sent as written: no client-side dot-segment clean-up
    r = conn.getresponse()
    assert r.status == 400
    assert json.loads(r.read())["code"] == "bad_path"


def test_a_path_without_its_leading_slash_is_a_json_400(live):
    host, port = live.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    conn.request("GET", "search.json?q=film")
    r = conn.getresponse()
    assert r.status == 400 and json.loads(r.read())["code"] == "bad_path"


@pytest.mark.parametrize("path", ["/about", "/nope", "/serch.json", "/.well-known/agent-skills/nope/SKILL.md",
                                  "/search.json?q=film"])
def test_header_bytes_that_are_not_utf8_never_break(live, path):
    host, port = live.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    conn.putrequest("GET", path)
    conn.putheader("Accept", b"text/\xff\xfe;q=0.5, text/markdown")
    conn.putheader("API-Version", b"1")
    conn.endheaders()
    r = conn.getresponse()
    body = r.read()
    assert r.status in (200, 404), (path, r.status, body[:200])
    assert b"Traceback" not in body


def test_huge_query_string_is_refused_as_json(api):
    from siteapi.web import MAX_QUERY_BYTES
    assert api.get("/search.json?q=" + "a" * (MAX_QUERY_BYTES - 2)).status_code == 200
    r = api.get("/search.json?q=" + "a" * (MAX_QUERY_BYTES - 1))
    assert r.status_code == 414 and "query string" in r.json()["error"]


@pytest.mark.parametrize("path, fields", [("/rn/tracks", {"tracks": []}), ("/around/changes.json", {"ok": False}),
                                          ("/lens/fetch", {"ok": False})])
def test_a_huge_query_string_keeps_the_route_error_fields(api, path, fields):
    from siteapi.web import MAX_QUERY_BYTES
    r = api.get(path + "?x=" + "a" * MAX_QUERY_BYTES)
    assert r.status_code == 414 and r.json()["code"] == "uri_too_long"
    assert fields.items() <= r.json().items()


def test_a_huge_query_string_on_mcp_is_a_json_rpc_error(api):
    from siteapi.web import MAX_QUERY_BYTES
    r = api.request("POST", "/mcp?x=" + "a" * MAX_QUERY_BYTES, headers={"Content-Type": "application/json"},
                    data=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
    assert r.status_code == 414 and r.json()["jsonrpc"] == "2.0" and "query string" in r.json()["error"]["message"]


def test_a_flood_of_parameters_is_a_400_naming_the_limit(api):
    r = api.get("/search.json?q=film&" + "&".join(f"x{n}=1" for n in range(300)))
    assert r.status_code == 400 and r.json()["code"] == "too_many_parameters" and "200" in r.json()["error"]
    assert api.get("/search.json?q=film&" + "&".join(f"x{n}=1" for n in range(150))).status_code == 200


@pytest.mark.parametrize("path, name", [
    ("/search.json?q=%E9t%E9", "q"),                             # Latin-1 é
    ("/search.json?q=film&limit=%FF", "limit"),
    ("/photos/query.json?camera=X%ED%A0%80", "camera"),           # a surrogate spelled in UTF-8
    ("/ask?query=caf%E9&streaming=0", "query"),
])
def test_a_query_parameter_that_is_not_utf8_is_a_400_naming_it(api, path, name):
    """As a path that is not UTF-8 is (the bytes had been read as U+FFFD and searched for)."""
    r = api.get(path)
    body = r.json()
    assert r.status_code == 400 and body["code"] == "invalid_parameter" and body["parameter"] == name, body
    assert f"Parameter {name} is not UTF-8" in body["error"] and "percent-encode" in body["error"], body
    assert api.get("/search.json?q=caf%C3%A9").status_code == 200


def test_a_parameter_the_route_does_not_read_is_ignored_even_when_not_utf8(api):
    """A tracker's utm_source or a name no route reads costs the request nothing (review24 M1)."""
    plain = api.get("/search.json?q=carburetor").json()
    for extra in ("utm_source=%FF", "x%E9=1"):
        r = api.get(f"/search.json?{extra}&q=carburetor")
        assert r.status_code == 200 and r.json() == plain, r.text[:200]
    assert api.get("/around/changes.json?x%E9=1").status_code != 400


@pytest.mark.parametrize("accept", ["", "garbage", "text/html;q=abc", ";;;,,,", "*/*;q=0.5;q=", "a/b/c;q=2"])
def test_malformed_accept_never_breaks(api, accept):
    for path in ["/about", "/nope", "/search.json?q=film"]:
        r = api.get(path, headers={"Accept": accept})
        assert r.status_code in (200, 404), (path, accept)


def test_unexpected_exception_is_a_json_500_without_traceback(site_settings, checker):
    from app import make_app
    from servers import serve_wsgi
    from conftest import Client

    site = make_app(site_settings)

    def broken():
        raise RuntimeError("secret internal detail")

    site.route("/broken.json", broken)
    with serve_wsgi(site.wsgi) as base:
        r = Client(base, checker).get("/broken.json")
    assert r.status_code == 500
    assert r.json()["code"] == "internal_error" and "secret" not in r.text and "Traceback" not in r.text


def test_cache_control_per_endpoint(api):
    served = {
        "/search.json?q=film": "public, max-age=300, s-maxage=600",
        "/photos/query.json?q=beach": "public, max-age=300, s-maxage=600",
        "/images/manifest.json": "public, max-age=300, s-maxage=600",
        "/resume.json": "public, max-age=0, must-revalidate, s-maxage=86400",
        "/resume.md": "public, max-age=0, must-revalidate, s-maxage=86400",
        "/about": "public, max-age=0, s-maxage=86400, stale-while-revalidate=604800",
        "/about.md": "public, max-age=0, s-maxage=86400, stale-while-revalidate=604800",
        "/openapi.json": "public, max-age=3600",
        "/ask?query=espresso&streaming=0": "no-store",
    }
    for path, value in served.items():
        r = api.get(path)
        assert (r.status_code, r.headers["Cache-Control"]) == (200, value), path
    errors = {  # REFERENCE: the JSON endpoints' errors are kept 30 s; other errors never
        "/search.json": (400, "public, max-age=30, must-revalidate"),
        "/photos/query.json?from=2024-13-01": (400, "public, max-age=30, must-revalidate"),
        "/ask": (400, "no-store"),
        "/nope": (404, "no-store"),
    }
    for path, expected in errors.items():
        r = api.get(path)
        assert (r.status_code, r.headers["Cache-Control"]) == expected, path
    # a shared cache must not hand one caller's unserved API-Version to everyone asking for the URL
    versioned = api.get("/search.json?q=film", headers={"API-Version": "2"})
    assert (versioned.status_code, versioned.headers["Cache-Control"]) == (400, "no-store")
    deleted = api.request("DELETE", "/search.json?q=film")
    assert (deleted.status_code, deleted.headers["Cache-Control"]) == (405, "public, max-age=30, must-revalidate")


def test_a_site_db_that_is_no_database_is_a_503_everywhere(tmp_path, checker, caplog):
    """A damaged or half-restored site.db is the storage_unavailable 503 with Retry-After (it was a 500
    on every endpoint that reads it), keeping each route's error fields; pages and 404s too. The log
    tells the owner what to do, as the jobs' does."""
    base_settings = make_settings(tmp_path)
    settings = make_settings(tmp_path, sections={**base_settings.sections,
                                                 "feeds": {**base_settings.section("feeds"), "playlist_id": "abc"}})
    settings.db_path.write_bytes(b"this is not a database, only bytes where one should be" * 100)
    with serve_wsgi(make_app(settings).wsgi) as base:
        for path in ("/search.json?q=carb", "/ask?query=carb&streaming=0", "/photos/query.json", "/images/manifest.json",
                     "/resume.json", "/llms.txt", "/sitemap.xml", "/", "/about", "/nothing.json",
                     "/lens/census.json", "/rn/tracks"):
            r = requests.get(base + path, timeout=30)
            assert r.status_code == 503 and r.json()["code"] == "storage_unavailable", (path, r.status_code, r.text[:200])
            assert r.headers["Retry-After"] == "60", path
            checker.validate("GET", path.split("?")[0], r)
        assert requests.get(base + "/lens/census.json", timeout=30).json()["ok"] is False
        assert requests.get(base + "/rn/tracks", timeout=30).json()["tracks"] == []
    told = [r.getMessage() for r in caplog.records if "could not be used" in r.getMessage()]
    assert any(m.startswith("site.db (") and "Its tables stay as they are" in m for m in told), told  # at start
    assert any(m.startswith("On GET /about: site.db (") and "restore a backup" in m for m in told), told
