"""Agent doors: what an agent could use on the target, and the strategy verdict they add up to.

MCP and NLWeb are read from how `/mcp` and `/ask` answer a GET (verdicts yes/likely/maybe/no/
unknown); WebMCP from markers in the page; the A2A card, OpenAPI, ai-plugin and api-catalog from
their discovery probes; markdown negotiation from a real `Accept: text/markdown` request, set
against the page fetch that asked for HTML: it is negotiation only when the two answers differ.
"""
from __future__ import annotations

import json
import re
from urllib.parse import urlsplit

from .discovery import CapReached, Subrequests, error_envelope
from .fetch import FetchFailed, FetchRefused, FetchResult
from .page import mime_of

MCP_ACCEPT = "application/json, text/event-stream"
MARKDOWN_ACCEPT = "text/markdown, text/html;q=0.5"
ENDPOINT_CAP = 2048  # /mcp and /ask: the first bytes say what answered
# WebMCP in a page's own script: the API object and one of its two calls that give an agent tools.
_WEBMCP_API = re.compile(r"(?:\bnavigator\.)?\bmodelContext\b")
_WEBMCP_CALL = re.compile(r"\b(?:registerTool|provideContext)\s*\(")
# A script start tag (or a comment's start), then its src attributes. `[^<>]` keeps each try inside
# one tag, so the search stays linear; `[^>]+` ran on past every `<script` that never closed.
_SCRIPT_TAG = re.compile(r"<!--|<script[^<>]*", re.I)  # comments are passed over whole
_SCRIPT_END = re.compile(r"</script", re.I)
_SCRIPT_SRC = re.compile(r"""src=["']([^"']*)["']""", re.I)
# A bridge script's path segment: the @mcp-b package scope, or a file or folder named for WebMCP
# (webmcp.js, mcp-b.min.js, model-context/), not any name that merely starts so (mcp-banner.js).
_BRIDGE_SEGMENT = re.compile(r"@mcp-b|(?:webmcp|mcp-b|model-context)(?:[.-][\w.-]*)?", re.I)


def endpoint_answer(result: FetchResult | None, error: str | None) -> dict:
    """What /mcp or /ask answered, kept small (and cacheable with discovery)."""
    if result is None:
        return {"error": error}
    return {"status": result.status, "contentType": result.content_type,
            "wwwAuthenticate": result.headers.get("www-authenticate"),
            "body": result.body[:ENDPOINT_CAP].decode("utf-8", errors="replace")}


def fetch_endpoint(sub: Subrequests, url: str) -> dict:
    try:
        # a streaming answer never ends by itself: a small cap and a short timeout read its start,
        # and what came before the timeout (status, type, first events) is the answer
        return endpoint_answer(sub.fetch(url, {"Accept": MCP_ACCEPT}, cap_bytes=ENDPOINT_CAP, timeout_s=3.0, keep_partial=True), None)
    except (FetchFailed, FetchRefused, CapReached) as failed:
        return endpoint_answer(None, str(failed))


def _json(body: str):
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return None


def mcp_verdict(answer: dict, server_card: bool) -> dict:
    if answer.get("error"):
        return {"verdict": "unknown", "detail": "GET /mcp did not answer", "error": answer["error"]}
    status, mime, body = answer["status"], mime_of(answer["contentType"]), answer["body"]
    data = _json(body) if "json" in mime else None
    if mime == "text/event-stream":
        return {"verdict": "yes", "detail": f"GET /mcp opened an event stream ({status})"}
    if isinstance(data, dict) and data.get("jsonrpc") == "2.0":
        return {"verdict": "yes", "detail": f"GET /mcp answered JSON-RPC ({status})"}
    if status == 401 and answer.get("wwwAuthenticate"):
        return {"verdict": "likely", "detail": "GET /mcp asks for authentication (401 with WWW-Authenticate)"}
    if status == 405 and server_card:
        return {"verdict": "likely", "detail": "GET /mcp answered 405 (POST only) and a server card is published"}
    if status in (400, 405, 406) and data is not None:
        return {"verdict": "maybe", "detail": f"GET /mcp answered a JSON {status}"}
    if status >= 500:
        return {"verdict": "unknown", "detail": f"GET /mcp answered {status}"}
    return {"verdict": "no", "detail": f"GET /mcp answered {status} {mime or 'without a type'}, not an MCP endpoint"}


def nlweb_verdict(answer: dict) -> dict:
    if answer.get("error"):
        return {"verdict": "unknown", "detail": "GET /ask did not answer", "error": answer["error"]}
    status, mime, body = answer["status"], mime_of(answer["contentType"]), answer["body"]
    if mime == "text/event-stream":
        return {"verdict": "likely", "detail": "GET /ask answered an event stream"}
    if status in (400, 422) and "query" in body.lower():
        return {"verdict": "likely", "detail": f"GET /ask answered {status} naming the query parameter"}
    if status == 401 and answer.get("wwwAuthenticate"):
        return {"verdict": "likely", "detail": "GET /ask asks for authentication"}
    if 200 <= status < 300 and "json" in mime and _json(body) is not None:
        if error_envelope(_json(body)):  # a catch-all route's "not found", sent with a 200
            return {"verdict": "no", "detail": f"GET /ask answered {status} JSON that reports an error"}
        return {"verdict": "maybe", "detail": "GET /ask answered JSON"}
    if status >= 500:
        return {"verdict": "unknown", "detail": f"GET /ask answered {status}"}
    return {"verdict": "no", "detail": f"GET /ask answered {status} {mime or 'without a type'}"}


