"""Pages and the documents agents look for: HTML (strict HTML5), Markdown negotiation and twins,
llms.txt, llms-full.txt, sitemap, robots.txt, api-catalog, /openapi.json and the developer guide."""
import base64
import hashlib
import json
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from urllib.parse import urljoin, urlsplit

import html5lib
import pytest
import requests
from conftest import Client, make_settings
from markdown_it import MarkdownIt
from openapi_spec_validator import validate
from servers import serve_wsgi

import jobs
from app import make_app
from siteapi import agentdocs, resume, tokens
from siteapi.lens.fetch import Fetcher
from siteapi.mcp_tools import Tool


def strict_parse(text):
    html5lib.HTMLParser(strict=True).parse(text)


def assert_runs_under_its_policy(response):
    """Every inline <script> and <style> of the page is allowed by its Content-Security-Policy (CSP 3:
    the sha256 of the element's text), and nothing inline that a hash cannot allow (an on* handler,
    a style attribute, a javascript: URL) is on the page, since the browser would drop it."""
    policy = dict((d.split(" ", 1) + [""])[:2] for d in response.headers["Content-Security-Policy"].split("; "))
    assert "'unsafe-inline'" not in response.headers["Content-Security-Policy"]
    assert policy["object-src"] == "'none'" and policy["base-uri"] == "'none'" and policy["default-src"] == "'self'"
    tree = html5lib.parse(response.text, namespaceHTMLElements=False)
    for tag, directive in (("script", "script-src"), ("style", "style-src")):
        for element in tree.iter(tag):
            if tag == "script" and element.get("type") == "application/ld+json":
                continue  # a data block, which no browser runs, so no policy applies to it
            digest = base64.b64encode(hashlib.sha256((element.text or "").encode()).digest()).decode()
            assert f"'sha256-{digest}'" in policy[directive].split(), (response.url, tag)
    for element in tree.iter():
        for name, value in element.attrib.items():
            assert not name.startswith("on") and name != "style", (response.url, element.tag, name)
            assert not value.strip().lower().startswith("javascript:"), (response.url, element.tag, name)


class _Links(HTMLParser):
    """Every href and src of an HTML page."""

    def __init__(self):
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.found += [value for name, value in attrs if name in ("href", "src") and value]


def test_every_link_a_page_shows_leads_to_something(api, site_settings):
    """From / and every sitemap entry, each same-site href and src of each HTML page reached is
    followed: none may be a 4xx or 5xx (a renamed page, a mistyped link in content/). /data/ is
    Datasette's, behind Caddy (test_stack_e2e)."""
    site = site_settings.public_base_url
    sitemap = api.get("/sitemap.xml").text
    queue = ["/", *(loc.removeprefix(site) or "/" for loc in re.findall(r"<loc>([^<]+)</loc>", sitemap))]
    seen, linked_from, broken = set(), {}, {}
    while queue:
        path = queue.pop()
        if path in seen:
            continue
        seen.add(path)
        r = api.get(path, headers={"Accept": "text/html"})
        if r.status_code >= 400:
            broken[path] = (r.status_code, linked_from.get(path))
        elif "text/html" in r.headers.get("Content-Type", ""):
            links = _Links()
            links.feed(r.text)
            for link in links.found:
                parts = urlsplit(urljoin(site + path, link))
                if f"{parts.scheme}://{parts.netloc}" == site and not parts.path.startswith("/data/"):
                    target = parts.path + (f"?{parts.query}" if parts.query else "")
                    linked_from.setdefault(target, path)
                    queue.append(target)
    assert len(seen) >= 60 and not broken, broken


def test_every_page_is_strict_html5_with_a_markdown_twin(api, site_settings):
    from siteapi import db
    paths = [r["path"] for r in db.connect(site_settings.db_path, readonly=True).execute("SELECT path FROM pages")]
    assert len(paths) >= 40
    for path in paths + ["/developers"]:
        r = api.get(path, headers={"Accept": "text/html"})
        assert r.status_code == 200, path
        assert r.headers["Content-Type"] == "text/html; charset=utf-8"
        strict_parse(r.text)
        assert_runs_under_its_policy(r)
        twin = "/index.md" if path == "/" else path + ".md"
        assert f'href="{twin}"' in r.text
        md = api.get(twin)
        assert md.status_code == 200 and md.headers["Content-Type"] == "text/markdown; charset=utf-8", twin
        assert md.text.startswith("# ")


def test_every_page_says_what_it_is_as_ask_does_and_a_post_when_it_was_published(api, site_settings):
    """Each page's JSON-LD names the site's WebSite node, which /ask's schema_object points into,
    and its own node, the one /ask gives for it; a post shows its date in words as its Markdown
    twin does, and as datePublished (html_audit25 F2, F4). The navigation can wrap (F1)."""
    from siteapi import db
    site = site_settings.public_base_url
    rows = db.connect(site_settings.db_path, readonly=True).execute("SELECT path, title, kind, date FROM pages").fetchall()
    assert {row["kind"] for row in rows} == {"page", "writing", "document", "utility"}
    asked = {}
    for row in rows:
        if row["path"] == "/developers":
            continue  # the app's guide, titled as the guide; the content row is its introduction
        page = api.get(row["path"], headers={"Accept": "text/html"}).text
        blocks = re.findall(r'<script type="application/ld\+json">(.*?)</script>', page, re.S)
        assert len(blocks) == 1 and "<" not in blocks[0], row["path"]
        website, node = json.loads(blocks[0])["@graph"]
        assert website == {"@type": "WebSite", "@id": f"{site}/#website", "url": f"{site}/", "name": site_settings.site_name}
        canonical = re.search(r'<link rel="canonical" href="([^"]+)">', page)[1]
        assert node["@id"] == node["url"] == canonical and node["isPartOf"] == website["@id"], row["path"]
        assert f'<meta property="og:url" content="{canonical}">' in page
        assert re.search(r'<a href="/"[^>]*>[^<]+</a>\s+<a href="/writing"', page)  # a break between the links
        current = re.findall(r'<a href="([^"]+)" aria-current="page">', page)
        assert current == ([row["path"]] if row["path"] in ("/", "/writing", "/photos", "/garage") else []), row["path"]
        published = f"Published {row['date']}."
        if row["kind"] == "writing":
            assert node["@type"] == "BlogPosting" and node["datePublished"] == row["date"] and node["headline"] == row["title"]
            assert f'Published <time datetime="{row["date"]}">{row["date"]}</time>.' in page
            assert published in api.get(row["path"] + ".md").text
        else:
            assert "datePublished" not in node and "Published <time" not in page, row["path"]
        if len(asked) < 8 or row["kind"] not in {n["@type"] for n in asked.values()}:
            asked[canonical] = {k: v for k, v in node.items() if k not in ("headline", "datePublished", "inLanguage")}
    for url, node in asked.items():  # /ask describes each page as the page does itself
        answer = api.get("/ask", params={"query": node["name"], "streaming": "0", "top_k": "50"}).json()
        found = [r["schema_object"] for r in answer["results"] if r["url"] == url]
        assert found and found[0] == {"@context": "https://schema.org", **node}, url


