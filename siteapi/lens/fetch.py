"""The safe fetcher: the one way the product fetches a URL someone else chose.

Rules, in the order they apply: `https://` is assumed when no scheme is given; only http and
https, ports 80 and 443, no credentials; the host is IDNA-normalised and private names
(`.local`, `.internal`, `.onion`, `localhost` ...) are refused; every A/AAAA answer is checked
against the address policy and the connection goes to the address that was checked (TLS SNI,
certificate check and `Host` stay the name), so DNS rebinding cannot slip in between; redirects
are followed by hand, at most `max_redirects`, each hop checked again from the top; one deadline
covers the whole fetch (DNS, connect, TLS, headers, body, every hop); the raw body is capped and
the decoded body is capped while decompressing, so a compression bomb costs nothing, and at most
MAX_CODINGS stacked Content-Encodings are decoded. Each hop is signed for its own authority (Web
Bot Auth, `siteapi.botauth`) when the fetcher has a signer, as the production fetcher does
whenever the site's key can be read or made. A copy made by `visiting(visit)` shows `visit` each
hop's Target before opening it: how a scan spends the per-target budget (targets.py), and how the
neighborhood crawl asks each hop's robots.txt (feeds/around.py).

Built on urllib3 (the transport under requests) rather than a requests adapter: a connection
pool aimed at the checked IP with `server_hostname`/`assert_hostname` set to the name is
urllib3's own documented way to pin an address, and requests' extra layers (its redirect
logic, proxy and netrc lookups from the environment, transparent decoding) would each have had
to be switched off for safety.

The address policy, the name->address resolver and the CA bundle (certifi's by default) are
seams: tests build `Fetcher(policy=AddressPolicy(allow={("127.0.0.1", port)}), resolve=stub)`.
The production policy is the default and nothing a caller sends can loosen it.
"""
from __future__ import annotations

import copy
import io
import ipaddress
import re
import time
import zlib
from dataclasses import dataclass, field
from http.client import BadStatusLine, HTTPResponse, LineTooLong, RemoteDisconnected, parse_headers
from typing import Callable, Iterable, Mapping
from urllib.parse import quote, urljoin, urlsplit

import brotli
import certifi
import idna
import urllib3
import zstandard
from urllib3.exceptions import (ConnectTimeoutError, HTTPError, NameResolutionError, NewConnectionError,
                                ProtocolError, ReadTimeoutError, SSLError)

from siteapi.botauth import BotSigner, signer_for
from siteapi.feeds.crawlers import PRODUCT_USER_AGENT
from siteapi.watchdog import WatchedHTTPConnection, WatchedHTTPSConnection, Watchdog, watching

from .settings import lens_settings

USER_AGENT = PRODUCT_USER_AGENT  # the bot's one identity lives in the crawler registry
CHROME_UA = ("Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 (KHTML, like Gecko) "
             "Chrome/141.0.0.0 Safari/537.36")  # desktop Chrome: the bot views' control, vault's browser profile
ACCEPT_HTML = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
ACCEPT_ENCODING = "gzip, deflate, br, zstd"
REDIRECT_STATUSES = {301, 302, 303, 307, 308}
MAX_URL_CHARS = 2048
MAX_HEADER_VALUE = 4096
READ_GRACE_S = 1.0
TIMEOUT_SENTENCE = "The site took too long to answer ({seconds}s timeout)."


class FetchRefused(Exception):
    """The URL is not one the lens fetches (answered 400); the message says why."""


class FetchFailed(Exception):
    """The target could not be fetched (answered 502); the message says what happened."""


# --- address policy -------------------------------------------------------------------------

