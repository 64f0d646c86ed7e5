"""The page pass: what a machine reads in one fetched page, from the page alone.

`analyse()` turns a decoded body into the `anatomy`, `structured` and `ai` objects of a
LensObservation (API.md §2.5), plus the strings cost.py prices. Parsing is selectolax (Lexbor)
over at most `parse_bytes` of the body; output strings are capped (rawHtml 80,000 chars, text
24,000, JSON-LD re-indented within a depth and a size budget). `visible_words()` is what counts
as the words a visitor reads (bot views sample them too). `frame_policy()` reads X-Frame-Options
and CSP frame-ancestors.
"""
from __future__ import annotations

import codecs
import json
import math
import re
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import html_to_markdown
import webencodings
from selectolax.lexbor import LexborHTMLParser

from .fetch import join_url

RAW_HTML_CHARS = 80_000
TEXT_CHARS = 24_000
MARKDOWN_CHARS = 80_000
JSONLD_BLOCKS = 100
JSONLD_TYPES = 100  # distinct @type values listed per block
# Indenting repeats two spaces per level on every line, so the re-serialised text grows with the
# square of the depth (100 blocks of 900 nested arrays, 184 KB, indented to 162 MB): a depth limit,
# and caps on each block's text and on all of them.
JSONLD_DEPTH = 64
JSONLD_CHARS = 32_000
JSONLD_TOTAL_CHARS = 160_000
RAW_INVALID_CHARS = 2_000
LIST_ITEMS = 200
VALUE_CHARS = 2_000
HEADING_CHARS = 300
HEADINGS = 500
# Lexbor's tree builder is quadratic in nesting depth (256 KiB of `<ul><li>` takes seconds), so
# the parse stops where the page nests deeper than any real page does.
NESTING_LIMIT = 2_048

AI_CRAWLERS = ("gptbot", "chatgpt-user", "oai-searchbot", "claudebot", "claude-user", "claude-searchbot",
               "anthropic-ai", "google-extended", "ccbot", "perplexitybot", "perplexity-user", "bytespider",
               "applebot-extended", "meta-externalagent", "amazonbot", "cohere-ai", "diffbot", "youbot")
MF1_ROOTS = ("vcard", "hentry", "hfeed", "vevent", "vcalendar", "hreview", "hreview-aggregate", "hproduct",
             "hrecipe", "hresume", "hnews", "geo", "adr", "xoxo", "hlisting")
_MF_SELECTOR = '[class^="h-"], [class*=" h-"], ' + ", ".join("." + c for c in MF1_ROOTS)
_MF2_ROOT = re.compile(r"^h-[a-z0-9]+(-[a-z0-9]+)*$")
# A comment's start, or a tag: end tag or not, its name, and whether it ends in "/>". A quoted
# attribute value may hold < and > (title="<script>" opens no script); a quote anywhere but after
# "=" is a character, as HTML's tokenizer reads it (<div a=b'> is one tag). The name and the
# attributes are atomic, so a failed match costs its length once: `<a` and 256 KB of letters had
# backtracked through every split of the name from the attributes (minutes, holding the GIL).
_MARKUP = re.compile(r"""<!--|<(/?)((?>[A-Za-z][A-Za-z0-9:-]*))"""
                     r"""(?>(?:[^<>"'/=]+|=\s*"[^"]*"|=\s*'[^']*'|[="']|/(?!>))*)(/?)>""")
_NOT_NESTING = frozenset("area base br col embed hr img input link meta param source track wbr li p td th tr "
                         "option optgroup dt dd rt rp thead tbody tfoot colgroup caption basefont bgsound frame "
                         "keygen".split())
# What HTML's tree builder reads as text up to the element's own end tag (outside SVG and MathML).
_RAW_TEXT = {name: re.compile(rf"</{name}\b", re.I) for name in
             "script style textarea title xmp noembed noframes iframe plaintext".split()}