def webmcp(raw_html: str) -> dict:
    """A WebMCP bridge script, or the page's own script calling navigator.modelContext's
    registerTool or provideContext; text, comments and code shown in <pre> are not scripts."""
    raw_html = raw_html or ""
    position = 0
    while (tag := _SCRIPT_TAG.search(raw_html, position)) is not None:
        if tag.group(0) == "<!--":
            position = raw_html.find("-->", tag.end()) + 3
            if position < 3:
                break
            continue
        for src in _SCRIPT_SRC.finditer(tag.group(0)):
            path = urlsplit(src.group(1).strip()).path
            if any(_BRIDGE_SEGMENT.fullmatch(segment) for segment in path.split("/")):
                return {"found": True, "kind": "bridge", "marker": tag.group(0)[:src.end()][:200]}
        end = _SCRIPT_END.search(raw_html, tag.end())
        script = raw_html[tag.end():end.start() if end else len(raw_html)]
        if _WEBMCP_CALL.search(script) and (api := _WEBMCP_API.search(script)):
            return {"found": True, "kind": "inline", "marker": api.group(0)}
        if end is None:
            break
        position = end.end()
    return {"found": False}


def door(probe: dict, data, describe) -> dict:
    """An AgentDoor from a probe and its parsed document."""
    if probe.get("ok") and data is not None and not isinstance(data, Exception):
        return {"present": True, "detail": describe(data)}
    if probe.get("note"):
        return {"present": False, "note": probe["note"]}
    status = probe.get("status")
    return {"present": False, "status": status, "unknown": status is None or status >= 500}


def describe_card(card: dict) -> str:
    skills = card.get("skills") if isinstance(card.get("skills"), list) else []
    return f"{str(card.get('name'))[:80]}: {len(skills)} skill(s)"


def describe_openapi(doc: dict) -> str:
    paths = doc.get("paths") if isinstance(doc.get("paths"), dict) else {}
    return f"OpenAPI {str(doc.get('openapi') or doc.get('swagger'))[:20]}, {len(paths)} path(s)"


def describe_plugin(doc: dict) -> str:
    return f"plugin {str(doc.get('name_for_model') or doc.get('name_for_human') or '')[:80]}".strip()


def describe_catalog(doc: dict) -> str:
    return f"{len(doc.get('linkset') or [])} API(s) listed"


def md_answer(sub: Subrequests, url: str) -> dict:
    """What the page answers to `Accept: text/markdown`: status, contentType and vary, or error."""
    try:
        result = sub.fetch(url, {"Accept": MARKDOWN_ACCEPT}, cap_bytes=64 * 1024)
    except (FetchFailed, FetchRefused, CapReached) as failed:
        return {"error": str(failed)}
    return {"status": result.status, "contentType": result.content_type, "vary": result.headers.get("vary", "")}


def md_negotiation(answer: dict, page_headers: dict) -> dict:
    """mdNegotiation from the Markdown answer and the headers the HTML-asking page fetch got.
    `supported` means it negotiates; a note on a supported answer names a defect: either answer
    without Vary: Accept, which lets a cache hand one of them to the other kind of client."""
    if answer.get("error"):
        return {"supported": False, "error": answer["error"]}
    status, content_type = answer["status"], answer["contentType"]
    mime = mime_of(content_type)
    markdown = mime == "text/markdown" and 200 <= status < 300
    always = markdown and mime_of(page_headers.get("content-type", "")) == "text/markdown"
    out = {"supported": markdown and not always, "contentType": content_type, "status": status}
    lacking = [name for name, vary in (("Markdown", answer["vary"]), ("HTML", page_headers.get("vary", "")))
               if not {field.strip().lower() for field in vary.split(",")} & {"accept", "*"}]
    if always:
        out["note"] = "answers Markdown to a request for HTML too: the page is always Markdown, not negotiated"
    elif markdown and lacking:
        out["note"] = (f"answers Markdown but without Vary: Accept on the {' and the '.join(lacking)} answer, "
                       "so caches may serve one in place of the other")
    elif not markdown:
        out["note"] = f"asked for text/markdown, got {mime or 'no content type'} ({status})"
    return out


def strategy(mcp: dict, nlweb: dict, web_mcp: dict, doors: dict, md: dict, llms: dict) -> dict:
    action, readable, unknowns = [], [], []
    if mcp["verdict"] in ("yes", "likely"):
        action.append("mcp")
    if nlweb["verdict"] in ("likely", "maybe"):
        action.append("nlweb")
    if web_mcp["found"]:
        action.append("webmcp")
    if doors["agentCard"].get("present"):
        action.append("agentCard")
    if llms["present"]:
        readable.append("llmsTxt")
    if md["supported"]:
        readable.append("mdNegotiation")
    for key in ("apiCatalog", "openapi", "aiPlugin"):
        if doors[key].get("present"):
            readable.append(key)
    for key, verdict in (("mcp", mcp), ("nlweb", nlweb)):
        if verdict["verdict"] == "unknown":
            unknowns.append(key)
    for key, value in doors.items():
        if value.get("unknown"):
            unknowns.append(key)
    if md.get("error"):
        unknowns.append("mdNegotiation")
    if llms.get("unknown"):
        unknowns.append("llmsTxt")
    if action:
        verdict, note = "agent-native", "an agent can act here: " + ", ".join(action)
    elif readable:
        verdict, note = "agent-readable", "an agent can read this site well but has no door to act through"
    else:
        verdict, note = "human-only", "nothing here is made for agents yet"
    return {"verdict": verdict, "note": note, "action": action, "readable": readable, "unknowns": unknowns}