@pytest.mark.parametrize("accept, markdown", [
    ("text/markdown", True),
    ("text/markdown;q=0.9, text/html;q=0.8", True),
    ("text/html, text/markdown", False),            # a tie goes to HTML
    ("text/html;q=0.5, text/markdown;q=0.5", False),
    ("text/markdown;q=0", False),
    ("*/*", False),                                  # wildcards never count
    ("text/*", False),
    ("application/xhtml+xml, text/markdown;q=0.9", False),
    ("text/markdown;q=nan", False),                  # a q-value outside 0..1 is malformed: q=0
    ("text/markdown;q=inf", False),
    ("text/markdown;q=2, text/html;q=0.1", False),
])
@pytest.mark.parametrize("path", ["/about", "/developers"])  # the guide, an app page, too (cache_audit24 M1)
def test_markdown_negotiation_follows_q_values(api, accept, markdown, path):
    r = api.get(path, headers={"Accept": accept})
    assert r.status_code == 200
    assert r.headers["Vary"] == "Accept"
    assert r.headers["Content-Type"].startswith("text/markdown" if markdown else "text/html")
    if markdown:
        assert int(r.headers["x-markdown-tokens"]) == tokens.count(r.text)
        assert r.headers["Cache-Control"] == "no-store, must-revalidate"  # REFERENCE: caches that ignore Vary
    else:
        assert r.headers["Cache-Control"].startswith("public")


def test_llms_txt_follows_the_format(api):
    r = api.get("/llms.txt")
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/plain")
    lines = r.text.splitlines()
    assert lines[0].startswith("# ") and sum(1 for l in lines if l.startswith("# ")) == 1
    assert lines[2].startswith("> ")
    sections = [l[3:] for l in lines if l.startswith("## ")]
    assert sections[:2] == ["API", "Pages"] and "Writing" in sections
    links = re.findall(r"^- \[([^\]]+)\]\((https?://[^)]+)\)", r.text, re.M)
    assert len(links) >= 45 and any("/search.json?q=" in u for _, u in links)
    assert r.text.count("```") % 2 == 0
    # before the lists: where an MCP client connects, and the one-file text (agent_audit23 #10)
    intro = r.text.split("\n## ")[0]
    assert "MCP server at https://aadhar.sh/mcp (Streamable HTTP" in intro
    assert "[llms-full.txt](https://aadhar.sh/llms-full.txt)" in intro
    for target in ("/llms-full.txt", "/.well-known/mcp/server-card.json"):
        assert api.get(target).status_code == 200


def test_every_link_in_llms_txt_can_be_followed(api, site_settings):
    """An agent following a link gets what it names: each API entry links a GET's example request,
    which answers, or another method's section of the guide; never a bare endpoint's 400 or 405.
    The lens's examples inspect example.com, which these tests do not reach; the feeds without
    data yet answer 502 or 503, as they would on a new site."""
    site = site_settings.public_base_url
    links = re.findall(r"^- \[[^\]]+\]\((https?://[^)]+)\)", api.get("/llms.txt").text, re.M)
    for url in links:
        assert url.startswith(site + "/"), url
        target = url.removeprefix(site)
        if target.startswith(("/lens/fetch?", "/lens/compare.json?")):
            continue
        r = api.get(target, headers={"Accept": "text/markdown, application/json;q=0.9, */*;q=0.1"})
        assert r.status_code in (200, 502, 503), (url, r.status_code, r.text[:200])
        if "#" in target:
            assert f'<a id="{target.split("#")[1]}"></a>' in r.text, url


def test_llms_full_inlines_every_page(api):
    full = api.get("/llms-full.txt").text
    assert full.startswith(api.get("/llms.txt").text.rstrip("\n"))
    assert full.count("\n---\n") >= 40


def test_llms_full_has_one_h2_per_page_and_the_pages_outlines_below_it(api):
    """A reader splitting on ## finds the pages: each page's title is the one ## of its section and
    its own headings start at ### (they had kept their ##, 247 of them for 45 pages)."""
    full = api.get("/llms-full.txt").text
    md = MarkdownIt("commonmark")
    sections = full.split("# The site — full text", 1)[1].split("\n\n---\n\n")[1:]
    assert len(sections) >= 40
    deeper = 0
    for section in sections:
        levels = [int(t.tag[1]) for t in md.parse(section) if t.type == "heading_open" and t.level == 0]
        assert levels[0] == 2 and all(level >= 3 for level in levels[1:]), section[:120]
        deeper += len(levels) - 1
    assert deeper >= 40  # the demo pages do have headings of their own


def test_sitemap_lists_every_page(api, site_settings):
    r = api.get("/sitemap.xml")
    root = ET.fromstring(r.content)
    ns = {"s": "http://www.sitemaps.org/schemas/sitemap/0.9"}
    locs = [e.text for e in root.findall("s:url/s:loc", ns)]
    assert "https://aadhar.sh/" in locs and "https://aadhar.sh/developers" in locs
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\d", e.text) for e in root.findall("s:url/s:lastmod", ns))


def test_robots_txt_names_the_sitemap(api):
    text = api.get("/robots.txt").text
    assert "User-agent: *" in text and "Sitemap: https://aadhar.sh/sitemap.xml" in text