_FOREIGN_ROOTS = frozenset(("svg", "math"))
# Inside SVG or MathML, these hold HTML again; and an HTML tag such as <div> ends the foreign content.
_INTEGRATION_POINTS = frozenset("foreignobject desc title annotation-xml mi mo mn ms mtext".split())
_BREAKOUT = frozenset("b big blockquote body br center code dd div dl dt em embed h1 h2 h3 h4 h5 h6 head hr i img "
                      "li listing menu meta nobr ol p pre ruby s small span strong strike sub sup table tt u ul "
                      "var font".split())
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.I)
_XML_ENCODING = re.compile(rb"""<\?xml[^>]*?\sencoding\s*=\s*["']\s*([A-Za-z0-9_.:-]+)""")
_HEADER_CHARSET = re.compile(r'charset\s*=\s*"?([A-Za-z0-9_.:-]+)', re.I)
# Where the Encoding Standard's decoder is not the Python codec webencodings names: GBK is decoded
# as gb18030 (its superset); x-user-defined as HTML's prescan reads it.
_WEB_DECODERS = {"gbk": "gb18030", "x-user-defined": "windows-1252"}
_UTF16 = ("utf-16-le", "utf-16-be")
_BEYOND_ASCII = re.compile("[^\x00-\x7f\ufffd]")
_TEXT_MIMES = ("application/xhtml+xml", "application/xml", "application/json", "application/javascript",
               "application/ecmascript", "application/x-javascript", "application/rss+xml", "application/atom+xml")
_MAGIC = (b"\x89PNG", b"GIF8", b"\xff\xd8\xff", b"%PDF", b"PK\x03\x04", b"\x1f\x8b", b"RIFF", b"\x00asm",
          b"\x00\x00\x01\x00", b"OggS", b"fLaC", b"ID3", b"wOFF", b"wOF2", b"\x7fELF", b"MZ")
# `[^<>]`: a URI reference has no `<`, and stopping there keeps every try within one entry (with
# `[^>]*`, each `<` of a value without `>` ran on to the end: quadratic in the header's length).
_LINK_ENTRY = re.compile(r'<([^<>]*)>((?:\s*;\s*[A-Za-z0-9*_.-]+\s*(?:=\s*(?:"[^"]*"|[^;,]*))?)*)')
_LINK_PARAM = re.compile(r';\s*([A-Za-z0-9*_.-]+)\s*(?:=\s*("[^"]*"|[^;,]*))?')


@dataclass
class Page:
    """One analysed page: the JSON objects and the full strings behind the capped ones."""
    binary: bool
    html: bool
    anatomy: dict
    structured: dict
    ai: dict
    parse_truncated: bool = False
    parsed_bytes: int = 0
    strings: dict = field(default_factory=dict)  # tier key -> full string (cost.py)


def mime_of(content_type: str) -> str:
    return content_type.split(";")[0].strip().lower()


def is_binary(body: bytes, content_type: str) -> bool:
    """Binary by declared type, or by sniffing a body that claims to be text (a Content-Type lie)."""
    mime = mime_of(content_type)
    texty = (not mime or mime.startswith("text/") or mime in _TEXT_MIMES or mime.endswith("+json")
             or mime.endswith("+xml"))
    if not texty:
        return True
    head = body[:1024]
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) or header_codec(content_type) in _UTF16:
        return False
    return b"\x00" in head or head.startswith(_MAGIC)


def is_html(body: bytes, content_type: str) -> bool:
    mime = mime_of(content_type)
    if mime in ("text/html", "application/xhtml+xml"):
        return True
    if mime:
        return False
    head = body[:512].lstrip().lower()
    return head.startswith((b"<!doctype html", b"<html"))


def web_codec(label: str) -> str | None:
    """The Python codec that decodes a WHATWG Encoding Standard label as browsers do, or None for a
    label the web does not know (browsers ignore it). iso-8859-1 and us-ascii are windows-1252 there,
    and Python's own names (unicode_escape, utf-7 ...) are not labels at all."""
    encoding = webencodings.lookup(label)
    if encoding is None:
        return None
    return _WEB_DECODERS.get(encoding.name, encoding.codec_info.name)


