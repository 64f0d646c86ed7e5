"""A loopback "web" for lens tests: fixture sites on a real ThreadingHTTPServer.

Every path is one site behaviour: a rich page, frame headers, and each hostile answer the lens
must survive (slow, dripping, reset, garbage status line, redirect loops and redirects to private
addresses or to a malformed URL, 103 Early Hints before the answer, an event stream that stays
open, 10 MB bodies, compression bombs, a body gzipped under N stacked Content-Encodings, broken
encodings and charsets, header values in raw UTF-8, binary sent as HTML, deep nesting, 50,000
JSON-LD blocks, JSON-LD that grows when indented, header values and a title longer than anyone
stores). `loopback_fetcher()` reaches it through the fetcher's seams: a policy that allows exactly
this server's (127.0.0.1, port) and a stub resolver.
"""
from __future__ import annotations

import gzip
import io
import socket
import struct
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import brotli
import zstandard

from siteapi.lens.fetch import AddressPolicy, Fetcher
from servers import start_thread, stop_thread, write_response

RICH_PAGE = """<!doctype html>
<html lang="en"><head>
<meta charset="utf-8">
<title>  Rich   fixture page </title>
<meta name="description" content="A page with every kind of structured data.">
<meta name="robots" content="index, follow">
<meta name="GPTBot" content="noindex">
<meta property="og:title" content="Rich OG title">
<meta property="og:type" content="article">
<meta name="twitter:card" content="summary_large_image">
<meta name="twitter:site" content="@fixture">
<link rel="canonical" href="/rich">
<link rel="alternate" type="application/rss+xml" title="Feed" href="/feed.xml">
<link rel="llms-txt" href="/llms.txt">
<script type="application/ld+json">{"@context": "https://schema.org", "@type": "Organization", "name": "Fixture"}</script>
<script type="application/ld+json">{"@context": "https://schema.org", "@type": "Broken", "name": </script>
<script type="application/ld+json; charset=utf-8">{"@context": "https://schema.org", "@graph": [
  {"@type": "WebSite", "name": "Fixture"}, {"@type": ["WebPage", "FAQPage"], "name": "Home"}]}</script>
<script>var notJsonLd = {"@type": "Nope"};</script>
<style>.hidden { display: none }</style>
</head><body>
<h1>Main heading</h1>
<p>Hello machine readers, this page has words.</p>
<div itemscope itemtype="https://schema.org/Product"><span itemprop="name">Widget</span>
  <span itemprop="offers" itemscope itemtype="https://schema.org/Offer"><span itemprop="price">9.99</span></span></div>
<div vocab="https://schema.org/" typeof="Person"><span property="name">Ada</span><span property="jobTitle">Engineer</span></div>
<article class="h-entry post"><h2 class="p-name">An entry</h2><div class="h-card">Author</div></article>
<div class="vcard">Old style card</div>
<h3>Third level</h3>
<img src="/a.png" alt="An image"><img src="/b.png"><img src="/c.png" alt="">
</body></html>"""

_BOMB_SIZE = 64 * 1024 * 1024  # 32 times the decoded cap


