"""The HTTP conventions every route shares, applied once so a route gets them by being declared.

`Site.route(rule, handler, ...)` wraps a handler with: path and query sanity, OPTIONS (CORS
preflight), 405 with `Allow`, `API-Version`, the caller's rate-limit policy (429 with
`Retry-After`, `RateLimit-Policy`, `RateLimit`), JSON errors (never a traceback), the `Link`
header to the service description, CORS and a per-route `Cache-Control`. Handlers return a dict
(JSON) or a `Reply`, or raise `ApiError`. Every 404 answers in the format asked for, with a `hint`
and the closest real pages (`suggestions`); unknown paths go to a fallback that raises it, and a
path that may not exist (the fallback, `/images/...`) is a 404 whatever the method, OPTIONS too.
"""
from __future__ import annotations

import functools
import hashlib
import json
import logging
import re
import sqlite3
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable
from urllib.parse import parse_qsl, quote

import bottle

from siteapi import db, openapi
from siteapi.ratelimit import Decision, RateLimiter, SlotsFull, WorkSlots, address_key

log = logging.getLogger("siteapi")

JSON_CACHE = "public, max-age=300, s-maxage=600"
NO_STORE = "no-store"
# REFERENCE: the JSON endpoints' errors (a 400 for a missing q is the same a minute later); over a
# limit (429) and faults on our side (5xx) are never stored.
ERROR_CACHE = "public, max-age=30, must-revalidate"
PAGE_CACHE = "public, max-age=0, s-maxage=86400, stale-while-revalidate=604800"
DOC_CACHE = "public, max-age=3600"
MOVED_CACHE = "public, max-age=86400"  # a trailing slash's 308
ANY_METHOD = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
SUPPORTED_API_VERSIONS = ["1"]
# A 5 KB /ask question with every byte percent-encoded (15 KB) still fits, with its other parameters.
MAX_QUERY_BYTES = 16 * 1024
MAX_FIELDS = 200
# Well above what the endpoints take (/ask reads 64 KB; an MCP batch of sixteen tool calls naming
# 2,048-character URLs is 35 KB). The edge holds a body until it is whole (Caddyfile), so a larger
# cap is memory an attacker could make it hold.
MAX_BODY_BYTES = 256 * 1024
DOCS_PATH = "/developers"
NOT_FOUND_HINT = "See /sitemap.xml for every page and /openapi.json for every API endpoint."
_BAD_PATH = re.compile(r"[\x00-\x1f\x7f]|(^|/)\.\.(/|$)")
# Response headers a cross-origin script may read beyond the CORS-safelisted ones: each one a route
# sends (ETag: server cards and images revalidate by it; Allow: a 405 names the methods).
EXPOSED = ("Link, RateLimit, RateLimit-Policy, Retry-After, ETag, Allow, x-markdown-tokens, Content-Type, "
           "Content-Disposition, Content-Range, Accept-Ranges, Signature, Signature-Input")
# The environ key of the response's convention headers (CORS, Link, rate limits, Cache-Control):
# kept in wire form and appended by Site.wsgi as the response starts, because Bottle's per-header
# normalising cost a fifth of /search.json's throughput (bench_search.py). Route-specific headers
# (Reply.headers) still go through Bottle.
CORS = [("Access-Control-Allow-Origin", "*"), ("Access-Control-Expose-Headers", EXPOSED)]


def preflight_headers(methods: Iterable[str]) -> list[tuple[str, str]]:
    """An OPTIONS answer's headers: the methods a path answers, any request header, for a day."""
    allowed = ", ".join(methods)
    return [("Allow", allowed), ("Access-Control-Allow-Methods", allowed), ("Access-Control-Allow-Headers", "*"),
            ("Access-Control-Max-Age", "86400")]


CONVENTION_HEADERS = "siteapi.convention_headers"
LENGTH_UNKNOWN = "siteapi.length_unknown"  # a HEAD whose GET would send a body of a length not known here
# The environ key naming a policy whose unit the caller has spent on this request already: an MCP
# tool's in-process call of its endpoint, paid for by the POST /mcp that asked for it.
PAID_POLICY = "siteapi.paid_policy"
RATE_HEADERS = ("RateLimit-Policy", "RateLimit")