def header_codec(content_type: str) -> str | None:
    """The codec of the Content-Type's first charset the web knows, or None."""
    return next(filter(None, map(web_codec, _HEADER_CHARSET.findall(content_type))), None)


def decode_text(body: bytes, content_type: str, sniff_meta: bool) -> tuple[str, str]:
    """(text, Python codec used), as the Encoding Standard and HTML's sniffing choose: a BOM, then the
    header's charset, then (`sniff_meta`) an XML declaration or <meta charset> in the first 2 KB.
    Unlabelled text is UTF-8, unless it is not UTF-8 and holds no UTF-8 sequence beyond ASCII: then
    it is windows-1252, the default browsers use for such pages in English locales."""
    for bom, name in ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16")):
        if body.startswith(bom):
            return body.decode(name, errors="replace"), name
    codec = header_codec(content_type)
    if codec is None and sniff_meta:
        head = body[:2048]
        match = _XML_ENCODING.match(head) or _META_CHARSET.search(head)
        if match:
            codec = _in_page_codec(match.group(1).decode("ascii", "replace"))
    if codec == "replacement":  # labels of encodings unsafe to decode (ISO-2022-KR, HZ ...)
        return "\ufffd", codec
    if codec is not None:
        return body.decode(codec, errors="replace"), codec
    text = body.decode("utf-8", errors="replace")
    if "\ufffd" in text and not _BEYOND_ASCII.search(text):
        return body.decode("windows-1252", errors="replace"), "windows-1252"
    return text, "utf-8"


def _in_page_codec(label: str) -> str | None:
    """The codec a label inside the page stands for, as HTML's prescan maps it. A declaration that
    was read as ASCII rules out UTF-16, so the page is UTF-8; only a BOM or the header selects UTF-16."""
    codec = web_codec(label)
    return "utf-8" if codec in _UTF16 else codec


def nesting_cut(text: str, limit: int = NESTING_LIMIT) -> int | None:
    """Offset where open elements first nest deeper than `limit`, or None. It follows HTML's tree
    builder as far as nesting goes: comments and raw text (script, style ...) hold no elements, and
    "/>" closes an element only inside SVG or MathML (an icon sprite's thousands of <path/> nest
    nothing, where <div/> in HTML opens a div). Where it cannot tell, it counts an element open: a
    count too high cuts a page short, one too low would let a page nest as deep as it likes. So a
    comment or raw text that never ends (which a tag this reads differently from HTML could fake)
    is cut at its start when what follows has tags enough to nest past the limit."""
    depth, position, switches = 0, 0, []  # switches: (element, in foreign content before it)
    foreign = False
    while (match := _MARKUP.search(text, position)) is not None:
        position = match.end()
        if match.group() == "<!--":
            if text.startswith((">", "->"), position):  # <!--> and <!---> end where they start, in HTML
                position = text.index(">", position) + 1
                continue
            end = text.find("-->", position)
            if end < 0:
                return _unended(text, match, depth, limit)
            position = end + 3
            continue
        closing, name, self_closing = match.group(1), match.group(2).lower(), match.group(3)
        if closing:
            if switches and switches[-1][0] == name:
                foreign = switches.pop()[1]
            if name not in _NOT_NESTING and not (name in _RAW_TEXT and not foreign):
                depth = max(0, depth - 1)
            continue
        if foreign and name in _BREAKOUT:
            switches, foreign = [], False
        if foreign and self_closing:
            continue
        if not foreign and name in _RAW_TEXT:
            end = _RAW_TEXT[name].search(text, position)
            if end is None:
                return _unended(text, match, depth, limit)
            position = end.end()
            continue
        if name in _NOT_NESTING:
            continue
        if name in _FOREIGN_ROOTS and not foreign and not self_closing:
            switches.append((name, foreign))
            foreign = True
        elif name in _INTEGRATION_POINTS and foreign:
            switches.append((name, foreign))
            foreign = False
        depth += 1
        if depth > limit:
            return match.start()
    return None


