"""The MCP tool registry: tools derived from `siteapi/openapi.yaml`, served by the site itself.

Every operation carrying `x-mcp` (one spec or a list of specs: `tool`, `title`, `openWorld`, and
optionally `fixed` query values always sent, `hide` parameters kept out of the tool, `returns` a
schema answered instead of the 200's (made from it, see RESHAPED), `note` put after the summary in
the description) becomes a tool: its `inputSchema` comes from the operation's query parameters (a
number may be a string too, as in a query string) or its JSON request body for a POST-only
operation, its `outputSchema` from the 200 JSON response (or `returns`) with every `$ref` inlined. A
call runs the site's own WSGI app in-process with the caller's address, so shapes, errors and
rate-limit budgets are exactly the HTTP endpoint's, but for the `read` unit, which the POST /mcp
carrying the call has spent (one unit a tool call, as a request to the endpoint). The snapshot tools
call `siteapi.lens.vault` directly (capture and compare each under a small rate policy of its own
and the lens's per-target budget), and only while site.db exists (the jobs build it).
"""
from __future__ import annotations

import copy
import io
import json
import logging
import sqlite3
import sys
from concurrent.futures import ThreadPoolExecutor, TimeoutError as FutureTimeout
from contextlib import closing, nullcontext
from dataclasses import dataclass, field
from typing import Any, Callable
from urllib.parse import urlencode
from wsgiref.util import setup_testing_defaults

from siteapi import db, openapi
from siteapi.ratelimit import RateLimiter, SlotsFull, TargetBudget, WorkSlots
from siteapi.web import PAID_POLICY, RATE_HEADERS, ApiError, rate_refusal, slots_refusal

log = logging.getLogger(__name__)
BUDGET = "read"  # the /mcp route's policy (app.py), one unit of which each tool call spends

CALL_TIMEOUT_S = 30


@dataclass
class Tool:
    name: str
    title: str
    description: str
    input_schema: dict
    output_schema: dict
    open_world: bool
    read_only: bool = True
    run: Callable[[dict, str], "Outcome"] = field(default=None, repr=False)
    endpoint: str | None = None  # "GET /search.json": the HTTP operation it calls, if any

    def listing(self) -> dict:
        return {"name": self.name, "title": self.title, "description": self.description,
                "inputSchema": self.input_schema, "outputSchema": self.output_schema,
                "annotations": {"title": self.title, "readOnlyHint": self.read_only, "destructiveHint": False,
                                "idempotentHint": self.read_only, "openWorldHint": self.open_world}}


@dataclass
class Outcome:
    """What a tool produced: the JSON result, or the endpoint's error sentence and, when it gave
    one, its whole error body (the fields an agent can act on: `parameter`, `retry_after`, ...);
    `limits`: the RateLimit headers of the budgets its endpoint spent."""
    result: dict | None = None
    error: str | None = None
    details: dict | None = None
    limits: list[tuple[str, str]] = field(default_factory=list)


# -- schemas from the OpenAPI document -------------------------------------------------------------
def inline(doc: dict, node: Any, seen: tuple[str, ...] = (), names: bool = False) -> Any:
    """A copy of `node` with every local `$ref` replaced by its target (a cycle becomes {}) and
    OpenAPI's `example` keyword dropped (`names`: node maps property names, keep them all)."""
    if isinstance(node, dict):
        if "$ref" in node and not names:
            ref = node["$ref"]
            if ref in seen or not ref.startswith("#/"):
                return {}
            return inline(doc, openapi.resolve(doc, ref), seen + (ref,))
        return {key: inline(doc, value, seen, names=not names and key in ("properties", "patternProperties"))
                for key, value in node.items() if names or key != "example"}
    if isinstance(node, list):
        return [inline(doc, item, seen) for item in node]
    return node


def input_schema(doc: dict, method: str, op: dict, hidden: set[str]) -> dict:
    if method == "post":
        body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
        schema = inline(doc, body)
        schema.setdefault("type", "object")
        return schema
    properties, required = {}, []
    for param in (inline(doc, p) for p in op.get("parameters", [])):
        if param.get("in") != "query" or param["name"] in hidden:
            continue
        prop = dict(param.get("schema", {}))
        if prop.get("type") in ("integer", "number"):  # the endpoint reads "5" as 5 and clamps, or defaults
            prop["type"] = [prop["type"], "string"]  # a non-number, as over HTTP: one parser, the endpoint's
        if param.get("description"):
            prop["description"] = " ".join(param["description"].split())
        prop.update(param.get("x-mcp-schema", {}))  # what a tool argument may be beyond a query string
        properties[param["name"]] = prop
        if param.get("required"):
            required.append(param["name"])
    schema = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = required
    return schema