def _bombs() -> dict[str, bytes]:
    zeros = b"\0" * (1024 * 1024)
    gz = io.BytesIO()
    with gzip.GzipFile(fileobj=gz, mode="wb", compresslevel=6) as out:
        for _ in range(_BOMB_SIZE // len(zeros)):
            out.write(zeros)
    compressor = zlib.compressobj(6)
    deflated = b"".join(compressor.compress(zeros) for _ in range(_BOMB_SIZE // len(zeros))) + compressor.flush()
    cctx = zstandard.ZstdCompressor(level=3)
    chunker = cctx.compressobj()
    zst = b"".join(chunker.compress(zeros) for _ in range(_BOMB_SIZE // len(zeros))) + chunker.flush()
    squeezer = brotli.Compressor(quality=1)
    br = b"".join(squeezer.process(zeros) for _ in range(_BOMB_SIZE // len(zeros))) + squeezer.finish()
    return {"gzip": gz.getvalue(), "deflate": deflated, "zstd": zst, "br": br}


_BOMBS: dict[str, bytes] = {}
_BOMB_LOCK = threading.Lock()


def _raw_utf8(text: str) -> str:
    return text.encode().decode("latin-1")


def bomb(coding: str) -> bytes:
    with _BOMB_LOCK:
        if not _BOMBS:
            _BOMBS.update(_bombs())
    return _BOMBS[coding]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "LoopbackWeb"

    def log_message(self, *args):  # keep test output quiet
        pass

    def send(self, status: int, body: bytes, content_type: str = "text/html; charset=utf-8", headers: dict | None = None):
        write_response(self, status, body, content_type, headers)

    def redirect(self, location: str, status: int = 302):
        self.send(status, b"", headers={"Location": location})

    def do_GET(self):
        self.server.seen.append((self.path, dict(self.headers)))
        path = self.path.split("?")[0]
        port = self.server.server_address[1]
        routes = {
            "/rich": lambda: self.send(200, RICH_PAGE.encode(), headers={
                "Link": '</llms.txt>; rel="llms-txt", <https://shop.test/openapi.json>; rel="service-desc"; type="application/json"',
                "X-Frame-Options": "DENY", "X-Robots-Tag": "claudebot: noai"}),
            "/framable": lambda: self.send(200, b"<html><body><p>frame me</p></body></html>"),
            "/csp-star": lambda: self.send(200, b"<p>x</p>", headers={"Content-Security-Policy": "default-src 'self'; frame-ancestors *",
                                                                     "X-Frame-Options": "DENY"}),
            "/csp-none": lambda: self.send(200, b"<p>x</p>", headers={"Content-Security-Policy": "frame-ancestors 'none'"}),
            "/sameorigin": lambda: self.send(200, b"<p>x</p>", headers={"X-Frame-Options": "SAMEORIGIN"}),
            "/plain": lambda: self.send(200, b"Just some plain words here.\n", "text/plain; charset=utf-8"),
            "/image.png": lambda: self.send(200, b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8, "image/png"),
            "/binary-as-html": lambda: self.send(200, b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 64),
            "/invalid-utf8": lambda: self.send(200, b"<html><title>caf\xc3\xa9 \xff\xfe broken</title><p>ok \xc3</p></html>"),
            "/wrong-charset": lambda: self.send(200, "<title>naïve café</title><p>déjà vu</p>".encode("utf-8"),
                                                "text/html; charset=iso-8859-1"),
            "/bogus-charset": lambda: self.send(200, "<title>café</title>".encode("utf-8"), "text/html; charset=rot13"),
            "/meta-charset": lambda: self.send(200, '<meta charset="windows-1252"><title>caf\xe9</title>'.encode("latin-1"), "text/html"),
            "/deep": lambda: self.send(200, b"<html><body>" + b"<ul><li>" * 40_000 + b"deep</body></html>"),
            "/jsonld-flood": lambda: self.send(200, b"<html><head>" + b'<script type="application/ld+json">{"@type":"Thing"}</script>' * 50_000 + b"</head></html>"),
            "/jsonld-deep": lambda: self.send(200, b'<script type="application/ld+json">' + b"[" * 100_000 + b"]" * 100_000 + b"</script>"),
            "/jsonld-indent": lambda: self.send(200, b"<html><head>" + (
                b'<script type="application/ld+json">' + b"[" * 900 + b"]" * 900 + b"</script>") * 20 + b"</head></html>"),
            "/jsonld-wide": lambda: self.send(200, b"<html><head>" + (
                b'<script type="application/ld+json">' + b"[" * 60 + b"1," * 5000 + b"1" + b"]" * 60 + b"</script>") * 20
                + b"</head></html>"),
            "/fat-headers": lambda: self.send(200, b"<html><head><title>" + b"T" * 5000 + b"</title></head><body>x</body></html>",
                                              "text/html; " + "a" * 8000,
                                              {name: "v" * 8000 for name in ("Cache-Control", "Vary", "ETag", "Server")}),
            "/big": self.big,
            "/bad-gzip": lambda: self.send(200, b"this is not gzip at all", headers={"Content-Encoding": "gzip"}),
            "/unknown-encoding": lambda: self.send(200, b"whatever", headers={"Content-Encoding": "x-snappy-frame"}),
            "/gzip-page": lambda: self.send(200, gzip.compress(RICH_PAGE.encode()), headers={"Content-Encoding": "gzip"}),
            "/br-page": lambda: self.send(200, brotli.compress(RICH_PAGE.encode()), headers={"Content-Encoding": "br"}),
            "/zstd-page": lambda: self.send(200, zstandard.ZstdCompressor().compress(RICH_PAGE.encode()), headers={"Content-Encoding": "zstd"}),
            "/deflate-page": lambda: self.send(200, zlib.compress(RICH_PAGE.encode()), headers={"Content-Encoding": "deflate"}),
            "/slow": self.slow,
            "/drip": self.drip,
            "/reset": self.reset,
            "/reset-markdown": lambda: self.reset() if "markdown" in self.headers.get("Accept", "") else self.send(
                200, RICH_PAGE.encode()),
            "/garbage": self.garbage,
            "/hangup": self.hangup,
            "/loop-a": lambda: self.redirect("/loop-b"),
            "/loop-b": lambda: self.redirect("/loop-a"),
            "/to-rich": lambda: self.redirect(f"http://shop.test:{port}/rich", 301),
            "/to-private": lambda: self.redirect("http://10.0.0.7/admin"),
            "/to-metadata": lambda: self.redirect("http://169.254.169.254/latest/meta-data/"),
            "/to-rebind": lambda: self.redirect(f"http://rebind.test:{port}/rich"),
            "/to-other-port": lambda: self.redirect("http://shop.test:8080/"),
            "/to-ftp": lambda: self.redirect("ftp://shop.test/file"),
            "/to-template-host": lambda: self.redirect("http://[YOUR-DOMAIN]/"),
            # header values in raw UTF-8, as many servers send them (send_header writes ISO-8859-1)
            "/to-cafe": lambda: self.redirect(_raw_utf8("/café")),
            "/caf%C3%A9": lambda: self.send(200, "<title>café</title>".encode()),
            "/utf8-link": lambda: self.send(200, b"<p>x</p>", headers={
                "Link": _raw_utf8('</café>; rel="alternate"; type="text/markdown"'), "X-Note": _raw_utf8("déjà vu"),
                "X-Latin-1": "caf\xe9"}),
            "/early-hints": self.early_hints,
            "/held-stream": self.held_stream,
            "/negotiate": self.negotiate,
            "/changing": self.changing,
        }
        if path.startswith("/chain/"):
            left = int(path.rsplit("/", 1)[1])
            return self.redirect(f"/chain/{left - 1}") if left > 0 else self.send(200, b"<title>end of chain</title>")
        if path.startswith("/stacked/"):  # "hello" gzipped N times, every layer named
            layers = int(path.rsplit("/", 1)[1])
            body = b"hello"
            for _ in range(layers):
                body = gzip.compress(body)
            return self.send(200, body, "text/plain", {"Content-Encoding": ", ".join(["gzip"] * layers)})
        if path.startswith("/bomb/"):
            coding = path.rsplit("/", 1)[1]
            return self.send(200, bomb(coding), headers={"Content-Encoding": coding})
        handler = routes.get(path)
        if handler is None:
            return self.send(404, b"<title>Not found</title>")
        handler()

    def big(self):
        chunk = b"<p>" + b"x" * 65_530 + b"</p>"
        size = 10 * 1024 * 1024
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(size))
        self.end_headers()
        try:
            sent = 0
            while sent < size:
                piece = chunk[: size - sent]
                self.wfile.write(piece)
                sent += len(piece)
        except OSError:
            pass  # the client stopped reading at its cap

    def _sleep(self, seconds: float):
        end = time.monotonic() + seconds
        while time.monotonic() < end and not self.server.stopping.is_set():
            time.sleep(0.05)

    def slow(self):
        self._sleep(30)  # far past any deadline the tests set, so a check on one has room on a busy machine
        try:
            self.send(200, b"<title>too late</title>")
        except OSError:
            pass

    def drip(self):
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            while not self.server.stopping.is_set():
                self.wfile.write(b"<p>")
                self.wfile.flush()
                time.sleep(0.1)
        except OSError:
            pass

    def early_hints(self):
        self.wfile.write(b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n")
        self.send(200, b"<title>after the hints</title>")

    def held_stream(self):
        """An event stream that stays open, as an MCP or NLWeb server's GET does."""
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            self.wfile.write(b'event: message\ndata: {"jsonrpc":"2.0","method":"ping"}\n\n')
            self.wfile.flush()
            self._sleep(30)
        except OSError:
            pass

    def reset(self):
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()
        self.close_connection = True

    def garbage(self):
        self.wfile.write(b"HELLO THERE THIS IS NOT HTTP\r\n\r\n")
        self.close_connection = True

    def hangup(self):
        self.close_connection = True
        self.connection.shutdown(socket.SHUT_RDWR)

    def negotiate(self):
        if "text/markdown" in self.headers.get("Accept", ""):
            self.send(200, b"# Negotiated\n\nMarkdown words here.\n", "text/markdown; charset=utf-8", {"Vary": "Accept"})
        else:
            self.send(200, b"<html><title>Negotiated</title><p>HTML words here.</p></html>", headers={"Vary": "Accept"})

    def changing(self):
        self.server.counter += 1
        n = self.server.counter
        self.send(200, f"<title>Version {n}</title><p>{'word ' * n}</p>".encode(),
                  headers={"ETag": f'"v{n}"', "Cache-Control": "max-age=60"})


class LoopbackWeb(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.stopping = threading.Event()
        self.seen: list = []
        self.counter = 0

    @property
    def port(self) -> int:
        return self.server_address[1]

    def url(self, path: str, host: str = "shop.test") -> str:
        return f"http://{host}:{self.port}{path}"


def start() -> tuple[LoopbackWeb, threading.Thread]:
    return start_thread(LoopbackWeb())


def stop(web: LoopbackWeb, thread: threading.Thread) -> None:
    stop_thread(web, thread)


class StubResolver:
    """Name -> addresses from a table; a list of lists answers differently on each call."""

    def __init__(self, table: dict):
        self.table = table
        self.calls: list[str] = []

    def __call__(self, host: str, timeout: float) -> list[str]:
        self.calls.append(host)
        answer = self.table.get(host, [])
        if answer and isinstance(answer[0], list):
            return answer[min(self.calls.count(host) - 1, len(answer) - 1)]
        return answer


def loopback_fetcher(web: LoopbackWeb, resolver: StubResolver | None = None, **limits) -> Fetcher:
    resolver = resolver or StubResolver({"shop.test": ["127.0.0.1"]})
    limits.setdefault("timeout_s", 2.0)
    return Fetcher(policy=AddressPolicy(allow=frozenset({("127.0.0.1", web.port)})), resolve=resolver, **limits)