def _unended(text: str, start: re.Match, depth: int, limit: int) -> int | None:
    return start.start() if text.count("<", start.end()) > limit - depth else None


def analyse(body: bytes, content_type: str, headers: dict, url: str, parse_bytes: int = 256 * 1024) -> Page:
    """The page pass over one decoded body."""
    link_header = parse_link_header(headers.get("link", ""), url)
    directives = {"metaRobots": None, "xRobotsTag": headers.get("x-robots-tag"), "namesAiCrawlers": False}
    if is_binary(body, content_type):
        anatomy = _anatomy(raw="", raw_bytes=len(body), text="", word_count=0)
        return Page(True, False, anatomy, {}, {"llmsTxtPresent": False, "directives": _ai_directives(directives, {})})
    if not is_html(body, content_type):
        text, _ = decode_text(body, content_type, sniff_meta=False)
        words = text.split()
        anatomy = _anatomy(raw=text[:RAW_HTML_CHARS], raw_bytes=len(body), text=" ".join(words)[:TEXT_CHARS],
                           word_count=word_count(words))
        strings = {"text": " ".join(words), "raw": text}
        if mime_of(content_type) == "text/markdown":
            strings["markdown"] = text
        ai = {"llmsTxtPresent": _mentions_llms_txt(link_header), "directives": _ai_directives(directives, {})}
        return Page(False, False, anatomy, {}, ai, strings=strings)

    parsed = body[:parse_bytes]
    html, encoding = decode_text(parsed, content_type, sniff_meta=True)
    truncated = len(body) > len(parsed)
    cut = nesting_cut(html)
    if cut is not None:
        html, truncated = html[:cut], True
        parsed = html.encode(encoding if encoding != "utf-16" else "utf-16-le", errors="replace")
    tree = LexborHTMLParser(html)
    base = _base_url(tree, url)
    structured = _structured(tree, base, link_header)
    meta_robots = [n.attributes.get("content") or "" for n in tree.css('meta[name="robots" i]')]
    directives["metaRobots"] = ", ".join(meta_robots) if meta_robots else None
    headings = [{"level": int(n.tag[1]), "text": " ".join((n.text() or "").split())[:HEADING_CHARS]}
                for n in tree.css("h1, h2, h3, h4, h5, h6")[:HEADINGS]]
    images = tree.css("img")
    markdown = _markdown(html)
    words = visible_words(tree)
    text = " ".join(words)
    anatomy = _anatomy(raw=html[:RAW_HTML_CHARS], raw_bytes=len(body), text=text[:TEXT_CHARS], word_count=word_count(words),
                       images=len(images), images_no_alt=sum(1 for n in images if "alt" not in n.attributes),
                       headings=headings)
    anatomy["parsedBytes"] = len(parsed)
    anatomy["parseTruncated"] = truncated
    ai = {"markdown": markdown[:MARKDOWN_CHARS],
          "llmsTxtPresent": _mentions_llms_txt(structured["relLinks"]),
          "directives": _ai_directives(directives, structured["meta"])}
    outline = "\n".join("#" * h["level"] + " " + h["text"] for h in headings)
    raw_text = html if not truncated else decode_text(body, content_type, sniff_meta=True)[0]
    strings = {"html": html, "text": text, "markdown": markdown, "outline": outline, "raw": raw_text}
    return Page(False, True, anatomy, structured, ai, truncated, len(parsed), strings)


def visible_words(tree: LexborHTMLParser) -> list[str]:
    """The words a visitor reads in the body: its text without scripts, styles, templates and
    inline SVG. Strips those elements from `tree`, so read anything else first."""
    tree.strip_tags(["script", "style", "noscript", "template", "svg"])
    root = tree.body or tree.root
    return (root.text(separator=" ") if root is not None else "").split()