def output_schema(doc: dict, op: dict) -> dict:
    ok = op.get("responses", {}).get("200", {})
    content = inline(doc, ok).get("content", {})
    schema = next((v.get("schema", {}) for k, v in content.items() if "json" in k), {})
    schema = copy.deepcopy(schema) or {}
    schema.setdefault("type", "object")
    return schema


def describe(op: dict, note: str = "") -> str:
    """Summary, then the tool's own note (what sets apart the tools of one operation), then the
    operation's description."""
    parts = [op.get("summary", "").strip().rstrip(".") + ".", note, " ".join((op.get("description") or "").split())]
    return " ".join(p for p in parts if p and p != ".")


# -- calling the site in-process -------------------------------------------------------------------
class InProcess:
    """Runs one request through the site's WSGI app on a worker thread (Bottle's request state is
    per thread, so the outer /mcp request keeps its own), its `read` unit paid, and returns (status,
    parsed JSON or None, its RateLimit headers)."""

    def __init__(self, wsgi, workers: int = 8):
        self.wsgi = wsgi
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="mcp-call")

    def request(self, method: str, path: str, query: dict, body: dict | None,
                caller: str) -> tuple[int, Any, list[tuple[str, str]]]:
        future = self.pool.submit(self._run, method, path, query, body, caller)
        try:
            return future.result(timeout=CALL_TIMEOUT_S)
        except FutureTimeout:
            return 504, {"error": f"The call took longer than {CALL_TIMEOUT_S} seconds; try again later."}, []

    def _run(self, method, path, query, body, caller):
        payload = json.dumps(body).encode() if body is not None else b""
        environ: dict = {}
        setup_testing_defaults(environ)
        environ.update({"REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": urlencode(query, errors="replace"),
                        "REMOTE_ADDR": caller, "HTTP_ACCEPT": "application/json", "wsgi.input": io.BytesIO(payload),
                        "CONTENT_LENGTH": str(len(payload)), "CONTENT_TYPE": "application/json",
                        "wsgi.errors": sys.stderr, PAID_POLICY: BUDGET})
        status, limits = [], []

        def start_response(line, headers, exc_info=None):
            status.append(int(line.split()[0]))
            limits.extend((name, value) for name, value in headers if name in RATE_HEADERS)

        chunks = self.wsgi(environ, start_response)
        try:
            raw = b"".join(chunks)
        finally:
            getattr(chunks, "close", lambda: None)()
        try:
            return status[0], json.loads(raw) if raw else None, limits
        except ValueError:
            return status[0], None, limits


def as_query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():  # JSON Schema's integer 2.0 is the endpoint's "2"
        return str(int(value))
    if isinstance(value, list):  # a JSON array, which keeps commas inside its items (/ask's prev reads one)
        return json.dumps(value)
    return str(value)


def endpoint_tools(doc: dict, caller_app: InProcess) -> list[Tool]:
    """One Tool per `x-mcp` spec in the OpenAPI document."""
    tools = []
    for path, method, op in openapi.operations(doc):
        specs = op.get("x-mcp")
        for spec in specs if isinstance(specs, list) else [specs] if specs else []:
            fixed = {k: as_query_value(v) for k, v in (spec.get("fixed") or {}).items()}
            returns = spec.get("returns")
            tools.append(Tool(
                name=spec["tool"], title=spec.get("title") or spec["tool"].replace("_", " ").title(),
                description=describe(op, spec.get("note", "")),
                input_schema=input_schema(doc, method, op, set(spec.get("hide") or ()) | set(fixed)),
                output_schema=(inline(doc, {"$ref": f"#/components/schemas/{returns}"}) if returns
                               else output_schema(doc, op)),
                open_world=bool(spec.get("openWorld", False)), endpoint=f"{method.upper()} {path}",
                run=_endpoint_runner(caller_app, path, method, fixed, RESHAPED[returns] if returns else None)))
    return tools