class ApiError(Exception):
    """An error answered as JSON: `error` sentence, HTTP status, optional `code` and extra fields.
    `limit`: the refusing limit of a 429 other than the route's own policy (its RateLimit headers,
    and the body's `limit`, its name)."""

    def __init__(self, status: int, error: str, code: str | None = None, headers: dict | None = None,
                 limit: Decision | None = None, **extra):
        super().__init__(error)
        self.status = status
        self.body = {"error": error, **({"code": code} if code else {}), "status": status, **extra,
                     **({"limit": limit.policy.name} if limit else {})}
        self.headers = headers or {}
        self.limit = limit


def version_refusal(version: str | None) -> ApiError | None:
    """The 400 for an API-Version field the site does not serve; None for 1, no field or an empty
    one (no version asked for, as the 400 says "leave the header out")."""
    if not (version and version.strip()) or version.strip() in SUPPORTED_API_VERSIONS:
        return None
    return ApiError(400, f"API-Version {version.strip()[:20]!r} is not served; send API-Version: 1 or leave the "
                         "header out.", code="unsupported_api_version", supported=SUPPORTED_API_VERSIONS)


def method_refusal(path: str, method: str, allowed: list[str]) -> ApiError:
    """The 405 for a method the path does not answer, listing those it does."""
    return ApiError(405, f"{path} answers {', '.join(allowed)}, not {method}.", code="method_not_allowed",
                    headers={"Allow": ", ".join(allowed)}, allow=list(allowed))


def rate_refusal(decision: Decision) -> ApiError:
    """The 429 of a caller past a budget."""
    return ApiError(429, decision.refusal(), code="rate_limited", retry_after=decision.retry_after)


def slots_refusal(full: SlotsFull, slots: WorkSlots) -> ApiError:
    """The 429 of a caller holding its share of `slots`, or the 503 of every slot busy."""
    if full.mine:
        return ApiError(429, str(full), code="rate_limited", retry_after=slots.retry_after, limit=slots.refusal())
    return ApiError(503, str(full), code="busy", retry_after=slots.retry_after,
                    headers={"Retry-After": str(slots.retry_after)})


@dataclass
class Reply:
    """A response other than plain 200 JSON: any status, content type, headers, body or stream."""
    body: Any
    status: int = 200
    content_type: str = "application/json"
    headers: dict = field(default_factory=dict)
    cache: str | None = None


# One way to match each digit: `0*` followed by `[0-9]+` tried every split of a run of zeros before
# a non-digit, 3 s of a held GIL for 16 KB of them.
_INTEGER = re.compile(r"([+-]?)([0-9]+)", re.ASCII)


def clamp_int(raw, default: int, low: int, high: int) -> int:
    """Clamp, don't reject: a non-number (anything but ASCII digits with an optional sign) falls
    back to the default; a number out of range, however many digits it has, is clamped."""
    match = _INTEGER.fullmatch(str(raw).strip()) if raw is not None else None
    if match is None:
        return default
    sign, digits = match.groups()
    digits = digits.lstrip("0") or "0"
    if len(digits) > 18:  # past every bound, and int() refuses more than 4,300 digits
        return low if sign == "-" else high
    return max(low, min(high, int(sign + digits)))


def json_bytes(value) -> bytes:
    """UTF-8 JSON; a lone surrogate a client sent as a \\u escape and that comes back in an error or
    an echo becomes "?" instead of failing the response."""
    return json.dumps(value, ensure_ascii=False).encode("utf-8", "replace")


def cached_json(conn, key: tuple, compute: Callable[[], dict]) -> Reply:
    """A JSON reply whose encoded body and ETag are kept per thread until site.db changes
    (db.versioned_cache): a repeated query, or its revalidation, costs a dictionary lookup. Errors
    raised by `compute` are not cached."""
    cache = db.versioned_cache(conn)
    if key not in cache:
        body = json_bytes(compute())
        cache[key] = (body, etag_of(body))
    body, etag = cache[key]
    return conditional(Reply(body), etag)


# Bytes that are not UTF-8, as parse_qsl's surrogateescape keeps them.
_UNDECODED = re.compile("[\udc80-\udcff]")


