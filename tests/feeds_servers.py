"""Loopback servers speaking the outside protocols the feeds read: the Spotify Web API (token
endpoint, playlist with paginated items, several artists by id), an ICS calendar feed, and firm
homepages with robots.txt; and the network between: an HTTP proxy (what HTTP_PROXY and HTTPS_PROXY
name), a black hole (a port whose connects hang) and a name server that never answers.

Each server runs a real ThreadingHTTPServer on 127.0.0.1 in a thread (over TLS when given an
ssl context); `fault` switches it into a failure mode (500, slow, dripping body or headers,
malformed, huge, unexpected schema) so tests can inject each fault.
"""
from __future__ import annotations

import base64
import contextlib
import json
import secrets
import select
import socket
import ssl
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import trustme

from servers import write_response


# Real User-Agent strings by crawler registry key, and a browser's (for the ledger's tests).
USER_AGENTS = {
    "gptbot": "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; GPTBot/1.2; +https://openai.com/gptbot)",
    "oai-searchbot": "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko); compatible; OAI-SearchBot/1.0; +https://openai.com/searchbot",
    "chatgpt-user": "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko); compatible; ChatGPT-User/1.0; +https://openai.com/bot",
    "claudebot": "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; ClaudeBot/1.0; +claudebot@anthropic.com)",
    "claude-user": "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; Claude-User/1.0; +Claude-User@anthropic.com)",
    "perplexity-user": "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; Perplexity-User/1.0; +https://perplexity.ai/perplexity-user)",
    "googlebot": "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
    "aadharshbot": "AadharshBot/1.0 (+https://aadhar.sh/bot)",
    "browser": "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Safari/605.1.15",
}


class QuietServer(ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        pass  # clients that stop reading (body caps, timeouts) reset the connection on purpose


class LoopbackServer:
    """A threaded HTTP server on 127.0.0.1:0; subclasses implement `respond(handler)`."""

    server_header = "nginx"

    def __init__(self, tls: ssl.SSLContext | None = None):
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                outer.requests.append((self.command, self.path, dict(self.headers)))
                outer.respond(self)

            do_POST = do_HEAD = do_GET

            def log_message(self, *args):
                pass

            def version_string(self):
                return outer.server_header

        self.requests: list = []
        self.fault: str | None = None
        self.dripped = 0
        self.closed = threading.Event()
        self.httpd = QuietServer(("127.0.0.1", 0), Handler)
        if tls:
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        self.scheme = "https" if tls else "http"
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.httpd.server_address[1]}"

    def send(self, handler, status: int, body: bytes | str, content_type: str = "application/json", headers=None):
        write_response(handler, status, body, content_type, headers)

    def common_fault(self, handler) -> bool:
        """Apply the faults every protocol shares; True when the response was already sent."""
        if self.fault == "500":
            self.send(handler, 500, '{"error":{"status":500,"message":"Server error"}}')
        elif self.fault == "slow":
            time.sleep(1.5)
            self.send(handler, 200, "{}")
        elif self.fault == "drip":  # a byte every 0.1 s for 10 s: every read is quick, the whole is not
            handler.send_response(200)
            handler.send_header("Content-Length", "100")
            handler.end_headers()
            try:
                for _ in range(100):
                    handler.wfile.write(b" ")
                    handler.wfile.flush()
                    self.dripped += 1
                    time.sleep(0.1)
            except OSError:
                pass  # the client gave up, as it should
        elif self.fault == "drip-headers":  # a header line every 0.1 s for 10 s: no body yet to time
            try:
                handler.wfile.write(b"HTTP/1.1 200 OK\r\n")
                for n in range(100):
                    handler.wfile.write(b"X-Drip-%d: 1\r\n" % n)
                    handler.wfile.flush()
                    self.dripped += 1
                    time.sleep(0.1)
                handler.wfile.write(b"Content-Length: 2\r\n\r\n{}")
            except OSError:
                pass
        else:
            return False
        return True

    def close(self):
        self.closed.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def spotify_track(n: int, explicit: bool = False) -> dict:
    """A playlist item in the shape the Web API returns (recorded, trimmed of markets)."""
    track_id = f"{n:02d}" + "4uLU6hMCjMI75M1A2tKUQ"[:20]
    artist_id = f"{n:02d}" + "0OdUWJ0sBjDrqHygGUXeCF"[:20]
    return {
        "added_at": f"2026-10-{(n % 28) + 1:02d}T14:03:11Z",
        "added_by": {"external_urls": {"spotify": "https://open.spotify.com/user/aadharsh"}, "id": "aadharsh",
                     "type": "user", "uri": "spotify:user:aadharsh"},
        "is_local": False,
        "primary_color": None,
        "track": {
            "album": {
                "album_type": "album", "total_tracks": 11, "id": f"alb{n}", "name": f"Album {n}",
                "images": [
                    {"url": f"https://i.scdn.co/image/ab67616d0000b273{n:04d}", "height": 640, "width": 640},
                    {"url": f"https://i.scdn.co/image/ab67616d00001e02{n:04d}", "height": 300, "width": 300},
                ],
                "release_date": "2019-05-17", "release_date_precision": "day", "type": "album",
                "uri": f"spotify:album:alb{n}",
                "artists": [{"id": artist_id, "name": f"Artist {n}", "type": "artist"}],
            },
            "artists": [
                {"external_urls": {"spotify": f"https://open.spotify.com/artist/{artist_id}"}, "id": artist_id,
                 "name": f"Artist {n}", "type": "artist", "uri": f"spotify:artist:{artist_id}"},
                {"external_urls": {"spotify": "https://open.spotify.com/artist/feat"}, "id": "feat",
                 "name": "Guest", "type": "artist", "uri": "spotify:artist:feat"},
            ],
            "disc_number": 1, "duration_ms": 180000 + n * 1000, "explicit": explicit,
            "external_ids": {"isrc": f"USRC1{n:07d}"},
            "external_urls": {"spotify": f"https://open.spotify.com/track/{track_id}"},
            "href": f"https://api.spotify.com/v1/tracks/{track_id}", "id": track_id, "is_local": False,
            "name": f"Song {n}", "popularity": 61, "preview_url": None if n % 2 else f"https://p.scdn.co/mp3-preview/{n}",
            "track_number": n, "type": "track", "uri": f"spotify:track:{track_id}",
        },
        "video_thumbnail": {"url": None},
    }