_METADATA = "a cloud metadata address"
_DENIED_NETWORKS = [(ipaddress.ip_network(net), label) for net, label in [
    # cloud metadata first, so the sentence names it even where a wider class also matches
    ("169.254.169.254/32", _METADATA), ("169.254.170.2/32", _METADATA), ("168.63.129.16/32", _METADATA),
    ("100.100.100.200/32", _METADATA), ("192.0.0.192/32", _METADATA), ("fd00:ec2::254/128", _METADATA),
    ("255.255.255.255/32", "the broadcast address"),
    ("0.0.0.0/8", "an unspecified (this-network) address"),
    ("10.0.0.0/8", "a private network address"), ("172.16.0.0/12", "a private network address"),
    ("192.168.0.0/16", "a private network address"),
    ("100.64.0.0/10", "a shared (CGNAT) address"),
    ("127.0.0.0/8", "a loopback address"),
    ("169.254.0.0/16", "a link-local address"),
    ("192.0.0.0/24", "a reserved protocol address"),
    ("192.0.2.0/24", "a documentation address"), ("198.51.100.0/24", "a documentation address"),
    ("203.0.113.0/24", "a documentation address"),
    ("192.88.99.0/24", "an IPv6 transition relay address"),
    ("198.18.0.0/15", "a benchmarking address"),
    ("224.0.0.0/4", "a multicast address"),
    ("240.0.0.0/4", "a reserved address"),
    ("::/128", "an unspecified address"), ("::1/128", "a loopback address"),
    ("::ffff:0:0/96", "an IPv4-mapped IPv6 address"), ("::/96", "an IPv4-compatible IPv6 address"),
    ("64:ff9b::/96", "a NAT64 address"), ("64:ff9b:1::/48", "a NAT64 address"),
    ("100::/64", "a discard-only address"),
    ("2001::/32", "a Teredo address"), ("2001:db8::/32", "a documentation address"),
    ("3fff::/20", "a documentation address"),  # RFC 9637 (2024), inside 2000::/3
    ("2001::/23", "a reserved protocol address"),
    ("2002::/16", "a 6to4 address"),
    ("fc00::/7", "a private (unique local) address"),
    ("fe80::/10", "a link-local address"), ("fec0::/10", "a site-local address"),
    ("ff00::/8", "a multicast address"),
]]
_GLOBAL_UNICAST_V6 = ipaddress.ip_network("2000::/3")
DENIED_NAME_SUFFIXES = ("localhost", "local", "internal", "onion", "home.arpa", "arpa", "localdomain")


