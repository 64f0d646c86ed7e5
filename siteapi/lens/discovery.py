"""Discovery: the well-known paths of the target's origin as Probe objects, DNS-AID and the wire pass.

A probe passes on what the body is - its content type and shape - never on a bare 200: an SPA
answering `200 text/html` for `/llms.txt` is a miss with a note saying so. robots.txt's text goes
on to the terms pass all the same, miss or not, because crawlers read it that way. Every
subrequest goes through one `Subrequests` budget (one deadline for the whole scan, a per-probe
timeout, a cap on how many are made). DNS goes through a `DnsClient` (dnspython); tests point it at a loopback
name server. scan.py caches an origin's discovery result (cache.py).
"""
from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from .fetch import FetchFailed, Fetcher, FetchRefused, FetchResult, join_url, parse_target
from .page import decode_text, is_binary, mime_of
from .terms import robots_field, robots_lines

PROBE_BODY_CHARS = 2_000          # a probe's `body` in the observation
PROBE_CAP = 256 * 1024            # bytes read per probe
ROBOTS_CAP = 512 * 1024           # Google reads the first 500 KiB of robots.txt
DOCUMENT_CAP = 1024 * 1024        # OpenAPI documents are read whole (the keyless check needs every operation)
SHOWN_HEADERS = ("content-type", "content-length", "cache-control", "vary", "link", "www-authenticate",
                 "location", "content-signal", "tdm-reservation", "x-robots-tag", "cf-mitigated")
DNS_AID_PREFIXES = ("_index", "_a2a", "_mcp")
DNS_TIMEOUT_S = 4.5               # all the DNS-AID lookups together, and the ECH lookup


class CapReached(Exception):
    """The scan's subrequest cap is spent; the probe is reported as not made."""


class Subrequests:
    """One scan's budget: a deadline shared by every subrequest, a per-probe timeout and a cap."""

    def __init__(self, fetcher: Fetcher, deadline: float, cap: int, probe_timeout_s: float):
        self.fetcher = fetcher
        self.deadline = deadline
        self.cap = cap
        self.probe_timeout_s = probe_timeout_s
        self.made = 0
        self.capped = False
        self._lock = threading.Lock()

    def take(self) -> None:
        with self._lock:
            if self.made >= self.cap:
                self.capped = True
                raise CapReached(f"not fetched: the scan's cap of {self.cap} subrequests was reached")
            self.made += 1

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def fetch(self, url: str, headers: dict | None = None, cap_bytes: int = PROBE_CAP,
              timeout_s: float | None = None, keep_partial: bool = False) -> FetchResult:
        self.take()
        if self.remaining() <= 0:
            raise FetchFailed("not fetched: the scan's deadline had passed")
        own = time.monotonic() + (timeout_s or self.probe_timeout_s)
        return self.fetcher.fetch(url, headers, cap_bytes=cap_bytes, deadline=min(self.deadline, own),
                                  keep_partial=keep_partial)


# --- what a body is -----------------------------------------------------------------------------

def body_text(result: FetchResult) -> str:
    """The body as UTF-8 without a leading BOM, which browsers, crawlers and JSON readers all skip."""
    return result.body.decode("utf-8-sig", errors="replace")


def looks_html(result: FetchResult) -> bool:
    mime = mime_of(result.content_type)
    if mime in ("text/html", "application/xhtml+xml"):
        return True
    head = result.body[:512].lstrip().lower()
    return head.startswith((b"<!doctype html", b"<html", b"<head", b"<body"))


def plain_text(result: FetchResult) -> str | None:
    """The body as text when it is text and not an HTML page, else None. Decoded as browsers decode
    it (a BOM, the charset: page.decode_text), so a UTF-16 or Latin-1 llms.txt reads as written;
    robots.txt and JSON are UTF-8 by their specifications (body_text)."""
    if looks_html(result) or is_binary(result.body, result.content_type):
        return None
    text = decode_text(result.body, result.content_type, sniff_meta=False)[0]
    return None if "\x00" in text[:8192] else text


