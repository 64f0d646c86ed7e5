"""A loopback web of fixture sites for the full lens scan, one ThreadingHTTPServer dispatching by Host.

Sites: ready.test (every agent door: expect level 5), blog.test (content only), spa.test (200 HTML
for every path), blocked.test (robots.txt blocks AI crawlers and AI user agents get a challenge),
paid.test (402 pay-per-crawl + x402), robots503.test, robots302.test (robots.txt a 302 with no Location
and an HTML body), signals.test (Content-Signal + TDMRep),
hang.test (every probe hangs), bigrobots.test (5 MB robots.txt), binrobots.test, badcoding.test
(a robots.txt of rules labelled gzip that is not), bomb.test (a
sitemap bomb), malformed.test (broken cards and OpenAPI), deep.test (every JSON answer nested 20,000
deep, its home page a 402), notes.test (a robots.txt of comments and Host: only), htmlrobots.test and
octetrobots.test (rules served as text/html and application/octet-stream), bom.test (robots.txt,
llms.txt and the API catalog behind a UTF-8 BOM), tdmtypes.test (TDMRep fields of the wrong JSON types), mdalways.test (Markdown
to every request, no Vary), novary.test (negotiates Markdown with only Vary: Accept-Encoding),
halfvary.test (Vary: Accept on its Markdown answer only),
sitemaps.test (robots.txt declares a sitemap other than a valid /sitemap.xml), smupper.test (it
declares its /sitemap.xml in capitals), catchjson.test and catchtext.test (every path but the home
page a 200 "not found", in JSON and in plain text), puzzle.test (an
ordinary page that loads /static/challenge.js), applebot.test (Applebot named in a group with `*`),
moved.test (robots.txt blocks /shop/; / redirects to landing.test/shop/, /stay to its own /shop/),
landing.test (allows everything), fatdocs.test (well-known JSON documents near their size caps, in
non-ASCII text) and fatrobots.test (a robots.txt near its 512 KiB cap). `latency` adds a delay to
every answer; `requests` counts every request and `hosts` each site's.
A small UDP DNS server (dnspython messages) answers the DNS-AID and HTTPS/ECH lookups.
`site_fetcher()` reaches the web through the fetcher's seams.
"""
from __future__ import annotations

import gzip
import json
import socket
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import dns.message
import dns.rcode
import dns.rdata
import dns.rdataclass
import dns.rdatatype
import dns.rrset

from siteapi.lens.discovery import DnsClient
from siteapi.lens.fetch import AddressPolicy, Fetcher
from servers import start_thread, stop_thread, write_response

SITES = ("ready.test", "blog.test", "spa.test", "blocked.test", "paid.test", "robots503.test", "robots302.test",
         "signals.test",
         "hang.test", "bigrobots.test", "binrobots.test", "badcoding.test", "bomb.test", "malformed.test", "deep.test",
         "notes.test", "htmlrobots.test", "octetrobots.test", "bom.test", "tdmtypes.test", "mdalways.test",
         "novary.test", "halfvary.test", "sitemaps.test", "smupper.test", "catchjson.test", "catchtext.test",
         "puzzle.test", "applebot.test", "moved.test", "landing.test", "fatdocs.test", "fatrobots.test")
WORDS = " ".join(["Plain words for machine readers about sourdough, photographs and the open web."] * 8)