@functools.lru_cache(maxsize=512)  # repeated query strings are the common case; parsing is a tenth of a request
def _query_pairs(query_string: str) -> tuple[tuple[tuple[str, str], ...], tuple[str, ...]]:
    """(name, value) pairs that are UTF-8 once their %-escapes are decoded, and the names of those
    that are not (shown with U+FFFD for the bytes that are not)."""
    try:
        pairs = parse_qsl(query_string, keep_blank_values=True, errors="surrogateescape", max_num_fields=MAX_FIELDS)
    except ValueError:
        raise ApiError(400, f"The query string has more than {MAX_FIELDS} parameters; send only the ones "
                       "the endpoint reads (see /openapi.json).", code="too_many_parameters") from None
    decoded, undecoded = [], []
    for key, value in pairs:
        if _UNDECODED.search(key) or _UNDECODED.search(value):
            undecoded.append(key.encode("utf-8", "surrogateescape").decode("utf-8", "replace"))
        else:
            decoded.append((key, value))
    return tuple(decoded), tuple(undecoded)


def params() -> dict[str, str]:
    """The query string as text, first value of each name. A parameter the route reads whose name
    or value is not UTF-8 is a 400; one it does not read (a tracker's, say) is left out, as any
    parameter the route does not read is ignored."""
    pairs, undecoded = _query_pairs(bottle.request.environ.get("QUERY_STRING", ""))
    if undecoded:
        read = openapi.query_names(bottle.request.route.rule)
        for name in undecoded:
            if name in read:
                raise ApiError(400, f"Parameter {name} is not UTF-8 once its %-escapes are decoded; percent-"
                               "encode the UTF-8 bytes of its text (é is %C3%A9).", code="invalid_parameter",
                               parameter=name)
    out: dict[str, str] = {}
    for key, value in pairs:
        out.setdefault(key, value)
    return out


def etag_matches(etag: str) -> bool:
    """Whether the request's If-None-Match names `etag` (weak comparison, as RFC 9110 asks for GET)."""
    if "HTTP_IF_NONE_MATCH" not in bottle.request.environ:  # most requests: nothing to parse
        return False
    sent = [t.strip().removeprefix("W/") for t in header("If-None-Match").split(",")]
    return etag in sent or "*" in sent


def etag_of(body: bytes) -> str:
    """A weak ETag: the edge compresses these bodies and passes it on unchanged, and a strong one
    would then name two different byte sequences."""
    return 'W/"' + hashlib.sha256(body).hexdigest()[:32] + '"'


def conditional(reply: Reply, etag: str) -> Reply:
    """`reply` (new, so changed in place: a copy is a tenth of a cached answer's cost) with `etag`,
    or, when the request's If-None-Match names it, made the 304 with the same headers (Vary,
    Cache-Control: what a cache refreshes its stored copy from)."""
    reply.headers["ETag"] = etag
    if etag_matches(etag.removeprefix("W/")):
        reply.body, reply.status = b"", 304
    return reply


def with_etag(reply: Reply) -> Reply:
    """`reply` with an ETag of its body, answered 304 when If-None-Match names it."""
    body = json_bytes(reply.body) if isinstance(reply.body, (dict, list)) else reply.body
    body = body.encode("utf-8", "replace") if isinstance(body, str) else body
    return conditional(replace(reply, body=body, headers=dict(reply.headers)), etag_of(body))


def header(name: str, default: str | None = "") -> str | None:
    """A request header, UTF-8 decoded when it is valid UTF-8 and as Latin-1 otherwise (Bottle's own
    accessor raises on such bytes, which made a hostile Accept header a 500)."""
    value = bottle.request.environ.get("HTTP_" + name.upper().replace("-", "_"))
    if value is None:
        return default
    try:
        return value.encode("latin-1").decode("utf-8")
    except UnicodeError:
        return value


def report_limits(headers: list[tuple[str, str]]) -> None:
    """Adds to this response's RateLimit-Policy and RateLimit the policies that `headers` (another
    answer's) name, where work done for this request spent them (an MCP tool's endpoint call, a
    later tool call of a batch); a policy named twice keeps its latest state."""
    convention = bottle.request.environ[CONVENTION_HEADERS]
    for field_name in RATE_HEADERS:
        members = {}
        for name, value in [*convention, *headers]:
            if name == field_name:
                members.update((m.split(";", 1)[0], m) for m in (m.strip() for m in value.split(",")))
        if members:
            convention[:] = [(n, v) for n, v in convention if n != field_name]
            convention.append((field_name, ", ".join(members.values())))


