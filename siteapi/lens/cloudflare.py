"""mode=cloudflare of `/lens/fetch`: a CDN's agent-readiness level for a URL, read from its public
scanner over MCP (initialize, then the scan_site tool) and cached per URL for
`[lens] cloudflare_cache_hours` (cache.py).
"""
from __future__ import annotations

import json
import re
import sqlite3
from urllib.parse import quote

import requests

from ..ratelimit import TargetBudget
from . import cache, observe, targets
from .fetch import USER_AGENT, FetchFailed, Fetcher, FetchRefused, fetcher_from_settings
from .settings import scan_settings

SCANNER_SOURCE = "Cloudflare agent-readiness scanner (isitagentready.com)"
LEVEL_NAME_CHARS = 120
_LEVEL = re.compile(r"Level\s+([0-5])\s*/\s*5\s*(?:[—–:-]+\s*([^\n\r\"*]+))?", re.I)


class ScannerError(Exception):
    pass


def _rpc(session: requests.Session, url: str, message: dict, headers: dict, timeout: float, cap: int = 192 * 1024):
    # Not followed: only the URL under test passes the address policy, so a hop could lead anywhere,
    # loopback and the metadata address included.
    response = session.post(url, json=message, headers=headers, timeout=timeout, stream=True, allow_redirects=False)
    if 300 <= response.status_code < 400:
        response.close()
        raise ScannerError(f"the scanner answered {response.status_code} (a redirect, not followed)")
    raw = b""
    for chunk in response.iter_content(16384):
        raw += chunk
        if len(raw) > cap:
            break
    response.close()
    if response.status_code >= 400:
        raise ScannerError(f"the scanner answered {response.status_code}")
    text = raw[:cap].decode("utf-8", errors="replace")
    if "text/event-stream" in response.headers.get("content-type", ""):
        frames = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
        text = next((f for f in frames if '"id"' in f), frames[-1] if frames else "")
    try:
        body = json.loads(text)
    except (ValueError, RecursionError):
        raise ScannerError("the scanner's answer is not JSON-RPC") from None
    if not isinstance(body, dict) or "error" in body and body["error"]:
        raise ScannerError(f"the scanner returned an error: {str((body or {}).get('error'))[:200]}")
    return body.get("result"), response.headers.get("mcp-session-id")


def _read_level(result) -> tuple[int, str | None]:
    if isinstance(result, dict):
        if result.get("isError"):
            raise ScannerError("the scanner's scan_site tool reported an error")
        structured = result.get("structuredContent")
        # type(...) is int: JSON's true is a Python int too, and would read as level 1
        if isinstance(structured, dict) and type(structured.get("level")) is int and 0 <= structured["level"] <= 5:
            name = structured.get("levelName")
            name = " ".join(name.split())[:LEVEL_NAME_CHARS] if isinstance(name, str) else ""
            return structured["level"], name or None
        text = " ".join(c.get("text", "") for c in result.get("content") or [] if isinstance(c, dict))
        match = _LEVEL.search(text)
        if match:
            return int(match.group(1)), (match.group(2) or "").strip()[:LEVEL_NAME_CHARS] or None
    raise ScannerError("the scanner's answer has no 'Level N/5' in it")


def level(url: str | None, settings, conn: sqlite3.Connection | None = None, fetcher: Fetcher | None = None,
          budget: TargetBudget | None = None) -> dict:
    """That CDN's agent-readiness level for `url`, cached; `available:false` with `error` when unreadable.
    A lookup the cache does not answer spends `budget` (targets.py): the scanner scans the target."""
    conf = scan_settings(settings)
    fetcher = fetcher or fetcher_from_settings(settings)
    target = observe.checked(url, fetcher)
    source_url = conf["cloudflare_report_url"] + "?url=" + quote(target.url, safe="")
    base = {"ok": True, "source": SCANNER_SOURCE, "sourceUrl": source_url}
    cached = cache.read(conn, cache.LEVELS, target.url, conf["cloudflare_cache_hours"])
    if cached:
        return {**base, **cached, "fromCache": True}
    fetcher = targets.spending(fetcher, budget, target)
    targets.spend_on_scanner(budget, conf["cloudflare_scanner_url"])
    try:  # the scanner fetches from its own network, but a name that leads inside is still not sent out
        fetcher.check_addresses(target)
    except (FetchRefused, FetchFailed) as failed:
        raise observe.fetch_error(failed) from None
    try:
        rung, name = _scan_site(conf, target.url)
    except (ScannerError, requests.RequestException) as failed:
        error = (str(failed) if isinstance(failed, ScannerError) else
                 f"the scanner did not answer within {conf['cloudflare_timeout_s']:g} seconds"
                 if isinstance(failed, requests.Timeout) else "the scanner could not be reached")
        return {**base, "available": False, "level": None, "score": None, "levelName": None, "fromCache": False,
                "error": error}
    found = {"available": True, "level": rung, "score": rung * 20, "levelName": name}
    cache.write(conn, cache.LEVELS, target.url, found)
    return {**base, **found, "fromCache": False}


def _scan_site(conf: dict, url: str) -> tuple[int, str | None]:
    endpoint, timeout = conf["cloudflare_scanner_url"], conf["cloudflare_timeout_s"]
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
               "User-Agent": USER_AGENT}
    with requests.Session() as session:
        session.trust_env = False
        _, session_id = _rpc(session, endpoint, {
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "aadhar.sh lens", "version": "1"}}}, headers, timeout)
        headers = {**headers, "MCP-Protocol-Version": "2025-06-18",
                   **({"Mcp-Session-Id": session_id} if session_id else {})}
        result, _ = _rpc(session, endpoint, {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                             "params": {"name": "scan_site", "arguments": {"url": url, "profile": "all"}}},
                         headers, timeout)
    return _read_level(result)