def test_robots_txt_gives_named_crawlers_the_rules_everyone_has_and_the_policy_shows_it(api):
    """A named group replaces `*` (RFC 9309): asked through Google's parser, every crawler gets the
    same verdicts, and /documents/crawler-policy quotes the file that is served."""
    import robotstxt

    text = api.get("/robots.txt").text
    for agent in ("Googlebot", "GPTBot", "ClaudeBot", "CCBot", "Google-Extended", "PerplexityBot"):
        for path, allowed in (("/data/site/pages.csv", False), ("/data/site/pages", True), ("/about", True)):
            assert robotstxt.RobotsMatcher().is_allowed(text, agent, "https://aadhar.sh" + path) is allowed, (agent, path)
    policy = api.get("/documents/crawler-policy.md").text
    quoted = policy.split("```\n", 2)[1].split("```")[0]
    served = "".join(line + "\n" for line in text.splitlines() if line and not line.startswith("#"))
    assert quoted.replace("\n\n", "\n") == served


def test_robots_txt_description_cannot_go_stale(api):
    """/openapi.json points to the crawler policy, which quotes the served file (tested above),
    instead of restating signal values that the file may change."""
    description = api.get("/openapi.json").json()["paths"]["/robots.txt"]["get"]["description"]
    assert "/documents/crawler-policy" in description
    assert not re.search(r"\b(yes|no)\b|=", description), description


def test_api_catalog_is_an_rfc9727_linkset(api):
    for method in ("GET", "HEAD"):
        r = api.request(method, "/.well-known/api-catalog")
        assert r.status_code == 200
        assert r.headers["Content-Type"].startswith("application/linkset+json")
        assert 'profile="https://www.rfc-editor.org/info/rfc9727"' in r.headers["Content-Type"]
    linkset = api.get("/.well-known/api-catalog").json()["linkset"]
    assert linkset[0]["service-desc"][0]["href"] == "https://aadhar.sh/openapi.json"
    anchors = {entry["anchor"] for entry in linkset}
    assert "https://aadhar.sh/search.json" in anchors and "https://aadhar.sh/resume.json" in anchors


def test_what_the_guide_says_the_api_catalog_lists_is_what_it_lists(api):
    """The catalog holds the API endpoints and leaves out the paths tagged documents; /developers
    says so rather than promising every endpoint."""
    doc = api.get("/openapi.json").json()
    anchors = {entry["anchor"] for entry in api.get("/.well-known/api-catalog").json()["linkset"][1:]}
    for path, item in doc["paths"].items():
        documents = all("documents" in op["tags"] for op in item.values() if isinstance(op, dict) and "tags" in op)
        assert ("https://aadhar.sh" + path in anchors) is not documents, path
    for guide in (api.get("/developers.md").text, api.get("/developers").text):
        assert "lists every endpoint" not in guide and "pointing at every endpoint" not in guide
        assert "lists every API endpoint. It leaves out the documents" in guide
        assert "pointing at every API endpoint; documents such as llms.txt" in guide


def test_openapi_has_no_key_without_a_value(api):
    """A YAML flow mapping whose description holds an unquoted comma leaves a stray key with a null
    value; the OpenAPI validator accepts it (unknown keywords are allowed), so look for it here."""
    def strays(node, where):
        if isinstance(node, dict):
            for key, value in node.items():
                if value is None:
                    yield f"{where}/{key}"
                yield from strays(value, f"{where}/{key}")
        elif isinstance(node, list):
            for n, value in enumerate(node):
                yield from strays(value, f"{where}/{n}")

    assert list(strays(api.get("/openapi.json").json(), "")) == []


def test_openapi_schemas_are_plain_enough_for_client_generators(api):
    """What client generators trip on though the document is valid (audit client22): a `const`
    without its `type` (openapi-python-client wrote a file that does not parse), an array without
    `items` (the schema dropped), null inside an enum (three enum classes for one field; a named enum
    and `anyOf` with null instead), a `required` name with no property (an empty type)."""
    found = []

    def walk(node, where):
        if isinstance(node, dict):
            if "const" in node and "type" not in node:
                found.append(f"{where}: const without type")
            types = node.get("type") if isinstance(node.get("type"), list) else [node.get("type")]
            if "array" in types and "items" not in node and "prefixItems" not in node:
                found.append(f"{where}: array without items")
            if None in node.get("enum", ()):
                found.append(f"{where}: null in an enum")
            if isinstance(node.get("required"), list):  # a parameter's `required` is a boolean
                found.extend(f"{where}: required {name} is no property" for name in node["required"]
                             if name not in node.get("properties", {}))
            for key, value in node.items():
                walk(value, f"{where}/{key}")
        elif isinstance(node, list):
            for n, value in enumerate(node):
                walk(value, f"{where}/{n}")

    walk(api.get("/openapi.json").json(), "")
    assert found == []


def test_both_ask_dialects_are_listed_in_llms_txt_the_catalog_and_the_guide(api):
    ask_lines = [line for line in api.get("/llms.txt").text.splitlines()
                 if "(https://aadhar.sh/ask?" in line or "(https://aadhar.sh/developers#askSite" in line]
    assert len(ask_lines) == 2 and any("query-string dialect" in line for line in ask_lines)
    assert any("v0.55 JSON-body dialect" in line and ": POST: " in line for line in ask_lines)
    assert all(line.rstrip().endswith(".") for line in ask_lines)  # whole first sentences, not cut lines
    (entry,) = [e for e in api.get("/.well-known/api-catalog").json()["linkset"] if e["anchor"] == "https://aadhar.sh/ask"]
    assert [link["href"] for link in entry["service-doc"]] == [
        "https://aadhar.sh/developers#askSite", "https://aadhar.sh/developers#askSiteStructured"]
    guide = api.get("/developers.md").text
    assert "`GET /ask`" in guide and "`POST /ask`" in guide and "`prefer.streaming`" in guide


def test_openapi_is_valid_and_every_operation_is_keyless(api):
    doc = api.get("/openapi.json").json()
    validate(doc)
    assert doc["openapi"].startswith("3.1") and doc["security"] == []
    for path, item in doc["paths"].items():
        for method, op in item.items():
            assert op.get("security") == [], (path, method)
            assert op.get("operationId"), (path, method)


