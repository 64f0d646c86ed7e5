"""/ask: NLWeb questions in both dialects, ranked by the local model with a lexical fallback.

Owns the request rules (query-string "legacy" dialect and the v0.55 JSON-body dialect, where body
fields win), the ranking decision (model, or lexical with the reason: rate-limited, timeout,
model-unavailable), the AskResponse/AskResult shapes, and the two event-stream shapes: the
late-2025 legacy frames (begin-nlweb-response / result / end-nlweb-response) and the v0.55 named
events (start / result / complete). Streams are generators: the first frame goes out before any
ranking work, each result frame is built when it is sent, and a client that disconnects stops
the generator, so it costs nothing further.
"""
from __future__ import annotations

import json
import logging
import math
import sqlite3
import uuid
from dataclasses import dataclass, field
from typing import Callable, Iterator, Mapping
from urllib.parse import parse_qsl, unquote

import numpy as np

from siteapi import pages, ranker, search
from siteapi.web import ApiError, Reply, clamp_int

log = logging.getLogger(__name__)

VERSION = "0.55"
MAX_BODY = 64 * 1024
MAX_PREV = 10
MAX_QUERY_ID = 128  # every legacy frame repeats the id twice; a UUID is 36
TOP_K_DEFAULT, TOP_K_MAX = 10, 50
MODES_SUPPORTED = ["list"]
MODES_UNSERVED = ("summarize", "generate")
FALSE_WORDS = frozenset({"0", "false", "no", "off"})


@dataclass
class AskRequest:
    dialect: str  # "legacy" or "0.55"
    query: str
    query_id: str
    streaming: bool = True
    top_k: int = TOP_K_DEFAULT
    prev: list[str] = field(default_factory=list)
    decontextualized_query: str | None = None


@dataclass
class Ranking:
    ranking: str     # _meta.ranking: "model:<name>" or "lexical:<reason>"
    retrieval: str   # _meta.retrieval
    searched: str    # reported as decontextualized_query
    total: int
    results: Iterator[dict]  # AskResult dicts, built one at a time


def handle(method: str, query: Mapping[str, str], body: bytes | None, content_type: str | None, settings,
           conn: sqlite3.Connection, model_allowed: Callable[[], bool], caller: str = "") -> Reply:
    """Answer one /ask request: the AskResponse dict, or the SSE text chunks with the stream's headers.
    Raises ApiError 400 (a parameter or the body is wrong; `parameter` names it) or 501 (mode).
    `model_allowed()` spends one unit of the caller's model budget and says whether it was left;
    `caller` (the rate limiter's key) has one question embedded at a time."""
    request = parse_request(method, query, body, content_type, settings)
    if method == "HEAD":  # the headers GET would send; ranking for a body no one reads would spend the model budget
        return _stream_reply(_no_body()) if request.streaming else Reply(_no_body())
    if not request.streaming:
        ranked = rank_question(request, settings, conn, model_allowed, caller)
        results = list(ranked.results)
        return Reply({
            "query_id": request.query_id,
            "query": request.query,
            "site": settings.site_host,
            "mode": "list",
            "decontextualized_query": ranked.searched,
            "total": ranked.total,
            "results": results,
            "_meta": meta(request, ranked),
        })
    stream = legacy_stream if request.dialect == "legacy" else structured_stream
    return _stream_reply(stream(request, settings, conn, model_allowed, caller))


def _stream_reply(chunks: Iterator) -> Reply:
    return Reply(chunks, content_type="text/event-stream; charset=utf-8", headers={"X-Accel-Buffering": "no"},
                 cache="no-cache")


def _no_body() -> Iterator[bytes]:
    """A HEAD's body: nothing, and no Content-Length, whose value GET's answer alone could give."""
    yield b""


# --- request parsing --------------------------------------------------------------------------

def _bad(parameter: str, sentence: str, query_id: str) -> ApiError:
    return ApiError(400, sentence, code="invalid_parameter", parameter=parameter, query_id=query_id, results=[])


def _shown(value: str) -> str:
    """A client's value quoted in an error sentence, cut short."""
    return repr(value[:40] + "…" if len(value) > 40 else value)


def _query_id(sent: str, otherwise: str) -> str:
    """The query_id the caller sent, or `otherwise` when it sent none; raises 400 when it is too long."""
    query_id = search.clean(sent)
    if len(query_id) > MAX_QUERY_ID:
        raise _bad("query_id", f"The query_id is {len(query_id)} characters long; send at most {MAX_QUERY_ID} "
                   "(a UUID is 36), or leave it out and one is generated.", str(uuid.uuid4()))
    return query_id or otherwise