def classify_address(address: str) -> str | None:
    """Why `address` is not a public internet address, or None when it is."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return "not a valid address"
    for network, label in _DENIED_NETWORKS:
        if ip.version == network.version and ip in network:
            return label
    if ip.version == 6 and ip not in _GLOBAL_UNICAST_V6:
        return "a reserved address"
    if not ip.is_global:  # belt and braces for classes registered after this table was written
        return "a reserved address"
    return None


@dataclass(frozen=True)
class AddressPolicy:
    """Which (address, port) pairs the fetcher may connect to.

    The default instance is the production policy: public addresses on ports 80 and 443 only.
    `allow` lists exact (ip, port) exceptions; only tests construct one.
    """
    allow: frozenset = frozenset()

    def port_allowed(self, port: int) -> bool:
        return port in (80, 443) or any(port == allowed_port for _, allowed_port in self.allow)

    def refusal(self, address: str, port: int) -> str | None:
        """A short reason the pair is refused, or None."""
        if (address, port) in self.allow:
            return None
        return classify_address(address) or (None if port in (80, 443) else "a port other than 80 and 443")


PRODUCTION_POLICY = AddressPolicy()


def resolve_dns(host: str, timeout: float) -> list[str]:
    """Every A and AAAA answer for `host` (dnspython, bounded by `timeout`)."""
    import dns.exception
    import dns.resolver

    resolver = dns.resolver.Resolver()
    answers: list[str] = []
    deadline = time.monotonic() + timeout
    for rdtype in ("A", "AAAA"):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        try:
            answers += [r.address for r in resolver.resolve(host, rdtype, lifetime=remaining)]
        except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer, dns.resolver.NoNameservers):
            continue
        except dns.exception.Timeout:
            break
    return answers


# --- URL rules ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Target:
    scheme: str
    host: str          # ASCII (IDNA) host, no brackets
    port: int
    path: str          # path + query, what goes on the request line
    literal: bool      # the host is an IP address

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"

    @property
    def origin(self) -> str:
        return f"{self.scheme}://{self.host_header}"

    @property
    def url(self) -> str:
        return self.origin + self.path


_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
# `name:` without `//` names a scheme (mailto:, data:, tel:) unless a port follows (localhost:8080);
# a name with a dot is a host (example.com:8080)
_BARE_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+-]*):(?!\d{1,5}(?:[/?#]|$))")
_NOT_A_NAME = ("The host name is not a valid internet name (labels of letters, digits, hyphens or underscores "
               "between dots, each at most 63 characters, 253 in all); send a name such as example.com.")
_IPV6_IN_BRACKETS = "An IPv6 address in a URL goes in brackets; send it as https://[2606:4700::1]/."
_IPV6_NOT_VALID = "The URL's IPv6 address is not valid; write a valid one in brackets, such as https://[2606:4700::1]/."
_SCHEME_REFUSED = "Only http and https URLs can be inspected, not {} URLs; send one such as https://example.com/."
_NUMERIC_LABEL = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$")
_ASCII_LABEL = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")
_PATH_SAFE = "/%:@!$&'()*+,;=-._~"
_QUERY_SAFE = _PATH_SAFE + "?"


def parse_target(raw: str, policy: AddressPolicy = PRODUCTION_POLICY) -> Target:
    """Normalise and check a URL before any network step; raises FetchRefused with a sentence."""
    text = (raw or "").strip()
    if not text:
        raise FetchRefused("Send the address to inspect as url, for example url=https://example.com/.")
    if len(text) > MAX_URL_CHARS:
        raise FetchRefused(f"The URL is longer than {MAX_URL_CHARS} characters; send a shorter one.")
    if any(ord(c) < 32 or c in "\\" for c in text):
        raise FetchRefused("The URL contains control characters or backslashes; send a plain http(s) URL.")
    if not _SCHEME.match(text):
        text = _with_scheme(text)
    try:
        parts = urlsplit(text)
    except ValueError as exc:  # an unclosed or invalid [IPv6] host, or characters NFKC turns into delimiters
        if "[" in text:
            raise FetchRefused(_IPV6_NOT_VALID) from None
        raise FetchRefused(f"The URL cannot be read ({exc}); send a plain http(s) URL such as https://example.com/.") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise FetchRefused(_SCHEME_REFUSED.format(scheme))
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise FetchRefused("URLs with credentials (user:password@) are refused; send the URL without them.")
    try:
        port = parts.port
    except ValueError:
        if parts.netloc.count(":") > 1 and "[" not in parts.netloc:  # https://2001:db8::1/ reads as a host and a port
            raise FetchRefused(_IPV6_IN_BRACKETS) from None
        raise FetchRefused("The URL's port is not a number from 1 to 65535; leave the port out (only 80 and 443 are "
                           "inspected).") from None
    if port is None:
        port = 443 if scheme == "https" else 80
    if not policy.port_allowed(port):
        raise FetchRefused("Only ports 80 and 443 can be inspected; send the URL without another port.")
    host, literal = _normalise_host(parts.hostname or "", parts.netloc)
    path = quote(parts.path or "/", safe=_PATH_SAFE)
    if parts.query:
        path += "?" + quote(parts.query, safe=_QUERY_SAFE)
    return Target(scheme, host, port, path, literal)


def _with_scheme(text: str) -> str:
    """A URL written without `scheme://`, with its scheme spelled out or https:// assumed. Like
    WHATWG URL parsing, http:host and https:/host are read as http(s)://host."""
    if text.startswith("//"):
        return "https:" + text
    bare = _BARE_SCHEME.match(text)
    if bare is None:
        return "https://" + text
    if bare.group(1).lower() not in ("http", "https"):
        raise FetchRefused(_SCHEME_REFUSED.format(bare.group(1).lower()))
    return f"{bare.group(1)}://{text[bare.end():].lstrip('/')}"


def _ascii_name(name: str) -> str:
    """The name in ASCII: a label of letters, digits, hyphens and underscores is kept as it is, lower
    case, as DNS and browsers take it (sub_domain.example.com, r3---sn-abc.googlevideo.com, which
    IDNA 2008 refuses for its `--` in positions 3-4); other labels, and A-labels (xn--), are checked
    and encoded by IDNA 2008 (the idna package)."""
    labels = [label.lower() if _ASCII_LABEL.fullmatch(label) and not label.lower().startswith("xn--")
              else idna.encode(label, uts46=True).decode("ascii").lower() for label in name.split(".")]
    ascii_name = ".".join(labels)
    if len(ascii_name) > 253:
        raise idna.IDNAError("Domain too long")
    return ascii_name