def test_openapi_declares_every_tag_and_the_headers_of_every_answer(api):
    """API.md §1's areas are the tags, each described; every 2xx answer declares the headers the app
    sends with all of them (§4: every 200 carries RateLimit-Policy), but the image files, which the
    edge serves without them (test_stack_e2e)."""
    doc = api.get("/openapi.json").json()
    declared = {tag["name"]: tag.get("description") for tag in doc["tags"]}
    assert {"search", "photos", "lens", "music", "around", "contact", "about"} <= set(declared)
    for path, item in doc["paths"].items():
        for method, op in item.items():
            assert set(op["tags"]) <= set(declared) and all(declared[t] for t in op["tags"]), (path, method)
            for status, response in op["responses"].items():
                if status.startswith("2") and path != "/images/{path}":
                    assert {"RateLimit-Policy", "RateLimit", "Link"} <= set(response["headers"]), (path, method, status)
                elif status.startswith("2"):
                    assert not {"RateLimit-Policy", "RateLimit", "Link"} & set(response.get("headers", {})), status
    ask = doc["paths"]["/ask"]
    for method in ("get", "post"):
        assert ask[method]["responses"]["429"] == {"$ref": "#/components/responses/RateLimited"}
        assert ask[method]["responses"]["405"] == {"$ref": "#/components/responses/MethodNotAllowed"}
    for path in ("/resume.json", "/images/manifest.json", "/photos/query.json", "/search.json"):
        assert "RateLimit-Policy" in api.get(path).headers, path


def test_openapi_describes_every_route(site_settings, api):
    from app import make_app
    doc = api.get("/openapi.json").json()
    for rule, route in make_app(site_settings).routes.items():
        template = re.sub(r"<(\w+)(:[^>]*)?>", r"{\1}", rule)
        assert template in doc["paths"], rule
        documented = {m.upper() for m in doc["paths"][template] if m in ("get", "post", "put", "delete", "patch")}
        assert documented <= set(route.methods), rule


def test_developer_guide_curl_examples_work(site_settings, checker):
    """Each example reaches its endpoint with valid input: 200, or (feeds with nothing stored yet in
    this test site) the documented upstream or storage status. The lens's examples inspect
    example.com and example.org, which a test must not reach: its resolver here knows no name, so
    they are the 502 of a name that does not resolve, after the lens accepted the request."""
    no_dns = Fetcher(resolve=lambda host, timeout: [])
    with serve_wsgi(make_app(site_settings, fetcher=no_dns).wsgi) as base:
        _run_guide_examples(Client(base, checker))


def _run_guide_examples(api) -> None:
    guide = api.get("/developers.md").text
    commands = re.findall(r"^curl .*$", guide, re.M)
    doc = api.get("/openapi.json").json()
    assert len(commands) == sum(1 for item in doc["paths"].values() for m in item if m in ("get", "post"))
    for command in commands:
        url = re.search(r"'?(https://aadhar\.sh[^' ]*)'?", command).group(1)
        path = url.removeprefix("https://aadhar.sh")
        if " -X POST " in command:
            payload = re.search(r"-d '(.*)'$", command).group(1)
            r = api.request("POST", path, data=payload, headers={"Content-Type": "application/json"})
        else:
            r = api.get(path)
        if path.startswith(("/lens/fetch", "/lens/compare.json")):
            assert r.status_code == 502 and "does not resolve" in r.json()["error"], (command, r.text[:200])
            continue
        allowed = {200, 502, 503} if path.startswith(("/rn/", "/around/", "/coffee/", "/ledger")) else {200}
        assert r.status_code in allowed, (command, r.status_code, r.text[:200])


@pytest.mark.parametrize("method, page", [("get", "/writing/cb550-carb-rebuild"), ("post", "/writing/classic-negative-recipe")])
def test_the_ask_examples_find_what_they_ask_about(api, method, page):
    """The questions the guide shows are ones the model answers: the colour example it once showed
    ("which film recipe gives warm muted colours") went to the black-and-white Acros recipe."""
    op = api.get("/openapi.json").json()["paths"]["/ask"][method]
    if method == "get":
        question = next(p["example"] for p in op["parameters"] if p.get("name") == "query")
        body = api.get("/ask", params={"query": question, "streaming": "0"}).json()
    else:
        body = api.request("POST", "/ask", json=op["requestBody"]["content"]["application/json"]["example"]).json()
    assert body["_meta"]["ranking"].startswith("model:") and body["results"][0]["url"] == "https://aadhar.sh" + page


def test_auth_md_is_where_agents_look_for_it(api):
    """/auth.md, the path scanners probe (and the original site served), is /documents/auth's Markdown."""
    r = api.get("/auth.md")
    assert r.status_code == 200 and r.headers["Content-Type"] == "text/markdown; charset=utf-8"
    assert r.text == api.get("/documents/auth.md").text and r.text.startswith("# ")
    assert r.headers["Link"].startswith('<https://aadhar.sh/documents/auth>; rel="canonical"')


def test_resume_is_json_resume(api):
    r = api.get("/resume.json")
    assert r.status_code == 200
    resume = r.json()
    assert resume["basics"]["name"] and resume["work"] and "jsonresume" in resume["$schema"]


def test_resume_as_markdown_carries_every_entry_of_the_json(api):
    resume = api.get("/resume.json").json()
    r = api.get("/resume.md")
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/markdown")
    assert int(r.headers["x-markdown-tokens"]) > 100
    text = r.text
    assert text.startswith(f"# {resume['basics']['name']}\n") and resume["basics"]["summary"] in text
    for job in resume["work"]:
        assert f"### {job['position']} — " in text and job["name"] in text and job["summary"] in text
        assert all(f"- {h}" in text for h in job.get("highlights", []))
    for key in ("projects", "volunteer", "education"):
        assert resume[key] and all((entry.get("name") or entry.get("institution") or entry["organization"]) in text
                                   for entry in resume[key]), key
    assert all(word in text for skill in resume["skills"] for word in skill["keywords"])
    for profile in resume["basics"]["profiles"]:
        assert f"[{profile['network']}]({profile['url']})" in text
    assert text.rstrip().endswith(f"<{resume['meta']['canonical']}> (updated {resume['meta']['lastModified'][:10]}).")


