"""POST /mcp and the server cards over raw HTTP: both protocol eras, every malformed-input case,
tools derived from the OpenAPI document, shared rate budgets and the snapshot tools."""
from __future__ import annotations

import base64
import dataclasses
import gzip
import json
import re

import lens_web
import pytest
from jsonschema import Draft202012Validator

from app import make_app
from servers import serve_wsgi
from siteapi import mcp_tools, openapi
from siteapi.config import RatePolicy

MODERN = "2026-07-28"


def call(api, message, headers=None, raw=None):
    return api.request("POST", "/mcp", data=raw if raw is not None else json.dumps(message),
                       headers={"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
                                **(headers or {})})


def request(method, params=None, msg_id=1):
    return {"jsonrpc": "2.0", "id": msg_id, "method": method, **({"params": params} if params is not None else {})}


def modern(api, method, params=None, headers=None):
    params = {**(params or {}), "_meta": {"io.modelcontextprotocol/protocolVersion": MODERN,
                                          "io.modelcontextprotocol/clientCapabilities": {}}}
    sent = {"MCP-Protocol-Version": MODERN, "Mcp-Method": method}
    if method == "tools/call":
        sent["Mcp-Name"] = params["name"]
    return call(api, request(method, params), {**sent, **(headers or {})})


def error_code(response):
    return response.json()["error"]["code"]


def tools_by_name(api, version="2025-06-18"):
    answer = call(api, request("tools/list"), {"MCP-Protocol-Version": version}).json()
    return {tool["name"]: tool for tool in answer["result"]["tools"]}


def tool_call(api, name, arguments, version="2025-06-18"):
    response = call(api, request("tools/call", {"name": name, "arguments": arguments}),
                    {"MCP-Protocol-Version": version})
    return response


# -- handshake era ---------------------------------------------------------------------------------
@pytest.mark.parametrize("asked, offered", [("2024-11-05", "2024-11-05"), ("2025-03-26", "2025-03-26"),
                                            ("2025-06-18", "2025-06-18"), ("2025-11-25", "2025-11-25"),
                                            ("2023-01-01", "2025-11-25"), (None, "2025-11-25")])
def test_initialize_echoes_a_supported_version_else_offers_the_newest(api, asked, offered):
    response = call(api, request("initialize", {"protocolVersion": asked, "capabilities": {},
                                                "clientInfo": {"name": "t", "version": "1"}}))
    assert response.status_code == 200
    result = response.json()["result"]
    assert result["protocolVersion"] == offered
    assert result["capabilities"]["tools"] == {"listChanged": False}
    assert result["serverInfo"]["name"] and result["serverInfo"]["version"]
    assert "Mcp-Session-Id" not in response.headers
    assert response.headers["Cache-Control"] == "no-store"


