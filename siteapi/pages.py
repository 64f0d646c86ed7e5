"""Pages for people and agents: content pages as HTML or Markdown (negotiated, or the `.md` twin),
`/llms.txt`, `/llms-full.txt`, `/sitemap.xml`, `/robots.txt`, and the 404 page with suggestions.

The documents list what a visitor gets at each URL, once: a content page whose path an app route
answers (app.py's `routed`) is left out, and the pages the app renders itself (`AppPage`, the
developer guide) are listed in its place. The content job cannot do this: it runs without the app,
whose routes may change after a page is published, and /developers is such a page on purpose (its
body is the guide's introduction).
"""
from __future__ import annotations

import base64
import difflib
import functools
import hashlib
import html
import json
import re
import sqlite3
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Callable
from urllib.parse import quote, urlsplit, urlunsplit
from xml.sax.saxutils import escape as xml_escape

import bottle

from siteapi import tokens
from siteapi.content import TWIN_OF_HOME, markdown
from siteapi.web import PAGE_CACHE, ApiError, Reply, wants_markdown

_TEMPLATE_SOURCE = (Path(__file__).parent / "templates" / "page.tpl").read_text(encoding="utf-8")
TEMPLATE = bottle.SimpleTemplate(_TEMPLATE_SOURCE, noescape=False)
SECTIONS = (("page", "Pages"), ("writing", "Writing"), ("document", "Documents"), ("utility", "Utilities"))
MARKDOWN_TYPE = "text/markdown; charset=utf-8"
# What a path keeps as written in a URL: the rest (non-ASCII, quotes, brackets, parentheses, '<' and '>')
# is %-escaped, so that the URL is one in a sitemap and ends where a Markdown link or autolink says.
URL_SAFE = "/!$&*+,;=:@~"
_LINK_TEXT_SPECIALS = re.compile(r"([\\\[\]])")
# What makes inline Markdown of plain text: links, images, emphasis, code, HTML and autolinks.
_INLINE_SPECIALS = re.compile(r"([\\`*_\[\]()<>!#|~])")
# The HTML blocks that end only at a closing string, not at a blank line (CommonMark 4.6, kinds 1-5),
# with the line that closes each.
_HTML_BLOCK_ENDS = ((re.compile(r"<(script|pre|style|textarea)(?=[\s>]|$)", re.I), "</{}>"), (re.compile(r"<!--"), "-->"),
                    (re.compile(r"<\?"), "?>"), (re.compile(r"<!\[CDATA\["), "]]>"), (re.compile(r"<![A-Za-z]"), ">"))


def _inline_hash(tag: str) -> str:
    """The CSP source of the template's one inline <style> or <script>, by its text's hash."""
    body = re.search(rf"<{tag}>(.*?)</{tag}>", _TEMPLATE_SOURCE, re.S).group(1)
    return "'sha256-" + base64.b64encode(hashlib.sha256(body.encode()).digest()).decode() + "'"


# Every HTML page's policy. The template's own style and script run by their hashes; anything else
# inline - a <script> or a style="" in raw HTML in content/ - does not, nor does a plug-in, a <base>
# or a script from elsewhere. Images may come from any https site (the owner's Markdown may show
# one). Framing is left open: the page has nothing to click that changes anything.
CONTENT_SECURITY_POLICY = (f"default-src 'self'; script-src {_inline_hash('script')}; style-src {_inline_hash('style')}; "
                           "img-src 'self' https: data:; object-src 'none'; base-uri 'none'; form-action 'self'")
HTML_TYPE = "text/html; charset=utf-8"


@dataclass(frozen=True)
class AppPage:
    """A page the app renders itself rather than from content/, as the documents list it."""
    path: str
    twin: str
    title: str
    description: str


def page_url(settings, path: str) -> str:
    return settings.url(quote(path, safe=URL_SAFE))


def twin_path(path: str) -> str:
    return TWIN_OF_HOME if path == "/" else path + ".md"


def link(text: str, url: str, note: str = "") -> str:
    """An llms.txt list entry: `- [text](url): note`, brackets in the text escaped as CommonMark reads them."""
    escaped = _LINK_TEXT_SPECIALS.sub(r"\\\1", text)
    return f"- [{escaped}]({url})" + (f": {note}" if note else "")