@pytest.mark.parametrize("path", ["/developers.md", "/resume.md"])
def test_markdown_twin_routes_answer_as_openapi_describes_them(api, checker, path):
    r = api.get(path)
    documented = checker.resolve(checker.doc["paths"][path]["get"]["responses"]["200"])
    assert r.status_code == 200 and r.headers["Content-Type"].split(";")[0] in documented["content"]
    assert set(documented["headers"]) == {"x-markdown-tokens", "ETag", "RateLimit-Policy", "RateLimit", "Link"}
    assert all(name in r.headers for name in documented["headers"]), r.headers
    assert int(r.headers["x-markdown-tokens"]) == tokens.count(r.text)



def test_markdown_token_counts_read_special_token_look_alikes_as_text(api):
    """A Markdown answer quoting `<|endoftext|>` (a 404 quotes the path asked for) counts it as text."""
    r = api.get("/notes/<|endoftext|>", headers={"Accept": "text/markdown"})
    assert r.status_code == 404 and r.headers["Content-Type"].startswith("text/markdown")
    assert "<|endoftext|>" in r.text
    assert int(r.headers["x-markdown-tokens"]) == len(tokens.encoding().encode_ordinary(r.text))

def test_resume_markdown_leaves_out_what_is_not_text():
    """The owner's JSON is only checked for being one object: wrong types are skipped, not a 500."""
    odd = {"basics": {"name": ["not", "text"], "label": True, "profiles": [{"url": "javascript:alert(1)"}, 7]},
           "work": "many jobs", "skills": [1, {"keywords": "not a list"}, {"name": "Tea", "keywords": ["oolong", None]}],
           "education": [{"courses": [None, {}]}, {"institution": "Night school", "startDate": 2001}], "meta": []}
    text = resume.markdown(odd, "https://example.test/resume.json")
    assert text.startswith("# Resume\n") and "True" not in text and "## Work" not in text
    assert "](javascript:" not in text and "- **Tea**: oolong\n" in text
    assert "### Night school\n\n*2001 – present*" in text and "Untitled" not in text
    assert resume.markdown(["a", "list"], "u").startswith("# Resume\n")


def test_resume_markdown_ends_with_the_references_the_owner_gave():
    text = resume.markdown({"references": [{"name": "Ada Lovelace", "reference": "Careful with engines."}, {"reference": ["not", "text"]}],
                            "languages": [{"language": "French"}]}, "u")
    assert "## References\n\n### Ada Lovelace\n\nCareful with engines.\n\n## Languages" in text


def test_agent_card_and_skills_list_the_mcp_tools(api):
    card_tools = {t["name"] for t in api.get("/.well-known/mcp/server-card.json").json()["tools"]}
    agent = api.get("/.well-known/agent-card.json").json()
    assert agent["url"].endswith("/mcp") and {s["id"] for s in agent["skills"]} == card_tools
    # the one interface is MCP; no A2A transport (JSONRPC, GRPC, HTTP+JSON) is claimed where none is served
    assert agent["preferredTransport"] == "MCP" and agent["additionalInterfaces"] == [{"url": agent["url"], "transport": "MCP"}]
    index = api.get("/.well-known/agent-skills/index.json").json()
    assert {s["name"] for s in index["skills"]} == {name.replace("_", "-") for name in card_tools}
    # the Agent Skills specification: 1-64 lowercase letters, digits and hyphens, the folder's name
    assert all(re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", s["name"]) and len(s["name"]) <= 64
               and s["url"].endswith(f"/agent-skills/{s['name']}/SKILL.md") for s in index["skills"])
    moved = api.get("/.well-known/agent-skills/search_site/SKILL.md", allow_redirects=False)
    assert moved.status_code == 308 and moved.headers["Location"] == "/.well-known/agent-skills/search-site/SKILL.md"
    for skill in index["skills"][:5]:
        md = api.get(skill["url"].removeprefix("https://aadhar.sh"))
        assert md.status_code == 200 and md.headers["Content-Type"].startswith("text/markdown")
        assert md.text.startswith(f"---\nname: {skill['name']}\n")
        assert hashlib.sha256(md.content).hexdigest() == skill["sha256"]
    assert api.get("/.well-known/agent-skills/nope/SKILL.md").status_code == 404
    # a skill names its HTTP twin only when it has one
    assert "plain HTTP is `GET /search.json`" in api.get("/.well-known/agent-skills/search-site/SKILL.md").text
    assert "served over MCP only" in api.get("/.well-known/agent-skills/representation-capture/SKILL.md").text


def test_skill_descriptions_tell_the_tools_apart_and_end_on_a_boundary(api):
    """What an agent chooses a skill by (audit agent_audit23 #3): within the Agent Skills format's
    1,024 characters, cut after a sentence (or a word), never two alike; lens_inspect and lens_page
    share their operation's text, so their own notes must come before it."""
    index = api.get("/.well-known/agent-skills/index.json").json()["skills"]
    card = api.get("/.well-known/agent-card.json").json()["skills"]
    tools = {t["name"]: t for t in api.get("/.well-known/mcp/server-card.json").json()["tools"]}
    for described in (index, card):
        texts = [skill["description"] for skill in described]
        assert len(set(texts)) == len(texts), texts
        assert all(0 < len(text) <= 1024 and re.search(r"[.!?…]$", text) for text in texts), texts
    for skill, listed in zip(index, card):
        tool = tools[listed["id"]]
        assert skill["description"] == listed["description"]
        assert " ".join(tool["description"].split()).startswith(skill["description"].rstrip("…"))
        md = api.get(skill["url"].removeprefix("https://aadhar.sh")).text
        assert md.split("\n")[2] == "description: " + json.dumps(skill["description"])
    long = Tool("t", "T", "A first sentence. " * 50 + "One run-on clause " * 60, {}, {}, open_world=False)
    assert agentdocs.brief(long) == ("A first sentence. " * 50).strip()
    run_on = Tool("t", "T", "word " * 300, {}, {}, open_world=False)
    assert agentdocs.brief(run_on) == "word " * 203 + "word…"