def _normalise_host(hostname: str, netloc: str) -> tuple[str, bool]:
    if not hostname:
        raise FetchRefused("The URL has no host name; send a full address such as https://example.com/.")
    if "[" in netloc:
        if "%" in hostname:
            raise FetchRefused("IPv6 addresses with a zone index are refused; send a public address.")
        try:
            return str(ipaddress.IPv6Address(hostname)), True
        except ValueError:
            raise FetchRefused(_IPV6_NOT_VALID) from None
    try:
        # Mapped first: full-width digits and ideographic dots (１２７。０.０.１) spell addresses too.
        name = idna.uts46_remap(hostname, std3_rules=False).rstrip(".")
    except (idna.IDNAError, UnicodeError, ValueError):
        raise FetchRefused(_NOT_A_NAME) from None
    try:
        return str(ipaddress.IPv4Address(name)), True
    except ValueError:
        pass
    if _NUMERIC_LABEL.match(name.split(".")[-1]):
        # 2130706433, 0x7f.1, 017700000001 and friends: addresses in disguise
        raise FetchRefused("The host is a numeric address in a non-standard form; write it as a dotted address or a name.")
    try:
        ascii_name = _ascii_name(name)
    except (idna.IDNAError, UnicodeError, ValueError):
        raise FetchRefused(_NOT_A_NAME) from None
    for suffix in DENIED_NAME_SUFFIXES:
        if ascii_name == suffix or ascii_name.endswith("." + suffix):
            raise FetchRefused(f"Names under .{suffix} are private and are not inspected; send a public host.")
    if "." not in ascii_name:
        raise FetchRefused("The host name has no dot; send a public name such as example.com.")
    return ascii_name, False


# --- decoding -------------------------------------------------------------------------------

def _inflate(data: bytes, limit: int, wbits: int) -> bytes:
    out = bytearray()
    pending = data
    while pending and len(out) <= limit:
        decoder = zlib.decompressobj(wbits)
        while pending and len(out) <= limit and not decoder.eof:
            before = len(pending)
            out += decoder.decompress(pending, limit + 1 - len(out))
            pending = decoder.unconsumed_tail
            if len(pending) == before and not decoder.eof and len(out) <= limit:
                break
        if not decoder.eof:
            break
        pending = decoder.unused_data  # another gzip member follows
    return bytes(out)


def _gunzip(data: bytes, limit: int) -> bytes:
    return _inflate(data, limit, 16 + zlib.MAX_WBITS)


def _deflate(data: bytes, limit: int) -> bytes:
    try:
        return _inflate(data, limit, zlib.MAX_WBITS)
    except zlib.error:
        return _inflate(data, limit, -zlib.MAX_WBITS)  # servers that send raw deflate


def _unbrotli(data: bytes, limit: int) -> bytes:
    decoder = brotli.Decompressor()
    out = bytearray(decoder.process(data, output_buffer_limit=limit + 1))
    while len(out) <= limit and not decoder.is_finished() and not decoder.can_accept_more_data():
        out += decoder.process(b"", output_buffer_limit=limit + 1 - len(out))
    return bytes(out)


def _unzstd(data: bytes, limit: int) -> bytes:
    # an 8 MiB window is what browsers accept for zstd content-encoding; bigger frames are refused
    decoder = zstandard.ZstdDecompressor(max_window_size=8 * 1024 * 1024)
    out = bytearray()
    with decoder.stream_reader(io.BytesIO(data), read_across_frames=True) as reader:
        while len(out) <= limit:
            chunk = reader.read(limit + 1 - len(out))
            if not chunk:
                break
            out += chunk
    return bytes(out)


_DECODERS: dict[str, Callable[[bytes, int], bytes]] = {
    "gzip": _gunzip, "x-gzip": _gunzip, "deflate": _deflate, "br": _unbrotli, "zstd": _unzstd,
}
_DECODE_ERRORS = (zlib.error, brotli.error, zstandard.ZstdError, EOFError, ValueError)
# curl and urllib3 refuse a longer chain too; each layer is one more pass over up to `limit` bytes
MAX_CODINGS = 5


def decode_body(raw: bytes, content_encoding: str, limit: int, raw_truncated: bool) -> tuple[bytes, bool, dict | None]:
    """(decoded body, decoded cap hit, bodyUnreadable or None). Output never exceeds `limit`."""
    codings = [c.strip().lower() for c in content_encoding.split(",") if c.strip()]
    codings = [c for c in codings if c != "identity"]
    if len(codings) > MAX_CODINGS:
        return b"", False, {"reason": "undecodable-content-encoding", "encoding": ", ".join(codings)[:64]}
    body, capped = raw, False
    for coding in reversed(codings):
        decoder = _DECODERS.get(coding)
        if decoder is None:
            return b"", False, {"reason": "undecodable-content-encoding", "encoding": coding[:64]}
        try:
            body = decoder(body, limit)
        except _DECODE_ERRORS:
            if not raw_truncated:  # a cut-off stream fails at its end; a whole one must not
                return b"", False, {"reason": "undecodable-content-encoding", "encoding": coding[:64]}
            body = b""
        if len(body) > limit:
            body, capped = body[:limit], True
    return body, capped, None