def caller() -> str:
    """Who a rate limit counts: the client address as waitress sees it (X-Forwarded-For only from a
    trusted proxy), by `address_key`."""
    return address_key(bottle.request.environ.get("REMOTE_ADDR") or "0.0.0.0")


def body(limit: int = MAX_BODY_BYTES) -> bytes:
    """The request body, read up to `limit` + 1 bytes so an oversize body is detectable. A body in a
    content coding (gzip, br) is a 415 naming the one taken (RFC 9110 15.5.16); it had been read as
    its compressed bytes and refused as text that is not UTF-8."""
    coding = header("Content-Encoding").strip().lower()
    if coding not in ("", "identity"):
        raise ApiError(415, f"Request bodies are read as they are sent, not decoded from Content-Encoding "
                       f"{coding[:40]!r}; send the JSON without a content coding.",
                       code="unsupported_content_encoding", headers={"Accept-Encoding": "identity"})
    return bottle.request.environ["wsgi.input"].read(limit + 1) if bottle.request.content_length else b""


def accept_q(accept: str) -> dict[str, float]:
    """Media types named in an Accept header with their q-values; a malformed q-value counts as 0."""
    out: dict[str, float] = {}
    for part in (accept or "").split(",")[:50]:
        pieces = [p.strip() for p in part.split(";")]
        media = pieces[0].lower()
        if "/" not in media:
            continue
        q = 1.0
        for p in pieces[1:]:
            if p.lower().startswith("q="):
                try:
                    q = float(p[2:])
                except ValueError:
                    q = 0.0
                if not 0.0 <= q <= 1.0:  # RFC 9110 qvalues run 0..1; nan, inf and 2 are malformed
                    q = 0.0
        out[media] = max(q, out.get(media, 0.0))
    return out


def wants_markdown(accept: str) -> bool:
    """Markdown only when named explicitly with q>0 and beating text/html and xhtml (no wildcards)."""
    q = accept_q(accept)
    md = q.get("text/markdown", 0.0)
    return md > 0 and md > max(q.get("text/html", 0.0), q.get("application/xhtml+xml", 0.0))


def error_format(path: str, accept: str) -> str:
    """'json', 'markdown' or 'html' for an error page, by Accept and by what the path asks for: an
    API-like path (`.json`, /api/, /v1/; /images/ and `.pdf`, whose clients are programs, <img> tags
    and PDF viewers) answers JSON and a `.md` path (a Markdown twin, a SKILL.md) Markdown, unless
    HTML is asked for."""
    q = accept_q(accept)
    html_q = max(q.get("text/html", 0.0), q.get("application/xhtml+xml", 0.0))
    json_q = q.get("application/json", 0.0)
    if wants_markdown(accept) and q["text/markdown"] >= json_q:
        return "markdown"
    if json_q > html_q:
        return "json"
    if html_q == 0:
        if path.endswith(".md"):
            return "markdown"
        if path.endswith((".json", ".pdf")) or path.startswith(("/api/", "/v1/", "/images/")) or path in ("/api", "/v1"):
            return "json"
    if "text/html" not in q:  # the most specific range that covers it decides (RFC 9110 12.5.1)
        html_q = max(html_q, q.get("text/*", q.get("*/*", 0.0)))
    return "html" if html_q > 0 or not accept.strip() else "json"


@dataclass(frozen=True)
class Route:
    """A declared route and how it is served (`Site.route` makes one from app.py's keywords).

    `methods`: those it answers (HEAD with GET, OPTIONS unless declared without). `may_not_exist`:
    the rule is a template whose handler raises a 404 for a path that names nothing; it is then
    asked first for OPTIONS and unserved methods. `error_fields`: what every error body of the
    route carries, its 405 and 429 included (`ok: false`, `tracks: []`). `slots`: the handler runs
    holding one (a 429 when the caller holds its share, a 503 when the process is at its total).
    `error_body`: turns every error body of the route into the JSON it sends instead, status and
    headers kept (/mcp: a JSON-RPC error response). `error_cache`: the Cache-Control of its 4xx
    answers but 429 and an unserved API-Version's 400 (ERROR_CACHE, or no-store)."""
    rule: str
    methods: tuple[str, ...]
    policy: str = "read"
    cache: str = JSON_CACHE
    may_not_exist: bool = False
    error_fields: dict = field(default_factory=dict)
    slots: WorkSlots | None = None
    error_body: Callable[[dict], Any] | None = None
    error_cache: str = NO_STORE