def robots_text(result: FetchResult) -> str | None:
    """robots.txt as crawlers read it (RFC 9309): any body that is not binary, whatever its
    Content-Type; None for a binary body, or one whose content coding could not be undone (its
    empty stand-in would read as a file without rules: everything allowed, whatever it said)."""
    binary = is_binary(result.body, "") or b"\x00" in result.body[:8192]  # by the body alone
    return None if result.body_unreadable or binary else body_text(result)


def json_body(result: FetchResult):
    """The parsed JSON body, or raises ValueError with a sentence."""
    if looks_html(result):
        raise ValueError(f"answered {mime_of(result.content_type) or 'HTML'}, not JSON (a soft 404?)")
    try:
        return json.loads(body_text(result))
    except (json.JSONDecodeError, RecursionError):
        raise ValueError("the body is not valid JSON" + (" (cut at the size cap)" if result.truncated else "")) from None


_ERROR_WORDS = re.compile(r"\b(404|not found)\b", re.I)


def _text_check(result: FetchResult, what: str, must: Callable[[str], bool] | None = None, hint: str = "",
                markdown: bool = False):
    """None for a text document, else why not. A catch-all route's answer is not one: HTML, JSON
    (`{"error": "not found"}` with a 200) or a short text saying 404; a Markdown document is served
    as Markdown or plain text."""
    text = plain_text(result)
    if text is None:
        return f"answered {mime_of(result.content_type) or 'something'} that is not a {what} (a soft 404 or binary)"
    mime = mime_of(result.content_type)
    if mime.endswith("json") or _parses_as_json(text):
        return f"answered JSON, not a {what} (a soft 404?)"
    if markdown and mime not in ("", "text/markdown", "text/x-markdown", "text/plain"):
        return f"served as {mime}, not text/markdown or text/plain"
    if not text.strip():
        return f"the {what} is empty"
    if len(text.strip()) <= 200 and _ERROR_WORDS.search(text):  # "404 page not found", "Not Found" ...
        return f"the body reads as an error page, not a {what} (a soft 404)"
    if must and not must(text):
        return f"the body does not look like a {what}{hint}"
    return None


def _parses_as_json(text: str) -> bool:
    """Whether a text body is really a JSON object or array (a plain number or word is text)."""
    stripped = text.strip()
    if not stripped.startswith(("{", "[")):
        return False
    try:
        json.loads(stripped)
    except (ValueError, RecursionError):
        return False
    return True


def error_envelope(data) -> bool:
    """A JSON object that reports an error (`error`/`errors`, or a 4xx/5xx status or code) rather
    than being the document: what a catch-all API route answers, with a 200, for every path."""
    if not isinstance(data, dict):
        return False
    if data.get("error") or data.get("errors"):
        return True
    return any(type(data.get(key)) is int and 400 <= data[key] <= 599 for key in ("status", "statusCode", "code"))


def _json_check(result: FetchResult, what: str, shape: Callable[[object], bool], hint: str):
    try:
        data = json_body(result)
    except ValueError as bad:
        return str(bad)
    if error_envelope(data) and not shape(data):
        return f"the JSON reports an error, not a {what} (a soft 404?)"
    if not shape(data):
        return f"the JSON is not a {what}: {hint}"
    return None


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _robots_check(result: FetchResult) -> str | None:
    """None for a proper robots.txt, else what is wrong with it (crawlers still read any text answer)."""
    text = robots_text(result)
    if text is None:
        return "answered a binary body, not a robots.txt"
    if text.lstrip().startswith("<") and looks_html(result):
        return "answered an HTML page, not a robots.txt (a soft 404?)"
    mime = mime_of(result.content_type)
    if mime != "text/plain":
        return f"served as {mime or 'no content type'}, not text/plain (crawlers read it all the same)"
    return None


def _is_obj(data) -> bool:
    return isinstance(data, dict)


def _is_profile(data) -> bool:
    """A commerce profile: the three protocols fix no common field, so a non-empty object that does
    not report an error."""
    return isinstance(data, dict) and bool(data) and not error_envelope(data)