# --- deadline -------------------------------------------------------------------------------

class _FinalResponse(HTTPResponse):
    """Skips interim 1xx answers such as 103 Early Hints: http.client skips only 100 Continue and
    would report the hint as the final status with an empty body."""

    def _read_status(self):
        while True:
            version, status, reason = super()._read_status()
            if status >= 200 or status in (100, 101):
                return version, status, reason
            parse_headers(self.fp)  # the interim answer's headers


class _WatchedHTTPConnection(WatchedHTTPConnection):
    response_class = _FinalResponse


class _WatchedHTTPSConnection(WatchedHTTPSConnection):
    response_class = _FinalResponse


# --- the fetcher ----------------------------------------------------------------------------

@dataclass
class FetchResult:
    url: str                      # the normalised URL asked for
    final_url: str
    status: int
    headers: dict[str, str]       # lowercased names, repeated headers joined with ", "
    body: bytes                   # decoded (Content-Encoding removed), at most the cap
    raw_bytes: int                # bytes received on the wire for the final response
    truncated: bool
    elapsed_ms: int
    redirects: list[str] = field(default_factory=list)
    body_unreadable: dict | None = None

    @property
    def redirected(self) -> bool:
        return bool(self.redirects)

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "")


class Fetcher:
    """Fetches URLs under one address policy, resolver and set of limits (thread-safe)."""

    def __init__(self, policy: AddressPolicy = PRODUCTION_POLICY,
                 resolve: Callable[[str, float], Iterable[str]] = resolve_dns,
                 timeout_s: float = 8.0, max_redirects: int = 5, cap_bytes: int = 2 * 1024 * 1024,
                 signer: BotSigner | None = None, ca_certs: str | None = None):
        self.policy = policy
        self.resolve = resolve
        self.timeout_s = timeout_s
        self.max_redirects = max_redirects
        self.cap_bytes = cap_bytes
        self.signer = signer  # Web Bot Auth: each hop signed for its own authority
        self.ca_certs = ca_certs or certifi.where()
        self.visit: Callable[[Target], None] | None = None

    def visiting(self, visit: Callable[[Target], None]) -> "Fetcher":
        """This fetcher calling `visit(target)` before every hop it opens; an exception `visit`
        raises ends the fetch."""
        twin = copy.copy(self)
        twin.visit = visit
        return twin

    def check(self, url: str) -> Target:
        """The URL's rules, and the address policy for a literal address, without any network step."""
        target = parse_target(url, self.policy)
        reason = self.policy.refusal(target.host, target.port) if target.literal else None
        if reason:
            raise FetchRefused(f"The URL points to {reason}; the lens only fetches public internet addresses on ports 80 and 443.")
        return target

    def fetch(self, url: str, headers: Mapping[str, str] | None = None, *, cap_bytes: int | None = None,
              deadline: float | None = None, keep_partial: bool = False) -> FetchResult:
        """GET `url`, following redirects by hand. Raises FetchRefused or FetchFailed. With
        `keep_partial`, a body still arriving at the deadline (an event stream that stays open) is
        returned as far as it came, marked truncated, instead of failing the fetch."""
        started = time.monotonic()
        deadline = min(deadline or float("inf"), started + self.timeout_s)
        cap = cap_bytes or self.cap_bytes
        target = parse_target(url, self.policy)
        asked = target.url
        redirects: list[str] = []
        with watching(deadline) as watchdog:
            while True:
                if self.visit is not None:
                    self.visit(target)
                response = self._open(target, headers or {}, watchdog, hop=len(redirects))
                location = _header_text(response.headers.get("location", ""))
                if response.status not in REDIRECT_STATUSES or not location:
                    raw, raw_truncated = self._read(response, cap, watchdog, keep_partial)
                    break
                response.close()
                if len(redirects) >= self.max_redirects:
                    raise FetchFailed(f"The site redirected more than {self.max_redirects} times.")
                redirects.append(target.url)
                joined = join_url(target.url, location.strip())
                if joined is None:
                    raise FetchFailed(f"The site redirected to a malformed URL ({location.strip()[:200]!r}).")
                try:
                    target = parse_target(joined, self.policy)
                except FetchRefused as refused:
                    raise FetchFailed(f"The site redirected to a URL the lens refuses: {refused}") from None
                if target.url in redirects:
                    raise FetchFailed("The site redirects in a loop.")
        if watchdog.fired and not keep_partial:
            raise _timed_out(watchdog.budget_s)
        out_headers = _headers(response)
        raw_truncated = raw_truncated or watchdog.fired
        body, decoded_capped, unreadable = decode_body(raw, out_headers.get("content-encoding", ""), cap, raw_truncated)
        return FetchResult(
            url=asked, final_url=target.url, status=response.status, headers=out_headers, body=body,
            raw_bytes=len(raw), truncated=raw_truncated or decoded_capped,
            elapsed_ms=int((time.monotonic() - started) * 1000), redirects=redirects, body_unreadable=unreadable,
        )

    def check_addresses(self, target: Target) -> None:
        """Every address a checked target's name resolves to, against the policy, without connecting:
        for a URL that someone else fetches (mode=cloudflare's scanner), so a name that leads inside
        is refused (FetchRefused) as a fetch would refuse it. FetchFailed when it does not resolve."""
        self._addresses(target, time.monotonic() + self.timeout_s, self.timeout_s, hop=0)

    def _addresses(self, target: Target, deadline: float, budget_s: float, hop: int) -> list[str]:
        if target.literal:
            addresses = [target.host]
        else:
            try:
                addresses = [str(a) for a in self.resolve(target.host, max(0.1, deadline - time.monotonic()))]
            except Exception:  # a resolver failure of any kind is the target's, not ours
                addresses = []
            if not addresses:
                if deadline <= time.monotonic():
                    raise _timed_out(budget_s)
                raise FetchFailed(f"The name {target.host} does not resolve to an address; check its spelling, or "
                                  f"retry later if the site's DNS is down.")
        for address in addresses:  # every answer, so one public record cannot cover a private one
            reason = self.policy.refusal(address, target.port)
            if reason:
                where = "The site redirected to" if hop else "The URL points to"
                raise (FetchFailed if hop else FetchRefused)(
                    f"{where} {reason}; the lens only fetches public internet addresses on ports 80 and 443.")
        return addresses

    def _open(self, target: Target, extra: Mapping[str, str], watchdog: Watchdog, hop: int):
        addresses = self._addresses(target, watchdog.deadline, watchdog.budget_s, hop)
        request_headers = {"Host": target.host_header, "User-Agent": USER_AGENT, "Accept": ACCEPT_HTML,
                           "Accept-Encoding": ACCEPT_ENCODING, "Connection": "close"}
        request_headers.update({k: v for k, v in extra.items() if k.lower() != "host"})
        if self.signer is not None:
            request_headers.update(self.signer.request_headers(target.url))
        last_error: Exception | None = None
        for address in addresses[:2]:
            remaining = watchdog.remaining()
            if remaining <= 0:
                break
            pool = self._pool(target, address, remaining)
            try:
                return pool.urlopen("GET", target.path, headers=request_headers, redirect=False, retries=False,
                                    preload_content=False, decode_content=False, assert_same_host=False,
                                    release_conn=False)
            except (NewConnectionError, ConnectTimeoutError) as exc:
                last_error = exc  # try the next checked address
            except Exception as exc:
                raise self._failure(exc, watchdog, target) from None
        raise self._failure(last_error, watchdog, target)

    def _pool(self, target: Target, address: str, remaining: float):
        # The socket's own read timeout sits past the deadline, so the watchdog is what ends a slow
        # body: a read timeout at the same moment won half the races on a busy machine, and
        # http.client drops the bytes a timed-out read had gathered.
        timeout = urllib3.Timeout(connect=remaining, read=remaining + READ_GRACE_S)
        if target.scheme == "https":
            pool = urllib3.HTTPSConnectionPool(
                address, target.port, timeout=timeout, maxsize=1, retries=False, cert_reqs="CERT_REQUIRED",
                ca_certs=self.ca_certs, assert_hostname=target.host,
                server_hostname=None if target.literal else target.host)
            pool.ConnectionCls = _WatchedHTTPSConnection
        else:
            pool = urllib3.HTTPConnectionPool(address, target.port, timeout=timeout, maxsize=1, retries=False)
            pool.ConnectionCls = _WatchedHTTPConnection
        return pool

    def _read(self, response, cap: int, watchdog: Watchdog, keep_partial: bool) -> tuple[bytes, bool]:
        raw = bytearray()
        try:
            while len(raw) <= cap:
                # read1: what has arrived, at once; a read of n bytes waits for all n or the end
                chunk = response.read1(min(65536, cap + 1 - len(raw)), decode_content=False)
                if not chunk:
                    break
                raw += chunk
        except Exception:
            if (watchdog.fired or watchdog.remaining() <= 0) and not keep_partial:
                raise _timed_out(watchdog.budget_s) from None
            # the connection broke mid-body, or time ran out on a kept stream: keep what arrived
            # and say it is incomplete
            return bytes(raw[:cap]), True
        finally:
            response.close()
        return bytes(raw[:cap]), len(raw) > cap

    def _failure(self, exc: Exception | None, watchdog: Watchdog, target: Target) -> FetchFailed:
        # NewConnectionError subclasses ConnectTimeoutError in urllib3, so it is sorted out first
        connect_failed = isinstance(exc, NewConnectionError) and not any(isinstance(c, TimeoutError) for c in _causes(exc))
        if watchdog.fired or watchdog.remaining() <= 0 or (
                isinstance(exc, (ConnectTimeoutError, ReadTimeoutError)) and not connect_failed):
            return _timed_out(watchdog.budget_s)
        cause = next((c for c in _causes(exc) if isinstance(c, (BadStatusLine, LineTooLong, RemoteDisconnected,
                                                               ConnectionResetError, ConnectionRefusedError))), None)
        if isinstance(cause, RemoteDisconnected):
            return FetchFailed("The site closed the connection without answering.")
        if isinstance(cause, (BadStatusLine, LineTooLong)):
            return FetchFailed("The site answered with something that is not a valid HTTP response.")
        if isinstance(cause, ConnectionResetError):
            return FetchFailed("The site reset the connection.")
        if isinstance(cause, ConnectionRefusedError) or connect_failed:
            return FetchFailed("The site refused the connection.")
        if isinstance(exc, SSLError):
            return FetchFailed(f"The TLS connection to {target.host} failed (certificate or handshake).")
        if isinstance(exc, (ProtocolError, NameResolutionError, HTTPError, OSError)):
            return FetchFailed("The site could not be reached or broke the connection.")
        return FetchFailed("The site could not be fetched.")