def _lens_summary(observation: dict) -> dict:
    from siteapi.lens.scan import summary  # here: the lens is loaded by the endpoint, not by this module
    return summary(observation)


# x-mcp `returns`: a schema a tool answers instead of the endpoint's 200, made from that answer.
RESHAPED: dict[str, Callable[[dict], dict]] = {"LensSummary": _lens_summary}


def _endpoint_runner(caller_app: InProcess, path: str, method: str, fixed: dict,
                     reshape: Callable[[dict], dict] | None):
    def run(arguments: dict, caller: str) -> Outcome:
        if method == "post":
            status, body, limits = caller_app.request("POST", path, fixed, arguments, caller)
        else:
            query = {k: as_query_value(v) for k, v in arguments.items()} | fixed
            status, body, limits = caller_app.request("GET", path, query, None, caller)
        if 200 <= status < 300 and isinstance(body, dict):
            return Outcome(result=reshape(body) if reshape else body, limits=limits)
        sentence = body.get("error") if isinstance(body, dict) and isinstance(body.get("error"), str) else None
        if sentence and isinstance(body.get("parameter"), str):
            sentence = f"Argument {body['parameter']!r}: {sentence}"
            if "=" in sentence:  # the endpoint's examples are HTTP requests (?q=..., url=...)
                sentence += " (Examples are written as the HTTP request; over MCP, send the value as the argument.)"
        return Outcome(error=sentence or f"{path} answered HTTP {status} without a JSON result.",
                       details=body if sentence else None, limits=limits)
    return run


# -- the snapshot tools ----------------------------------------------------------------------------
STORAGE_DOWN = "The snapshot storage cannot be reached right now; try again later."
_NULLABLE = {"type": ["string", "null"]}
SNAPSHOT = {
    "type": "object", "required": ["id", "url", "profile", "observed_at"],
    "properties": {
        "id": {"type": "integer"}, "url": {"type": "string"},
        "profile": {"type": "string", "enum": ["browser", "bot", "markdown", "identity"]},
        "observed_at": {"type": "string", "description": "UTC, ISO 8601."},
        "final_url": _NULLABLE, "status": {"type": ["integer", "null"]},
        **{name: _NULLABLE for name in ("content_type", "content_encoding", "content_length", "cache_control",
                                        "vary", "etag", "last_modified", "server", "age", "body_hash", "title")},
        "body_bytes": {"type": ["integer", "null"]}, "truncated": {"type": ["integer", "null"]},
        "word_count": {"type": ["integer", "null"]},
        "error": {"type": ["string", "null"], "description": "Why the fetch failed, when it did."},
    },
}
SNAPSHOT_ID = {"type": "integer", "minimum": 1, "description": "The id a representation_capture returned."}