def _has_contact(text: str) -> bool:
    """A `Contact:` field on some line (RFC 9116), read line by line: a multiline regex whose leading
    whitespace may cross lines rescans the rest of the file from every line start."""
    return any(key.strip().lower() == "contact" and colon
               for key, colon, _ in (line.partition(":") for line in text.splitlines()))


# A validator returns None when the body is what the path promises, else a note saying why not.
VALIDATORS: dict[str, Callable[[FetchResult], str | None]] = {
    "robotsTxt": _robots_check,
    "llmsTxt": lambda r: _text_check(r, "llms.txt", lambda t: _first_line(t).startswith("# "),
                                     " (llmstxt.org: the first line is a '# Title')"),
    "llmsFullTxt": lambda r: _text_check(r, "llms-full.txt"),
    "aiTxt": lambda r: _text_check(r, "ai.txt"),
    "securityTxt": lambda r: _text_check(r, "security.txt", _has_contact, " (RFC 9116 requires a Contact: line)"),
    "authMd": lambda r: _text_check(r, "Markdown document", markdown=True),
    "agentsMd": lambda r: _text_check(r, "Markdown document", markdown=True),
    "webBotAuth": lambda r: _json_check(r, "JWKS", lambda d: _is_obj(d) and isinstance(d.get("keys"), list) and bool(d["keys"]),
                                        "a key directory has a non-empty keys array"),
    "openidConfiguration": lambda r: _json_check(r, "OpenID configuration", lambda d: _is_obj(d) and isinstance(d.get("issuer"), str),
                                                 "it needs an issuer"),
    "oauthAuthorizationServer": lambda r: _json_check(r, "OAuth server metadata", lambda d: _is_obj(d) and isinstance(d.get("issuer"), str),
                                                      "RFC 8414 metadata needs an issuer"),
    "oauthProtectedResource": lambda r: _json_check(r, "protected-resource metadata", lambda d: _is_obj(d) and isinstance(d.get("resource"), str),
                                                    "RFC 9728 metadata needs a resource"),
    "mcpServerCard": lambda r: _json_check(r, "MCP server card", lambda d: _is_obj(d) and (
        isinstance(d.get("serverInfo"), dict) or isinstance(d.get("remotes"), list) or isinstance(d.get("transport"), dict)),
        "a card has serverInfo and transport, or remotes"),
    "agentSkills": lambda r: _json_check(r, "agent skills index", lambda d: _is_obj(d) and isinstance(d.get("skills"), list),
                                         "the index has a skills array"),
    "apiCatalog": lambda r: _json_check(r, "API catalog", lambda d: _is_obj(d) and isinstance(d.get("linkset"), list),
                                        "RFC 9727 catalogs are linksets with a linkset array"),
    "openapi": lambda r: _json_check(r, "OpenAPI document", lambda d: _is_obj(d) and bool(d.get("openapi") or d.get("swagger"))
                                     and isinstance(d.get("paths", {}), dict), "it needs an openapi version and paths"),
    "aiPlugin": lambda r: _json_check(r, "ai-plugin manifest", lambda d: _is_obj(d) and bool(d.get("name_for_model") or d.get("schema_version")),
                                      "it needs schema_version and name_for_model"),
    "agentCard": lambda r: _json_check(r, "A2A agent card", lambda d: _is_obj(d) and isinstance(d.get("name"), str) and (
        isinstance(d.get("skills"), list) or "url" in d or isinstance(d.get("supportedInterfaces"), list)),
        "a card has a name and skills or an interface url"),
    "tdmrep": lambda r: _json_check(r, "TDMRep file", lambda d: isinstance(d, list) and all(_is_obj(x) for x in d),
                                    "it is an array of {location, tdm-reservation, tdm-policy}"),
    "ucp": lambda r: _json_check(r, "commerce profile", _is_profile, "expected a JSON object with fields"),
    "acp": lambda r: _json_check(r, "commerce profile", _is_profile, "expected a JSON object with fields"),
    "ap2": lambda r: _json_check(r, "commerce profile", _is_profile, "expected a JSON object with fields"),
    "sitemapXml": lambda r: None if _sitemap_entries(r) is not None else
        "answered something that is not a sitemap (no urlset or sitemapindex)",
}