READY_HOME = f"""<!doctype html><html><head><meta charset="utf-8"><title>Ready site</title>
<link rel="alternate" type="application/rss+xml" href="/feed.xml"></head><body><h1>Ready</h1><p>{WORDS}</p>
<script>navigator.modelContext && navigator.modelContext.registerTool({{name: "search"}});</script></body></html>"""
BLOG_HOME = f"""<!doctype html><html><head><title>A blog</title></head><body><h1>Posts</h1><p>{WORDS}</p></body></html>"""
SPA_HOME = """<!doctype html><html><head><title>App</title></head><body><div id="root"></div>
<script src="/app.js"></script></body></html>"""
PUZZLE_HOME = f"""<!doctype html><html><head><title>Daily puzzle</title>
<script src="/static/challenge.js"></script></head><body><h1>Today's challenge</h1><p>{WORDS}</p></body></html>"""
CHALLENGE = """<!DOCTYPE html><html><head><title>Just a moment...</title></head><body>
<noscript>Enable JavaScript and cookies to continue</noscript>
<script src="/cdn-cgi/challenge-platform/h/g/orchestrate/chl_page/v1"></script></body></html>"""
READY_ROBOTS = """User-agent: *
Allow: /
Content-Signal: search=yes, ai-input=yes, ai-train=no

User-agent: GPTBot
User-agent: ClaudeBot
Disallow: /private/

Sitemap: /sitemap.xml
"""
SITEMAP = """<?xml version="1.0" encoding="UTF-8"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
<url><loc>https://ready.test/</loc></url><url><loc>https://ready.test/about</loc></url></urlset>"""
KEYLESS_OPENAPI = {"openapi": "3.1.0", "info": {"title": "Ready API", "version": "1"}, "security": [],
                   "paths": {"/search.json": {"get": {"operationId": "search", "security": [], "responses": {"200": {"description": "ok"}}}},
                             "/items": {"get": {"responses": {"200": {"description": "ok"}}}}}}
READY_DOCS = {
    "/sitemap.xml": ("application/xml", SITEMAP),
    "/llms.txt": ("text/plain; charset=utf-8", "# Ready site\n\n> A site for agents.\n\n## Docs\n- [API](/openapi.json): the API\n"),
    "/llms-full.txt": ("text/plain; charset=utf-8", "# Ready site\n\nEverything inlined.\n"),
    "/ai.txt": ("text/plain", "User-Agent: *\nDisallow: /private\n"),
    "/.well-known/security.txt": ("text/plain", "Contact: mailto:security@ready.test\nExpires: 2030-01-01T00:00:00Z\n"),
    "/.well-known/http-message-signatures-directory": ("application/http-message-signatures-directory+json",
                                                       json.dumps({"keys": [{"kty": "OKP", "crv": "Ed25519", "x": "abc"}]})),
    "/.well-known/oauth-protected-resource": ("application/json", json.dumps({"resource": "https://ready.test/"})),
    "/.well-known/mcp/server-card.json": ("application/json", json.dumps({
        "protocolVersion": "2025-06-18", "serverInfo": {"name": "ready", "version": "1"},
        "transport": {"type": "streamable-http", "url": "https://ready.test/mcp"}})),
    "/.well-known/agent-skills/index.json": ("application/json", json.dumps({"skills": [{"name": "search"}]})),
    "/.well-known/api-catalog": ("application/linkset+json", json.dumps({"linkset": [
        {"anchor": "https://ready.test/", "service-desc": [{"href": "/openapi.json"}]}]})),
    "/openapi.json": ("application/json", json.dumps(KEYLESS_OPENAPI)),
    "/.well-known/agent-card.json": ("application/json", json.dumps({"name": "Ready agent", "url": "https://ready.test/a2a",
                                                                     "skills": [{"id": "search"}]})),
    "/agents.md": ("text/markdown", "# Agents\n\nUse the MCP server at /mcp.\n"),
}