def spotify_artist(simplified: dict) -> dict:
    """The full artist object of Get Several Artists for a track's simplified artist; the guest has no picture."""
    artist_id = simplified["id"]
    images = [] if artist_id == "feat" else [
        {"url": f"https://i.scdn.co/image/ab6761610000e5eb{artist_id[:2]}{size}", "height": size, "width": size}
        for size in (640, 320, 160)]
    return {**simplified, "followers": {"href": None, "total": 48213}, "genres": ["indie pop"],
            "href": f"https://api.spotify.com/v1/artists/{artist_id}", "images": images, "popularity": 58}


class SpotifyServer(LoopbackServer):
    """Accounts token endpoint at /api/token and the Web API under /v1 (playlist, paginated items,
    several artists). `artists_fault` ("500" or "malformed") breaks only the artists endpoint;
    `page_delay` slows every page of items."""

    CLIENT = ("test-client", "test-secret")
    PAGE = 2
    MAX_ARTIST_IDS = 50

    def __init__(self, playlist_id: str = "37i9dQZF1DXcBWIGoYBM5M", track_count: int = 5):
        self.playlist_id = playlist_id
        self.items = [spotify_track(n, explicit=n == 1) for n in range(track_count)]
        self.items.insert(2, {"added_at": "2026-10-01T00:00:00Z", "is_local": False, "track": None})  # removed track
        self.valid_tokens: set[str] = set()
        self.tokens_issued = 0
        self.artists_fault: str | None = None
        self.page_delay = 0.0  # seconds before each page of items (after the first) is answered
        super().__init__()

    @property
    def api_base(self) -> str:
        return self.url + "/v1"

    def expire_tokens(self):
        self.valid_tokens.clear()

    def page(self, offset: int) -> dict:
        chunk = self.items[offset: offset + self.PAGE]
        nxt = offset + self.PAGE
        base = f"{self.api_base}/playlists/{self.playlist_id}/tracks"
        return {"href": f"{base}?offset={offset}&limit={self.PAGE}", "items": chunk, "limit": self.PAGE,
                "next": f"{base}?offset={nxt}&limit={self.PAGE}" if nxt < len(self.items) else None,
                "offset": offset, "previous": None, "total": len(self.items)}

    def artists(self, handler, ids: list[str]):
        """GET /v1/artists?ids=a,b: full artist objects in the order asked, null for unknown ids."""
        if self.artists_fault == "500":
            return self.send(handler, 500, '{"error":{"status":500,"message":"Server error"}}')
        if self.artists_fault == "malformed":
            return self.send(handler, 200, '{"artists": [{"id": "half')
        if not ids or len(ids) > self.MAX_ARTIST_IDS:
            return self.send(handler, 400, '{"error":{"status":400,"message":"Too many ids requested"}}')
        known = {a["id"]: a for item in self.items if item["track"] for a in item["track"]["artists"]}
        self.send(handler, 200, json.dumps({"artists": [spotify_artist(known[i]) if i in known else None for i in ids]}))

    def respond(self, handler):
        parts = urlsplit(handler.path)
        if parts.path == "/api/token":
            length = int(handler.headers.get("Content-Length") or 0)
            form = parse_qs(handler.rfile.read(length).decode())
            expected = "Basic " + base64.b64encode(":".join(self.CLIENT).encode()).decode()
            if handler.headers.get("Authorization") != expected or form.get("grant_type") != ["client_credentials"]:
                return self.send(handler, 400, '{"error":"invalid_client","error_description":"Invalid client"}')
            token = "BQD" + secrets.token_hex(16)
            self.valid_tokens.add(token)
            self.tokens_issued += 1
            return self.send(handler, 200, json.dumps({"access_token": token, "token_type": "Bearer", "expires_in": 3600}))
        if handler.headers.get("Authorization", "").removeprefix("Bearer ") not in self.valid_tokens:
            return self.send(handler, 401, '{"error":{"status":401,"message":"The access token expired"}}')
        if self.common_fault(handler):
            return
        if self.fault == "malformed":
            return self.send(handler, 200, '{"id": "37i9", "name": "half a JSON')
        if self.fault == "huge":
            return self.send(handler, 200, b'{"padding": "' + b"x" * 6_000_000 + b'"}')
        if self.fault == "schema":
            return self.send(handler, 200, json.dumps({"id": self.playlist_id, "title": "renamed fields", "entries": []}))
        prefix = f"/v1/playlists/{self.playlist_id}"
        query = parse_qs(parts.query)
        if parts.path == prefix:
            return self.send(handler, 200, json.dumps({
                "collaborative": False, "description": "what I have on repeat",
                "external_urls": {"spotify": f"https://open.spotify.com/playlist/{self.playlist_id}"},
                "id": self.playlist_id, "name": "rn", "public": True, "type": "playlist",
                "owner": {"display_name": "Aadharsh", "id": "aadharsh", "type": "user"},
                "images": [{"url": "https://image-cdn-ak.spotifycdn.com/image/ab67706c", "height": None, "width": None}],
                "snapshot_id": "AAAAB3", "tracks": self.page(0)}))
        if parts.path == prefix + "/tracks" and self.fault == "loop":  # removed tracks, `next` pointing back
            page = self.page(0) | {"items": [self.items[2]], "next": f"{self.url}{parts.path}?offset=0"}
            return self.send(handler, 200, json.dumps(page))
        if parts.path == prefix + "/tracks" and self.fault == "endless":  # empty pages whose `next` never ends
            offset = int(query.get("offset", ["0"])[0])
            if offset > 100 * self.PAGE:  # a client still paging after a hundred empty pages would never stop
                return self.send(handler, 500, '{"error":{"status":500,"message":"Server error"}}')
            page = self.page(offset) if offset < len(self.items) else self.page(offset) | {"items": []}
            next_url = f"{self.url}{parts.path}?offset={offset + self.PAGE}"
            return self.send(handler, 200, json.dumps(page | {"next": next_url}))
        if parts.path == prefix + "/tracks":
            time.sleep(self.page_delay)
            return self.send(handler, 200, json.dumps(self.page(int(query.get("offset", ["0"])[0]))))
        if parts.path == "/v1/artists":
            return self.artists(handler, [i for i in query.get("ids", [""])[0].split(",") if i])
        self.send(handler, 404, '{"error":{"status":404,"message":"Resource not found"}}')