def test_the_json_documents_name_every_field_they_send(api, checker):
    """Typed clients see only what the schema names (audit client22 #13): the catalog's links, the
    agent card's A2A fields, the server card's serverInfo, the resume's entries."""
    for path in ("/.well-known/api-catalog", "/.well-known/agent-card.json", "/.well-known/mcp/server-card.json",
                 "/mcp/server-card", "/.well-known/agent-skills/index.json", "/.well-known/http-message-signatures-directory",
                 "/resume.json"):
        r = api.get(path)
        assert r.status_code == 200 and checker.checked[-1] == (path, 200)
        assert checker.unnamed("GET", path, r) == [], path
    catalog = api.get("/.well-known/api-catalog").json()["linkset"]
    assert all(entry["service-desc"] and entry["service-doc"] for entry in catalog)
    card = api.get("/.well-known/agent-card.json").json()
    assert {"protocolVersion", "description", "capabilities", "provider", "defaultInputModes"} <= set(card)


DOCUMENTS = ["/llms.txt", "/llms-full.txt", "/robots.txt", "/sitemap.xml", "/.well-known/api-catalog", "/openapi.json",
             "/developers", "/developers.md", "/resume.json", "/resume.md", "/.well-known/agent-card.json",
             "/.well-known/agent-skills/index.json", "/.well-known/agent-skills/search-site/SKILL.md",
             "/.well-known/mcp/server-card.json", "/mcp/server-card"]


@pytest.mark.parametrize("path, accept", [(path, "") for path in DOCUMENTS] + [
    ("/developers", "text/markdown"), ("/about", "text/html"), ("/about", "text/markdown"), ("/about.md", ""),
    ("/", "text/html"), ("/index.md", "")])
def test_documents_and_pages_answer_if_none_match_with_304(api, checker, path, accept):
    """Their Cache-Control asks browsers to revalidate (max-age=0) or caches to after an hour: a
    validator makes that a 304 instead of the whole body again."""
    first = api.get(path, headers={"Accept": accept})
    etag = first.headers["ETag"]
    # weak: the edge compresses these bodies and passes the ETag on as it is
    assert first.status_code == 200 and re.fullmatch(r'W/"[0-9a-f]{32}"', etag), first.headers
    for method, sent in (("GET", etag), ("HEAD", etag), ("GET", f'"stale", {etag.removeprefix("W/")}'), ("GET", "*")):
        again = api.request(method, path, headers={"Accept": accept, "If-None-Match": sent})
        assert again.status_code == 304 and again.content == b"", (method, sent)
        assert again.headers["ETag"] == etag and again.headers["Cache-Control"] == first.headers["Cache-Control"]
        assert again.headers.get("Vary") == first.headers.get("Vary")
    changed = api.get(path, headers={"Accept": accept, "If-None-Match": '"0123456789abcdef0123456789abcdef"'})
    assert changed.status_code == 200 and changed.content == first.content
    if path in DOCUMENTS:
        template = next(template for pattern, template in checker.paths if pattern.match(path))
        responses = checker.doc["paths"][template]["get"]["responses"]
        assert "304" in responses and "ETag" in checker.resolve(responses["200"])["headers"], path


def test_a_page_and_its_markdown_have_different_etags(api):
    html, md = (api.get("/about", headers={"Accept": accept}) for accept in ("text/html", "text/markdown"))
    assert html.headers["Vary"] == md.headers["Vary"] == "Accept"
    assert html.headers["ETag"] != md.headers["ETag"]
    stale = api.get("/about", headers={"Accept": "text/markdown", "If-None-Match": html.headers["ETag"]})
    assert stale.status_code == 200 and stale.text == md.text


ODD_PAGES = {
    "home.md": 'title: Home\ndescription: The home page.\nkind: page\npath: /\n',
    "odd.md": ('title: "Arrays]: notes on [draft\\n# Not a heading"\ndescription: |\n  First line\n  ## not a section\n'
               'kind: page\npath: /notes/café-(draft)\n'),
    "quote.md": "title: Don't 'quote' me\nkind: writing\ndate: 2026-01-02\npath: /writing/it's-<fine>\n",
    "plain.md": "title: Plain\ndescription: A plain page.\nkind: document\npath: /documents/plain\n",
    "tokyo.md": "title: 東京\nkind: writing\ndate: 2026-01-03\npath: /writing/東京\n",
}


@pytest.fixture(scope="module")
def odd_site(tmp_path_factory):
    """A site whose pages have a title with brackets and a line break, a description of two lines,
    and paths with non-ASCII letters, parentheses, a quote and angle brackets."""
    tmp = tmp_path_factory.mktemp("odd")
    for name, front in ODD_PAGES.items():
        (tmp / "content").mkdir(exist_ok=True)
        (tmp / "content" / name).write_text(f"---\n{front}---\nWords about this page.\n", encoding="utf-8")
    settings = make_settings(tmp, content_dir=tmp / "content")
    ok, summary = jobs.run_job(settings, "content")
    assert ok, summary
    with serve_wsgi(make_app(settings).wsgi) as base:
        yield base


@pytest.mark.parametrize("asked, location", [("/notes/caf%C3%A9-(draft)/", "/notes/caf%C3%A9-(draft)"),
                                             ("/writing/%E6%9D%B1%E4%BA%AC//?q=%C3%A9", "/writing/%E6%9D%B1%E4%BA%AC?q=%C3%A9")])
def test_a_trailing_slash_on_a_non_ascii_path_moves_to_its_utf8_spelling(odd_site, asked, location):
    """The 308 spelled the path in Latin-1 (a 400 where it led) and answered 500 past U+00FF (unicode_audit24 H1)."""
    moved = requests.get(odd_site + asked, timeout=30, allow_redirects=False)
    assert moved.status_code == 308 and moved.headers["Location"] == location, (moved.status_code, moved.text[:200])
    assert requests.get(odd_site + location, timeout=30, allow_redirects=False).status_code == 200


def fetch(base, url):
    """GET an absolute URL a document names, on the test server."""
    assert url.startswith("https://aadhar.sh/"), url
    return requests.get(base + url.removeprefix("https://aadhar.sh"), timeout=30, allow_redirects=False)