# Chinese and Japanese write no spaces between words: each Han or kana character counts as one, as
# word processors count them (a page of 900 Japanese characters had counted as one word).
_UNSPACED = re.compile("[\u3040-\u30fa\u30fc-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f"
                       "\U00020000-\U0003134f]")  # not the middle dot ・ (U+30FB); half-width kana too


def word_count(words: list[str]) -> int:
    """How many words `words` (runs between spaces) hold, a Han or kana character being one."""
    total = 0
    for word in words:
        unspaced = len(_UNSPACED.findall(word))
        rest = _UNSPACED.sub("", word) if unspaced else word
        total += unspaced + any(char.isalnum() for char in rest)
    return total


def _anatomy(raw: str, raw_bytes: int, text: str, word_count: int, images: int = 0, images_no_alt: int = 0,
             headings: list | None = None) -> dict:
    return {"rawHtml": raw, "rawBytes": raw_bytes, "text": text, "wordCount": word_count, "imgTotal": images,
            "imgNoAlt": images_no_alt, "headings": headings or []}


def _markdown(html: str) -> str:
    try:
        return html_to_markdown.convert(html, html_to_markdown.ConversionOptions(extract_metadata=False)).content
    except Exception:  # the converter's own errors on hostile markup; the rest of the pass stands
        return ""


def _base_url(tree, url: str) -> str:
    base = tree.css_first("base[href]")
    return (join_url(url, base.attributes.get("href") or "") or url) if base is not None else url


def _clip(value: str | None) -> str:
    return (value or "").strip()[:VALUE_CHARS]


def document_title(tree):
    """The document's <title>: the first not inside SVG or MathML, where a title names a drawing
    (one selector, matched in C: a walk up from every title took seconds on 16,000 titles in a deep SVG)."""
    return tree.css_first("title:not(svg *):not(math *)")


def _structured(tree, base: str, link_header: list[dict]) -> dict:
    title_node = document_title(tree)
    meta: dict[str, str] = {}
    og: dict[str, str] = {}
    twitter: dict[str, str] = {}
    for node in tree.css("meta[content]"):
        attrs = node.attributes
        key = (attrs.get("property") or attrs.get("name") or "").strip().lower()
        if not key:
            continue
        bucket = og if key.startswith("og:") else twitter if key.startswith("twitter:") else meta
        if key not in bucket and len(bucket) < LIST_ITEMS:
            bucket[key[:200]] = _clip(attrs.get("content"))
    jsonld, total = _jsonld(tree)
    rel_links = [link for node in tree.css("link[rel][href]")[:LIST_ITEMS] if (link := _rel_link(node.attributes, base))]
    microformats: list[str] = []
    for node in tree.css(_MF_SELECTOR):
        for cls in (node.attributes.get("class") or "").split():
            if (_MF2_ROOT.match(cls) or cls in MF1_ROOTS) and cls not in microformats:
                microformats.append(cls)
    return {
        "title": " ".join((title_node.text() if title_node is not None else "").split())[:VALUE_CHARS],
        "meta": meta, "og": og, "twitter": twitter,
        "jsonld": jsonld, "jsonldTotal": total,
        "microdata": {"itemtypes": _attribute_tokens(tree, "itemtype"), "props": _attribute_tokens(tree, "itemprop")},
        "rdfa": {"typeof": _attribute_tokens(tree, "typeof"), "properties": _attribute_tokens(tree, "property")},
        "microformats": microformats[:LIST_ITEMS],
        "relLinks": rel_links + link_header[:LIST_ITEMS],
    }


def _attribute_tokens(tree, name: str) -> list[str]:
    seen: dict[str, None] = {}
    for node in tree.css(f"[{name}]"):
        for token in (node.attributes.get(name) or "").split():
            seen.setdefault(token[:200])
        if len(seen) >= LIST_ITEMS:
            break
    return list(seen)[:LIST_ITEMS]