# key -> (path, byte cap)
PATHS: dict[str, tuple[str, int]] = {
    "robotsTxt": ("/robots.txt", ROBOTS_CAP),
    "sitemapXml": ("/sitemap.xml", PROBE_CAP),
    "llmsTxt": ("/llms.txt", PROBE_CAP),
    "llmsFullTxt": ("/llms-full.txt", 64 * 1024),
    "aiTxt": ("/ai.txt", PROBE_CAP),
    "securityTxt": ("/.well-known/security.txt", PROBE_CAP),
    "webBotAuth": ("/.well-known/http-message-signatures-directory", PROBE_CAP),
    "openidConfiguration": ("/.well-known/openid-configuration", PROBE_CAP),
    "oauthAuthorizationServer": ("/.well-known/oauth-authorization-server", PROBE_CAP),
    "oauthProtectedResource": ("/.well-known/oauth-protected-resource", PROBE_CAP),
    "authMd": ("/auth.md", PROBE_CAP),
    "mcpServerCard": ("/.well-known/mcp/server-card.json", PROBE_CAP),
    "agentSkills": ("/.well-known/agent-skills/index.json", PROBE_CAP),
    "apiCatalog": ("/.well-known/api-catalog", PROBE_CAP),
    "openapi": ("/openapi.json", DOCUMENT_CAP),
    "aiPlugin": ("/.well-known/ai-plugin.json", PROBE_CAP),
    "agentCard": ("/.well-known/agent-card.json", PROBE_CAP),
    "tdmrep": ("/.well-known/tdmrep.json", PROBE_CAP),
    "ucp": ("/.well-known/ucp", PROBE_CAP),
    "acp": ("/.well-known/acp.json", PROBE_CAP),
    "ap2": ("/.well-known/ap2", PROBE_CAP),
}
# Documents whose parsed JSON later passes read (agent doors, readiness keyless).
PARSED = ("openapi", "agentCard", "aiPlugin", "apiCatalog", "mcpServerCard", "tdmrep")

_LOC = re.compile(rb"<loc>", re.I)


def _sitemap_entries(result: FetchResult) -> int | None:
    if is_binary(result.body, result.content_type) or looks_html(result):
        return None
    head = result.body[:65536].lower()  # past a long leading comment or stylesheet instruction
    if b"<urlset" not in head and b"<sitemapindex" not in head:
        return None
    return len(_LOC.findall(result.body))


# --- probes -------------------------------------------------------------------------------------

def probe_result(key: str, url: str, result: FetchResult | None = None, error: str | None = None) -> dict:
    """The Probe object for one fetch outcome (API.md §2.5)."""
    if result is None:
        return {"ok": False, "url": url, "error": error or "not fetched"}
    headers = {k: v for k, v in result.headers.items() if k in SHOWN_HEADERS}
    if not 200 <= result.status < 300:
        return {"ok": False, "status": result.status, "url": url, "headers": headers}
    note = VALIDATORS[key](result) if key in VALIDATORS else None
    probe = {"ok": note is None, "status": result.status, "url": url, "contentType": result.content_type,
             "headers": headers, "truncated": result.truncated}
    text = robots_text(result) if key == "robotsTxt" else plain_text(result)
    if text is not None or mime_of(result.content_type).endswith("json"):
        probe["body"] = (text if text is not None else body_text(result))[:PROBE_BODY_CHARS]
    if note:
        probe["note"] = note
    if key in ("sitemapXml", "sitemapDeclared") and note is None:
        probe["entries"] = _sitemap_entries(result)
    return probe


@dataclass
class Fetched:
    """A probe plus what later passes need from it (the full text or parsed JSON)."""
    probe: dict
    text: str | None = None
    data: object = None
    status: int | None = None
    unreachable: bool = False


