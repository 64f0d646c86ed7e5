"""The OpenAPI document (siteapi/openapi.yaml) and what is generated from it: `/openapi.json`,
the RFC 9727 API catalog, the developer guide and the API section of llms.txt. One source, so the
documents cannot disagree with each other.
"""
from __future__ import annotations

import copy
import functools
import json
import shlex
from pathlib import Path
from urllib.parse import urlencode

import yaml
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

SOURCE = Path(__file__).with_name("openapi.yaml")
METHODS = ("get", "post", "put", "patch", "delete")
READ_HEADERS = ("RateLimit-Policy", "RateLimit", "Link")
MAX_CARRIED_QUERY = 1000  # characters of a request's query a 404 suggestion carries over, encoded


@functools.cache
def load() -> dict:
    return yaml.safe_load(SOURCE.read_text(encoding="utf-8"))


def document(settings) -> dict:
    """The OpenAPI document with this deployment's server URL (built once; callers must not mutate it)."""
    return _document(settings.public_base_url)


@functools.cache
def _document(base_url: str) -> dict:
    doc = copy.deepcopy(load())
    doc["servers"] = [{"url": base_url}]
    for _, _, op in operations(doc):
        op["responses"].setdefault("default", {"$ref": "#/components/responses/Error"})  # any path can meet it
        op["responses"].setdefault("400", {"$ref": "#/components/responses/UnsupportedVersion"})  # so can any operation
        for status, response in op["responses"].items():
            # every answer the app gives carries these; the edge serves the image files itself
            if status.startswith("2") and "$ref" not in response and not op.get("x-edge-served"):
                headers = response.setdefault("headers", {})
                for name in READ_HEADERS:
                    headers.setdefault(name, {"$ref": f"#/components/headers/{name}"})
    return doc


def operations(doc: dict):
    """(path, method, operation) for every operation, in document order."""
    for path, item in doc["paths"].items():
        for method in METHODS:
            if method in item:
                yield path, method, item[method]


def api_operations(doc: dict):
    """(path, method, operation) for the JSON API (not the documents), in document order."""
    return [(path, method, op) for path, method, op in operations(doc) if "documents" not in op.get("tags", [])]


def get_target(path: str, query: list[tuple[str, str]] = ()) -> str:
    """What a plain GET should ask for to reach route `path` from a request that carried `query`:
    the path with those of the query's parameters its GET reads (each by its first value), or, when
    the route has no GET (/mcp) or a required parameter is missing (/search.json's q), its section
    of the guide. A route the document does not list is a page."""
    item = load()["paths"].get(path)
    if item is None:
        return path
    op = item.get("get")
    if op is not None:
        named = {p["name"]: p for p in parameters(load(), op) if p.get("in") == "query"}
        read = {}
        for name, value in query:
            if name in named:
                read.setdefault(name, value)
        kept = urlencode(list(read.items()))
        if len(kept) > MAX_CARRIED_QUERY:
            read, kept = {}, ""
        if all(name in read for name, p in named.items() if p.get("required")):
            return f"{path}?{kept}" if kept else path
    return f"/developers#{(op or next(item[m] for m in METHODS if m in item))['operationId']}"


@functools.lru_cache(maxsize=None)
def query_names(path: str) -> frozenset[str]:
    """The query parameters route `path` reads (any of its operations); none for a route the
    document does not list."""
    doc = load()
    item = doc["paths"].get(path, {})
    return frozenset(p["name"] for method in METHODS if method in item
                     for p in parameters(doc, item[method]) if p.get("in") == "query")


def api_endpoints() -> list[tuple[str, str, str]]:
    """(summary, target, note) per JSON API operation: a GET's example request (followed, it answers
    200, where the bare path may be a 400 for a missing parameter), another method's section of the
    guide; and the description's first sentence, prefixed with the method when it is not GET."""
    out = []
    for path, method, op in api_operations(load()):
        text = " ".join((op.get("description") or op.get("summary", "")).split())
        note = text.split(". ")[0].rstrip(".") + "."
        if method == "get":
            out.append((op.get("summary", path), example_target(path, method, op), note))
        else:
            out.append((op.get("summary", path), f"/developers#{op['operationId']}", f"{method.upper()}: {note}"))
    return out


def catalog(settings) -> dict:
    """RFC 9727 linkset: the API anchor with its description and documentation, plus each API
    endpoint (not the documents) with the guide's section for each of its operations."""
    url = settings.url
    base = {
        "anchor": url("/"),
        "service-desc": [{"href": url("/openapi.json"), "type": "application/openapi+json"}],
        "service-doc": [{"href": url("/developers"), "type": "text/html"}],
    }
    docs: dict[str, list] = {}
    for path, _, op in api_operations(load()):
        docs.setdefault(path, []).append({"href": url("/developers") + "#" + op["operationId"], "type": "text/html"})
    endpoints = [{"anchor": url(path), "service-desc": [{"href": url("/openapi.json"), "type": "application/openapi+json"}],
                  "service-doc": links} for path, links in docs.items()]
    return {"linkset": [base, *endpoints]}