def _split_prev(raw: str) -> list[str]:
    """`prev` from a query string: a JSON array of strings, or comma-separated with [] stripped."""
    raw = raw.strip()
    if raw.startswith("["):
        try:
            items = json.loads(raw)
            if isinstance(items, list) and all(isinstance(i, str) for i in items):
                return items
        except (ValueError, RecursionError):
            pass
        raw = raw[1:-1] if raw.endswith("]") else raw[1:]
    return [item.strip().strip("\"'") for item in raw.split(",")]


def _prev_list(items: list[str]) -> list[str]:
    return [text for text in (search.clean(i) for i in items) if text][:MAX_PREV]


def parse_request(method: str, query: Mapping[str, str], body: bytes | None, content_type: str | None,
                  settings) -> AskRequest:
    """The request in either dialect, every rule of API.md §4.2/4.3 applied; raises ApiError."""
    params = {k: str(v) for k, v in query.items()}
    query_id = _query_id(params.get("query_id", ""), str(uuid.uuid4()))
    fields: dict = {}       # legacy-named values from the body (they win over the query string)
    body_names: set = set()  # every name the body sent, read or not
    dialect = "legacy"
    if method == "POST" and body is not None and len(body) > MAX_BODY:
        raise _bad("body", f"The request body is over {MAX_BODY} bytes; send at most {MAX_BODY} bytes of JSON.", query_id)
    if method == "POST" and body is not None and body.strip():
        ctype = (content_type or "").split(";")[0].strip().lower()
        if ctype == "application/x-www-form-urlencoded" and not body.lstrip().startswith((b"{", b"[", b'"')):
            fields = dict(parse_qsl(body.decode("utf-8", "replace")))
            body_names = set(fields)
        else:
            data = _json_object(body, query_id)
            body_names = set(data)
            if isinstance(data.get("query"), dict):
                dialect = "0.55"
                fields = _structured_fields(data, query_id)
            else:
                fields = _legacy_body_fields(data, query_id)
        if isinstance(fields.get("query_id"), str):
            query_id = _query_id(fields["query_id"], query_id)

    def value(name: str):
        return fields[name] if name in fields else params.get(name)

    def named(name: str) -> str:
        """How the caller sent `name`: its v0.55 body field, or the query-string parameter."""
        return V055_FIELDS.get(name, name) if dialect == "0.55" and name in fields else name

    def send(name: str, good: str) -> str:
        return f'{named(name)} "{good}"' if named(name) != name else f"{name}={good}"

    sent = value("query") or ""
    question = search.clean(sent)
    if not question:
        in_body = dialect == "0.55" or (method == "POST" and "form" not in (content_type or ""))
        example = ('{"query": {"text": "how do I rebuild a carburetor"}}' if in_body
                   else "/ask?query=how+do+I+rebuild+a+carburetor")
        where = "query.text in the JSON body" if in_body else "the query parameter"
        problem = ("The question has no readable characters (only control, invisible or undecodable ones)"
                   if sent.strip() else "A question is required")
        other = " (q is /search.json's parameter; /ask reads query)" if "q" in {*params, *body_names} and not sent else ""
        raise _bad("query", f"{problem}: send it as UTF-8 text in {where}, e.g. {example}{other}.", query_id)

    mode = str(value("mode") or "list").strip().lower()
    if mode in MODES_UNSERVED:
        raise ApiError(501, f"Mode {mode} is not served: this site returns ranked pages only; "
                       f"send {send('mode', 'list')}.", code="mode_not_supported", parameter=named("mode"), supported_modes=MODES_SUPPORTED,
                       query_id=query_id, results=[])
    if mode not in MODES_SUPPORTED:
        raise _bad(named("mode"), f"Mode {_shown(mode)} is unknown; send {send('mode', 'list')} (summarize and generate "
                   "are not served).", query_id)

    site = str(value("site") or "").strip().lower()
    if not _names_this_site(site, settings.site_host):
        raise _bad(named("site"), f"Site {_shown(site)} is not served here; send {send('site', settings.site_host)} or "
                   "leave it out.", query_id)

    streaming = value("streaming")
    if isinstance(streaming, str):
        streaming = streaming.strip().lower() not in FALSE_WORDS
    top_k = value("top_k")
    if top_k is None or (isinstance(top_k, str) and not top_k.strip()):
        top_k = value("limit")
    prev = value("prev")
    if isinstance(prev, str):
        prev = _split_prev(prev)
    decontextualized = search.clean(value("decontextualized_query") or "")
    return AskRequest(
        dialect=dialect,
        query=question,
        query_id=query_id,
        streaming=True if streaming is None else bool(streaming),
        top_k=clamp_int(top_k, TOP_K_DEFAULT, 1, TOP_K_MAX),
        prev=_prev_list(prev or []),
        decontextualized_query=decontextualized or None,
    )