def run_probe(sub: Subrequests, key: str, url: str, cap: int = PROBE_CAP) -> Fetched:
    try:
        result = sub.fetch(url, cap_bytes=cap)
    except (FetchFailed, FetchRefused, CapReached) as failed:
        return Fetched(probe_result(key, url, error=str(failed)), unreachable=True)
    probe = probe_result(key, url, result)
    fetched = Fetched(probe, status=result.status)
    if key == "robotsTxt":  # crawlers follow a robots.txt that is not served as one, too
        fetched.text = robots_text(result) if 200 <= result.status < 300 else None
    elif probe["ok"]:
        if key in PARSED:
            fetched.data = json_body(result)
        else:
            fetched.text = plain_text(result)
    elif key in ("agentCard", "openapi", "aiPlugin", "mcpServerCard") and 200 <= result.status < 300:
        fetched.data = ValueError(probe.get("note", "malformed"))
    return fetched


def agents_md(sub: Subrequests, origin: str) -> dict:
    """/agents.md, falling back to /AGENTS.md (the name the convention started with)."""
    unknown = False
    for variant in ("/agents.md", "/AGENTS.md"):
        fetched = run_probe(sub, "agentsMd", origin + variant)
        probe = fetched.probe
        if probe["ok"]:
            return {"ok": True, "present": True, "variant": variant, "status": probe["status"],
                    "body": probe.get("body", ""), "truncated": probe.get("truncated", False)}
        unknown = unknown or fetched.unreachable or (probe.get("status") or 0) >= 500
    out = {"ok": True, "present": False, "unknown": unknown}
    if probe.get("note"):
        out["note"] = probe["note"]
    if probe.get("status"):
        out["status"] = probe["status"]
    if probe.get("error"):
        out["error"] = probe["error"]
    return out


def declared_sitemaps(robots: str | None, origin: str) -> list[str]:
    """The first five `Sitemap:` URLs of robots.txt, resolved against the origin."""
    found = []
    for line in robots_lines(robots or ""):
        field = robots_field(line)
        if field and field[0].lower() == "sitemap" and field[1]:
            found.append(field[1].split()[0])
            if len(found) == 5:
                break
    return [url for url in (join_url(origin + "/", found_url) for found_url in found) if url]


def sitemap_declared(sub: Subrequests, robots: str | None, origin: str, sitemap: dict | None) -> dict | None:
    """The sitemap robots.txt declares: the /sitemap.xml probe when it names that (however spelt),
    else probed only when /sitemap.xml (`sitemap`, its probe) is not a valid sitemap itself; when
    not probed, `ok` is null and `skipped` true, since nothing is known of it."""
    declared = declared_sitemaps(robots, origin)
    if not declared:
        return None
    try:
        target = parse_target(declared[0], sub.fetcher.policy)
    except FetchRefused as refused:
        return {"ok": False, "url": declared[0][:300], "error": str(refused)}
    if sitemap and target.url == parse_target(origin + "/sitemap.xml", sub.fetcher.policy).url:
        return dict(sitemap)
    if sitemap and sitemap["ok"]:
        return {"ok": None, "url": declared[0][:300], "skipped": True,
                "note": "not fetched: /sitemap.xml is already a valid sitemap"}
    return run_probe(sub, "sitemapDeclared", declared[0], PROBE_CAP).probe


def feeds(rel_links: list[dict]) -> list[dict]:
    """The alternate links to RSS, Atom and JSON feeds. Plain application/json is a feed only when its
    title or URL says so (JSON Feed 1.0's type): WordPress links its REST API so from every page."""
    def is_feed(link: dict) -> bool:
        kind = (link.get("type") or "").split(";")[0].strip().lower()
        if kind == "application/json":
            return "feed" in f"{link.get('title', '')} {link.get('href', '')}".lower()
        return kind in ("application/rss+xml", "application/atom+xml", "application/feed+json")

    return [link for link in rel_links if "alternate" in link.get("rel", "").split() and is_feed(link)]


# --- DNS ----------------------------------------------------------------------------------------