# Each near its probe's byte cap, in a letter JSON escapes to six characters: what a discovery result
# would hold if it kept whole documents.
FAT_TEXT = "\u00e9" * 400
FAT_DOCS = {
    "/openapi.json": {"openapi": "3.1.0", "security": [],
                      "paths": {f"/p{i}": {"get": {"description": FAT_TEXT, "responses": {}}} for i in range(1000)}},
    "/.well-known/agent-card.json": {"name": "Fat agent", "skills": [{"id": "s", "description": FAT_TEXT}] * 290},
    "/.well-known/ai-plugin.json": {"schema_version": "v1", "name_for_model": "fat", "x": FAT_TEXT * 290},
    "/.well-known/api-catalog": {"linkset": [{"anchor": "https://fatdocs.test/", "x": FAT_TEXT}] * 290},
    "/.well-known/mcp/server-card.json": {"serverInfo": {"name": "fat"}, "x": FAT_TEXT * 290},
    "/.well-known/tdmrep.json": [{"location": "/", "tdm-reservation": 1}] + [{"location": "/x"}] * 9000,
}
FAT_ROBOTS = "User-agent: *\nDisallow: /private/\n" + "# \u00e9 filler \u00e9\n" * 33_000


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send(self, status: int, body: bytes | str, content_type: str = "text/html; charset=utf-8", headers: dict | None = None):
        write_response(self, status, body, content_type, {"Connection": "close", **(headers or {})})

    def do_GET(self):
        web: SiteWeb = self.server
        web.count(self)
        if web.latency:
            time.sleep(web.latency)
        site = (self.headers.get("Host") or "").split(":")[0]
        path = self.path.split("?")[0]
        method = getattr(self, "site_" + site.split(".")[0], None)
        if method is None:
            return self.send(404, "no such site", "text/plain")
        try:
            method(path)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def not_found(self):
        self.send(404, "<html><body>Not found</body></html>")

    def site_ready(self, path):
        accept = self.headers.get("Accept", "")
        if path == "/":
            if "text/markdown" in accept:
                return self.send(200, f"# Ready\n\n{WORDS}\n", "text/markdown; charset=utf-8", {"Vary": "Accept"})
            return self.send(200, READY_HOME, headers={
                "Vary": "Accept", "Link": '</sitemap.xml>; rel="sitemap", </.well-known/api-catalog>; rel="api-catalog"'})
        if path == "/robots.txt":
            return self.send(200, READY_ROBOTS, "text/plain")
        if path == "/mcp":  # one event, then the stream ends (a real server would hold it open)
            return self.send(200, 'event: message\ndata: {"jsonrpc":"2.0","method":"ping"}\n\n', "text/event-stream")
        if path == "/ask":
            return self.send(400, json.dumps({"error": "query is required"}), "application/json")
        if path in READY_DOCS:
            content_type, body = READY_DOCS[path]
            return self.send(200, body, content_type)
        self.not_found()

    def site_blog(self, path):
        if path == "/":
            return self.send(200, BLOG_HOME)
        if path == "/robots.txt":
            return self.send(200, "User-agent: *\nDisallow: /drafts/\nSitemap: /sitemap.xml\n", "text/plain")
        if path == "/sitemap.xml":
            return self.send(200, SITEMAP, "application/xml")
        self.not_found()

    def site_spa(self, path):
        self.send(200, SPA_HOME)

    def site_blocked(self, path):
        agent = self.headers.get("User-Agent", "").lower()
        if path == "/robots.txt":
            return self.send(200, "User-agent: *\nAllow: /\n\nUser-agent: GPTBot\nUser-agent: ClaudeBot\nUser-agent: CCBot\n"
                                  "User-agent: Google-Extended\nDisallow: /\n", "text/plain")
        if any(bot in agent for bot in ("gptbot", "claudebot", "ccbot", "perplexitybot", "aadharshbot")):
            return self.send(403, CHALLENGE, headers={"cf-mitigated": "challenge"})
        if path == "/":
            # a CSP naming the vendor is not a challenge
            return self.send(200, BLOG_HOME, headers={"Content-Security-Policy": "script-src 'self' challenges.cloudflare.com"})
        self.not_found()

    def site_paid(self, path):
        if path == "/robots.txt":
            return self.send(200, "User-agent: *\nAllow: /\n", "text/plain")
        if path == "/":
            body = {"x402Version": 1, "error": "payment required", "accepts": [{"scheme": "exact", "network": "base",
                                                                              "maxAmountRequired": "10000"}]}
            return self.send(402, json.dumps(body), "application/json", {"crawler-price": "USD 0.01"})
        self.not_found()

    def site_robots503(self, path):
        if path == "/robots.txt":
            return self.send(503, "busy", "text/plain", {"Retry-After": "60"})
        if path == "/":
            return self.send(200, BLOG_HOME)
        self.not_found()

    def site_robots302(self, path):
        if path == "/robots.txt":  # a redirect that names nowhere: the fetcher's final answer is the 302
            return self.send(302, "<html><body>Moved</body></html>")
        if path == "/":
            return self.send(200, BLOG_HOME)
        self.not_found()

    def site_signals(self, path):
        if path == "/robots.txt":
            return self.send(200, "User-agent: *\nContent-Signal: search=yes, ai-train=no\nAllow: /\n", "text/plain")
        if path == "/.well-known/tdmrep.json":
            return self.send(200, json.dumps([{"location": "/", "tdm-reservation": 1,
                                               "tdm-policy": "https://signals.test/policy.json"}]), "application/json")
        if path == "/":
            return self.send(200, BLOG_HOME)
        self.not_found()

    def site_hang(self, path):
        if path == "/":
            return self.send(200, BLOG_HOME)
        self.server.stopping.wait(30)

    def site_bigrobots(self, path):
        if path == "/robots.txt":
            return self.send(200, ("User-agent: *\nDisallow: /x\n" + "# filler line\n" * 400_000).encode(), "text/plain")
        if path == "/":
            return self.send(200, BLOG_HOME)
        self.not_found()

    def site_binrobots(self, path):
        self.robots_site(path, bytes(range(256)) * 64, "text/plain")

    def site_badcoding(self, path):
        self.robots_site(path, "User-agent: *\nDisallow: /\n", "text/plain", {"Content-Encoding": "gzip"})

    def site_bomb(self, path):
        if path == "/sitemap.xml":
            return self.send(200, self.server.sitemap_bomb(), "application/xml", {"Content-Encoding": "gzip"})
        if path == "/":
            return self.send(200, BLOG_HOME)
        self.not_found()

    def site_malformed(self, path):
        broken = {"/.well-known/agent-card.json": '{"name": "half', "/.well-known/mcp/server-card.json": "[1, 2",
                  "/openapi.json": '{"openapi": "3.1.0", "paths": ', "/.well-known/api-catalog": '{"linkset": 5}'}
        if path in broken:
            return self.send(200, broken[path], "application/json")
        if path == "/":
            return self.send(200, BLOG_HOME)
        self.not_found()

    def site_deep(self, path):
        deep = "[" * 20_000 + "]" * 20_000
        if path == "/robots.txt":
            return self.send(200, "User-agent: *\nAllow: /\n", "text/plain")
        if path == "/":
            return self.send(402, deep, "application/json", {"crawler-price": "USD 0.01"})
        if path in ("/mcp", "/ask") or path.endswith(".json") or path.startswith("/.well-known/"):
            return self.send(200, deep, "application/json")
        self.not_found()

    def robots_site(self, path, robots: bytes | str, content_type: str, headers: dict | None = None):
        if path == "/robots.txt":
            return self.send(200, robots, content_type, headers)
        if path == "/":
            return self.send(200, BLOG_HOME)
        self.not_found()

    def site_notes(self, path):
        self.robots_site(path, "# robots for notes.test\n# (no rules yet)\nHost: notes.test\n", "text/plain")

    def site_htmlrobots(self, path):
        self.robots_site(path, "User-agent: GPTBot\nDisallow: /\n", "text/html")

    def site_octetrobots(self, path):
        self.robots_site(path, "User-agent: GPTBot\nDisallow: /\n", "application/octet-stream")

    def site_bom(self, path):
        behind_bom = {"/llms.txt": ("\ufeff# BOM site\n\n> Files saved by an editor that writes a BOM.\n", "text/plain"),
                      "/.well-known/api-catalog": ("\ufeff" + json.dumps({"linkset": [{"anchor": "https://bom.test/"}]}),
                                                   "application/linkset+json")}
        if path in behind_bom:
            return self.send(200, *behind_bom[path])
        self.robots_site(path, "\ufeffUser-agent: GPTBot\nDisallow: /\n", "text/plain; charset=utf-8")

    def site_tdmtypes(self, path):
        if path == "/.well-known/tdmrep.json":
            return self.send(200, json.dumps([{"tdm-reservation": {"x": 1}, "location": 5, "tdm-policy": [1]}]),
                             "application/json")
        self.robots_site(path, "User-agent: *\nAllow: /\n", "text/plain")

    def site_mdalways(self, path):
        if path == "/":
            return self.send(200, f"# Always Markdown\n\n{WORDS}\n", "text/markdown; charset=utf-8")
        self.not_found()

    def site_novary(self, path):
        if path == "/" and "text/markdown" in self.headers.get("Accept", ""):
            return self.send(200, f"# No Vary\n\n{WORDS}\n", "text/markdown; charset=utf-8", {"Vary": "Accept-Encoding"})
        if path == "/":
            return self.send(200, BLOG_HOME, headers={"Vary": "Accept-Encoding"})
        self.not_found()

    def site_halfvary(self, path):
        if path == "/" and "text/markdown" in self.headers.get("Accept", ""):
            return self.send(200, f"# Half Vary\n\n{WORDS}\n", "text/markdown; charset=utf-8", {"Vary": "Accept"})
        if path == "/":
            return self.send(200, BLOG_HOME)
        self.not_found()

    def site_sitemaps(self, path):
        if path == "/sitemap.xml":
            return self.send(200, SITEMAP, "application/xml")
        self.robots_site(path, "User-agent: *\nAllow: /\nSitemap: /sitemap-news.xml\n", "text/plain")

    def site_smupper(self, path):
        if path == "/sitemap.xml":
            return self.send(200, SITEMAP, "application/xml")
        port = self.server.server_address[1]
        self.robots_site(path, f"User-agent: *\nAllow: /\nSitemap: HTTP://SMUPPER.TEST:{port}/sitemap.xml\n", "text/plain")

    def site_catchjson(self, path):
        if path == "/":
            return self.send(200, BLOG_HOME)
        self.send(200, '{"error": "not found", "status": 404}', "application/json")

    def site_catchtext(self, path):
        if path == "/":
            return self.send(200, BLOG_HOME)
        self.send(200, "404 page not found\n", "text/plain")

    def site_puzzle(self, path):
        if path == "/":
            return self.send(200, PUZZLE_HOME)
        self.robots_site(path, "User-agent: *\nAllow: /\n", "text/plain")

    def site_applebot(self, path):
        self.robots_site(path, "User-agent: Applebot\nUser-agent: *\nAllow: /\n", "text/plain")

    def site_moved(self, path):
        if path == "/":
            return self.send(301, "", headers={"Location": f"http://landing.test:{self.server.port}/shop/"})
        if path == "/stay":
            return self.send(302, "", headers={"Location": "/shop/"})
        if path == "/shop/":
            return self.send(200, BLOG_HOME)
        self.robots_site(path, "User-agent: *\nDisallow: /shop/\n", "text/plain")

    def site_fatdocs(self, path):
        if path in FAT_DOCS:
            return self.send(200, json.dumps(FAT_DOCS[path], ensure_ascii=False).encode(), "application/json")
        self.robots_site(path, "User-agent: *\nAllow: /\n", "text/plain")

    def site_fatrobots(self, path):
        self.robots_site(path, FAT_ROBOTS.encode(), "text/plain; charset=utf-8")

    def site_landing(self, path):
        if path == "/shop/":
            return self.send(200, BLOG_HOME)
        self.robots_site(path, "User-agent: *\nAllow: /\n", "text/plain")