def page_row(conn: sqlite3.Connection, path: str) -> sqlite3.Row | None:
    return conn.execute("SELECT * FROM pages WHERE path = ?", (path,)).fetchone()


def canonical_link(settings, path: str) -> str:
    """The Link a Markdown twin sends, naming the HTML page it is the twin of."""
    return f'<{page_url(settings, path)}>; rel="canonical"'


def page_markdown(row) -> str:
    """Title, description and (for writing) date, each a block of its own: with no blank line after
    it, the body's first paragraph would continue the description's block quote."""
    blocks = [f"# {row['title']}", f"> {row['description']}"]
    if row["date"] and row["kind"] == "writing":
        blocks.append(f"Published {row['date']}.")
    return "\n\n".join(blocks + [row["body"].strip()]).rstrip() + "\n"


@functools.lru_cache(maxsize=512)
def _render_body(body: str) -> str:
    return markdown.render(body)


# A page's schema.org type by its kind: the pages' JSON-LD and /ask's schema_object say the same.
SCHEMA_TYPES = {"page": "WebPage", "writing": "BlogPosting", "document": "DigitalDocument", "utility": "WebAPI"}
SCHEMA_DESCRIPTION_CHARS = 300


def schema_node(settings, url: str, name: str, kind: str, description: str) -> dict:
    """The schema.org node of the page at `url`, part of the site's WebSite node."""
    return {"@context": "https://schema.org", "@type": SCHEMA_TYPES.get(kind, "WebPage"), "@id": url, "url": url,
            "name": name, "description": description[:SCHEMA_DESCRIPTION_CHARS],
            "isPartOf": settings.public_base_url + "/#website"}


# The site's own language, and the languages written right to left (by their primary subtag, or the
# script subtag a tag such as ku-Arab names).
SITE_LANG = "en"
_RIGHT_TO_LEFT = frozenset({"ar", "ckb", "dv", "fa", "he", "ps", "sd", "ug", "ur", "yi", "syr",
                            "arab", "hebr", "thaa", "syrc", "nkoo", "adlm", "rohg"})


def direction(lang: str) -> str:
    """rtl for a language tag written right to left, else ltr."""
    subtags = lang.lower().split("-")
    return "rtl" if subtags[0] in _RIGHT_TO_LEFT or (len(subtags) > 1 and subtags[1] in _RIGHT_TO_LEFT) else "ltr"


def _json_ld(settings, url: str, title: str, description: str, kind: str, date: str | None, lang: str) -> str:
    """The page's JSON-LD: the site's WebSite node, which /ask's schema_object names, and the page's
    own; a post's date as published. Every < escaped, so no text can end the script element."""
    page = schema_node(settings, url, title, kind, description)
    del page["@context"]
    page["inLanguage"] = lang
    if kind == "writing":
        page["headline"] = title
        if date:
            page["datePublished"] = date
    site = {"@type": "WebSite", "@id": settings.public_base_url + "/#website", "url": settings.public_base_url + "/",
            "name": settings.site_name}
    graph = {"@context": "https://schema.org", "@graph": [site, page]}
    return json.dumps(graph, ensure_ascii=False).replace("<", "\\u003c")


def html_page(settings, title: str, description: str, body_html: str, path: str | None,
              markdown_path: str | None, kind: str = "page", date: str | None = None, lang: str | None = None) -> str:
    """The page template; `path` None (a 404) names no canonical URL and describes no page, since
    nothing lives there. A post (kind writing) shows its date, as its Markdown twin does. `lang`, the
    page's language when it is not the site's, sets the page's, and its writing direction."""
    canonical = path and page_url(settings, path)
    lang = lang or SITE_LANG
    return TEMPLATE.render(site=settings.site_name, title=title, description=description, body=body_html,
                           lang=lang, dir=direction(lang),  # the site's own navigation and footer keep the site's
                           chrome="" if lang == SITE_LANG else f' lang="{SITE_LANG}" dir="{direction(SITE_LANG)}"',
                           canonical=canonical, markdown_path=markdown_path and quote(markdown_path, safe=URL_SAFE),
                           current=path,
                           published=date if kind == "writing" else None,
                           og_type="article" if kind == "writing" else "website",
                           json_ld=canonical and _json_ld(settings, canonical, title, description, kind, date, lang))