@dataclass
class DnsAnswer:
    name: str
    status: int                    # rcode: 0 NOERROR, 2 SERVFAIL, 3 NXDOMAIN ...
    authenticated: bool            # the AD flag
    records: list = field(default_factory=list)   # rdata objects


class DnsClient:
    """DNS over dnspython. `nameservers`/`port` point it at a given server (tests run one on loopback)."""

    def __init__(self, nameservers: list[str] | None = None, port: int = 53):
        self.nameservers = nameservers
        self.port = port

    def query(self, name: str, rdtype: str, timeout: float) -> DnsAnswer:
        """One query; raises DnsError with a sentence on timeout or no usable server."""
        import dns.exception
        import dns.flags
        import dns.rcode
        import dns.resolver

        resolver = dns.resolver.Resolver(configure=self.nameservers is None)
        if self.nameservers is not None:
            resolver.nameservers = list(self.nameservers)
            resolver.port = self.port
        resolver.use_edns(0, dns.flags.DO, 1232)
        resolver.flags = dns.flags.RD | dns.flags.AD
        try:
            answer = resolver.resolve(name, rdtype, lifetime=max(0.1, timeout), raise_on_no_answer=False)
        except dns.resolver.NXDOMAIN:
            return DnsAnswer(name, 3, False)
        except dns.resolver.NoNameservers:
            raise DnsError(f"no name server answered for {name} (SERVFAIL or refused)") from None
        except dns.exception.Timeout:
            raise DnsError(f"the DNS lookup of {name} timed out") from None
        except dns.exception.DNSException as exc:
            raise DnsError(f"the DNS lookup of {name} failed ({type(exc).__name__})") from None
        response = answer.response
        return DnsAnswer(name, response.rcode(), bool(response.flags & dns.flags.AD), list(answer.rrset or []))


class DnsError(Exception):
    pass


def dns_aid(sub: Subrequests, dns: DnsClient, host: str) -> dict:
    """DNS-AID: SVCB records at _index, _a2a and _mcp under _agents.<host>."""
    names = [f"{prefix}._agents.{host}" for prefix in DNS_AID_PREFIXES]
    records, errors = [], []
    end = time.monotonic() + min(DNS_TIMEOUT_S, sub.remaining())
    for name in names:
        if time.monotonic() >= end:
            errors.append(f"the DNS lookup of {name} was not made: the DNS time budget was spent")
            continue
        try:
            sub.take()
            answer = dns.query(name, "SVCB", max(0.1, end - time.monotonic()))
        except (DnsError, CapReached) as failed:
            errors.append(str(failed))
            continue
        records.append({"name": name, "status": answer.status, "dnssecValidated": answer.authenticated,
                        "answers": len(answer.records)})
    if not records:
        return {"ok": False, "found": False, "error": errors[0] if errors else "no DNS answer", "names": names}
    out = {"ok": True, "found": any(r["answers"] for r in records), "names": names, "records": records,
           "dnssecValidated": all(r["dnssecValidated"] for r in records)}
    if errors:
        out["error"] = "; ".join(errors)
    return out


def ech(sub: Subrequests, dns: DnsClient, host: str) -> dict:
    """ECH: an HTTPS record for the host with an `ech` SvcParam (key 5)."""
    try:
        sub.take()
        answer = dns.query(host, "HTTPS", max(0.1, min(DNS_TIMEOUT_S, sub.remaining())))
    except (DnsError, CapReached) as failed:
        return {"observed": False, "recordPresent": False, "parsed": False, "error": str(failed)}
    present = bool(answer.records)
    observed = any(5 in getattr(record, "params", {}) for record in answer.records)
    return {"observed": observed, "recordPresent": present, "parsed": present,
            "dnssecValidated": answer.authenticated}


def dictionary(headers: dict) -> dict:
    """Compression dictionary transport, read from the page's own response headers."""
    offer = headers.get("use-as-dictionary")
    encoding = (headers.get("content-encoding") or "").strip().lower() or None
    return {"observed": bool(offer) or encoding in ("dcb", "dcz"), "offer": offer,
            "negotiates": encoding in ("dcb", "dcz"), "activeEncoding": encoding}