def _reject_constant(name: str):
    raise ValueError(f"{name} is not allowed in JSON")


def _finite_float(literal: str) -> float:
    """The number as a float; one too large for a double would re-serialize as Infinity, which is not JSON."""
    value = float(literal)
    if math.isinf(value):
        raise ValueError(f"the number {literal[:40]} does not fit in a double")
    return value


def _jsonld(tree) -> tuple[list[dict], int]:
    """The first JSON-LD blocks re-serialised as indented JSON, and how many there are. A block's
    `json` stops at JSONLD_CHARS, and at what is left of JSONLD_TOTAL_CHARS, with `truncated`."""
    blocks, total, budget = [], 0, JSONLD_TOTAL_CHARS
    for node in tree.css("script[type]"):
        if mime_of(node.attributes.get("type") or "") != "application/ld+json":
            continue
        total += 1
        if len(blocks) >= JSONLD_BLOCKS:
            continue
        raw = node.text() or ""
        try:
            data = _read_block(raw)
        except ValueError as exc:
            blocks.append({"valid": False, "error": str(exc)[:300], "raw": raw[:RAW_INVALID_CHARS]})
            continue
        text, cut = _indented(data, min(JSONLD_CHARS, budget))
        budget -= len(text)
        block = {"valid": True, "types": _jsonld_types(data), "json": text}
        blocks.append({**block, "truncated": True} if cut else block)
    return blocks, total


def _read_block(raw: str):
    """The block's JSON, or ValueError with a sentence (json.JSONDecodeError is a ValueError)."""
    if not raw.strip():
        raise ValueError("the block is empty")
    try:
        data = json.loads(raw, parse_constant=_reject_constant, parse_float=_finite_float)
        too_deep = _deeper_than(data, JSONLD_DEPTH)
    except RecursionError:
        too_deep = True
    if too_deep:
        raise ValueError(f"the JSON nests deeper than {JSONLD_DEPTH} levels")
    return data