class IcsServer(LoopbackServer):
    """One ICS feed at /calendar.ics (the body is set by the test). With `redirect_to` set, every
    answer is a redirect there, `redirect_delay` seconds late (to /calendar.ics itself: a loop that
    ends when the client stops following)."""

    def __init__(self, ics: str = "", tls: ssl.SSLContext | None = None):
        self.ics = ics
        self.redirect_to: str | None = None
        self.redirect_delay = 0.0
        super().__init__(tls)

    @property
    def feed_url(self) -> str:
        return self.url + "/calendar.ics"

    def respond(self, handler):
        if self.redirect_to:
            time.sleep(self.redirect_delay)
            return self.send(handler, 302, "", "text/plain", {"Location": self.redirect_to})
        if self.common_fault(handler):
            return
        if self.fault == "huge":
            return self.send(handler, 200, b"BEGIN:VCALENDAR\r\n" + b"X-PAD:" + b"x" * 11_000_000, "text/calendar")
        if urlsplit(handler.path).path != "/calendar.ics":
            return self.send(handler, 404, "not found", "text/plain")
        self.send(handler, 200, self.ics, "text/calendar; charset=utf-8")


class FirmServer(LoopbackServer):
    """One firm's origin: a homepage at / (and at /home and /en/home, whatever `;name=value` path
    parameters they carry) and a robots.txt answered with `robots_status`. With `redirect_to` set, /
    redirects there, its {token} (hex), {TOKEN} (upper-case hex), {uuid} and {number} (13 digits,
    a time in milliseconds) new in every answer, as session ids and cache-busters are."""

    def __init__(self, title: str, robots: str = "User-agent: *\nAllow: /\n", robots_status: int = 200,
                 og_image: str = "/og.png", encoding: str = "utf-8"):
        self.title = title
        self.encoding = encoding
        self.description = f"{title} backs founders."
        self.og_image = og_image
        self.robots = robots
        self.robots_status = robots_status
        self.page_status = 200
        self.last_modified = "Tue, 03 Nov 2026 10:00:00 GMT"
        self.redirect_to: str | None = None
        super().__init__()

    def homepage(self) -> str:
        return (f"<!doctype html><html><head><title>{self.title}</title>"
                f'<meta name="description" content="{self.description}">'
                f'<meta property="og:image" content="{self.og_image}"></head><body><h1>{self.title}</h1>'
                + "<p>portfolio</p>" * 50 + "</body></html>")

    def noisy_homepage(self) -> str:
        """The homepage as a CDN serves it: a fresh nonce, challenge token and obfuscated e-mail link
        in every answer, and the same words."""
        token = secrets.token_hex(8)
        return self.homepage().replace("<head>", f'<head><script nonce="{token}">window.__CF$cv$params='
                                       f'{{r:"{token}",t:"{time.time()}"}}</script>').replace(
            "</h1>", f'</h1><a href="/cdn-cgi/l/email-protection#{token}" data-cfemail="{token}">[email protected]</a>')

    def respond(self, handler):
        path = urlsplit(handler.path).path.split(";")[0]
        if path == "/robots.txt":
            return self.send(handler, self.robots_status, self.robots, "text/plain")
        if path == "/" and self.redirect_to:
            token = secrets.token_hex(16)
            location = self.redirect_to.format(token=token, TOKEN=token.upper(), uuid=uuid.uuid4(),
                                               number=secrets.randbelow(9 * 10**12) + 10**12)
            return self.send(handler, 302, "", "text/plain", {"Location": location})
        if self.fault == "noise":
            return self.send(handler, 200, self.noisy_homepage(), "text/html; charset=utf-8")
        if self.fault == "slow":  # longer than the crawl's time limit in the tests, until the server closes
            self.closed.wait(10)
        if self.fault == "huge":
            return self.send(handler, 200, "<html><title>Huge</title>" + "a" * 400_000, "text/html")
        if path in ("/", "/home", "/en/home"):
            return self.send(handler, self.page_status, self.homepage().encode(self.encoding),
                             f"text/html; charset={self.encoding}",
                             {"Last-Modified": self.last_modified})
        if path == "/old":
            return self.send(handler, 301, "", "text/plain", {"Location": "/home"})
        self.send(handler, 404, "not found", "text/plain")


