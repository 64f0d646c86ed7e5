"""Every operation of the live /openapi.json, called on the real server with generated requests:
values its schema allows, values out of range, wrong types, hostile text, unknown parameters, and
for the POST operations JSON bodies of every shape. No answer may be a 500; every status must be
one the document lists for the operation or one of the errors any path can meet (its `default`),
every JSON body must validate against the document (the Client checks), and every JSON error must
carry a sentence. Hypothesis runs derandomized, so CI
meets the same cases on every run; the lens reaches nothing (its resolver answers no name)."""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app import make_app
from conftest import ROOT, Client
from servers import serve_wsgi
from siteapi import openapi
from siteapi.config import load_settings
from siteapi.lens.fetch import Fetcher

METHODS = ("get", "post")
DOC = openapi.document(load_settings(ROOT / "site.toml"))
ANY_PATH = {400: {"bad_path", "too_many_parameters"}, 414: {"uri_too_long"}}  # codes of `default`
OPERATIONS = [(path, method) for path, item in DOC["paths"].items() for method in METHODS if method in item]

HOSTILE = ["", " ", "-1", "0", "1e309", "NaN", "-0", "0x1F", "99999999999999999999999", "1.5", "true", "null",
           "[]", "{}", "%00", "\x00", "\x1b[31m", "../../etc/passwd", "..%2F..%2Fetc%2Fpasswd", "a" * 5000,
           "☃ 雪 \u202e", "<script>alert(1)</script>", "' OR 1=1 --", "http://10.0.0.1/", "http://[::1]/",
           "http://169.254.169.254/", "file:///etc/passwd", "example.com", "https://user:pw@example.com:8443/",
           "all", "list", "summarize", "cloudflare", "page", "2026-13-45", "2026-11-21", "fujifilm x100vi"]
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)  # surrogates cannot be sent as UTF-8
JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | TEXT,
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
                           max_leaves=12)


LABEL = st.from_regex(r"[a-z0-9][a-z0-9-]{0,20}", fullmatch=True)
URLS = st.builds("{}://{}.{}{}".format, st.sampled_from(["http", "https", "HTTPS", ""]), LABEL,
                 st.sampled_from(["com", "test", "invalid", "xn--p1ai", "local"]), st.sampled_from(["", "/", "/a?b=c#d"]))


def value_for(schema: dict, name: str = "") -> st.SearchStrategy:
    """Text for one parameter: something its schema allows, or anything hostile."""
    schema = schema or {}
    allowed = [URLS, URLS] if name in ("url", "left", "right") else []
    if "enum" in schema:
        allowed.append(st.sampled_from([str(v) for v in schema["enum"]]))
    if schema.get("type") == "integer":
        low, high = schema.get("minimum", -1000), schema.get("maximum", 1000)
        allowed.append(st.integers(low - 50, high + 50).map(str))
    if schema.get("type") == "boolean":
        allowed.append(st.sampled_from(["true", "false", "0", "1", "no", "off"]))
    return st.one_of(*allowed, st.sampled_from(HOSTILE), TEXT)


def parameters_of(operation: dict, where: str) -> dict[str, dict]:
    """name -> parameter for the operation's parameters `where` (query, path, header)."""
    return {p["name"]: p for p in openapi.parameters(DOC, operation) if p.get("in") == where}


def query_for(parameters: dict[str, dict]) -> st.SearchStrategy:
    """Mostly the required parameters and some optional ones, each with a generated value."""
    @st.composite
    def build(draw):
        chosen = [n for n, p in parameters.items() if p.get("required") and draw(st.integers(0, 9))]
        chosen += draw(st.lists(st.sampled_from(sorted(parameters)), unique=True)) if parameters else []
        return {name: draw(value_for(parameters[name].get("schema"), name)) for name in dict.fromkeys(chosen)}
    return build()


TOOLS = {op["x-mcp"]["tool"]: list(parameters_of(op, "query")) for _, item in DOC["paths"].items()
         for op in item.values() if isinstance(op, dict) and isinstance(op.get("x-mcp"), dict)}


