"""The MCP server at POST /mcp (JSON-RPC 2.0 over Streamable HTTP, stateless, JSON answers) and
the two server cards, all generated from one tool registry (siteapi/mcp_tools.py).

Two eras on one URL. Handshake era (2024-11-05 .. 2025-11-25): `initialize` echoes a supported
version or offers the newest, `ping`, notifications get 202, batches of up to 16 where the version
still has them (up to 2025-03-26; never with `initialize` in them). 2026-07-28:
no handshake; each request carries `_meta` with the protocol version and client capabilities,
`MCP-Protocol-Version`/`Mcp-Method`/`Mcp-Name` headers must agree with the body, `server/discover`
describes the server, results carry `resultType`, list results `ttlMs`/`cacheScope`, and errors
map to HTTP statuses (404 for an unknown method, 400 for the rest). A request is modern when its
`MCP-Protocol-Version` header names a modern version, or when it has no such header and its
`_meta` names a protocol version.

Tool arguments: an endpoint tool's bounds (minimum, maximum, maxLength) are documentation, not
refusals, because the endpoint clamps or truncates them as it does over HTTP, and its numbers may
come as strings (the inputSchema says so), which the endpoint parses as it parses a query string;
the hard limits are a string over 16 KiB, which no endpoint takes (it would not fit a query
string), an array of more than 64 items (no tool takes more than 4) or of anything but scalars,
and values nested too deeply to check. Arguments that break the schema otherwise are -32602 up to
2025-06-18 and, from 2025-11-25 on, a result with `isError` that a model can read and correct (the
tools chapter moved input validation there). A tool that fails says why in its first content
block, and gives the endpoint's whole JSON error in a second.

Budgets: a tool call spends one `read` unit, as a request to its endpoint does (the POST's own;
each later call of a batch one more), and its endpoint's other budgets (`inspect`, `compare`, the
lens's per-target budget, `ask_model`) as over HTTP; the answer's RateLimit headers name each
budget the call spent.

An error the site gives before the server reads the message (the read budget spent, an unserved
API-Version, GET) keeps its HTTP status and headers but comes as a JSON-RPC error response
(-32000, the REST error's other fields as `data`): MCP clients show that, and nothing else.
"""
from __future__ import annotations

import base64
import binascii
import json
import logging
import re
from typing import Any

import bottle
from jsonschema import Draft202012Validator

from siteapi import openapi
from siteapi.mcp_tools import BUDGET, InProcess, Outcome, Tool, endpoint_tools, snapshot_tools
from siteapi.web import (MAX_BODY_BYTES, MAX_QUERY_BYTES, ApiError, Reply, body, caller, header, report_limits,
                         with_etag)

log = logging.getLogger("siteapi.mcp")

HANDSHAKE_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
BATCH_VERSIONS = ("2024-11-05", "2025-03-26")  # 2025-06-18 removed JSON-RPC batching
ARGUMENT_ERRORS_AS_RESULTS = "2025-11-25"  # from this version on, bad arguments are tool results
BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength", "maxItems")
MODERN_VERSIONS = ("2026-07-28",)
ALL_VERSIONS = HANDSHAKE_VERSIONS + MODERN_VERSIONS
ASSUMED_VERSION = "2025-03-26"  # a handshake-era request without MCP-Protocol-Version
MAX_BATCH = 16
MAX_STRING = MAX_QUERY_BYTES  # no endpoint takes a longer value: it would not fit a query string
MAX_ITEMS = 64  # checked before the schema: jsonschema's uniqueItems is quadratic on arrays of objects
LIST_TTL_MS = 3_600_000
VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
SERVER_INFO_KEY = "io.modelcontextprotocol/serverInfo"
CARD_TYPE = "application/mcp-server-card+json"
CARD_CACHE = "public, max-age=3600"
CARD_SCHEMA = "https://static.modelcontextprotocol.io/schemas/2025-12-11/server-card.schema.json"
_BASE64_HEADER = re.compile(r"=\?base64\?(.*)\?=")
# An origin as browsers serialise one (RFC 6454): any scheme, so MCP clients running as browser
# extensions pass, and "null" (sandboxed frames, file: pages). The check guards against no attack
# here - the server is public and keyless, with CORS open to every origin - but the protocol asks
# for a 403 to an Origin that is not one.
_ORIGIN = re.compile(r"^(null|[A-Za-z][A-Za-z0-9+.\-]*://([A-Za-z0-9.\-]+|\[[0-9A-Fa-f:.]+\])(:\d{1,5})?)$")

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = -32700, -32600, -32601, -32602, -32603
SERVER_ERROR = -32000  # JSON-RPC's first code for errors the implementation defines
HEADER_MISMATCH, UNSUPPORTED_VERSION = -32020, -32022
MODERN_STATUS = {PARSE_ERROR: 400, INVALID_REQUEST: 400, INVALID_PARAMS: 400, HEADER_MISMATCH: 400,
                 UNSUPPORTED_VERSION: 400, METHOD_NOT_FOUND: 404}