def markdown_links(text):
    """(text, href) of every link in `text` as a CommonMark reader sees them."""
    links, label = [], None
    for block in MarkdownIt("commonmark").parse(text):
        for token in block.children or []:
            if token.type == "link_open":
                href, label = token.attrs["href"], ""
            elif token.type == "link_close":
                links.append((label, href))
                label = None
            elif label is not None:
                label += token.content
    return links


def test_odd_titles_and_paths_leave_llms_txt_one_list_of_links_that_answer(odd_site):
    text = requests.get(odd_site + "/llms.txt", timeout=30).text
    lines = text.splitlines()
    assert [line for line in lines if line.startswith("# ")] == ["# aadhar.sh"]
    assert [line[3:] for line in lines if line.startswith("## ")] == ["API", "Pages", "Writing", "Documents"]
    section_lines = lines[lines.index("## Pages"):]
    assert all(line == "" or line.startswith(("## ", "- [")) for line in section_lines), section_lines
    pages = dict(markdown_links(text[text.index("## Pages"):]))
    assert set(pages) == {"Home", "Arrays]: notes on [draft # Not a heading", "Don't 'quote' me", "Plain", "東京",
                          "Developer guide"}, pages  # the guide: a page the app renders
    # the reference parser (PyPI llms-txt) reads a link's URL up to the first ')'
    reference_urls = re.findall(r"^-\s*\[[^\n]*?\]\((?P<url>[^)]+)\)", text, re.M)
    assert set(pages.values()) <= set(reference_urls)
    for label, url in pages.items():
        twin = fetch(odd_site, url)
        assert twin.status_code == 200 and twin.headers["Content-Type"] == "text/markdown; charset=utf-8", url
        title, _, quote, *_ = twin.text.split("\n")
        assert title.startswith("# ") and quote.startswith("> "), twin.text  # the guide's too (html_audit25 F9)
    assert "- [Arrays\\]: notes on \\[draft # Not a heading](" in text
    assert ": First line ## not a section\n" in text


def test_odd_paths_are_uris_in_the_sitemap_and_llms_full(odd_site):
    root = ET.fromstring(requests.get(odd_site + "/sitemap.xml", timeout=30).content)
    locs = [e.text for e in root.findall("{http://www.sitemaps.org/schemas/sitemap/0.9}url/"
                                         "{http://www.sitemaps.org/schemas/sitemap/0.9}loc")]
    assert "https://aadhar.sh/notes/caf%C3%A9-%28draft%29" in locs
    full = requests.get(odd_site + "/llms-full.txt", timeout=30).text
    autolinks = re.findall(r"^<(.*)>$", full, re.M)
    assert len(autolinks) == len(ODD_PAGES) and len(locs) == len(ODD_PAGES) + 1  # and /developers
    for url in locs + autolinks:
        assert re.fullmatch(r"https://aadhar\.sh/[A-Za-z0-9\-._~!$&*+,;=:@/%]*", url), url  # RFC 3986, nothing to escape
        page = fetch(odd_site, url)
        assert page.status_code == 200 and page.headers["Content-Type"] == "text/html; charset=utf-8", url
    html = fetch(odd_site, "https://aadhar.sh/notes/caf%C3%A9-%28draft%29").text
    assert '<link rel="alternate" type="text/markdown" href="/notes/caf%C3%A9-%28draft%29.md">' in html
    near = requests.get(odd_site + "/notes/cafe-(draft)", headers={"Accept": "application/json"}, timeout=30)
    assert near.status_code == 404 and "https://aadhar.sh/notes/caf%C3%A9-%28draft%29" in near.json()["suggestions"]


def serve_content(tmp, files):
    """Index `files` ({name: (front matter, body)}) into a site.db of its own; yields the app's base URL."""
    (tmp / "content").mkdir()
    for name, (front, body) in files.items():
        (tmp / "content" / name).write_text(f"---\n{front}---\n{body}", encoding="utf-8")
    settings = make_settings(tmp, content_dir=tmp / "content")
    ok, summary = jobs.run_job(settings, "content")
    assert ok, summary
    return serve_wsgi(make_app(settings).wsgi)


SHADOWED_PAGES = {
    "home.md": ("title: Home\ndescription: The home page.\nkind: page\npath: /\n", "Welcome.\n"),
    # the guide's introduction: the app renders /developers itself, this body included
    "developers.md": ("title: Developers intro\ndescription: Intro.\ndate: 2026-09-05\nkind: page\npath: /developers\n",
                      "An introduction.\n"),
    # paths an app route answers: a visitor never gets these pages there
    "robots.md": ("title: Robots notes\ndescription: Notes.\ndate: 2026-01-01\nkind: document\npath: /robots.txt\n",
                  "Shadowed words.\n"),
    "holiday.md": ("title: Holiday\ndescription: Photos.\nkind: writing\ndate: 2026-02-02\npath: /images/holiday\n",
                   "Shadowed too.\n"),
    # a page that is served, but whose twin's path /resume.md is the app's resume
    "resume.md": ("title: Resume page\ndescription: My resume.\nkind: page\npath: /resume\n", "A page about work.\n"),
    "plain.md": ("title: Plain\ndescription: A plain page.\nkind: document\npath: /documents/plain\n", "Plain words.\n"),
}


@pytest.fixture(scope="module")
def shadowed_site(tmp_path_factory):
    with serve_content(tmp_path_factory.mktemp("shadowed"), SHADOWED_PAGES) as base:
        yield base