class ForwardProxy:
    """An HTTP proxy on 127.0.0.1: a request in absolute form (http://host/path) is sent on over a
    connection of its own and the answer relayed as it arrives, byte for byte; CONNECT host:port
    opens a tunnel (for https://). `requests` lists (method, target) as they come."""

    def __init__(self):
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                outer.requests.append((self.command, self.path))
                target = urlsplit(self.path)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = "".join(f"{name}: {value}\r\n" for name, value in self.headers.items()
                                  if name.lower() not in ("connection", "proxy-connection"))
                upstream = socket.create_connection((target.hostname, target.port or 80))
                upstream.sendall(f"{self.command} {target.path or '/'}{'?' + target.query if target.query else ''} "
                                 f"HTTP/1.1\r\n{headers}Connection: close\r\n\r\n".encode() + body)
                head = b""
                while b"\r\n" not in head and (chunk := upstream.recv(65536)):
                    head += chunk
                status, _, rest = head.partition(b"\r\n")
                # one answer per connection: the client must not send its next request down this one
                self.connection.sendall(status + b"\r\nConnection: close\r\n" + rest)
                self.close_connection = True
                outer.relay(upstream, self.connection)

            do_POST = do_GET

            def do_CONNECT(self):
                outer.requests.append((self.command, self.path))
                host, _, port = self.path.rpartition(":")
                upstream = socket.create_connection((host, int(port)))
                self.send_response(200, "Connection established")
                self.end_headers()
                self.close_connection = True
                outer.relay(upstream, self.connection)

            def log_message(self, *args):
                pass

        self.requests: list[tuple[str, str]] = []
        self.closed = threading.Event()
        self.httpd = QuietServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def relay(self, upstream: socket.socket, client: socket.socket) -> None:
        """Bytes both ways until either side closes (or the proxy does)."""
        with upstream:
            while not self.closed.is_set():
                ready, _, _ = select.select([upstream, client], [], [], 0.05)
                for sock in ready:
                    try:
                        data = sock.recv(65536)
                        if data:
                            (client if sock is upstream else upstream).sendall(data)
                    except OSError:
                        data = b""
                    if not data:
                        return

    def close(self):
        self.closed.set()
        self.httpd.shutdown()
        self.httpd.server_close()