def _causes(exc: BaseException | None, depth: int = 6):
    """The exception and what it wraps (urllib3 puts the low-level error in args or the chain)."""
    while exc is not None and depth:
        yield exc
        inner = [a for a in exc.args if isinstance(a, BaseException)]
        exc = inner[0] if inner else (exc.__cause__ or exc.__context__)
        depth -= 1


def join_url(base: str, reference: str) -> str | None:
    """`reference` resolved against `base`, or None when it cannot be (urljoin raises on a broken
    bracketed host such as `http://[YOUR-DOMAIN]/`, which templates leave in real pages)."""
    try:
        return urljoin(base, reference)
    except ValueError:
        return None


def _header_text(value: str) -> str:
    """A header value as browsers read it: http.client decodes the bytes as ISO-8859-1, and bytes
    that are valid UTF-8 (a raw `Location: /café`, common) are read as UTF-8 instead."""
    try:
        return value.encode("latin-1").decode("utf-8")
    except UnicodeError:
        return value


def _headers(response) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in response.headers.items():
        key = name.lower()
        value = _header_text(value)[:MAX_HEADER_VALUE]
        out[key] = f"{out[key]}, {value}" if key in out else value
    return out


def _timed_out(budget_s: float) -> FetchFailed:
    """The timeout failure, naming the budget this fetch had (a probe's is shorter than a page's)."""
    seconds = round(budget_s, 1)
    return FetchFailed(TIMEOUT_SENTENCE.format(seconds=int(seconds) if seconds.is_integer() else seconds))


def fetcher_from_settings(settings) -> Fetcher:
    """The production fetcher with the operator's limits (never a looser address policy)."""
    conf = lens_settings(settings)
    return Fetcher(timeout_s=conf["timeout_s"], max_redirects=conf["max_redirects"],
                   cap_bytes=conf["raw_cap_kb"] * 1024, signer=signer_for(settings))