REFUSAL_ID_BYTES = 64 * 1024  # of a refused request's body, read for its id; a longer one answers id null
TOOL_CALLED = "siteapi.mcp_tool_called"  # environ: this POST's own unit paid for a tool call already


def unknown_method(method: str, answers: str) -> "RpcError":
    # The agent card names /mcp as its endpoint, so A2A clients send their own methods here.
    a2a = (" It is an MCP server: the agent card (/.well-known/agent-card.json) describes its tools for discovery"
           " and it speaks no A2A methods." if method.startswith(("message/", "tasks/", "agent/")) else "")
    return RpcError(METHOD_NOT_FOUND, f"Unknown method {method[:80]!r}; {answers}.{a2a}")


class RpcError(Exception):
    def __init__(self, code: int, message: str, data: Any = None):
        super().__init__(message)
        self.code, self.message, self.data = code, message, data


def rpc_error(msg_id, code: int, message: str, data: Any = None) -> dict:
    error = {"code": code, "message": message, **({"data": data} if data is not None else {})}
    return {"jsonrpc": "2.0", "id": msg_id, "error": error}


def readable_id(message):
    """The id of a request object when it is a valid one (errors found before reading it answer it)."""
    msg_id = message.get("id") if isinstance(message, dict) else None
    return msg_id if isinstance(msg_id, (str, int)) and not isinstance(msg_id, bool) else None