class BlackHole:
    """A loopback port whose connects hang, as a host that drops every packet: Linux drops a SYN to a
    listener whose accept queue is full, and this one never accepts."""

    def __init__(self):
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(0)
        self.fillers = []
        for _ in range(3):
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(self.listener.getsockname())
            self.fillers.append(filler)
        time.sleep(0.2)  # the handshakes that fit complete and fill the queue

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}/calendar.ics"

    def close(self):
        for sock in (*self.fillers, self.listener):
            sock.close()


class SilentNameServer:
    """A DNS server on port 53 of a loopback address (127.0.53.n, the first free; binding port 53
    needs root) that reads every query and answers none, as a resolver whose upstream is down.
    `names` lists the names asked, as they come."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for n in range(1, 255):
            with contextlib.suppress(OSError):
                self.sock.bind((f"127.0.53.{n}", 53))
                break
        else:
            raise OSError("No 127.0.53.n address has port 53 free.")
        self.address = self.sock.getsockname()[0]
        self.names: list[str] = []
        self.closed = threading.Event()
        self.thread = threading.Thread(target=self._listen, daemon=True)
        self.thread.start()

    def _listen(self) -> None:
        while not self.closed.is_set():
            if not select.select([self.sock], [], [], 0.05)[0]:
                continue
            query = self.sock.recv(512)
            labels, at = [], 12  # the question's name follows the 12-byte header, label by label
            while at < len(query) and query[at]:
                labels.append(query[at + 1:at + 1 + query[at]].decode("ascii", "replace"))
                at += 1 + query[at]
            self.names.append(".".join(labels))

    def close(self):
        self.closed.set()
        self.thread.join()
        self.sock.close()


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(str(value))


def feeds_settings(tmp_path, feeds: dict | None = None, access_log: str = ""):
    """A real site.toml in `tmp_path` with a `[feeds]` table, loaded the way the app loads it."""
    from siteapi.config import load_settings

    feeds = dict(feeds or {})
    roster = feeds.pop("around_roster", None)
    lines = [
        'site_name = "aadhar.sh"', 'site_host = "aadhar.sh"', 'public_base_url = "https://aadhar.sh"',
        'content_dir = "content"', 'db_path = "site.db"', 'photos_dir = "photos"', 'images_dir = "images"',
        f"access_log = {_toml_value(access_log)}",
        "[rate]", "read_q = 120", "read_w = 60", "inspect_q = 30", "inspect_w = 60", "compare_q = 4",
        "compare_w = 60", "ask_model_q = 20", "ask_model_w = 60",
        "[feeds]", *(f"{k} = {_toml_value(v)}" for k, v in feeds.items()),
    ]
    for firm in roster or []:
        lines += ["[[feeds.around_roster]]", *(f"{k} = {_toml_value(v)}" for k, v in firm.items())]
    path = tmp_path / "site.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return load_settings(path)


@contextlib.contextmanager
def trusted_tls_ics(monkeypatch, body: str):
    """An IcsServer over TLS whose test CA requests trusts (REQUESTS_CA_BUNDLE) inside the block."""
    ca = trustme.CA()
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(tls)
    server = IcsServer(body, tls=tls)
    try:
        with ca.cert_pem.tempfile() as bundle:
            monkeypatch.setenv("REQUESTS_CA_BUNDLE", bundle)
            yield server
    finally:
        server.close()