def snapshot_tools(settings, limiter: RateLimiter, fetcher, slots: WorkSlots, budget: TargetBudget) -> list[Tool]:
    """The three MCP-only snapshot tools, fetching with the app's `fetcher` while holding one of the
    lens's `slots` and spending its per-target `budget`."""
    from siteapi.lens import vault  # here: vault imports the lens fetcher, which this module need not load

    def snapshot_runner(policy: str | None, work: Callable) -> Callable[[dict, str], Outcome]:
        """A tool's run: `work` on a site.db writer, after spending `policy` and taking a lens slot
        (neither without a policy), refused as the endpoints refuse."""
        def run(arguments: dict, caller: str) -> Outcome:
            if not policy:
                return attempt(arguments, caller)
            decision = limiter.hit(policy, caller)
            outcome = attempt(arguments, caller) if decision.allowed else refused(rate_refusal(decision))
            outcome.limits = decision.headers()
            return outcome

        def refused(exc: ApiError) -> Outcome:
            return Outcome(error=exc.body["error"], details=exc.body)

        def attempt(arguments: dict, caller: str) -> Outcome:
            if not db.has_content(settings.db_path):  # a writer would build a new site.db that hides the outage
                return Outcome(error=STORAGE_DOWN)
            try:
                with slots.slot(caller) if policy else nullcontext(), \
                        closing(db.writer(settings.db_path)) as conn:
                    return Outcome(result=work(conn, arguments, fetcher, budget.for_caller(caller)))
            except ApiError as exc:
                return refused(exc)
            except SlotsFull as full:
                return refused(slots_refusal(full, slots))
            except sqlite3.Error as exc:  # held past the busy timeout, full, damaged: the owner's to fix
                log.warning("snapshot tool: %s", db.storage_problem(settings.db_path, exc))
                return Outcome(error=STORAGE_DOWN)
        return run

    stores = ("Stores one snapshot row per profile in the site's snapshot table (not read-only; "
              f"each call adds rows; rows are kept {vault.KEEP_DAYS} days, at most the newest {vault.KEEP_ROWS:,}). "
              "The rows are public (representation_read by id, and the site's data under /data/), the URL's "
              "query string included: never capture a URL that carries a secret.")
    per_site = (f"The URL's site is fetched afresh at most {budget.policy.quota} times per {budget.policy.window} "
                f"seconds for all callers of the lens together, {budget.share.quota} for one caller.")
    return [
        Tool("representation_capture", "Representation Capture",
             "Fetch a public URL as up to four client profiles (browser, bot, markdown, identity; default "
             "browser, markdown and identity) and record how each was answered: status, final URL, caching "
             "and encoding headers, body size and SHA-256, title and word count; a profile whose fetch failed "
             "is stored with its error. When no profile gets an answer, the call is an error with the fetch's "
             f"sentence, as lens_inspect gives it, and stores nothing. {stores} "
             f"Limit {limiter.policies['representation_capture'].quota} per "
             f"{limiter.policies['representation_capture'].window} seconds per caller. {per_site}",
             {"type": "object", "additionalProperties": False, "required": ["url"], "properties": {
                 "url": {"type": "string", "maxLength": 2048,
                         "description": "Public http(s) URL; https:// is assumed without a scheme."},
                 "profiles": {"type": "array", "maxItems": 4, "uniqueItems": True,
                              "description": f"The profiles to fetch as; left out or empty: {', '.join(vault.DEFAULT_PROFILES)}.",
                              "items": {"type": "string", "enum": ["browser", "bot", "markdown", "identity"]}}}},
             {"type": "object", "required": ["ok", "url", "snapshots"], "properties": {
                 "ok": {"type": "boolean"}, "url": {"type": "string"},
                 "snapshots": {"type": "array", "items": SNAPSHOT}}},
             open_world=True, read_only=False,
             run=snapshot_runner("representation_capture",
                           lambda conn, a, f, b: vault.capture(conn, a["url"], a.get("profiles"), fetcher=f, budget=b))),
        Tool("representation_read", "Representation Read",
             "Read one stored representation snapshot by id (as returned by representation_capture or "
             "representation_compare). Reads only; stores nothing.",
             {"type": "object", "additionalProperties": False, "required": ["snapshot_id"],
              "properties": {"snapshot_id": SNAPSHOT_ID}},
             {"type": "object", "required": ["ok", "snapshot"],
              "properties": {"ok": {"type": "boolean"}, "snapshot": SNAPSHOT}},
             open_world=False, read_only=True,
             run=snapshot_runner(None, lambda conn, a, f, b: vault.read(conn, a["snapshot_id"]))),
        Tool("representation_compare", "Representation Compare",
             "Refetch a stored snapshot's URL with the same profile and list which of its fields changed. "
             f"Stores one new snapshot row (not read-only). Limit {limiter.policies['representation_compare'].quota} "
             f"per {limiter.policies['representation_compare'].window} seconds per caller. {per_site}",
             {"type": "object", "additionalProperties": False, "required": ["snapshot_id"],
              "properties": {"snapshot_id": SNAPSHOT_ID}},
             {"type": "object", "required": ["ok", "before", "after", "changed", "changes"], "properties": {
                 "ok": {"type": "boolean"}, "before": SNAPSHOT, "after": SNAPSHOT, "changed": {"type": "boolean"},
                 "changes": {"type": "array", "items": {"type": "object", "required": ["field"], "properties": {
                     "field": {"type": "string"}, "before": {}, "after": {}}}}}},
             open_world=True, read_only=False,
             run=snapshot_runner("representation_compare",
                           lambda conn, a, f, b: vault.compare(conn, a["snapshot_id"], fetcher=f, budget=b))),
    ]