def without_bounds(schema):
    """A copy of a JSON schema without its range and length keywords (property names are kept)."""
    if isinstance(schema, list):
        return [without_bounds(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    return {key: ({name: without_bounds(sub) for name, sub in value.items()} if key == "properties"
                  else without_bounds(value)) for key, value in schema.items() if key not in BOUNDS}


def name_header() -> str | None:
    """Mcp-Name as the client meant it: a name that is not plain printable ASCII travels as
    `=?base64?<its UTF-8 in base64>?=` (2026-07-28 transports); a malformed one matches no name."""
    value = header("Mcp-Name", None)
    match = _BASE64_HEADER.fullmatch(value or "")
    if match is None:
        return value
    try:
        return base64.b64decode(match[1], validate=True).decode("utf-8")
    except (binascii.Error, UnicodeError):
        return None


def unsupported(requested) -> RpcError:
    return RpcError(UNSUPPORTED_VERSION, f"MCP protocol version {str(requested)[:40]!r} is not supported; use one "
                    f"of {', '.join(ALL_VERSIONS)}.", {"supported": list(ALL_VERSIONS), "requested": str(requested)[:40]})


class McpServer:
    """The registry plus the protocol; `handle` is the POST /mcp route handler."""

    def __init__(self, site, settings, fetcher, slots, budget):
        self.settings = settings
        self.limiter = site.limiter
        doc = openapi.load()
        self.info = {"name": settings.site_name, "title": f"{settings.site_name} MCP server",
                     "version": str(doc["info"]["version"]),
                     # Whole in the draft card too, which allows 100 characters.
                     "description": "The site's JSON API as tools; read-only but for the two snapshot tools, which store rows.",
                     "websiteUrl": settings.url("/developers")}
        read = settings.rates[BUDGET]
        self.instructions = ("Read-only tools over the public API of a personal site: search and ask its pages, "
                             "query its photo archive, inspect public URLs (lens), and read its live feeds. "
                             "No key needed; rate limits are per caller, shared with the HTTP endpoints: each tool "
                             f"call spends one unit of the {BUDGET} budget ({read.quota} per {read.window} seconds), "
                             "and the lens and snapshot tools also their own budget, which their descriptions give.")
        endpoints = endpoint_tools(doc, InProcess(site.wsgi))
        snapshots = snapshot_tools(settings, site.limiter, fetcher, slots, budget)
        self.tools: dict[str, Tool] = {t.name: t for t in endpoints + snapshots}
        self.validators = {**{t.name: Draft202012Validator(without_bounds(t.input_schema)) for t in endpoints},
                           **{t.name: Draft202012Validator(t.input_schema) for t in snapshots}}

    # -- HTTP ------------------------------------------------------------------------------------
    def handle(self):
        origin = header("Origin", None)
        if origin is not None and not _ORIGIN.match(origin.strip()):
            return self._http(403, rpc_error(None, INVALID_REQUEST, "The Origin header must be an origin such as "
                                             "https://example.com or null; malformed origins are refused."))
        raw = body(MAX_BODY_BYTES)
        if len(raw) > MAX_BODY_BYTES:
            return self._http(413, rpc_error(None, INVALID_REQUEST, f"The request body is larger than "
                                             f"{MAX_BODY_BYTES // 1024} KB; send smaller messages."))
        try:
            message = json.loads(raw)
        except (ValueError, RecursionError) as exc:  # RecursionError: thousands of nested arrays
            what = ("nests JSON too deeply to read" if isinstance(exc, RecursionError) else
                    f"is not UTF-8 ({exc.reason} at byte {exc.start}), as JSON must be" if isinstance(exc, UnicodeDecodeError)
                    else "is not JSON")
            return self._http(400, rpc_error(None, PARSE_ERROR, f"The body {what}; send one JSON-RPC 2.0 request "
                                             "object (or a batch array of them)."))
        version_header = header("MCP-Protocol-Version", None)
        if version_header is not None and version_header not in ALL_VERSIONS:
            exc = unsupported(version_header)
            return self._http(400, rpc_error(readable_id(message), exc.code, exc.message, exc.data))
        if isinstance(message, list):
            return self._batch(message, version_header)
        modern = self._is_modern(message, version_header)
        answer = self.answer(message, version_header, modern)
        if answer is None:
            return Reply(b"", status=202, content_type="text/plain")
        status = 200
        if "error" in answer:
            code = answer["error"]["code"]
            status = MODERN_STATUS.get(code, 200) if modern else 400 if code in (PARSE_ERROR, INVALID_REQUEST) else 200
        return self._http(status, answer)

    def _batch(self, messages: list, version_header):
        version = version_header or ASSUMED_VERSION
        if version not in BATCH_VERSIONS:
            return self._http(400, rpc_error(None, INVALID_REQUEST, f"Protocol {version} takes one JSON-RPC "
                                             "request per POST, not a batch."))
        if not messages:
            return self._http(400, rpc_error(None, INVALID_REQUEST, "An empty batch; send at least one request."))
        if len(messages) > MAX_BATCH:
            return self._http(413, rpc_error(None, INVALID_REQUEST, f"A batch holds at most {MAX_BATCH} "
                                             f"messages; this one has {len(messages)}."))
        answers = [a for a in (self.answer(m, version_header, False, in_batch=True) for m in messages) if a is not None]
        return self._http(200, answers) if answers else Reply(b"", status=202, content_type="text/plain")

    @staticmethod
    def _http(status: int, payload) -> Reply:
        return Reply(payload, status=status)

    @staticmethod
    def refusal(error: dict) -> dict:
        """An error the site gives before the server reads the message (over the read budget, an
        unserved API-Version, GET, a fault), as the JSON-RPC response to it: MCP clients show a
        response's error and drop any other body. The sentence is the message, the rest its data."""
        try:  # the id of a message of ordinary size: a refused request costs no megabyte of parsing
            message = json.loads(body(REFUSAL_ID_BYTES))
        except (ValueError, RecursionError, ApiError):  # ApiError: a body in a content coding, itself refused
            message = None
        return rpc_error(readable_id(message), SERVER_ERROR, error["error"], {k: v for k, v in error.items() if k != "error"})

    @staticmethod
    def _is_modern(message, version_header) -> bool:
        if version_header is not None:
            return version_header in MODERN_VERSIONS
        params = message.get("params") if isinstance(message, dict) else None
        meta = params.get("_meta") if isinstance(params, dict) else None
        return isinstance(meta, dict) and VERSION_KEY in meta

    # -- JSON-RPC --------------------------------------------------------------------------------
    def answer(self, message, version_header, modern: bool, in_batch: bool = False) -> dict | None:
        """The response object for one message, or None for a notification or a client response."""
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            return rpc_error(None, INVALID_REQUEST, 'Each message must be a JSON object with "jsonrpc": "2.0".')
        msg_id = message.get("id")
        if "id" in message and (isinstance(msg_id, bool) or not isinstance(msg_id, (str, int))):
            return rpc_error(None, INVALID_REQUEST, "id must be a string or an integer.")
        method = message.get("method")
        if method is None and "id" in message and ("result" in message or "error" in message):
            return None  # a response to a server request; this server sends none
        if not isinstance(method, str) or not method:
            return rpc_error(msg_id, INVALID_REQUEST, "method is missing; name the method as a string, "
                             "for example tools/list.")
        params = message.get("params", {})
        if params is not None and not isinstance(params, (dict, list)):
            return rpc_error(msg_id, INVALID_REQUEST, "params must be an object.")
        if "id" not in message:
            return None  # a notification: acknowledged with 202, nothing to act on statelessly
        if in_batch and method == "initialize":
            return rpc_error(msg_id, INVALID_REQUEST, "initialize must be sent on its own, not in a batch.")
        try:
            if not isinstance(params, dict):
                raise RpcError(INVALID_PARAMS, f"params must be an object, not {'null' if params is None else 'an array'}.")
            if modern:
                version = self._check_envelope(method, params)
                result = self._modern(method, params, version)
            else:
                result = self._handshake(method, params, version_header or ASSUMED_VERSION)
        except RpcError as exc:
            return rpc_error(msg_id, exc.code, exc.message, exc.data)
        except Exception:
            log.exception("MCP %s failed", method)
            return rpc_error(msg_id, INTERNAL_ERROR, "Something broke on our side while answering; try again later.")
        return {"jsonrpc": "2.0", "id": msg_id, "result": result}

    def _check_envelope(self, method: str, params: dict) -> str:
        meta = params.get("_meta")
        if not isinstance(meta, dict) or VERSION_KEY not in meta or CAPABILITIES_KEY not in meta:
            raise RpcError(INVALID_PARAMS, f"params._meta must carry {VERSION_KEY!r} and {CAPABILITIES_KEY!r}.")
        version = meta[VERSION_KEY]
        if header("MCP-Protocol-Version", None) != version:
            raise RpcError(HEADER_MISMATCH, "The MCP-Protocol-Version header must equal params._meta's protocol version.")
        if header("Mcp-Method", None) != method:
            raise RpcError(HEADER_MISMATCH, "The Mcp-Method header must equal the body's method.")
        if method == "tools/call" and params.get("name") is not None and name_header() != params["name"]:
            raise RpcError(HEADER_MISMATCH, "The Mcp-Name header must equal the tool name in the body.")
        if version not in MODERN_VERSIONS:
            raise unsupported(version)
        return version

    def _handshake(self, method: str, params: dict, version: str) -> dict:
        if method == "initialize":
            asked = params.get("protocolVersion")
            return {"protocolVersion": asked if asked in HANDSHAKE_VERSIONS else HANDSHAKE_VERSIONS[-1],
                    "capabilities": self.capabilities(), "serverInfo": self.info, "instructions": self.instructions}
        if method == "ping":
            return {}
        if method == "tools/list":
            self._no_cursor(params)
            return {"tools": [self._for_version(t.listing(), version) for t in self.tools.values()]}
        if method == "tools/call":
            result = self.call(params, version)
            if version < "2025-06-18":
                result.pop("structuredContent", None)
            return result
        raise unknown_method(method, "this server answers initialize, ping, tools/list and tools/call")

    def _modern(self, method: str, params: dict, version: str) -> dict:
        stamp = {"resultType": "complete", "_meta": {SERVER_INFO_KEY: self.info}}
        if method == "server/discover":
            return {"supportedVersions": list(ALL_VERSIONS), "capabilities": self.capabilities(),
                    "instructions": self.instructions, "ttlMs": LIST_TTL_MS, "cacheScope": "public", **stamp}
        if method == "tools/list":
            self._no_cursor(params)
            return {"tools": [t.listing() for t in self.tools.values()], "ttlMs": LIST_TTL_MS,
                    "cacheScope": "public", **stamp}
        if method == "tools/call":
            return {**self.call(params, version), **stamp}
        raise unknown_method(method, f"protocol {version} answers server/discover, tools/list and tools/call")

    @staticmethod
    def _no_cursor(params: dict) -> None:
        if params.get("cursor") is not None:
            raise RpcError(INVALID_PARAMS, "Unknown cursor: tools/list returns every tool on one page.")

    @staticmethod
    def _for_version(listing: dict, version: str) -> dict:
        if version < "2025-06-18":
            listing = {k: v for k, v in listing.items() if k not in ("title", "outputSchema")}
        if version < "2025-03-26":
            listing.pop("annotations", None)
        return listing

    def capabilities(self) -> dict:
        return {"tools": {"listChanged": False}}

    def call(self, params: dict, version: str) -> dict:
        name, arguments = params.get("name"), params.get("arguments")
        if not isinstance(name, str):
            raise RpcError(INVALID_PARAMS, "tools/call needs params.name, the tool's name as a string.")
        tool = self.tools.get(name)
        if tool is None:
            raise RpcError(INVALID_PARAMS, f"Unknown tool {name[:80]!r}; tools/list names the tools.",
                           {"tools": sorted(self.tools)})
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            raise RpcError(INVALID_PARAMS, "params.arguments must be an object of the tool's parameters.")
        refusal = self._spend_unit()
        if refusal is not None:
            return {"content": [{"type": "text", "text": refusal}], "isError": True}
        message = self._argument_problem(name, arguments)
        if message is not None:
            if version < ARGUMENT_ERRORS_AS_RESULTS:
                raise RpcError(INVALID_PARAMS, message, {"inputSchema": tool.input_schema})
            return {"content": [{"type": "text", "text": message}], "isError": True}
        try:
            outcome = tool.run(arguments, caller())
        except Exception:
            log.exception("MCP tool %s failed", name)
            outcome = Outcome(error="The tool broke on our side; try again later.")
        report_limits(outcome.limits)
        if outcome.error is not None:
            details = [{"type": "text", "text": json.dumps(outcome.details, ensure_ascii=False)}] if outcome.details else []
            return {"content": [{"type": "text", "text": outcome.error}, *details], "isError": True}
        return {"content": [{"type": "text", "text": json.dumps(outcome.result, ensure_ascii=False)}],
                "structuredContent": outcome.result, "isError": False}

    def _spend_unit(self) -> str | None:
        """One `read` unit for a tool call, as its endpoint spends over HTTP: the POST's own for its
        first (Site.serve spent it; the endpoint then spends none), a unit more for each later call
        of a batch. The refusal sentence when none is left."""
        environ = bottle.request.environ
        if not environ.get(TOOL_CALLED):
            environ[TOOL_CALLED] = True
            return None
        decision = self.limiter.hit(BUDGET, caller())
        report_limits(decision.headers())
        return None if decision.allowed else decision.refusal()

    def _argument_problem(self, name: str, arguments: dict) -> str | None:
        """What is wrong with a tool's arguments, as a sentence, or None."""
        too_long = [k for k, v in arguments.items() if isinstance(v, str) and len(v) > MAX_STRING]
        if too_long:
            return f"Argument {too_long[0][:40]!r} is longer than {MAX_STRING} characters, more than any tool takes."
        too_many = [k for k, v in arguments.items() if isinstance(v, list) and len(v) > MAX_ITEMS]
        if too_many:
            return f"Argument {too_many[0][:40]!r} has more than {MAX_ITEMS} items, more than any tool takes."
        # uniqueItems compares objects pairwise in full: 64 objects of 1,500 keys took a second of CPU
        nested = [k for k, v in arguments.items() if isinstance(v, list) and any(isinstance(i, (dict, list)) for i in v)]
        if nested:
            return f"Argument {nested[0][:40]!r} holds objects or arrays; every tool's arrays take strings."
        try:
            error = next(iter(sorted(self.validators[name].iter_errors(arguments), key=lambda e: e.path)), None)
        except RecursionError:
            return f"Invalid arguments for {name}: a value is nested too deeply; send plain strings and numbers."
        if error is None:
            return None
        where = "/".join(str(p) for p in error.absolute_path) or "arguments"
        schema = self.tools[name].input_schema
        names = [f"{arg} (required)" if arg in schema.get("required", ()) else arg for arg in schema.get("properties", {})]
        takes = f"{name} takes {', '.join(names)}" if names else f"{name} takes no arguments"
        return f"Invalid arguments for {name} at {where}: {error.message[:300]}. {takes}."

    # -- server cards ----------------------------------------------------------------------------
    def scanner_card(self) -> dict:
        """/.well-known/mcp/server-card.json: the shape scanners read today, with the tool list."""
        return {"version": "1.0", "protocolVersion": MODERN_VERSIONS[-1], "supportedProtocolVersions": list(ALL_VERSIONS),
                "serverInfo": {k: self.info[k] for k in ("name", "title", "version", "description")},
                "transport": {"type": "streamable-http", "url": self.settings.url("/mcp")},
                "capabilities": {"tools": True, "resources": False, "prompts": False},
                "authentication": {"required": False}, "documentationUrl": self.settings.url("/developers"),
                "tools": [t.listing() for t in self.tools.values()]}

    def draft_card(self) -> dict:
        """/mcp/server-card: the SEP-2127 draft shape (no tool list)."""
        host = self.settings.site_host
        return {"$schema": CARD_SCHEMA, "name": ".".join(reversed(host.split("."))) + "/site",
                "version": self.info["version"], "title": self.info["title"],
                "description": self.info["description"], "websiteUrl": self.settings.url("/"),
                "remotes": [{"type": "streamable-http", "url": self.settings.url("/mcp"),
                             "supportedProtocolVersions": list(ALL_VERSIONS)}]}

    def scanner_card_reply(self):
        return with_etag(Reply(self.scanner_card(), cache=CARD_CACHE))

    def draft_card_reply(self):
        return with_etag(Reply(self.draft_card(), content_type=CARD_TYPE, cache=CARD_CACHE))