class SiteWeb(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 128

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.stopping = threading.Event()
        self.latency = 0.0
        self.requests = 0
        self.hosts: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._bomb: bytes | None = None

    def count(self, handler):
        with self._lock:
            self.requests += 1
            self.hosts[(handler.headers.get("Host") or "").split(":")[0]] += 1

    def sitemap_bomb(self) -> bytes:
        if self._bomb is None:
            entry = b"<url><loc>https://bomb.test/page</loc></url>"
            self._bomb = gzip.compress(b'<?xml version="1.0"?><urlset>' + entry * 400_000 + b"</urlset>", 6)
        return self._bomb

    @property
    def port(self) -> int:
        return self.server_address[1]

    def url(self, site: str, path: str = "/") -> str:
        return f"http://{site}:{self.port}{path}"


def start_web() -> tuple[SiteWeb, threading.Thread]:
    return start_thread(SiteWeb())


def stop_web(web: SiteWeb, thread: threading.Thread) -> None:
    stop_thread(web, thread)


def site_fetcher(web: SiteWeb, **limits) -> Fetcher:
    table = {**{site: ["127.0.0.1"] for site in SITES}, "private.test": ["10.0.0.7"],  # a name that leads inside
             # public names only mode=cloudflare's scanner is sent to (never connected to here)
             "example.com": ["93.184.215.14"], "deep.example": ["93.184.215.14"]}
    limits.setdefault("timeout_s", 3.0)
    return Fetcher(policy=AddressPolicy(allow=frozenset({("127.0.0.1", web.port)})),
                   resolve=lambda host, timeout: table.get(host) or wildcard(host), **limits)


def wildcard(host: str) -> list[str]:
    """blog.test's DNS answers every name under it, as many hosting platforms' do."""
    return ["127.0.0.1"] if host.endswith(".blog.test") else []


# --- DNS ----------------------------------------------------------------------------------------

DNS_RECORDS = {
    ("_mcp._agents.ready.test.", "SVCB"): ['1 mcp.ready.test. alpn="h2" port=443'],
    ("ready.test.", "HTTPS"): ['1 . alpn="h2,h3" ech="AAj+DQAEYWJjZA=="'],
    ("blog.test.", "HTTPS"): ['1 . alpn="h2"'],
}


class DnsServer:
    """Answers queries from DNS_RECORDS (NXDOMAIN otherwise); names in `servfail` get SERVFAIL,
    names in `silent` get no answer at all."""

    def __init__(self, servfail=(), silent=()):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.servfail, self.silent = set(servfail), set(silent)
        self.running = True
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return self.sock.getsockname()[1]

    def client(self) -> DnsClient:
        return DnsClient(["127.0.0.1"], self.port)

    def _serve(self):
        while self.running:
            try:
                data, peer = self.sock.recvfrom(4096)
            except (socket.timeout, OSError):
                continue
            try:
                query = dns.message.from_wire(data)
            except Exception:
                continue
            question = query.question[0]
            name, rdtype = question.name.to_text(), dns.rdatatype.to_text(question.rdtype)
            if any(name.endswith(s) for s in self.silent):
                continue
            reply = dns.message.make_response(query)
            try:
                self._answer(reply, question, name, rdtype)
            except Exception:
                reply.set_rcode(dns.rcode.SERVFAIL)
            self.sock.sendto(reply.to_wire(), peer)

    def _answer(self, reply, question, name, rdtype):
        if any(name.endswith(s) for s in self.servfail):
            reply.set_rcode(dns.rcode.SERVFAIL)
        elif (name, rdtype) in DNS_RECORDS:
            rdatas = [dns.rdata.from_text(dns.rdataclass.IN, question.rdtype, text) for text in DNS_RECORDS[(name, rdtype)]]
            reply.answer.append(dns.rrset.from_rdata_list(question.name, 300, rdatas))
        elif not any(key[0] == name for key in DNS_RECORDS):
            reply.set_rcode(dns.rcode.NXDOMAIN)

    def stop(self):
        self.running = False
        self.thread.join(2)
        self.sock.close()


# --- a CDN's agent-readiness scanner, spoken as MCP JSON-RPC (for mode=cloudflare) ----------------

class Scanner(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        message = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/moved":  # a scanner that sends its callers somewhere else
            return self.reply("", "text/plain", {"Location": "/mcp"}, status=307)
        self.server.calls.append(message["method"])
        if message["method"] == "initialize":
            result = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}}, "serverInfo": {"name": "scanner"}}
            body = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result})
            self.reply(body, "application/json", {"Mcp-Session-Id": "s1"})
        elif message["method"] == "tools/call" and self.headers.get("Mcp-Session-Id") == "s1":
            assert message["params"] == {"name": "scan_site", "arguments": {"url": message["params"]["arguments"]["url"], "profile": "all"}}
            scanned = message["params"]["arguments"]["url"]
            if "deep" in scanned:  # an answer nested too deeply to read
                return self.reply("[" * 20_000 + "]" * 20_000, "application/json")
            if "slow" in scanned:  # an answer after the lens has stopped waiting
                time.sleep(2)
            text = "## Results\nLevel 3/5 — Agent-Readable\n18 checks"
            result = {"content": [{"type": "text", "text": text}]}
            if "typed" in scanned:  # structured fields of the wrong JSON types, beside the text
                result["structuredContent"] = {"level": True, "levelName": 42} if "bool" in scanned else {
                    "level": 2, "levelName": 42}
            body = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result})
            self.reply(f"event: message\ndata: {body}\n\n", "text/event-stream")
        else:
            self.reply(json.dumps({"jsonrpc": "2.0", "id": message.get("id"), "error": {"code": -32600, "message": "no"}}),
                       "application/json", status=400)

    def reply(self, body: str, content_type: str, headers: dict | None = None, status: int = 200):
        write_response(self, status, body, content_type, headers)


def start_scanner() -> tuple[ThreadingHTTPServer, threading.Thread]:
    """The fake scanner on a loopback port; `server.calls` records the JSON-RPC methods it got."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), Scanner)
    server.calls = []
    server.stopping = threading.Event()
    return start_thread(server)