def _whole_number(digits: str) -> int:
    """A JSON integer, one of thousands of digits too: past every bound all the same, where Python
    refuses more than 4,300 (and then blamed the body, not the field)."""
    return int(digits if len(digits) <= 64 else digits[:64])


def _json_type(value) -> str:
    """The JSON name of a decoded value's type, for an error sentence."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    return {dict: "object", list: "array", str: "string"}.get(type(value), "number")


def _json_object(body: bytes, query_id: str) -> dict:
    try:
        data = json.loads(body, parse_int=_whole_number)
    except UnicodeDecodeError as exc:  # RFC 8259: JSON between systems is UTF-8, whatever charset is declared
        raise _bad("body", f"The request body is not UTF-8 ({exc.reason} at byte {exc.start}); send the JSON "
                           'encoded as UTF-8, such as {"query": {"text": "your question"}}.', query_id) from None
    except ValueError as exc:
        raise _bad("body", f"The request body is not valid JSON ({exc}); send a JSON object such as "
                           '{"query": {"text": "your question"}}.', query_id) from None
    except RecursionError:  # thousands of nested arrays fit in 64 KB and exhaust the decoder's stack
        raise _bad("body", "The request body nests JSON too deeply to read; send a flat JSON object such as "
                           '{"query": {"text": "your question"}}.', query_id) from None
    if not isinstance(data, dict):
        raise _bad("body", 'The request body must be a JSON object such as {"query": {"text": "your question"}}, '
                           f"not a JSON {_json_type(data)}.", query_id)
    return data


_JSON_TYPES = {str: "a string", bool: "true or false", list: "an array of strings", dict: "an object", int: "an integer"}


def _names_this_site(site: str, host: str) -> bool:
    """`site` (lower case) is empty, `all`, the host name or its https origin, as the origin may be
    written: a trailing slash, the default port 443, the fully qualified name's trailing dot."""
    if site in ("", "all"):
        return True
    if site.startswith("https://"):
        site = site.removeprefix("https://").rstrip("/").removesuffix(":443")
    return site.removesuffix(".") == host


def _typed(container: dict, key: str, kinds: tuple, name: str, query_id: str):
    """container[key] when it has one of `kinds` (None when absent); otherwise a 400 naming `name`."""
    if key not in container or container[key] is None:
        return None
    item = container[key]
    if int in kinds and isinstance(item, float) and item.is_integer():
        item = int(item)
    if not isinstance(item, kinds) or (isinstance(item, bool) and bool not in kinds):
        wanted = " or ".join(_JSON_TYPES[k] for k in kinds)
        raise _bad(name, f"Field {name} must be {wanted}, not {json.dumps(item)[:60]}.", query_id)
    if isinstance(item, list) and not all(isinstance(i, str) for i in item):
        raise _bad(name, f"Field {name} must be an array of strings.", query_id)
    return item


def _legacy_body_fields(data: dict, query_id: str) -> dict:
    """A JSON body whose `query` is not an object: the query-string parameters, as body fields."""
    if "query" in data and data["query"] is not None and not isinstance(data["query"], str):
        raise _bad("query", 'Field query must be a string, or an object {"text": "..."} for the v0.55 dialect.', query_id)
    fields = {}
    for key in ("query", "mode", "site", "decontextualized_query", "query_id"):
        fields[key] = _typed(data, key, (str,), key, query_id)
    streaming = data.get("streaming")
    if isinstance(streaming, (int, float)) and not isinstance(streaming, bool):  # the query string's 0, as a number
        raise _bad("streaming", "Field streaming must be true or false (or a string such as \"0\"), not a number; "
                   "send false for one JSON body, true for the event stream.", query_id)
    fields["streaming"] = _typed(data, "streaming", (bool, str), "streaming", query_id)
    for key in ("top_k", "limit"):
        fields[key] = _typed(data, key, (int, str), key, query_id)
    fields["prev"] = _typed(data, "prev", (list, str), "prev", query_id)
    return {k: v for k, v in fields.items() if v is not None}