def html_reply(text: str, cache: str = PAGE_CACHE) -> Reply:
    return Reply(text, content_type=HTML_TYPE, cache=cache,
                 headers={"Vary": "Accept", "Content-Security-Policy": CONTENT_SECURITY_POLICY})


def markdown_reply(text: str, cache: str = PAGE_CACHE) -> Reply:
    return Reply(text, content_type=MARKDOWN_TYPE, cache=cache,
                 headers={"Vary": "Accept", "x-markdown-tokens": str(tokens.count(text))})


NEGOTIATED_CACHE = "no-store, must-revalidate"


def serve_page(conn: sqlite3.Connection, settings, path: str, accept: str, routed: Callable[[str], bool]) -> Reply:
    """A content page at its path (HTML, or Markdown when asked), or its `.md` twin, which names the
    page as canonical. The HTML names the twin unless an app route answers the twin's path."""
    twin = path.endswith(".md")
    # composed, as content.py stores paths: a link spelled decomposed (e + U+0301) finds the page too
    lookup = unicodedata.normalize("NFC", ("/" if path == TWIN_OF_HOME else path[:-3]) if twin else path)
    # "/.md" is no page's path plus .md: the home page's twin is /index.md alone
    row = None if twin and lookup.endswith("/") and path != TWIN_OF_HOME else page_row(conn, lookup)
    if row is None:
        raise ApiError(404, f"There is no page at {path}.", code="not_found")
    if twin:
        reply = markdown_reply(page_markdown(row))
        reply.headers["Link"] = canonical_link(settings, lookup)
        return reply
    if wants_markdown(accept):  # as REFERENCE: a cache that ignores Vary must not hand it to a browser
        return markdown_reply(page_markdown(row), cache=NEGOTIATED_CACHE)
    body = _render_body(row["body"])
    markdown_path = None if routed(twin_path(lookup)) else twin_path(lookup)
    lang = row["lang"] if "lang" in row.keys() else None  # a site.db from before the column, served read-only
    text = html_page(settings, row["title"], row["description"], body, lookup, markdown_path, row["kind"], row["date"], lang)
    return html_reply(text)


def all_pages(conn: sqlite3.Connection, routed: Callable[[str], bool]) -> list[dict]:
    """Every content page that is what a visitor gets at its path, by kind and newest first, with
    `markdown`: its twin's path, or its own (which answers `Accept: text/markdown`) when an app
    route answers the twin's."""
    pages = []
    for row in conn.execute("SELECT path, title, description, kind, date, body FROM pages "
                            "ORDER BY kind, coalesce(date, '') DESC, path"):
        if not routed(row["path"]):
            twin = twin_path(row["path"])
            pages.append(dict(row, markdown=row["path"] if routed(twin) else twin))
    return pages


def llms_txt(conn: sqlite3.Connection, settings, api: list[tuple[str, str, str]], app_pages: list[AppPage],
             routed: Callable[[str], bool]) -> str:
    """llmstxt.org: title, summary, then sections of links; `api` is (name, path, note) per endpoint,
    and the app's own pages close the Pages section."""
    home = page_row(conn, "/")
    summary = home["description"] if home else f"The personal site {settings.site_host}."
    out = [f"# {settings.site_name}", "", f"> {summary}", "",
           "Every page answers `Accept: text/markdown`, and the page links below go to their Markdown twins "
           "(the path plus `.md`). "
           f"The JSON API is read-only and keyless: [OpenAPI]({settings.url('/openapi.json')}), "
           f"[guide]({settings.url('/developers')}), [API catalog]({settings.url('/.well-known/api-catalog')}). "
           f"The same endpoints are the tools of an MCP server at {settings.url('/mcp')} (Streamable HTTP, "
           f"[server card]({settings.url('/.well-known/mcp/server-card.json')})). Every page's text in one file: "
           f"[llms-full.txt]({settings.url('/llms-full.txt')}).", "",
           "## API", ""]
    out += [link(name, settings.url(path), note) for name, path, note in api]
    rows = all_pages(conn, routed)
    rows += [{"kind": "page", "title": p.title, "description": p.description, "markdown": p.twin} for p in app_pages]
    for kind, heading in SECTIONS:
        items = [r for r in rows if r["kind"] == kind]
        if items:
            out += ["", f"## {heading}", ""]
            out += [link(r["title"], page_url(settings, r["markdown"]), r["description"]) for r in items]
    return "\n".join(out) + "\n"