class Site:
    """The Bottle app plus the shared conventions; app.py declares every route on it."""

    def __init__(self, settings, limiter: RateLimiter, render_error: Callable[[str, dict, str], tuple[str, str, dict]],
                 suggest: Callable[[str, str], list[str]]):
        self.settings = settings
        self.limiter = limiter
        self.render_error = render_error  # (format, error body, path) -> (content type, text, headers)
        self.suggest = suggest  # (path, query string) -> the closest real pages, for every 404
        self.app = bottle.Bottle()
        self.app.config["catchall"] = False
        link_header = ", ".join([
            '</openapi.json>; rel="service-desc"; type="application/openapi+json"',
            '</developers>; rel="service-doc"; type="text/html"',
            '</.well-known/api-catalog>; rel="api-catalog"; type="application/linkset+json"',
            '</sitemap.xml>; rel="sitemap"; type="application/xml"',
            '</llms.txt>; rel="describedby"; type="text/plain"',
            '</mcp/server-card>; rel="service-meta"; type="application/mcp-server-card+json"',
            '</.well-known/mcp/server-card.json>; rel="service-meta"; type="application/json"',
        ])
        self.static_headers = [("Link", link_header), *CORS, ("X-Content-Type-Options", "nosniff")]
        self.routes: dict[str, Route] = {}  # rule -> Route, in the order declared

    # -- declaring routes ------------------------------------------------------------------------
    def route(self, rule: str, handler: Callable, methods: Iterable[str] = ("GET",), policy: str = "read",
              cache: str = JSON_CACHE, options: bool = True, may_not_exist: bool = False,
              error_fields: dict | None = None, slots: WorkSlots | None = None,
              error_body: Callable[[dict], Any] | None = None, error_cache: str = NO_STORE) -> None:
        """Serve `rule` with `handler` (the keywords are the Route's fields; `options`: whether it
        answers OPTIONS)."""
        if rule in self.routes:  # Bottle would route the first, the error shapes follow the second
            raise ValueError(f"{rule} is declared twice; declare each route once.")
        allowed = list(dict.fromkeys(m.upper() for m in methods))
        if "GET" in allowed and "HEAD" not in allowed:
            allowed.insert(allowed.index("GET") + 1, "HEAD")
        if options and "OPTIONS" not in allowed:
            allowed.append("OPTIONS")
        route = self.routes[rule] = Route(rule, tuple(allowed), policy, cache, may_not_exist, error_fields or {},
                                          slots, error_body, error_cache)

        def endpoint(**url_args):
            return self.serve(handler, url_args, route)

        self.app.route(rule, method="ANY", callback=endpoint)

    def fallback(self, handler: Callable[[str], Any]) -> None:
        """The last route: `handler(path)` serves content pages or raises ApiError(404). A path that
        only adds a trailing '/' to a page or an endpoint (/about/, /mcp/) is a 308 to it, whatever
        the method: a 308 keeps a POST's body, and MCP clients follow one within the origin."""
        moved = Route("/<path:path>", ANY_METHOD, cache=MOVED_CACHE, may_not_exist=True)
        page = Route("/<path:path>", ("GET", "HEAD", "OPTIONS"), cache=PAGE_CACHE, may_not_exist=True)

        def endpoint(path=""):
            asked = "/" + path
            if asked != "/" and asked.endswith("/"):
                return self.serve(lambda: self._moved(asked, handler), {}, moved)
            return self.serve(lambda: handler(asked), {}, page)

        self.app.route("/<path:path>", method="ANY", callback=endpoint)
        self.app.route("/", method="ANY", callback=endpoint)

    def _moved(self, asked: str, handler: Callable[[str], Any]) -> Reply:
        """The 308 from `asked` to itself without its trailing slashes, or the 404 of `asked` when
        that names nothing either."""
        target = asked.rstrip("/") or "/"
        if not self.routed(target):
            try:
                handler(target)
            except ApiError as exc:
                if exc.status == 404:
                    handler(asked)  # raises the 404 of what was asked, with its suggestions
                raise
        location = quote(target, safe="/:@!$&'()*+,;=~")  # Bottle has decoded the path as UTF-8
        query = bottle.request.query_string
        return Reply(b"", status=308, content_type="text/plain",
                     headers={"Location": f"{location}?{query}" if query else location})

    def routed(self, path: str) -> bool:
        """Whether a declared route answers `path`, rather than the fallback that serves content pages."""
        route, _ = self.app.match({"PATH_INFO": path, "REQUEST_METHOD": "GET"})
        return route.rule in self.routes

    def wsgi(self, environ, start_response):
        """Sanity checks that come before routing, then Bottle."""
        path = environ.get("PATH_INFO", "")
        if not path.startswith("/") or _BAD_PATH.search(path):
            return self._early(environ, start_response, 400, "The path does not start with '/' or contains "
                               "'..' segments or control characters; send a plain path such as /search.json.", "bad_path")
        try:  # WSGI hands the decoded path over as Latin-1; Bottle would drop bytes that are not UTF-8
            path.encode("latin-1").decode("utf-8")
        except UnicodeError:
            return self._early(environ, start_response, 400, "The path is not UTF-8 once its %-escapes are decoded; "
                               "percent-encode the path's UTF-8 bytes.", "bad_path")
        if len(environ.get("QUERY_STRING", "")) > MAX_QUERY_BYTES:
            return self._early(environ, start_response, 414, f"The query string is longer than {MAX_QUERY_BYTES} "
                               "bytes; send shorter parameters.", "uri_too_long", self._route_for(path))
        convention_headers = environ[CONVENTION_HEADERS] = list(self.static_headers)

        def start(status, headers, exc_info=None):
            if environ.get(LENGTH_UNKNOWN):  # Bottle counts the empty body it was given as the length
                headers = [(name, value) for name, value in headers if name.lower() != "content-length"]
            return start_response(status, headers + convention_headers, exc_info)

        return self.app(environ, start)

    # -- serving ---------------------------------------------------------------------------------
    def serve(self, handler: Callable, url_args: dict, route: Route):
        request, response = bottle.request, bottle.response
        method = request.method.upper()
        unserved_version = version_refusal(header("API-Version", None))
        try:
            if route.may_not_exist and (method == "OPTIONS" or method not in route.methods or unserved_version):
                handler(**url_args)  # raises the 404 of a path that names nothing; a real one goes on to its 204, 405 or 400
            if method == "OPTIONS" and "OPTIONS" in route.methods:
                response.status = 204
                request.environ[CONVENTION_HEADERS] += preflight_headers(route.methods)
                return b""
            if method not in route.methods:
                raise method_refusal(request.path, method, route.methods)
            if unserved_version:
                raise unserved_version
            if request.environ.get(PAID_POLICY) != route.policy:
                decision = self.limiter.hit(route.policy, caller())
                request.environ[CONVENTION_HEADERS] += decision.headers()
                if not decision.allowed:
                    raise rate_refusal(decision)
            if route.slots is None:
                result = handler(**url_args)
            else:
                try:
                    with route.slots.slot(caller()):
                        result = handler(**url_args)
                except SlotsFull as full:
                    raise slots_refusal(full, route.slots) from None
        except ApiError as exc:
            if exc.limit is not None:
                self._over_limit(exc.limit)
            # Only an error the URL alone decides may be kept for everyone: a 429 is the caller's, an
            # unserved API-Version the request header's (which no Vary names).
            cacheable = 400 <= exc.status < 500 and exc.status != 429 and exc.body.get("code") != "unsupported_api_version"
            return self._error(exc, route, route.error_cache if cacheable else NO_STORE)
        except sqlite3.Error as exc:  # site.db missing, emptied, damaged or unreadable until the jobs rebuild it
            log.error("On %s %s: %s", method, request.path, db.storage_problem(self.settings.db_path, exc))
            return self._error(ApiError(503, "The site's database cannot be read right now; try again in a minute.",
                                        code="storage_unavailable", headers={"Retry-After": "60"}), route)
        except Exception:
            incident = uuid.uuid4().hex[:12]
            log.exception("unhandled error %s on %s %s", incident, method, request.path)
            return self._error(ApiError(500, f"Something broke on our side while answering this request "
                                        f"(incident {incident}); try again later.", code="internal_error"), route)
        return self._reply(result, route.cache)

    @staticmethod
    def _over_limit(limit: Decision) -> None:
        """RateLimit names the refusing limit (nothing remaining) and RateLimit-Policy lists it after
        the route's own policy, whose unit the request has spent (API.md §8)."""
        convention = bottle.request.environ[CONVENTION_HEADERS]
        refusing = dict(limit.headers())
        policies = [value for name, value in convention if name == "RateLimit-Policy"]
        convention[:] = [(name, value) for name, value in convention if name not in refusing]
        convention += [("RateLimit-Policy", ", ".join(policies + [refusing["RateLimit-Policy"]])),
                       ("RateLimit", refusing["RateLimit"]), ("Retry-After", refusing["Retry-After"])]

    def _reply(self, result, cache):
        response = bottle.response
        reply = result if isinstance(result, Reply) else Reply(result)
        if reply.status != 200:  # Bottle starts every response at 200
            response.status = reply.status
        self._send_headers({"Cache-Control": reply.cache or cache, **reply.headers})
        response.content_type = reply.content_type
        if isinstance(reply.body, (dict, list)):
            return json_bytes(reply.body)
        if isinstance(reply.body, str):
            return reply.body.encode("utf-8", "replace")
        if not isinstance(reply.body, bytes) and bottle.request.environ["REQUEST_METHOD"] == "HEAD":
            bottle.request.environ[LENGTH_UNKNOWN] = True  # a stream's length, or one only a GET would know
        return reply.body  # bytes or an iterator (event streams)

    @staticmethod
    def _send_headers(headers: dict) -> None:
        """Cache-Control and ETag join the convention headers (Bottle's header handling would cost
        the cached JSON answers a sixth of their time), and a route's Link goes first in their Link
        (one field: a reader that takes the first Link field sees all of them); the rest go through Bottle."""
        convention = bottle.request.environ[CONVENTION_HEADERS]
        convention.append(("Cache-Control", headers.pop("Cache-Control")))
        if "ETag" in headers:
            convention.append(("ETag", headers.pop("ETag")))
        link = headers.pop("Link", None)
        if link:
            convention[:] = [(name, f"{link}, {value}" if name == "Link" else value) for name, value in convention]
        for name, value in headers.items():
            bottle.response.set_header(name, value)

    def _error(self, exc: ApiError, route: Route, cache: str = NO_STORE):
        request, response = bottle.request, bottle.response
        body = {**route.error_fields, **exc.body}
        if exc.status == 404:
            body = {"ok": False, **body}
            body.setdefault("hint", NOT_FOUND_HINT)
            body.setdefault("suggestions", self.suggest(request.path, request.query_string))
        body.setdefault("docs", self.settings.url(DOCS_PATH))
        response.status = exc.status
        self._send_headers({"Cache-Control": cache, **exc.headers})
        if route.error_body is not None:
            response.content_type = "application/json"
            return json_bytes(route.error_body(body))
        fmt = "json"
        if exc.status == 404:  # a 404's format follows Accept
            response.set_header("Vary", "Accept")
            fmt = error_format(request.path, header("Accept"))
        if fmt == "json":
            response.content_type = "application/json"
            return json_bytes(body)
        content_type, text, extra = self.render_error(fmt, body, request.path)
        response.content_type = content_type
        for name, value in extra.items():
            response.set_header(name, value)
        return text.encode("utf-8", "replace")

    def _route_for(self, path: str) -> Route | None:
        """The declared route that would answer `path` (None: the fallback)."""
        try:
            route, _ = self.app.match({"PATH_INFO": path, "REQUEST_METHOD": "GET"})
        except bottle.HTTPError:
            return None
        return self.routes.get(route.rule)

    def _early(self, environ, start_response, status, error, code, route: Route | None = None):
        """An error answered before routing, in the route's shape where one is known."""
        body = {**(route.error_fields if route else {}), "error": error, "code": code, "status": status,
                "docs": self.settings.url(DOCS_PATH)}
        if route is not None and route.error_body is not None:
            bottle.request.bind(environ)  # the shape may read the request (/mcp: the message's id)
            body = route.error_body(body)
        body = json_bytes(body)
        start_response(f"{status} {bottle.HTTP_CODES.get(status, '')}", [
            ("Content-Type", "application/json"), ("Content-Length", str(len(body))),
            ("Cache-Control", NO_STORE), *self.static_headers])
        return [] if environ.get("REQUEST_METHOD") == "HEAD" else [body]