V055_FIELDS = {"site": "query.site", "mode": "prefer.mode"}  # legacy name -> the v0.55 body field


def _structured_fields(data: dict, query_id: str) -> dict:
    """The v0.55 body (`query{text, site}`, `prefer{streaming, mode}`, `context{prev}`, `query_id`,
    `top_k`) mapped onto the legacy names."""
    question = data["query"]
    if question.get("text") is not None and not isinstance(question["text"], str):
        raise _bad("query", "Field query.text must be a string: the question.", query_id)
    fields = {
        "query": question.get("text"),  # absent: the query string's `query`, as for every other field
        "site": _typed(question, "site", (str,), "query.site", query_id),
        "decontextualized_query": _typed(question, "decontextualized_query", (str,), "query.decontextualized_query", query_id),
        "query_id": _typed(data, "query_id", (str,), "query_id", query_id),
        "top_k": _typed(data, "top_k", (int,), "top_k", query_id),
    }
    prefer = _typed(data, "prefer", (dict,), "prefer", query_id) or {}
    fields["streaming"] = _typed(prefer, "streaming", (bool,), "prefer.streaming", query_id)
    fields["mode"] = _typed(prefer, "mode", (str,), "prefer.mode", query_id)
    context = _typed(data, "context", (dict,), "context", query_id) or {}
    fields["prev"] = _typed(context, "prev", (list,), "context.prev", query_id)
    return {k: v for k, v in fields.items() if v is not None}


# --- ranking ----------------------------------------------------------------------------------

def rank_question(request: AskRequest, settings, conn: sqlite3.Connection,
                  model_allowed: Callable[[], bool], caller: str = "") -> Ranking:
    """Rank with the model when it is loaded, has page vectors, the caller has budget left and the
    question embeds within its deadline; otherwise lexically, naming the reason."""
    config = ranker.RankerSettings.from_settings(settings)
    searched = request.decontextualized_query or request.query
    prev = [] if request.decontextualized_query else request.prev
    model = ranker.load_model(config)
    matrix = ranker.page_matrix(conn) if model is not None else None
    if model is None or not matrix.paths:
        reason = "model-unavailable"
    elif not model_allowed():  # spent before embedding: a run that overruns its deadline still used the core
        reason = "rate-limited"
    else:
        try:
            vector = ranker.embed_question(model, searched, prev, config, caller)
        except ranker.EmbeddingTimeout as exc:
            log.info("ask: %s; ranking lexically", exc)
            reason = "timeout"
        except Exception:  # onnxruntime failing mid-run: the question is still answered, never refused
            log.exception("ask: the model failed on a question; ranking lexically")
            reason = "model-unavailable"
        else:
            probabilities = ranker.rank(matrix.similarity(vector), config.temperature, config.none_cosine)
            order = np.argsort(-probabilities[:-1], kind="stable")[: request.top_k]
            hits = [(matrix.paths[i], math.floor(float(probabilities[i]) * 100)) for i in order]
            reported = f"{searched} (in the context of: {'; '.join(prev)})" if prev else searched
            return Ranking(f"model:{ranker.MODEL_NAME}", "embedding", reported, len(matrix.paths),
                           _model_results(hits, searched, settings, conn))
    found = search.search(conn, searched, request.top_k, settings)
    return Ranking(f"lexical:{reason}", "lexical", searched, found["total"], _lexical_results(found, searched, settings, conn))


def _model_results(hits: list[tuple[str, int]], searched: str, settings, conn: sqlite3.Connection) -> Iterator[dict]:
    pattern = search.stems_pattern(search.terms(searched))
    for path, score in hits:
        page = conn.execute("SELECT title, description, kind, text FROM pages WHERE path = ?", (path,)).fetchone()
        if page is None:  # deleted since the vectors were written; the content job drops it next run
            continue
        yield result(settings, pages.page_url(settings, path), page["title"], page["kind"], score,
                     search.snippet(page["text"], pattern) or page["description"], page["description"])


def _term_share(words: list[str], page) -> float:
    """What share of the question's terms the page holds, scored as the original site scored /ask:
    each term 8 in the title, 4 in the description, 1 in the text (13 at most)."""
    got = 0
    for word in words:
        pattern = search.stems_pattern([word])
        got += sum(weight for weight, part in ((8, page["title"]), (4, page["description"]), (1, page["text"]))
                   if pattern.search(search.fold(part or "")))
    return got / (13 * len(words)) if words else 0.0