@functools.lru_cache(maxsize=512)
def headings_below_the_title(body: str) -> str:
    """`body` with its headings two levels down (at most ###### ), so that in llms-full.txt, where a
    page's title is ##, a reader splitting on ## finds the pages and each page keeps its outline.
    Underlined headings become # headings; headings in lists, quotes and code are left as they are."""
    lines = body.split("\n")
    for token in markdown.parse(body):
        if token.type == "heading_open" and token.level == 0 and token.map:
            first, end = token.map
            level = min(6, int(token.tag[1]) + 2)
            if token.markup.startswith("#"):
                lines[first] = "#" * level + lines[first].lstrip()[len(token.markup):]
            else:  # setext: the text lines, then the underline
                text = " ".join(line.strip() for line in lines[first:end - 1])
                lines[first:end] = [f"{'#' * level} {text}"] + [""] * (end - first - 1)
    return "\n".join(lines)


@functools.lru_cache(maxsize=512)
def closing_line(body: str) -> str | None:
    """The line that closes the code fence or HTML block `body` leaves open at its end, or None. A
    CommonMark reader would take all that follows for code or raw HTML (an HTML comment hides it):
    the fence closes with its own opening run (a longer or ~~~ fence is not closed by ```), and
    a fence within a list or quote needs nothing, as it ends with them."""
    last = [token for token in markdown.parse(body + "\n\n---\n") if token.level == 0][-1]
    if last.type == "fence":
        return last.markup
    if last.type == "html_block":
        first = last.content.lstrip(" ")
        for start, end in _HTML_BLOCK_ENDS:
            match = start.match(first)
            if match:
                return end.format(*match.groups())
    return None


def llms_full_txt(conn: sqlite3.Connection, settings, api, app_pages: list[AppPage],
                  routed: Callable[[str], bool]) -> str:
    """llms.txt, then each content page's text in a section of its own: a fence or HTML block the
    page leaves open is closed there, so that the next page is read as Markdown again."""
    parts = [llms_txt(conn, settings, api, app_pages, routed), "# The site — full text"]
    for row in all_pages(conn, routed):
        dated = f" ({row['date']})" if row["date"] else ""
        body = headings_below_the_title(row["body"].strip())
        closer = closing_line(body)
        parts.append(f"## {row['title']}{dated}\n\n<{page_url(settings, row['path'])}>\n\n{body}"
                     + (f"\n{closer}" if closer else ""))
    return "\n\n---\n\n".join(parts) + "\n"