def _deeper_than(data, limit: int) -> bool:
    """Whether arrays and objects nest more than `limit` levels in `data` (walked without recursion)."""
    stack = [(data, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > limit:
                return True
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return False


def _indented(data, limit: int) -> tuple[str, bool]:
    """`data` as json.dumps(indent=2) writes it, stopped once `limit` characters are written: (text, cut)."""
    chunks, size = [], 0
    for chunk in json.JSONEncoder(indent=2, ensure_ascii=False).iterencode(data):
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            return "".join(chunks)[:limit], True
    return "".join(chunks), False


def _jsonld_types(data) -> list[str]:
    """Every node's @type in document order, once each: the top-level nodes', those of @graph
    members and of nested nodes (a WebPage's mainEntity Product, its offers Offer ...), as rich
    result testers list them; not the @context. Walked without recursion (the depth is bounded already)."""
    types: dict[str, None] = {}
    stack = [data]
    while stack and len(types) < JSONLD_TYPES:
        item = stack.pop()
        if isinstance(item, dict):
            value = item.get("@type")
            for t in (value if isinstance(value, list) else [value]):
                if isinstance(t, str) and t:
                    types.setdefault(t[:200])
            # a @context's term definitions type values ("@id", xsd:date), not nodes
            stack.extend(reversed([v for k, v in item.items() if k != "@context"]))
        elif isinstance(item, list):
            stack.extend(reversed(item))
    return list(types)[:JSONLD_TYPES]


def _rel_link(attrs: dict, base: str) -> dict | None:
    """The link as a RelLink, or None when its href is not a URL that can be resolved."""
    href = join_url(base, (attrs.get("href") or "").strip())
    if href is None:
        return None
    link = {"rel": " ".join((attrs.get("rel") or "").lower().split())[:200], "href": href[:VALUE_CHARS]}
    for key in ("type", "title", "hreflang"):
        if attrs.get(key):
            link[key] = _clip(attrs[key])
    return link


def parse_link_header(value: str, base: str) -> list[dict]:
    """RFC 8288 Link header entries as RelLink objects (entries without rel are skipped)."""
    links = []
    for match in _LINK_ENTRY.finditer(value or ""):
        params = {}
        for name, raw in _LINK_PARAM.findall(match.group(2)):
            params.setdefault(name.lower(), raw.strip().strip('"'))
        href = join_url(base, match.group(1).strip())
        if not params.get("rel") or href is None:
            continue
        link = {"rel": " ".join(params["rel"].lower().split())[:200], "href": href[:VALUE_CHARS]}
        for key in ("type", "title", "hreflang"):
            if params.get(key):
                link[key] = params[key][:VALUE_CHARS]
        links.append(link)
        if len(links) >= LIST_ITEMS:
            break
    return links


def _mentions_llms_txt(links: list[dict]) -> bool:
    return any(urlsplit(link["href"]).path.endswith("/llms.txt") or "llms" in link["rel"].split() for link in links)


def _ai_directives(directives: dict, meta: dict) -> dict:
    header = (directives.get("xRobotsTag") or "").lower()
    named = any(name in meta for name in AI_CRAWLERS) or any(f"{bot}:" in header for bot in AI_CRAWLERS)
    return {**directives, "namesAiCrawlers": named}


def frame_policy(headers: dict, final_url: str, site_host: str) -> tuple[bool, str | None]:
    """(framable, reason): may `https://site_host` show this page in an iframe?

    Browsers enforce every CSP policy (a repeated header arrives comma-joined), so one policy whose
    frame-ancestors refuses is enough, and a CSP frame-ancestors overrides X-Frame-Options.
    Content-Security-Policy-Report-Only enforces nothing and is not read.
    """
    target = urlsplit(final_url)
    same_origin = target.scheme == "https" and (target.hostname or "") == site_host
    allowing = []
    for policy in headers.get("content-security-policy", "").split(","):
        sources = _frame_ancestors(policy)
        if sources is None:
            continue
        shown = " ".join(sources)[:200]
        if not _frame_source_allows([s.lower() for s in sources], site_host, same_origin):
            return False, "Content-Security-Policy frame-ancestors " + (shown or "'none'")
        allowing.append(f"frame-ancestors {shown}")
    if allowing:
        return True, ("Content-Security-Policy " + ", ".join(allowing))[:400]
    values = {v.strip().lower() for v in headers.get("x-frame-options", "").split(",") if v.strip()}
    if len(values) > 1 and values & {"deny", "sameorigin", "allowall"}:  # HTML: conflicting values deny
        return False, f"X-Frame-Options has conflicting values ({', '.join(sorted(values))[:120]})"
    xfo = next(iter(values), "")
    if xfo == "deny":
        return False, "X-Frame-Options: DENY"
    if xfo == "sameorigin":
        return (True, "X-Frame-Options: SAMEORIGIN (same origin)") if same_origin else (False, "X-Frame-Options: SAMEORIGIN")
    if xfo:
        return True, f"X-Frame-Options {xfo[:60]!r} is not a value browsers enforce"
    return True, None


def _frame_ancestors(policy: str) -> list[str] | None:
    """The sources of the policy's frame-ancestors directive, or None when it has none.

    A repeated directive is ignored, as CSP says, so only the first counts.
    """
    for directive in policy.split(";"):
        parts = directive.split()
        if parts and parts[0].lower() == "frame-ancestors":
            return parts[1:]
    return None


def _frame_source_allows(sources: list[str], site_host: str, same_origin: bool) -> bool:
    for source in sources:
        if source == "'none'":
            continue
        if source in ("*", "https:", "http:"):
            return True
        if source == "'self'":
            if same_origin:
                return True
            continue
        host = source.split("://", 1)[-1].split("/", 1)[0].split(":", 1)[0]
        if host == site_host or (host.startswith("*.") and site_host.endswith(host[1:])):
            return True
    return False