def test_documents_list_what_a_visitor_gets_at_a_path_an_app_route_answers_once(shadowed_site):
    """A content page whose path an app route answers is not what a visitor gets there: the sitemap,
    llms.txt and llms-full.txt leave it out and list the app's page (the developer guide) once."""
    base = shadowed_site
    ns = "{http://www.sitemaps.org/schemas/sitemap/0.9}"
    urls = ET.fromstring(requests.get(base + "/sitemap.xml", timeout=30).content).findall(f"{ns}url")
    locs = [u.find(f"{ns}loc").text for u in urls]
    assert sorted(locs) == sorted(f"https://aadhar.sh{p}" for p in ("/", "/developers", "/resume", "/documents/plain"))
    # the guide's text follows the API description too: the introduction's date is not its last change
    assert [u.find(f"{ns}lastmod") for u in urls if u.find(f"{ns}loc").text.endswith("/developers")] == [None]
    for url in locs:
        page = fetch(base, url)
        assert page.status_code == 200 and page.headers["Content-Type"] == "text/html; charset=utf-8", url

    text = requests.get(base + "/llms.txt", timeout=30).text
    listed = markdown_links(text[text.index("## Pages"):])
    assert "Robots notes" not in text and "Holiday" not in text and "Developers intro" not in text
    assert [label for label, _ in listed].count("Developer guide") == 1
    for label, url in listed:
        answer = fetch(base, url)
        assert answer.status_code == 200, url
        if url.endswith(".md"):  # the twin a listing names is that page, under the listed title
            assert answer.text.startswith(f"# {label}\n"), (label, url)
    # /resume.md is the app's resume, not the page's twin: the page is listed at its own URL
    assert ("Resume page", "https://aadhar.sh/resume") in listed

    full = requests.get(base + "/llms-full.txt", timeout=30).text
    assert "Shadowed" not in full and "An introduction." not in full
    assert sorted(re.findall(r"^<(.*)>$", full, re.M)) == sorted(u for u in locs if not u.endswith("/developers"))


def test_a_page_whose_twin_path_an_app_route_answers_names_no_twin(shadowed_site):
    page = requests.get(shadowed_site + "/resume", headers={"Accept": "text/html"}, timeout=30)
    assert page.status_code == 200 and "A page about work." in page.text
    assert 'type="text/markdown"' not in page.text and 'href="/resume.md"' not in page.text
    negotiated = requests.get(shadowed_site + "/resume", headers={"Accept": "text/markdown"}, timeout=30)
    assert negotiated.text.startswith("# Resume page\n")


FENCED_BODIES = {  # name: (body, what the section must end with)
    "a-backticks": ("Intro.\n\n```python\nopen = True\n", "open = True\n```"),
    "b-tildes": ("~~~\nA ``` inside a tilde fence does not close it.\n```\n", "```\n~~~"),
    "c-long": ("`````md\n```\nshort runs do not close a longer fence\n```\n", "```\n`````"),
    "d-indented": ("   ```\n   indented opener\n", "indented opener\n```"),
    "e-comment": ("Text.\n\n<!-- a comment left open\n\nstill the comment\n", "still the comment\n-->"),
    "f-pre": ("<pre>\npreformatted, never closed\n", "never closed\n</pre>"),
    "g-cdata": ("<![CDATA[\nraw\n", "raw\n]]>"),
    # nothing to close: a fence in a list item or a quote ends with them, and a closed one is closed
    "h-list": ("- item\n\n  ```\n  code in a list item\n", "code in a list item"),
    "i-quote": ("> ```\n> quoted code\n", "> quoted code"),
    "j-closed": ("```\nclosed\n```\n", "closed\n```"),
}


@pytest.fixture(scope="module")
def fenced_site(tmp_path_factory):
    files = {f"{name}.md": (f"title: Page {name}\ndescription: About {name}.\nkind: page\npath: /{name}\n", body)
             for name, (body, _) in FENCED_BODIES.items()}
    files["z-last.md"] = ("title: Page z-last\ndescription: The last page.\nkind: page\npath: /z-last\n",
                          "The *last* page.\n")
    with serve_content(tmp_path_factory.mktemp("fenced"), files) as base:
        yield base


def test_each_page_of_llms_full_is_read_as_markdown_whatever_the_page_before_left_open(fenced_site):
    full = requests.get(fenced_site + "/llms-full.txt", timeout=30).text
    tokens = MarkdownIt("commonmark").parse(full)
    headings = [tokens[n + 1].content for n, t in enumerate(tokens) if t.type == "heading_open" and t.tag == "h2"]
    pages = [f"Page {name}" for name in [*FENCED_BODIES, "z-last"]]
    assert [h for h in headings if h.startswith("Page ")] == pages
    assert sum(1 for t in tokens if t.type == "hr" and t.level == 0) == full.count("\n\n---\n\n")
    assert not [t.content for t in tokens if t.type in ("fence", "code_block", "html_block")
                and ("\n---\n" in t.content or "## Page" in t.content)]
    assert any(t.type == "inline" and t.content == "The *last* page." for t in tokens)
    for name, (_, ending) in FENCED_BODIES.items():  # closed with the page's own fence, and only when open
        section = full.split(f"<https://aadhar.sh/{name}>\n\n", 1)[1].split("\n\n---\n\n", 1)[0]
        assert section.endswith(ending), (name, section)


def test_a_twins_description_and_date_are_blocks_of_their_own(api):
    """Without a blank line after them, the body's first paragraph would continue the quote."""
    for path in ("/about.md", "/writing/cb550-first-ride.md"):
        twin = api.get(path).text
        tokens = MarkdownIt("commonmark").parse(twin)
        quote = tokens[[t.type for t in tokens].index("blockquote_open") + 2].content
        assert twin.split("\n")[2] == f"> {quote}", path
    dated = MarkdownIt("commonmark").parse(api.get("/writing/cb550-first-ride.md").text)
    assert any(t.type == "inline" and re.fullmatch(r"Published \d{4}-\d\d-\d\d\.", t.content) for t in dated)


@pytest.mark.parametrize("twin, page", [("/about.md", "/about"), ("/index.md", "/"), ("/developers.md", "/developers")])
def test_a_markdown_twin_names_its_page_as_canonical_in_the_one_link_field(api, checker, twin, page):
    r = api.get(twin)
    fields = r.raw.headers.getlist("Link")
    assert len(fields) == 1, fields  # one field: some readers take only the first Link field
    first, *rest = fields[0].split(", <")
    assert first == f'<https://aadhar.sh{page}>; rel="canonical"', fields
    assert any('rel="service-desc"' in link for link in rest)
    for accept in ("text/html", "text/markdown"):  # the page at its own address is the canonical one
        assert "canonical" not in api.get(page, headers={"Accept": accept}).headers["Link"]
    again = api.get(twin, headers={"If-None-Match": r.headers["ETag"]})
    assert again.status_code == 304 and again.headers["Link"] == r.headers["Link"]
    if twin in checker.doc["paths"]:
        documented = checker.doc["paths"][twin]["get"]["responses"]["200"]["headers"]["Link"]
        assert "canonical" in documented["description"]