def test_notifications_get_202_without_a_body_and_ping_answers_empty(api):
    response = call(api, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert response.status_code == 202 and response.content == b""
    assert call(api, request("ping")).json() == {"jsonrpc": "2.0", "id": 1, "result": {}}


def test_tools_list_mirrors_the_openapi_operations(api, site_settings):
    tools = tools_by_name(api)
    doc = openapi.document(site_settings)
    declared = set()
    for _, _, op in openapi.operations(doc):
        specs = op.get("x-mcp") or []
        declared |= {spec["tool"] for spec in (specs if isinstance(specs, list) else [specs])}
    assert {"search_site", "resume", "representation_capture", "representation_read",
            "representation_compare"} <= set(tools)
    assert declared <= set(tools)
    for tool in tools.values():
        assert tool["title"] and tool["description"]
        assert tool["inputSchema"]["type"] == "object" and tool["outputSchema"]["type"] == "object"
        assert "$ref" not in json.dumps(tool["outputSchema"]) + json.dumps(tool["inputSchema"])
        Draft202012Validator.check_schema(tool["outputSchema"])
        assert set(tool["annotations"]) >= {"readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"}
        assert tool["annotations"]["destructiveHint"] is False
    search = tools["search_site"]["inputSchema"]
    assert search["required"] == ["q"] and search["additionalProperties"] is False
    assert search["properties"]["q"]["maxLength"] == 160
    assert search["properties"]["limit"] == {**search["properties"]["limit"], "type": ["integer", "string"],
                                             "minimum": 1, "maximum": 50, "default": 20}
    assert tools["search_site"]["annotations"]["readOnlyHint"] is True
    assert tools["representation_capture"]["annotations"]["readOnlyHint"] is False
    assert tools["representation_capture"]["annotations"]["idempotentHint"] is False
    assert "snapshot row" in tools["representation_capture"]["description"]
    assert "snapshot row" in tools["representation_compare"]["description"]
    if "lens_page" in tools:
        assert "phases" not in tools["lens_page"]["inputSchema"]["properties"]
        assert tools["lens_page"]["annotations"]["openWorldHint"] is True


def test_the_ask_tool_is_described_without_the_http_stream_it_never_sends(api):
    """agent_audit23 #5: the stream's frames and headers are the HTTP answer's, in its 200 response
    and the guide; the tool and its skill describe what the tool does."""
    stream = ("text/event-stream", "begin-nlweb-response", "X-Accel-Buffering", "keep-alive")
    tool = tools_by_name(api)["ask"]["description"]
    skill = api.get("/.well-known/agent-skills/ask/SKILL.md").text
    assert not [word for word in stream if word in tool or word in skill]
    assert "ranks every page" in tool.lower() and "never a stream" in tool
    answer = api.get("/openapi.json").json()["paths"]["/ask"]["get"]["responses"]["200"]["description"]
    for guide in (api.get("/developers.md").text, api.get("/developers").text, answer):
        assert all(word in guide for word in stream)


def test_older_versions_get_the_fields_they_know(api):
    old = tools_by_name(api, "2024-11-05")["search_site"]
    assert "outputSchema" not in old and "annotations" not in old and "title" not in old
    assert "annotations" in tools_by_name(api, "2025-03-26")["search_site"]
    legacy = tool_call(api, "search_site", {"q": "carburetor"}, "2025-03-26").json()["result"]
    assert "structuredContent" not in legacy and json.loads(legacy["content"][0]["text"])["results"]


def test_a_tool_call_answers_what_the_endpoint_answers(api):
    tools = tools_by_name(api)
    result = tool_call(api, "search_site", {"q": "carburetor", "limit": 3}).json()["result"]
    assert result["isError"] is False
    assert result["structuredContent"] == api.get("/search.json?q=carburetor&limit=3").json()
    assert json.loads(result["content"][0]["text"]) == result["structuredContent"]
    Draft202012Validator(tools["search_site"]["outputSchema"]).validate(result["structuredContent"])
    resume = tool_call(api, "resume", {}).json()["result"]
    assert resume["structuredContent"]["basics"]


@pytest.mark.parametrize("name,arguments", [("search_site", {"q": "coffee \ud800"}), ("ask", {"query": "coffee \udfff"})])
def test_a_lone_surrogate_in_an_argument_is_answered(api, name, arguments):
    response = tool_call(api, name, arguments)  # json.dumps sends the surrogate as a \u escape
    result = response.json()["result"]
    assert response.status_code == 200 and result.get("isError") is not True and result["structuredContent"]["results"]


def test_a_failing_endpoint_is_a_tool_error_with_its_sentence(api):
    result = tool_call(api, "search_site", {"q": "   "}).json()["result"]
    assert result["isError"] is True and "structuredContent" not in result
    # the endpoint's sentence, naming the argument at fault and saying its examples are HTTP requests
    sentence = api.get("/search.json?q=%20%20%20").json()["error"]
    assert result["content"][0]["text"].startswith(f"Argument 'q': {sentence} (Examples are written as the HTTP")


@pytest.mark.parametrize("params, fragment", [
    ({"name": "no_such_tool", "arguments": {}}, "Unknown tool"),
    ({"arguments": {}}, "params.name"),
    ({"name": "search_site", "arguments": {"q": "x", "colour": "red"}}, "colour"),
    ({"name": "search_site", "arguments": {}}, "'q' is a required property"),
    ({"name": "search_site", "arguments": {"q": "x", "limit": True}}, "limit"),
    ({"name": "search_site", "arguments": {"q": "x" * 100_000}}, "longer than"),
    ({"name": "search_site", "arguments": ["q"]}, "must be an object"),
])
def test_bad_tool_calls_are_invalid_params(api, params, fragment):
    response = call(api, request("tools/call", params))
    assert response.status_code == 200
    assert error_code(response) == -32602
    assert fragment in response.json()["error"]["message"]


def test_from_2025_11_25_bad_arguments_are_a_result_a_model_can_read(api):
    """The tools chapter of 2025-11-25 moved input validation errors from -32602 to tool results."""
    for arguments, fragment in (({"q": "x", "limit": True}, "limit"), ({}, "'q' is a required property"),
                                ({"q": "x" * 100_000}, "longer than")):
        older = tool_call(api, "search_site", arguments, version="2025-06-18")
        assert error_code(older) == -32602 and fragment in older.json()["error"]["message"]
        result = tool_call(api, "search_site", arguments, version="2025-11-25").json()["result"]
        assert result["isError"] is True and fragment in result["content"][0]["text"], result
    assert error_code(tool_call(api, "no_such_tool", {}, version="2025-11-25")) == -32602  # still a protocol error


def test_a_wrong_argument_name_is_told_the_names_the_tool_takes(api):
    """/ask's `query` sent to search_site, whose argument is `q`: the sentence names what it takes."""
    for version in ("2025-06-18", "2025-11-25"):
        answer = tool_call(api, "search_site", {"query": "carburetor"}, version=version).json()
        text = answer["error"]["message"] if "error" in answer else answer["result"]["content"][0]["text"]
        assert "'query' was unexpected" in text and text.endswith("search_site takes q (required), limit."), text


@pytest.mark.parametrize("version", ["2025-06-18", "2025-11-25"])
def test_tools_clamp_and_truncate_what_their_endpoints_clamp_and_truncate(api, version):
    """The bounds in an endpoint tool's inputSchema document the endpoint; out-of-range values are
    clamped or truncated as over HTTP, never refused."""
    def structured(name, arguments):
        result = tool_call(api, name, arguments, version=version).json()["result"]
        assert result["isError"] is False, (name, arguments, result)
        return result["structuredContent"]

    many = structured("search_site", {"q": "the honda", "limit": 100})
    assert many["returned"] == api.get("/search.json?q=the+honda&limit=100").json()["returned"]
    assert structured("search_site", {"q": "carburetor " + "x" * 200})["query"] == api.get(
        "/search.json", params={"q": "carburetor " + "x" * 200}).json()["query"]
    assert len(structured("ask", {"query": "how do I tune carburetors", "top_k": 0})["results"]) == 1
    long_question = "how do I tune carburetors " * 200  # 5,200 characters: GET /ask answers it, so the tool does
    assert structured("ask", {"query": long_question, "top_k": 2})["results"]
    assert structured("photo_query", {"camera": "X" * 121})["total"] == api.get(
        "/photos/query.json", params={"camera": "X" * 121}).json()["total"]
    assert structured("change_radar", {"limit": 500})["ok"] is not None
    tools = tools_by_name(api, version)
    assert tools["search_site"]["inputSchema"]["properties"]["limit"]["maximum"] == 50  # still documented
    assert "botViews" not in tools["lens_page"]["inputSchema"]["properties"]  # the page phase runs none


def test_ask_takes_prev_as_an_array_or_a_string(api):
    def searched(prev):
        result = tool_call(api, "ask", {"query": "and the jets?", "prev": prev}).json()["result"]
        assert result["isError"] is False, result
        return result["structuredContent"]["decontextualized_query"]

    assert "(in the context of: carburetor rebuild, float height; idle)" in searched(["carburetor rebuild, float height",
                                                                                       "idle"])
    assert "(in the context of: carburetor rebuild; idle)" in searched("carburetor rebuild,idle")
    properties = tools_by_name(api)["ask"]["inputSchema"]["properties"]
    assert properties["prev"]["type"] == ["string", "array"] and properties["prev"]["items"] == {"type": "string"}
    assert "mode" not in properties and "limit" not in properties  # list is the one mode served; top_k is the count
    # the tool answers one JSON body whatever: no advice to pass a streaming it refuses
    assert "streaming" not in properties and "streaming=" not in tools_by_name(api)["ask"]["description"]


@pytest.mark.parametrize("version", ["2025-06-18", "2025-11-25"])
def test_a_whole_number_written_as_a_float_is_that_number(api, version):
    """JSON Schema counts 2.0 as an integer, and Python clients send it so; the endpoint must get "2",
    not "2.0" (a non-number, which fell back to the default), and -1e308 clamps like any large number."""
    def structured(name, arguments):
        result = tool_call(api, name, arguments, version=version).json()["result"]
        assert result["isError"] is False, (name, arguments, result)
        return result["structuredContent"]

    assert len(structured("photo_query", {"limit": 2.0})["photos"]) == 2
    assert structured("photo_query", {"limit": 2.0, "offset": 1.0})["photos"] == api.get(
        "/photos/query.json?limit=2&offset=1").json()["photos"]
    assert len(structured("photo_query", {"limit": -1e308})["photos"]) == 1
    assert len(structured("ask", {"query": "how do I tune carburetors", "top_k": 3.0})["results"]) == 3
    assert structured("search_site", {"q": "the honda", "limit": 1.0})["returned"] == 1


def test_argument_arrays_are_capped_before_the_schema_is_checked(api):
    """uniqueItems on thousands of objects costs jsonschema quadratic time (4,000 took 14 s of a
    server thread); an array longer than any tool takes is refused before the schema runs."""
    many = [{"profile": i} for i in range(4000)]
    for version in ("2025-06-18", "2025-11-25"):
        response = api.request("POST", "/mcp", json=request("tools/call", {"name": "representation_capture",
                               "arguments": {"url": "https://example.com/", "profiles": many}}),
                               headers={"MCP-Protocol-Version": version}, timeout=5)
        answer = response.json()
        message = answer["error"]["message"] if version == "2025-06-18" else answer["result"]["content"][0]["text"]
        assert "more than 64 items" in message and "profiles" in message
    assert tool_call(api, "search_site", {"q": ["x"] * 65}).json()["error"]["code"] == -32602


@pytest.mark.parametrize("name, arguments", [("representation_capture", '{"url": "x", "profiles": %s}'),
                                             ("search_site", '{"q": %s}')])
def test_deeply_nested_arguments_are_invalid_params_not_an_internal_error(api, name, arguments):
    """About 975 levels still parse, and then failed jsonschema's repr of the value (-32603 and a
    logged traceback per request); no depth that parses may answer anything but -32602."""
    seen = set()
    for depth in range(930, 1000):
        nested = "[" * depth + "]" * depth
        raw = ('{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "%s", "arguments": %s}}'
               % (name, arguments % nested))
        response = call(api, None, {"MCP-Protocol-Version": "2025-06-18"}, raw=raw.encode())
        seen.add(error_code(response))
        assert error_code(response) in (-32602, -32700), (depth, response.text[:300])
        if error_code(response) == -32700:  # past what the decoder reads: said so, not "not JSON"
            assert "nests JSON too deeply" in response.json()["error"]["message"], response.text[:300]
    assert -32602 in seen
    too_deep = "[" * 100_000 + "]" * 100_000  # past any interpreter's recursion limit
    response = call(api, None, {"MCP-Protocol-Version": "2025-06-18"}, raw=too_deep.encode())
    assert error_code(response) == -32700 and "nests JSON too deeply" in response.json()["error"]["message"]


@pytest.mark.parametrize("raw, code, status", [
    ("{not json", -32700, 400),
    ("", -32700, 400),
    ('"just a string"', -32600, 400),
    ('{"jsonrpc": "2.0", "id": 1}', -32600, 400),
    ('{"jsonrpc": "1.0", "id": 1, "method": "ping"}', -32600, 400),
    ('{"jsonrpc": "2.0", "id": true, "method": "ping"}', -32600, 400),
    ('{"jsonrpc": "2.0", "id": 1.5, "method": "ping"}', -32600, 400),
    ('{"jsonrpc": "2.0", "id": {"a": 1}, "method": "ping"}', -32600, 400),
    ('{"jsonrpc": "2.0", "id": 1, "method": 7}', -32600, 400),
    ('{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": "x"}', -32600, 400),
    ('{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": [1]}', -32602, 200),
    ('{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"cursor": "abc"}}', -32602, 200),
    ('{"jsonrpc": "2.0", "id": 1, "method": "resources/list"}', -32601, 200),
    ('{"jsonrpc": "2.0", "id": 1, "method": "' + "x" * 50_000 + '"}', -32601, 200),
])
def test_malformed_messages_get_the_right_json_rpc_error(api, raw, code, status):
    response = call(api, None, raw=raw.encode())
    assert response.status_code == status
    assert response.json()["jsonrpc"] == "2.0" and error_code(response) == code
    assert len(response.json()["error"]["message"]) < 400


def test_a_body_that_is_not_utf8_is_told_so(api):
    """As POST /ask says it: "not JSON" sent a client looking for a syntax error (unicode_audit24 I4)."""
    response = call(api, None, raw='{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "caf\xe9"}}'
                    .encode("latin-1"))
    assert response.status_code == 400 and error_code(response) == -32700
    assert "not UTF-8" in response.json()["error"]["message"] and "at byte 75" in response.json()["error"]["message"]


def test_an_a2a_client_is_told_this_is_an_mcp_server(api):
    """The agent card names /mcp, so an A2A client sends message/send there (agent_audit23 #15)."""
    for response in (call(api, request("message/send", {"message": {"role": "user", "parts": []}})),
                     modern(api, "message/send")):
        message = response.json()["error"]["message"]
        assert error_code(response) == -32601 and "It is an MCP server" in message and "no A2A methods" in message
    assert "A2A" not in call(api, request("resources/list")).json()["error"]["message"]


@pytest.mark.parametrize("params, named", [("null", "not null"), ("[1]", "not an array")])
def test_params_that_are_not_an_object_are_named_as_sent(api, params, named):
    raw = '{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": %s}' % params
    response = call(api, None, raw=raw.encode())
    assert error_code(response) == -32602 and named in response.json()["error"]["message"]


def test_batches_are_answered_in_order_and_capped(api):
    batch = [request("ping", msg_id=1), {"jsonrpc": "2.0", "method": "notifications/initialized"},
             request("tools/list", msg_id="two"), {"bad": True}]
    answers = call(api, batch).json()
    assert [a.get("id") for a in answers] == [1, "two", None]
    assert "tools" in answers[1]["result"] and answers[2]["error"]["code"] == -32600
    assert call(api, [{"jsonrpc": "2.0", "method": "notifications/initialized"}]).status_code == 202
    assert error_code(call(api, [])) == -32600
    too_many = call(api, [request("ping", msg_id=i) for i in range(17)])
    assert too_many.status_code == 413 and error_code(too_many) == -32600
    assert call(api, [request("ping", msg_id=i) for i in range(16)]).status_code == 200
    initialize = request("initialize", {"protocolVersion": "2025-03-26", "capabilities": {},
                                        "clientInfo": {"name": "t", "version": "1"}}, msg_id=9)
    answers = call(api, [initialize, request("ping", msg_id=10)], {"MCP-Protocol-Version": "2025-03-26"}).json()
    assert answers[0]["id"] == 9 and answers[0]["error"]["code"] == -32600 and answers[1]["result"] == {}


@pytest.mark.parametrize("version", ["2025-06-18", "2025-11-25"])
def test_versions_without_batches_refuse_them(api, version):
    refused = call(api, [request("ping")], {"MCP-Protocol-Version": version})
    assert refused.status_code == 400 and error_code(refused) == -32600 and version in refused.json()["error"]["message"]


def test_a_body_over_256_kb_is_413(api):
    response = call(api, None, raw=json.dumps(request("ping", {"pad": "x" * 300_000})).encode())
    assert response.status_code == 413 and error_code(response) == -32600
    assert "larger than 256 KB" in response.json()["error"]["message"]


def test_a_compressed_body_is_a_415_as_a_json_rpc_error(api):
    response = call(api, None, raw=gzip.compress(json.dumps(request("ping")).encode()),
                    headers={"Content-Encoding": "gzip"})
    assert response.status_code == 415 and response.headers["Accept-Encoding"] == "identity"
    assert error_code(response) == -32000 and response.json()["id"] is None
    assert response.json()["error"]["data"]["code"] == "unsupported_content_encoding"


def test_get_and_delete_are_405_and_options_is_a_preflight(api):
    for method in ("GET", "DELETE", "PUT", "HEAD"):
        response = api.request(method, "/mcp")
        assert response.status_code == 405
        assert "POST" in response.headers["Allow"]
    preflight = api.request("OPTIONS", "/mcp", headers={"Origin": "https://example.com",
                                                        "Access-Control-Request-Method": "POST"})
    assert preflight.status_code == 204
    assert "POST" in preflight.headers["Access-Control-Allow-Methods"]
    assert preflight.headers["Access-Control-Allow-Origin"] == "*"


@pytest.mark.parametrize("origin, status", [
    ("https://example.com", 200), ("http://localhost:6274", 200), ("http://[::1]:8080", 200),
    ("chrome-extension://abcdefghijklmnop", 200), ("null", 200),  # an extension's client; a sandboxed frame
    ("example.com", 403), ("https://example.com/path", 403), ("https://example.com, https://b.example", 403), ("", 403),
])
def test_origin_is_checked(api, origin, status):
    response = call(api, request("ping"), {"Origin": origin})
    assert response.status_code == status
    if status == 403:
        assert error_code(response) == -32600


@pytest.mark.parametrize("version", ["1999-01-01", "latest", "2026-07-28x"])
def test_an_unsupported_protocol_version_header_is_400(api, version):
    response = call(api, request("tools/list", msg_id=7), {"MCP-Protocol-Version": version})
    assert response.status_code == 400 and error_code(response) == -32022
    assert response.json()["id"] == 7  # the body was readable, so the error answers its request
    assert "2026-07-28" in response.json()["error"]["data"]["supported"]


# -- 2026-07-28 ------------------------------------------------------------------------------------
def test_discover_and_modern_results(api):
    discover = modern(api, "server/discover")
    assert discover.status_code == 200
    result = discover.json()["result"]
    assert MODERN in result["supportedVersions"] and "2024-11-05" in result["supportedVersions"]
    assert result["resultType"] == "complete" and result["capabilities"]["tools"] is not None
    assert result["ttlMs"] > 0 and result["cacheScope"] in ("public", "private")
    listing = modern(api, "tools/list").json()["result"]
    assert listing["resultType"] == "complete" and listing["ttlMs"] > 0 and listing["cacheScope"] == "public"
    tools = {t["name"]: t for t in listing["tools"]}
    called = modern(api, "tools/call", {"name": "search_site", "arguments": {"q": "carburetor"}}).json()["result"]
    assert called["resultType"] == "complete" and called["isError"] is False
    Draft202012Validator(tools["search_site"]["outputSchema"]).validate(called["structuredContent"])


def test_modern_errors_map_to_http_statuses(api):
    unknown = modern(api, "resources/list")
    assert unknown.status_code == 404 and error_code(unknown) == -32601
    assert modern(api, "ping").status_code == 404  # removed in 2026-07-28
    assert modern(api, "initialize").status_code == 404
    no_meta = call(api, request("tools/list", {}), {"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/list"})
    assert no_meta.status_code == 400 and error_code(no_meta) == -32602
    wrong_method = modern(api, "tools/list", headers={"Mcp-Method": "tools/call"})
    assert wrong_method.status_code == 400 and error_code(wrong_method) == -32020
    wrong_name = modern(api, "tools/call", {"name": "search_site", "arguments": {"q": "x"}},
                        headers={"Mcp-Name": "resume"})
    assert wrong_name.status_code == 400 and error_code(wrong_name) == -32020
    bad_args = modern(api, "tools/call", {"name": "search_site", "arguments": {}}).json()["result"]
    assert bad_args["isError"] is True and "'q' is a required property" in bad_args["content"][0]["text"]
    batch = call(api, [request("ping")], {"MCP-Protocol-Version": MODERN})
    assert batch.status_code == 400 and error_code(batch) == -32600


def test_a_tool_name_in_a_base64_mcp_name_header_is_decoded(api):
    """Clients send a name that is not plain printable ASCII as =?base64?...?= (the SDK does), so an
    unknown non-ASCII name is an unknown tool, not a header mismatch."""
    def encoded(text):
        return "=?base64?" + base64.b64encode(text.encode()).decode() + "?="

    unknown = modern(api, "tools/call", {"name": "café", "arguments": {}}, headers={"Mcp-Name": encoded("café")})
    assert unknown.status_code == 400 and error_code(unknown) == -32602
    assert "Unknown tool 'café'" in unknown.json()["error"]["message"]
    found = modern(api, "tools/call", {"name": "search_site", "arguments": {"q": "carburetor"}},
                   headers={"Mcp-Name": encoded("search_site")})
    assert found.status_code == 200 and found.json()["result"]["isError"] is False
    for bad in ("=?base64?!!!?=", "=?base64?" + base64.b64encode(b"\xff").decode() + "?=", encoded("resume")):
        mismatch = modern(api, "tools/call", {"name": "search_site", "arguments": {"q": "x"}}, headers={"Mcp-Name": bad})
        assert mismatch.status_code == 400 and error_code(mismatch) == -32020


def test_a_meta_version_without_headers_is_modern_and_must_carry_them(api):
    params = {"_meta": {"io.modelcontextprotocol/protocolVersion": "2099-01-01",
                        "io.modelcontextprotocol/clientCapabilities": {}}}
    response = call(api, request("server/discover", params))
    assert response.status_code == 400 and error_code(response) == -32020


# -- server cards ----------------------------------------------------------------------------------
def test_the_draft_server_card_has_cors_caching_and_an_etag(api, site_settings):
    card = api.get("/mcp/server-card")
    assert card.status_code == 200
    assert card.headers["Content-Type"].startswith("application/mcp-server-card+json")
    assert card.headers["Access-Control-Allow-Origin"] == "*"
    assert card.headers["Cache-Control"] == "public, max-age=3600"
    body = card.json()
    assert body["remotes"][0] == {"type": "streamable-http", "url": site_settings.url("/mcp"),
                                  "supportedProtocolVersions": ["2024-11-05", "2025-03-26", "2025-06-18",
                                                                "2025-11-25", MODERN]}
    assert "/" in body["name"] and "tools" not in body
    # SEP-2127 allows 100 characters: the sentence is whole, the one serverInfo gives
    assert len(body["description"]) <= 100 and body["description"].endswith(".")
    assert body["description"] == api.get("/.well-known/mcp/server-card.json").json()["serverInfo"]["description"]
    # weak, as every document's: the edge gzips the card and passes the ETag on, and a strong tag
    # would then name two different byte sequences
    etag = card.headers["ETag"]
    assert re.fullmatch(r'W/"[0-9a-f]{32}"', etag), etag
    # If-None-Match compares weakly (RFC 9110 §13.1.2): the tag matches with or without its W/
    for sent in (etag, etag.removeprefix("W/"), '"x", ' + etag.removeprefix("W/"), f'"x", {etag}', "*"):
        again = api.get("/mcp/server-card", headers={"If-None-Match": sent})
        assert again.status_code == 304 and again.content == b"", sent
        assert again.headers["ETag"] == etag and again.headers["Cache-Control"] == "public, max-age=3600", sent
    assert api.get("/mcp/server-card", headers={"If-None-Match": '"other", W/"other"'}).status_code == 200
    responses = api.get("/openapi.json").json()["paths"]["/mcp/server-card"]["get"]["responses"]
    assert "304" in responses and "weak" in responses["200"]["headers"]["ETag"]["description"].lower()


def test_the_scanner_card_lists_the_same_tools(api, site_settings):
    card = api.get("/.well-known/mcp/server-card.json").json()
    assert card["transport"] == {"type": "streamable-http", "url": site_settings.url("/mcp")}
    assert card["authentication"] == {"required": False} and card["capabilities"]["tools"] is True
    assert [t["name"] for t in card["tools"]] == list(tools_by_name(api))


def test_openapi_describes_the_mcp_paths(api):
    doc = api.get("/openapi.json").json()
    assert {"/mcp", "/mcp/server-card", "/.well-known/mcp/server-card.json"} <= set(doc["paths"])
    assert doc["paths"]["/mcp"]["post"]["security"] == []


# -- shared budgets and the snapshot tools (an app whose lens reaches a loopback web) -------------
@pytest.fixture(scope="module")
def lens_api(site_settings, checker):
    from conftest import Client

    web, thread = lens_web.start()
    rates = {**site_settings.rates, "inspect": RatePolicy("inspect", 3, 60),
             "representation_capture": RatePolicy("representation_capture", 2, 60)}
    settings = dataclasses.replace(site_settings, rates=rates)
    try:
        with serve_wsgi(make_app(settings, fetcher=lens_web.loopback_fetcher(web)).wsgi) as base:
            yield Client(base, checker), web
    finally:
        lens_web.stop(web, thread)


def test_lens_tools_share_the_inspect_budget_with_the_endpoint(lens_api):
    api, web = lens_api
    tools = tools_by_name(api)
    answered = tool_call(api, "lens_page", {"url": web.url("/rich")})
    page = answered.json()["result"]
    assert page["isError"] is False, page
    # the answer names each budget the call spent: the POST's read unit and its endpoint's inspect unit
    read = api.get("/robots.txt").headers["RateLimit-Policy"]
    assert answered.headers["RateLimit-Policy"] == f'{read}, "inspect";q=3;w=60'
    assert answered.headers["RateLimit"].split(", ")[1].startswith('"inspect";r=2;')
    Draft202012Validator(tools["lens_page"]["outputSchema"]).validate(page["structuredContent"])
    summary = page["structuredContent"]  # REFERENCE: a LensSummary, page phase only, not the whole observation
    observed = api.get("/lens/fetch", params={"url": web.url("/rich"), "phases": "page"}).json()
    assert summary["finalUrl"] == web.url("/rich") and "anatomy" not in summary and "rawHtml" not in page["content"][0]["text"]
    assert summary["title"] == observed["structured"]["title"] and summary["wordCount"] == observed["anatomy"]["wordCount"]
    assert summary["readiness"] is None and summary["tier"] is None and summary["cost"]["tokens"] > 0
    assert summary["crawlers"] is None and summary["nextActions"] is None
    refused = tool_call(api, "lens_inspect", {"url": "http://10.0.0.1/"}).json()["result"]
    assert refused["isError"] is True and "public internet addresses" in refused["content"][0]["text"]
    over = tool_call(api, "lens_inspect", {"url": web.url("/rich")}).json()["result"]
    assert over["isError"] is True
    assert "inspect budget is 3 per 60 seconds" in over["content"][0]["text"] and "retry in" in over["content"][0]["text"]
    assert api.get("/lens/fetch", params={"url": web.url("/rich")}).status_code == 429


def test_snapshot_tools_store_read_compare_and_have_their_own_budget(lens_api):
    api, web = lens_api
    tools = tools_by_name(api)
    captured = tool_call(api, "representation_capture", {"url": web.url("/rich"), "profiles": ["browser", "bot"]})
    result = captured.json()["result"]
    assert result["isError"] is False, result
    Draft202012Validator(tools["representation_capture"]["outputSchema"]).validate(result["structuredContent"])
    snapshots = result["structuredContent"]["snapshots"]
    assert [s["profile"] for s in snapshots] == ["browser", "bot"] and snapshots[0]["status"] == 200
    snapshot_id = snapshots[0]["id"]

    read = tool_call(api, "representation_read", {"snapshot_id": snapshot_id}).json()["result"]
    assert read["structuredContent"]["snapshot"]["id"] == snapshot_id
    as_float = tool_call(api, "representation_read", {"snapshot_id": float(snapshot_id)}).json()["result"]
    assert as_float["structuredContent"] == read["structuredContent"]  # 1.0 is an integer to JSON Schema
    Draft202012Validator(tools["representation_read"]["outputSchema"]).validate(read["structuredContent"])
    compared = tool_call(api, "representation_compare", {"snapshot_id": snapshot_id}).json()["result"]
    assert compared["isError"] is False
    Draft202012Validator(tools["representation_compare"]["outputSchema"]).validate(compared["structuredContent"])
    assert compared["structuredContent"]["after"]["id"] > snapshot_id

    missing = tool_call(api, "representation_read", {"snapshot_id": 10 ** 9}).json()["result"]
    assert missing["isError"] is True and "capture one first" in missing["content"][0]["text"]
    assert error_code(tool_call(api, "representation_read", {"snapshot_id": "one"})) == -32602
    assert error_code(tool_call(api, "representation_capture", {"url": "x", "profiles": ["robot"]})) == -32602
    refused = tool_call(api, "representation_capture", {"url": "http://169.254.169.254/"}).json()["result"]
    assert refused["isError"] is True  # the second capture of the budget of 2
    over = tool_call(api, "representation_capture", {"url": web.url("/rich")}).json()["result"]
    assert over["isError"] is True and "representation_capture budget is 2" in over["content"][0]["text"]
    assert "retry in" in over["content"][0]["text"]


def test_mcp_spends_the_shared_read_budget_and_a_tool_call_one_unit_of_it(site_settings, checker):
    """/mcp is one more endpoint of the shared `read` budget (API.md §8), not a budget of its own; a
    search through it spends the one unit /search.json spends, not a second for the search it runs
    (agent_audit23 #7: two, and a RateLimit header one too high)."""
    from conftest import Client

    settings = dataclasses.replace(site_settings, rates={**site_settings.rates, "read": RatePolicy("read", 6, 60)})
    with serve_wsgi(make_app(settings).wsgi) as base:
        api = Client(base, checker)
        assert api.get("/robots.txt").status_code == 200  # read 1 of 6
        listed = call(api, request("tools/list"), {"MCP-Protocol-Version": "2025-06-18"})  # read 2
        assert listed.headers["RateLimit-Policy"] == '"read";q=6;w=60'
        for n in (3, 4):
            searched = tool_call(api, "search_site", {"q": "carburetor"})  # read 3, then 4
            assert searched.json()["result"]["isError"] is False
            assert searched.headers["RateLimit-Policy"] == '"read";q=6;w=60'
            policy, remaining, reset = searched.headers["RateLimit"].split(";")
            assert (policy, remaining) == ('"read"', f"r={6 - n}")
            # t counts down from 60 from the first hit on: 60 only while that was under a second ago
            assert reset.startswith("t=") and 1 <= int(reset[2:]) <= 60
        assert api.get("/robots.txt").headers["RateLimit"].startswith('"read";r=1;')  # read 5
        last = tool_call(api, "search_site", {"q": "carburetor"})  # read 6
        assert last.json()["result"]["isError"] is False and last.headers["RateLimit"].startswith('"read";r=0;')
        assert tool_call(api, "search_site", {"q": "carburetor"}).status_code == 429  # the 7th
        over = call(api, request("tools/list", msg_id="list-2"), {"MCP-Protocol-Version": "2025-06-18"})
        assert over.status_code == 429 and over.headers["RateLimit-Policy"] == '"read";q=6;w=60'
        # a JSON-RPC response to the request, which MCP clients show; a REST error body they would drop
        refusal = over.json()
        assert refusal["id"] == "list-2" and refusal["error"]["code"] == -32000
        assert "read budget is 6 per 60 seconds" in refusal["error"]["message"]
        assert refusal["error"]["data"]["code"] == "rate_limited"
        assert refusal["error"]["data"]["retry_after"] == int(over.headers["Retry-After"])
        padded = call(api, None, {"MCP-Protocol-Version": "2025-06-18"}, raw=json.dumps(
            {**request("ping", msg_id="big"), "params": {"_meta": {"pad": "x" * 100_000}}}))
        assert padded.status_code == 429 and padded.json()["id"] is None  # not read past 64 KB for its id


def test_each_tool_call_of_a_batch_spends_its_own_read_unit(site_settings, checker):
    """A batch (2024-11-05, 2025-03-26) is one POST: its unit pays for one tool call, and each other
    call spends one more, refused as a tool error when none is left; the headers say what is left."""
    from conftest import Client

    settings = dataclasses.replace(site_settings, rates={**site_settings.rates, "read": RatePolicy("read", 3, 60)})
    search = {"name": "search_site", "arguments": {"q": "carburetor"}}
    batch = [request("tools/list", msg_id=0)] + [request("tools/call", search, msg_id=n) for n in (1, 2, 3, 4)]
    with serve_wsgi(make_app(settings).wsgi) as base:
        api = Client(base, checker)
        answered = call(api, batch, {"MCP-Protocol-Version": "2025-03-26"})
        results = [answer["result"] for answer in answered.json()]
        assert [r.get("isError") for r in results] == [None, False, False, False, True]  # the POST's, +1, +1, none
        assert "read budget is 3 per 60 seconds" in results[4]["content"][0]["text"]
        assert answered.headers["RateLimit-Policy"] == '"read";q=3;w=60'
        assert answered.headers["RateLimit"].startswith('"read";r=0;')
        assert api.get("/robots.txt").status_code == 429


def test_an_unserved_api_version_is_a_json_rpc_error_to_the_request(api):
    refused = call(api, request("ping", msg_id=7), {"API-Version": "2"})
    assert refused.status_code == 400 and refused.json()["id"] == 7
    assert refused.json()["error"]["data"]["code"] == "unsupported_api_version"
    assert "send API-Version: 1" in refused.json()["error"]["message"]


def test_a_failing_tool_gives_the_endpoints_whole_error_after_its_sentence(api):
    failed = tool_call(api, "search_site", {"q": "   "}).json()["result"]
    assert failed["isError"] is True and len(failed["content"]) == 2
    details = json.loads(failed["content"][1]["text"])
    assert failed["content"][0]["text"].startswith(f"Argument 'q': {details['error']}") and details["parameter"] == "q"


@pytest.mark.parametrize("profiles", [[{"a": 1}], [["browser"]], [{str(k): 0 for k in range(1200)} | {"x": i} for i in range(16)]])
def test_arrays_of_objects_are_refused_before_the_schema_compares_them(api, profiles):
    """jsonschema's uniqueItems compares every pair of objects in full: 64 objects of 1,500 keys took
    about a second of CPU with the GIL held (a body the 256 KB cap now refuses; 16 of 1,200 fit it)."""
    refused = tool_call(api, "representation_capture", {"url": "https://example.com/", "profiles": profiles})
    assert error_code(refused) == -32602
    assert "'profiles' holds objects or arrays; every tool's arrays take strings" in refused.json()["error"]["message"]


def test_snapshot_tools_do_not_create_a_missing_site_db(tmp_path, checker):
    """With site.db missing the snapshot tools say their storage is down; they used to open a writer
    that created an empty site.db with every table, after which /search.json answered an empty 200
    instead of its 503."""
    from conftest import Client, make_settings

    settings = make_settings(tmp_path)
    with serve_wsgi(make_app(settings).wsgi) as base:
        api = Client(base, checker)
        assert api.get("/search.json?q=carburetor").status_code == 503
        for name, arguments in (("representation_read", {"snapshot_id": 1}), ("representation_compare", {"snapshot_id": 1}),
                                ("representation_capture", {"url": "http://10.0.0.1/"})):
            result = tool_call(api, name, arguments).json()["result"]
            assert result["isError"] is True and "storage cannot be reached" in result["content"][0]["text"], result
        assert not settings.db_path.exists()
        assert api.get("/search.json?q=carburetor").status_code == 503
        down = tool_call(api, "search_site", {"q": "carburetor"}).json()["result"]
        assert down["isError"] is True and down["content"][0]["text"] == api.get("/search.json?q=x").json()["error"]


def test_snapshot_tools_answer_a_storage_fault_with_a_sentence(tmp_path, checker, caplog):
    """A site.db that cannot be used (here damaged; held past the busy timeout or full alike) is the
    tools' storage being down, said in a sentence; the owner's log names the file and what to do."""
    from conftest import Client, make_settings

    settings = make_settings(tmp_path)
    settings.db_path.write_bytes(b"not a database " * 1000)
    with serve_wsgi(make_app(settings).wsgi) as base:
        api = Client(base, checker)
        for name, arguments in (("representation_read", {"snapshot_id": 1}), ("representation_compare", {"snapshot_id": 1})):
            result = tool_call(api, name, arguments).json()["result"]
            assert result["isError"] is True and result["content"][0]["text"] == mcp_tools.STORAGE_DOWN, result
    assert any("file is not a database" in r.getMessage() and "restore a backup" in r.getMessage() for r in caplog.records)
    assert not any(r.exc_info for r in caplog.records)