def body_for(path: str) -> st.SearchStrategy:
    """JSON bodies: any value, and the shapes the operation reads, with hostile members."""
    if path == "/mcp":
        arguments = st.sampled_from(sorted(TOOLS)).flatmap(lambda tool: st.fixed_dictionaries(
            {"name": st.just(tool), "arguments": st.dictionaries(st.sampled_from(TOOLS[tool] or ["x"]) | TEXT,
                                                                   st.sampled_from(HOSTILE) | TEXT | JSON_VALUES,
                                                                   max_size=4)}))
        shaped = st.fixed_dictionaries(
            {"jsonrpc": st.sampled_from(["2.0", "2.0", "2.0", "1.0", 2]), "id": st.integers(1, 99) | JSON_VALUES,
             "method": st.sampled_from(["tools/call", "tools/call", "initialize", "tools/list", "resources/list",
                                        "prompts/list", "ping", "server/discover", "nope"]) | TEXT},
            optional={"params": arguments | JSON_VALUES})
    else:
        text = st.sampled_from(HOSTILE) | TEXT
        shaped = st.fixed_dictionaries({"query": st.fixed_dictionaries({"text": text}, optional={
            "site": text | JSON_VALUES, "prev": st.lists(text, max_size=12) | JSON_VALUES}) | JSON_VALUES}, optional={
            "prefer": JSON_VALUES, "meta": JSON_VALUES, "top_k": JSON_VALUES, "streaming": st.sampled_from([False, True])})
    as_json = st.one_of(shaped, JSON_VALUES).map(json.dumps)
    return st.one_of(as_json, as_json, as_json, as_json, TEXT, st.just("{" * 5000))


@pytest.fixture(scope="module")
def fuzz_api(site_settings, checker):
    nowhere = Fetcher(resolve=lambda host, timeout: [], timeout_s=1)
    with serve_wsgi(make_app(site_settings, fetcher=nowhere).wsgi) as base:
        yield Client(base, checker)


@pytest.mark.parametrize("path, method", OPERATIONS, ids=[f"{m.upper()} {p}" for p, m in OPERATIONS])
def test_no_generated_request_breaks_an_operation(fuzz_api, path, method):
    operation = DOC["paths"][path][method]
    query = parameters_of(operation, "query")
    in_path = parameters_of(operation, "path")
    headers = parameters_of(operation, "header")

    @settings(max_examples=40, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def call(data):
        params = data.draw(query_for(query))
        if data.draw(st.booleans()):
            params[data.draw(TEXT)] = data.draw(TEXT)  # a parameter nobody asked for
        url = path
        for name in in_path:
            url = url.replace("{" + name + "}", data.draw(st.sampled_from(["x", "..", "%2e%2e%2f", "a" * 300])
                                                          | TEXT.filter(lambda s: "/" not in s and s not in (".", ".."))))
        sent = {name: data.draw(value_for(p.get("schema"))) for name, p in headers.items() if data.draw(st.booleans())}
        sent = {k: v for k, v in sent.items() if v.isprintable() and v.isascii() and v.strip() == v}
        kwargs = {"params": params, "headers": {"Accept": "application/json, text/event-stream", **sent}}
        if method == "post":
            kwargs["data"] = data.draw(body_for(path)).encode()
            kwargs["headers"]["Content-Type"] = data.draw(st.sampled_from(["application/json", "text/plain", ""]))
        response = fuzz_api.request(method.upper(), url, **kwargs)
        status, is_json = response.status_code, "json" in response.headers.get("Content-Type", "")
        listed = str(status) in operation["responses"] and str(status) != "500"
        assert listed or is_json and response.json().get("code") in ANY_PATH.get(status, ()), (url, params, response.text[:300])
        if status >= 400 and is_json:
            error = response.json().get("error")
            message = error.get("message") if isinstance(error, dict) else error  # JSON-RPC errors on /mcp
            assert isinstance(message, str) and len(message.split()) >= 3, (url, params, response.text[:300])

    call()