def parameters(doc: dict, op: dict) -> list[dict]:
    """The operation's parameters in order, `$ref`s resolved."""
    return [resolve(doc, p["$ref"]) if "$ref" in p else p for p in op.get("parameters", [])]


def _body_example(op: dict):
    return op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("example")


def example_target(path: str, method: str, op: dict) -> str:
    """The operation's example request: its path with the example path parameters and query string."""
    params = [p for p in parameters(load(), op) if "example" in p]
    # A POST with a body example says it all in the body (POST /ask also reads the query string).
    query = {} if method == "post" and _body_example(op) is not None else {
        p["name"]: p["example"] for p in params if p["in"] == "query"}
    for p in params:
        if p["in"] == "path":
            path = path.replace("{" + p["name"] + "}", str(p["example"]))
    return path + ("?" + urlencode(query) if query else "")


def curl_example(settings, path: str, method: str, op: dict) -> str:
    body = _body_example(op)
    target = example_target(path, method, op)
    url = settings.url(target)
    if method == "post" and body is not None:
        return (f"curl -s -X POST {shlex.quote(url)} -H 'Content-Type: application/json' "
                f"-d {shlex.quote(json.dumps(body))}")
    media = op["responses"].get("200", {}).get("content", {}).values()
    if any(m.get("schema", {}).get("format") == "binary" for m in media):  # curl will not print it to a terminal
        return f"curl -s -o {shlex.quote(Path(target.split('?')[0]).name)} {shlex.quote(url)}"
    return f"curl -s {shlex.quote(url)}"


def guide_markdown(settings, intro: str = "") -> str:
    """The developer guide's body (its page gives the title and description): every operation, its
    answer, its parameters, and a curl example that works."""
    doc = load()
    out = [doc["info"]["description"].strip(), ""]
    if intro:
        out += [intro.strip(), ""]
    out += [f"The machine-readable description is [/openapi.json]({settings.url('/openapi.json')}); "
            f"the [API catalog]({settings.url('/.well-known/api-catalog')}) lists every API endpoint. It leaves out "
            "the documents (tagged `documents` in the description), such as this guide, llms.txt, the sitemap, "
            "the image files, the agent card and the agent skills.", ""]
    for path, method, op in operations(doc):
        out += [f"## {op.get('summary', path)}", "", f'<a id="{op["operationId"]}"></a>',
                f"`{method.upper()} {path}` — operation `{op['operationId']}`", ""]
        if op.get("description"):
            out += [op["description"].strip(), ""]
        answer = op["responses"].get("200", {}).get("description")
        if answer:  # what the answer is made of, an event stream's frames included
            out += [f"200: {answer.strip()}", ""]
        params = parameters(doc, op)
        if params:
            out += ["| Parameter | Required | Description |", "|---|---|---|"]
            out += [f"| `{p['name']}` | {'yes' if p.get('required') else 'no'} | "
                    f"{' '.join(p.get('description', '').split())} |" for p in params]
            out.append("")
        out += ["```sh", curl_example(settings, path, method, op), "```", ""]
    return "\n".join(out)


JSON_KINDS = {dict: "an object", list: "an array", str: "a string", bool: "true or false", int: "a number",
              float: "a number", type(None): "null"}
SCHEMA_KINDS = {"object": "an object", "array": "an array", "string": "a string", "number": "a number",
                "integer": "a whole number", "boolean": "true or false", "null": "null"}


def mismatch(schema_name: str, value) -> str | None:
    """Where and how `value` breaks the document's `schema_name`, in JSON's words ("at
    work[0].startDate: a number where a string belongs"), by jsonschema's most relevant error; None
    when it matches."""
    validator = Draft202012Validator({"$ref": f"#/components/schemas/{schema_name}", "components": load()["components"]})
    error = best_match(validator.iter_errors(value))
    if error is None:
        return None
    where = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in error.absolute_path).lstrip(".")
    if error.validator == "type":
        wanted = error.validator_value if isinstance(error.validator_value, list) else [error.validator_value]
        found, belongs = JSON_KINDS.get(type(error.instance), "a value"), " or ".join(map(SCHEMA_KINDS.get, wanted))
        how = f"{found} where {belongs} belongs"
    elif error.validator == "required":
        how = "; ".join(f"{name} is missing" for name in error.validator_value if name not in error.instance)
    elif error.validator == "pattern" and error.schema.get("description"):
        wanted = error.schema["description"].rstrip(".")
        how = f"{_quoted(error.instance)} is not {wanted[:1].lower() + wanted[1:]}"
    else:  # the message quotes the value: cut short, as a file's value can be long
        how = error.message if len(error.message) <= 160 else error.message[:160] + "…"
    return f"at {where or 'the top level'}: {how}"


def _quoted(text: str) -> str:
    return json.dumps(text if len(text) <= 40 else text[:40] + "…", ensure_ascii=False)


def resolve(doc: dict, ref: str) -> dict:
    node = doc
    for part in ref.lstrip("#/").split("/"):
        node = node[part]
    return node