def _lexical_results(found: dict, searched: str, settings, conn: sqlite3.Connection) -> Iterator[dict]:
    """/search.json's order on an absolute scale: the best match scores its share of the terms
    (_term_share), the others that times their bm25 relative to it, every one at least 1. Scaled to
    the best alone, a question whose words only brush the site's text had its best match at 100."""
    rows = found["results"]
    if not rows:
        return
    best = conn.execute("SELECT title, description, text FROM pages WHERE path = ?",
                        (unquote(rows[0]["url"].removeprefix(settings.public_base_url)) or "/",)).fetchone()
    top = 100 * (_term_share(search.terms(searched), best) if best else 1.0)
    for row in rows:
        # bm25 can be 0 for all (a term on half the pages of a tiny site): then each scores as the best
        relative = row["score"] / rows[0]["score"] if rows[0]["score"] > 0 else 1.0
        score = max(1, min(100, round(top * relative)))
        yield result(settings, row["url"], row["title"], row["kind"], score,
                     row.get("snippet") or row.get("description") or "", row.get("description") or "")


def result(settings, url: str, name: str, kind: str, score: int, snippet: str, description: str) -> dict:
    """One AskResult: extractive `description` (a snippet of the page) and its schema.org node."""
    return {
        "url": url,
        "name": name,
        "site": settings.site_host,
        "score": score,
        "description": snippet,
        "schema_object": pages.schema_node(settings, url, name, kind, description or snippet),
    }


def meta(request: AskRequest, ranked: Ranking) -> dict:
    return {
        "version": VERSION,
        "dialect": request.dialect,
        "retrieval": ranked.retrieval,
        "ranking": ranked.ranking,
        "description": "extractive",
        "modes_supported": MODES_SUPPORTED,
    }


# --- streams ----------------------------------------------------------------------------------

# Line ends to str.splitlines(), which readers such as requests' iter_lines use, though SSE ends a
# line only at CR or LF; json.dumps escapes the other control characters already.
_LINE_BREAKS = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def _data(payload: dict, event: str | None = None) -> str:
    line = "data: " + json.dumps(payload, ensure_ascii=False).translate(_LINE_BREAKS) + "\n\n"
    return f"event: {event}\n{line}" if event else line


def legacy_stream(request: AskRequest, settings, conn, model_allowed, caller: str) -> Iterator[str]:
    """Late-2025 NLWeb frames: keep-alive comment, begin, one `result` frame per page, end."""
    ids = {"conversation_id": request.query_id, "query_id": request.query_id}
    yield ": keep-alive\n\n"
    yield _data({"message_type": "begin-nlweb-response", **ids, "query": request.query})
    try:
        ranked = rank_question(request, settings, conn, model_allowed, caller)
        for item in ranked.results:
            yield _data({"message_type": "result", **ids, "content": [{"@type": "Item", **item}]})
    except Exception:
        log.exception("ask stream %s failed (the question is not logged)", request.query_id)
        yield _data({"message_type": "end-nlweb-response", **ids, "error": True,
                     "message": "Ranking failed on the server; try again in a moment."})
        return
    yield _data({"message_type": "end-nlweb-response", **ids, "decontextualized_query": ranked.searched,
                 "total": ranked.total, "_meta": meta(request, ranked)})


def structured_stream(request: AskRequest, settings, conn, model_allowed, caller: str) -> Iterator[str]:
    """v0.55 named events: `start`, one `result` {index, item} per page, `complete`."""
    yield _data({"_meta": {"version": VERSION, "response_type": "answer", "mode": "list", "site": settings.site_host},
                 "streaming": True, "query_id": request.query_id}, "start")
    try:
        ranked = rank_question(request, settings, conn, model_allowed, caller)
        for index, item in enumerate(ranked.results):
            yield _data({"index": index, "item": item}, "result")
    except Exception:
        log.exception("ask stream %s failed (the question is not logged)", request.query_id)
        yield _data({"error": "Ranking failed on the server; try again in a moment."}, "error")
        yield _data({"_meta": {"version": VERSION}, "query_id": request.query_id, "error": True}, "complete")
        return
    yield _data({"_meta": meta(request, ranked), "query_id": request.query_id,
                 "decontextualized_query": ranked.searched, "total": ranked.total}, "complete")