def sitemap_xml(conn: sqlite3.Connection, settings, app_pages: list[AppPage], routed: Callable[[str], bool]) -> str:
    """Every content page a visitor gets at its path, with its date, then the app's own pages (their
    text follows the API description too, so a content page's date is not theirs)."""
    entries = [(r["path"], r["date"]) for r in all_pages(conn, routed)] + [(p.path, None) for p in app_pages]
    urls = "".join(
        f"<url><loc>{xml_escape(page_url(settings, path))}</loc>{f'<lastmod>{date}</lastmod>' if date else ''}</url>"
        for path, date in entries)
    return ('<?xml version="1.0" encoding="UTF-8"?>\n'
            f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{urls}</urlset>\n')


ROBOTS_RULES = ("Content-Signal: search=yes, ai-input=yes, ai-train=yes\n"
                "Allow: /\n"
                "Disallow: /data/*.csv\n")  # the data browser's CSV exports: the same rows as its pages


def robots_txt(settings) -> str:
    """Everyone may read everything (the policy /documents/crawler-policy states). The AI crawlers
    are named in a group of their own so readers see them addressed; a named group replaces `*`
    (RFC 9309), so it repeats every rule."""
    return (
        "# Everyone is welcome to read this site. The API is keyless and rate-limited per caller.\n"
        f"User-agent: *\n{ROBOTS_RULES}\n"
        "User-agent: GPTBot\nUser-agent: ClaudeBot\nUser-agent: CCBot\nUser-agent: Google-Extended\n"
        f"{ROBOTS_RULES}\n"
        f"Sitemap: {settings.url('/sitemap.xml')}\n"
    )


SUGGEST_CHARS = 200  # SequenceMatcher is quadratic: a 200 KB path held a request thread for 20 s (also the
# most of a path a 404 sentence repeats)


def suggest(path: str, known: dict[str, str], base_url: str, n: int = 3) -> list[str]:
    """The URLs of the closest real paths to `path` (`known`: each path and the request to give for
    it, a path with an encoded query or a fragment), by similarity of the whole path and of its last
    segment (only their first SUGGEST_CHARS count: no real path is longer), with and without a
    `.json` that clients add to guess an endpoint (/ask.json), and the endpoints under a path
    (/lens.json, /lens: /lens/fetch and its neighbours) close behind an exact match."""
    trimmed = path.rstrip("/").lower()
    asked = {(trimmed or "/")[:SUGGEST_CHARS], (trimmed.removesuffix(".json") or "/")[:SUGGEST_CHARS]}
    under = tuple(p.rstrip("/") + "/" for p in asked if p.strip("/"))

    def score(candidate: str) -> float:
        candidate = candidate.lower()
        last = candidate.rsplit("/", 1)[-1]
        return max(0.9 if candidate.startswith(under) else 0, *(
            max(difflib.SequenceMatcher(None, wanted, candidate).ratio(),
                difflib.SequenceMatcher(None, wanted.rsplit("/", 1)[-1], last).ratio()) for wanted in asked))

    scores = {candidate: score(candidate) for candidate in known}
    # of equals, an endpoint that reads the request's own parameters (carried in its target) first
    ranked = sorted(known, key=lambda c: (-scores[c], "?" not in known[c], c))
    picks = [known[c] for c in ranked if scores[c] >= 0.45][:n] or ["/", "/sitemap.xml"]
    # a page's path is percent-encoded here, not an endpoint's query (encoded already) nor the
    # fragment that names a section of the guide
    return [base_url + quote(target, safe=URL_SAFE) + rest
            for target, rest in (re.match(r"([^?#]*)(.*)", p).groups() for p in picks)]


def shown_path(path: str) -> str:
    """The path asked for as a 404's sentence quotes it: cut after SUGGEST_CHARS."""
    return path if len(path) <= SUGGEST_CHARS else path[:SUGGEST_CHARS] + "…"


def _code_span(text: str) -> str:
    """`text` as a Markdown code span, shown as it is: no link, emphasis or autolink is made of it
    (GitHub's renderers link a bare https://... in text, whatever is escaped around it)."""
    text = " ".join(text.splitlines())  # a blank line would end the span
    fence = "`" * (max(map(len, re.findall("`+", text)), default=0) + 1)
    return f"{fence} {text} {fence}"


def _site_path(url: str) -> str:
    """A suggestion as the HTML 404 links it: its path, which a screen reader need not spell out from
    https:// on, and which leads to the same stack the page came from (a local one, too)."""
    parts = urlsplit(url)
    return urlunsplit(("", "", parts.path or "/", parts.query, ""))


def render_error(settings, fmt: str, body: dict, path: str) -> tuple[str, str, dict]:
    """A 404 as Markdown or HTML, with its extra headers; JSON is handled by the web layer."""
    links = body.get("suggestions") or []
    if fmt == "markdown":
        # the sentence quotes the path asked for, which is anyone's text: shown, never rendered
        before, quoted, after = body["error"].partition(shown_path(path))
        sentence = "".join((_INLINE_SPECIALS.sub(r"\\\1", before), _code_span(quoted) if quoted else "",
                            _INLINE_SPECIALS.sub(r"\\\1", after)))
        text = f"# Not found\n\n{sentence}\n\n" + "".join(f"- <{u}>\n" for u in links)
        text += f"\nSee also the [sitemap]({settings.url('/sitemap.xml')}).\n"
        return MARKDOWN_TYPE, text, {"x-markdown-tokens": str(tokens.count(text))}
    items = "".join(f'<li><a href="{html.escape(p)}">{html.escape(p)}</a></li>' for p in map(_site_path, links))
    content = ((f"<p>Perhaps you meant:</p><ul>{items}</ul>" if items else "")
               + '<p>Or start from the <a href="/">home page</a> or the <a href="/sitemap.xml">sitemap</a>.</p>')
    return (HTML_TYPE, html_page(settings, "Not found", body["error"], content, None, None),
            {"Content-Security-Policy": CONTENT_SECURITY_POLICY})
