"""/ask over HTTP against the real app in waitress: every parameter rule of both dialects, both
streams read frame by frame by a real SSE client (httpx-sse) and as raw text, bad bodies and hostile
text, mode 501, methods, and each fallback reason (model budget, a zero deadline, no model file).
Every JSON answer is validated against /openapi.json. Each test asks as its own caller
(X-Forwarded-For from the trusted proxy), so the model budget of one test never leaks into another."""
from __future__ import annotations

import dataclasses
import gzip
import itertools
import json
import socket
import uuid

import httpx
import pytest
from httpx_sse import connect_sse

from app import make_app
from conftest import build_site, make_settings
from servers import serve_wsgi
from siteapi.config import RatePolicy


CALLERS = itertools.count(1)


@pytest.fixture(scope="module")
def settings(tmp_path_factory):
    settings = make_settings(tmp_path_factory.mktemp("ask-http"))
    settings = dataclasses.replace(settings, rates={**settings.rates, "ask_model": RatePolicy("ask_model", 20, 60)})
    build_site(settings)  # the content job computes the page vectors too
    return settings


@pytest.fixture(scope="module")
def base(settings):
    with serve_wsgi(make_app(settings).wsgi) as url:
        yield url


def http_client(base, checker) -> httpx.Client:
    def validate(response):
        if "json" in response.headers.get("content-type", ""):
            response.read()
            checker.validate(response.request.method, response.request.url.path, response)

    n = next(CALLERS)
    return httpx.Client(base_url=base, timeout=30, event_hooks={"response": [validate]},
                        headers={"X-Forwarded-For": f"10.9.{n // 250}.{n % 250 + 1}"})


@pytest.fixture()
def client(base, checker):
    with http_client(base, checker) as c:
        yield c


def test_get_json_answer(client):
    r = client.get("/ask", params={"query": "how did the carburetor rebuild go", "streaming": "0", "top_k": "3",
                                   "query_id": "h-1"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
    assert "RateLimit-Policy" in r.headers
    body = r.json()
    assert body["query_id"] == "h-1" and body["site"] == "aadhar.sh" and len(body["results"]) == 3
    assert body["_meta"]["dialect"] == "legacy" and body["_meta"]["description"] == "extractive"
    scores = [x["score"] for x in body["results"]]
    assert scores == sorted(scores, reverse=True)


def test_legacy_stream_read_by_an_sse_client(client, checker):
    with connect_sse(client, "GET", "/ask", params={"query": "film simulation recipe", "top_k": "2",
                                                     "query_id": "h-2"}) as source:
        assert source.response.headers["content-type"].startswith("text/event-stream")
        assert source.response.headers["cache-control"] == "no-cache"
        assert source.response.headers["x-accel-buffering"] == "no"
        # no length: siteapi.serving sends each frame as it is yielded (tests/test_serving.py)
        assert source.response.headers["transfer-encoding"] == "chunked"
        frames = [(e.event, json.loads(e.data)) for e in source.iter_sse()]
    checker.validate_stream("GET", "/ask", frames)
    assert all(event == "message" for event, _ in frames)  # unnamed data frames
    kinds = [data["message_type"] for _, data in frames]
    assert kinds == ["begin-nlweb-response", "result", "result", "end-nlweb-response"]
    item = frames[1][1]["content"][0]
    assert item["@type"] == "Item" and item["url"].startswith("https://aadhar.sh/")
    assert frames[-1][1]["query_id"] == "h-2" and "error" not in frames[-1][1]


def test_structured_stream_read_by_an_sse_client(client, checker):
    payload = {"query": {"text": "where do I book a coffee"}, "top_k": 2, "query_id": "h-3"}
    with connect_sse(client, "POST", "/ask", json=payload) as source:
        frames = [(e.event, json.loads(e.data)) for e in source.iter_sse()]
    checker.validate_stream("POST", "/ask", frames)
    assert [event for event, _ in frames] == ["start", "result", "result", "complete"]
    assert frames[0][1]["_meta"]["version"] == "0.55" and frames[0][1]["streaming"] is True
    assert [data["index"] for event, data in frames if event == "result"] == [0, 1]
    assert frames[-1][1]["_meta"]["dialect"] == "0.55" and frames[-1][1]["query_id"] == "h-3"


def test_post_json_body_with_another_content_type_is_served(client):
    r = client.post("/ask", content=json.dumps({"query": {"text": "coffee"}, "prefer": {"streaming": False}}),
                    headers={"Content-Type": "text/plain"})
    assert r.status_code == 200 and r.json()["_meta"]["dialect"] == "0.55"


@pytest.mark.parametrize("content,parameter", [
    (b"{nope", "body"), (b"[]", "body"), (b'{"query": {"text": ""}}', "query"),
    (b'{"query": {"text": "a"}, "prefer": {"streaming": "no"}}', "prefer.streaming"),
    (b'{"query": {"text": "' + b"a" * 70000 + b'"}}', "body"),
])
def test_bad_bodies_are_400(client, content, parameter):
    r = client.post("/ask", content=content, headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.headers["content-type"].startswith("application/json")
    assert r.json()["parameter"] == parameter and r.json()["error"]


@pytest.mark.parametrize("content,named", [(b"[1]", "array"), (b'"q"', "string"), (b"null", "null"),
                                           (b"5", "number"), (b"true", "boolean")])
def test_a_body_of_another_json_type_is_named_as_json_names_it(client, content, named):
    r = client.post("/ask", content=content, headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["parameter"] == "body"
    assert r.json()["error"].endswith(f"not a JSON {named}.")


def test_a_top_k_of_thousands_of_digits_is_clamped_not_blamed_on_the_body(client):
    r = client.post("/ask", content=b'{"query": {"text": "carburetor"}, "prefer": {"streaming": false}, "top_k": '
                    + b"9" * 5000 + b"}", headers={"Content-Type": "application/json"})
    assert r.status_code == 200 and len(r.json()["results"]) == 46, r.text[:300]  # 50, past every page
    r = client.post("/ask", content=b'{"query": {"text": "carburetor"}, "top_k": -' + b"9" * 5000 + b"}")
    assert r.status_code == 200


@pytest.mark.parametrize("coding", ["gzip", "br", "GZIP, identity"])
def test_a_compressed_body_is_a_415_saying_to_send_it_as_it_is(client, coding):
    r = client.post("/ask", content=gzip.compress(b'{"query": {"text": "carburetor"}}'),
                    headers={"Content-Type": "application/json", "Content-Encoding": coding})
    assert r.status_code == 415 and r.headers["Accept-Encoding"] == "identity"
    assert r.json()["code"] == "unsupported_content_encoding" and "without a content coding" in r.json()["error"]
    plain = client.post("/ask", json={"query": {"text": "carburetor"}, "prefer": {"streaming": False}},
                        headers={"Content-Encoding": "identity"})
    assert plain.status_code == 200


def test_a_structured_body_without_text_asks_the_query_strings_question(client):
    r = client.post("/ask?query=carburetor+jets", json={"query": {}, "prefer": {"streaming": False}, "top_k": 1})
    assert r.status_code == 200 and r.json()["query"] == "carburetor jets" and r.json()["_meta"]["dialect"] == "0.55"
    r = client.post("/ask", json={"query": {"site": "aadhar.sh"}, "prefer": {"streaming": False}})
    assert r.status_code == 400 and r.json()["parameter"] == "query"


def test_line_separators_stay_escaped_in_the_stream(client):
    """SSE ends a line only at CR or LF, but readers that split with str.splitlines (requests'
    iter_lines) also split at U+0085, U+2028 and U+2029: the frames keep them as JSON escapes."""
    r = client.get("/ask", params={"query": "carburetor\u2028jets\u2029floats"})
    frames = [line for line in r.text.splitlines() if line.startswith("data: ")]
    assert len(frames) >= 3 and all(json.loads(line[6:]) for line in frames)
    assert json.loads(frames[0][6:])["query"] == "carburetor\u2028jets\u2029floats"


def test_modes_and_sites_over_http(client):
    r = client.get("/ask", params={"query": "coffee", "mode": "summarize"})
    assert r.status_code == 501 and r.json()["supported_modes"] == ["list"]
    r = client.get("/ask", params={"query": "coffee", "site": "example.com"})
    assert r.status_code == 400 and r.json()["parameter"] == "site"
    r = client.get("/ask")
    assert r.status_code == 400 and r.json()["parameter"] == "query"
    assert "/ask?query=" in r.json()["error"]
    r = client.get("/ask", params={"q": "carburetor"})  # /search.json's parameter name
    assert r.status_code == 400 and "/ask reads query" in r.json()["error"]
    for body in ({"json": {"q": "carburetor"}}, {"data": {"q": "carburetor"}}):  # in a JSON or form body too
        r = client.post("/ask", **body)
        assert r.status_code == 400 and "/ask reads query" in r.json()["error"], r.text
    r = client.get("/search.json", params={"query": "carburetor"})  # and the other way round
    assert r.status_code == 400 and "this endpoint reads q" in r.json()["error"]
    r = client.post("/ask", json={"query": "bike", "streaming": 0})  # the query string's 0, as a JSON number
    assert r.status_code == 400 and r.json()["parameter"] == "streaming" and "send false" in r.json()["error"]
    for body in ({}, {"query": "  "}):  # a JSON POST without a question is shown the JSON body to send
        r = client.post("/ask", json=body)
        assert r.status_code == 400 and r.json()["parameter"] == "query"
        assert '{"query": {"text": ' in r.json()["error"] and "?query=" not in r.json()["error"], r.text


def test_the_21st_question_in_a_minute_is_ranked_lexically(client):
    headers = {"X-Forwarded-For": "192.0.2.77"}
    rankings = [client.get("/ask", params={"query": "carburetor", "streaming": "0"}, headers=headers)
                .json()["_meta"]["ranking"] for _ in range(21)]
    assert rankings[:20] == ["model:minilm-l6-v2-int8"] * 20 and rankings[20] == "lexical:rate-limited"


# --- every parameter rule, over HTTP ------------------------------------------------------------

def ask_json(client, **params) -> dict:
    r = client.get("/ask", params={"streaming": "0", **params})
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.parametrize("value", ["0", "false", "no", "off", "FALSE", " Off "])
def test_streaming_off_words_answer_one_json_body(client, value):
    r = client.get("/ask", params={"query": "coffee", "streaming": value})
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
    assert r.json()["results"]


@pytest.mark.parametrize("value", ["1", "true", "yes", "banana", ""])
def test_any_other_streaming_value_streams(client, value):
    r = client.get("/ask", params={"query": "coffee", "streaming": value})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    assert r.text.startswith(": keep-alive\n\n")


def test_unknown_and_unserved_modes(client):
    r = client.get("/ask", params={"query": "coffee", "mode": "generate"})
    assert r.status_code == 501 and r.json()["supported_modes"] == ["list"] and r.json()["parameter"] == "mode"
    r = client.get("/ask", params={"query": "coffee", "mode": "poetry"})
    assert r.status_code == 400 and r.json()["parameter"] == "mode" and r.json()["code"] == "invalid_parameter"
    r = client.post("/ask", json={"query": {"text": "coffee"}, "prefer": {"mode": "summarize"}})
    assert r.status_code == 501 and r.json()["supported_modes"] == ["list"]
    assert ask_json(client, query="coffee", mode="LIST")["mode"] == "list"


@pytest.mark.parametrize("site", ["", "all", "aadhar.sh", "https://aadhar.sh", "HTTPS://AADHAR.SH/"])
def test_accepted_site_values(client, site):
    body = ask_json(client, query="coffee", site=site)
    assert body["site"] == "aadhar.sh" and all(r["site"] == "aadhar.sh" for r in body["results"])


@pytest.mark.parametrize("params,count", [
    ({"top_k": "3"}, 3), ({"top_k": "0"}, 1), ({"top_k": "-4"}, 1), ({"top_k": "abc"}, 10), ({}, 10),
    ({"limit": "4"}, 4), ({"top_k": "2", "limit": "7"}, 2), ({"top_k": "999"}, 46), ({"top_k": "", "limit": "5"}, 5),
    ({"top_k": "9" * 4400}, 46), ({"top_k": "-" + "9" * 4400}, 1),
])
def test_top_k_is_clamped_and_limit_read_in_its_absence(client, params, count):
    body = ask_json(client, query="motorcycle", **params)
    assert len(body["results"]) == count  # 999 -> 50, and the demo site has 46 pages
    assert body["total"] == 46


def test_prev_keeps_the_first_ten_and_reports_what_was_searched(client):
    prev = ",".join(f"earlier question {n}" for n in range(1, 13))
    body = ask_json(client, query="and the jets?", prev=prev)
    searched = body["decontextualized_query"]
    assert searched.startswith("and the jets?") and "earlier question 10" in searched
    assert "earlier question 11" not in searched and "earlier question 12" not in searched
    as_json = ask_json(client, query="and the jets?", prev=json.dumps(["carburetor rebuild", "float height"]))
    assert "carburetor rebuild; float height" in as_json["decontextualized_query"]


def test_decontextualized_query_is_searched_instead(client):
    body = ask_json(client, query="and the jets?", prev="coffee,espresso", decontextualized_query="CB550 carburetor jets")
    assert body["decontextualized_query"] == "CB550 carburetor jets"
    assert body["results"][0]["url"] == "https://aadhar.sh/writing/cb550-carb-rebuild"


def test_query_id_is_echoed_or_generated(client):
    assert ask_json(client, query="coffee", query_id="mine-1")["query_id"] == "mine-1"
    generated = ask_json(client, query="coffee")["query_id"]
    assert uuid.UUID(generated)


def test_body_fields_win_over_the_query_string(client):
    r = client.post("/ask", params={"top_k": "5", "query": "carburetor"},
                    json={"query": {"text": "coffee"}, "top_k": 2, "prefer": {"streaming": False}})
    assert r.status_code == 200 and len(r.json()["results"]) == 2 and r.json()["query"] == "coffee"
    r = client.post("/ask", params={"query": "carburetor", "top_k": "5"}, json={"query": "coffee", "streaming": "0"})
    assert r.status_code == 200 and r.json()["query"] == "coffee" and len(r.json()["results"]) == 5
    assert r.json()["_meta"]["dialect"] == "legacy"


def test_a_form_body_is_read_as_parameters_but_a_json_array_is_still_not_an_object(client):
    r = client.post("/ask", content="query=coffee&streaming=0&top_k=2",
                    headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert r.status_code == 200 and r.json()["query"] == "coffee" and len(r.json()["results"]) == 2
    for content in ("[1, 2]", '"a question"'):
        r = client.post("/ask", content=content, headers={"Content-Type": "application/x-www-form-urlencoded"})
        assert r.status_code == 400 and r.json()["parameter"] == "body"


def test_an_oversized_body_is_refused_without_misstating_its_size(client):
    r = client.post("/ask", content=b'{"query": "' + b"a" * 400_000 + b'"}', headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["parameter"] == "body"
    assert "over 65536 bytes" in r.json()["error"]


@pytest.mark.parametrize("body", [b" " * 70_000, b" " * 70_000 + b'{"query": {"text": "coffee"}}'])
def test_leading_whitespace_does_not_slip_a_body_past_the_size_limit(client, body):
    r = client.post("/ask?query=coffee&streaming=0", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["parameter"] == "body" and "over 65536 bytes" in r.json()["error"]


def test_a_body_that_is_not_utf8_is_told_so(client):
    body = '{"query": {"text": "café"}}'.encode("latin-1")
    r = client.post("/ask", content=body, headers={"Content-Type": "application/json; charset=iso-8859-1"})
    assert r.status_code == 400 and r.json()["parameter"] == "body"
    assert "not UTF-8" in r.json()["error"] and "not valid JSON" not in r.json()["error"], r.json()["error"]


@pytest.mark.parametrize("content", [b'{"query": {"text": "car"}, "x": ' + b"[" * 5000 + b"]" * 5000 + b"}",
                                     b"[" * 30000])
def test_deeply_nested_json_is_a_400_on_body(client, content):
    for content_type in ("application/json", "text/plain"):
        r = client.post("/ask", content=content, headers={"Content-Type": content_type})
        assert r.status_code == 400 and r.json()["parameter"] == "body", r.text
        assert "too deeply" in r.json()["error"]


def test_prev_nested_too_deeply_is_read_as_text(client):
    r = client.get("/ask", params={"query": "coffee", "prev": "[" * 2500 + "]" * 2500, "streaming": "0"})
    assert r.status_code == 200 and r.json()["results"], r.text


# --- hostile text: answered or a 400, never a 500 -----------------------------------------------

@pytest.mark.parametrize("question", [
    "coffee\x00 slots\x1b[31m\x7f\x85", "a" * 5000, "é" * 2600, "咖啡" * 900, "\t\n coffee \r\n",
])
def test_control_characters_and_5_kb_questions_over_get(client, question):
    r = client.get("/ask", params={"query": question, "streaming": "0"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert not any(ch in body["query"] for ch in "\x00\x1b\x7f\x85\r\n")


@pytest.mark.parametrize("body", [
    b'{"query": {"text": "coffee \\ud800 slots"}, "prefer": {"streaming": false}}',
    b'{"query": {"text": "coffee"}, "query_id": "\\udc00x", "prefer": {"streaming": false}}',
    b'{"query": "coffee \\udfff", "prev": ["\\ud83d"], "streaming": "0"}',
])
def test_lone_surrogates_in_a_json_body_are_answered(client, body):
    r = client.post("/ask", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 200 and r.json()["results"]
    assert "coffee" in r.json()["query"] and r.json()["query_id"]


def test_lone_surrogates_in_a_streamed_answer(client):
    body = {"query": {"text": "coffee \ud800"}, "query_id": "\udc00"}
    payload = json.dumps(body).encode()  # json.dumps escapes the surrogates as \u sequences
    with connect_sse(client, "POST", "/ask", content=payload, headers={"Content-Type": "application/json"}) as source:
        events = [e.event for e in source.iter_sse()]
    assert events[0] == "start" and events[-1] == "complete" and "error" not in events


@pytest.mark.parametrize("question", ["\u200b", "\ufeff \u202e\u2060", "\x00\u200d", "\ufffd\ufffd"])
def test_a_question_with_nothing_readable_is_400(client, question):
    """Zero-width, bidi and byte-order marks, or the U+FFFD of bytes that were not UTF-8, are all the
    model's tokenizer drops: ranking them would rank an empty question."""
    r = client.get("/ask", params={"query": question, "streaming": "0"})
    assert r.status_code == 400 and r.json()["parameter"] == "query", r.text
    assert "readable" in r.json()["error"] and "/ask?query=" in r.json()["error"]
    r = client.post("/ask", json={"query": {"text": question}, "prefer": {"streaming": False}})
    assert r.status_code == 400 and r.json()["parameter"] == "query", r.text
    assert '{"query": {"text": ' in r.json()["error"]


def test_context_with_nothing_readable_is_left_out(client):
    body = ask_json(client, query="coffee", prev="\u200b,\ufeff", decontextualized_query="\u2060")
    assert body["decontextualized_query"] == "coffee"


def test_full_width_and_styled_letters_are_read_as_plain_letters(client):
    plain = ask_json(client, query="valve clearances", top_k="3")
    for spelled in ("ｖａｌｖｅ ｃｌｅａｒａｎｃｅｓ", "\U0001d42f\U0001d41a\U0001d425\U0001d42f\U0001d41e clearances"):
        body = ask_json(client, query=spelled, top_k="3")
        assert body["query"] == spelled  # echoed as sent
        assert [r["url"] for r in body["results"]] == [r["url"] for r in plain["results"]]
        assert [r["score"] for r in body["results"]] == [r["score"] for r in plain["results"]]


def test_a_query_id_over_128_characters_is_400(client):
    """Every legacy frame repeats the id twice: 15 KB of id turned one request into 1.5 MB of stream."""
    assert ask_json(client, query="coffee", query_id="q" * 128)["query_id"] == "q" * 128
    r = client.get("/ask", params={"query": "coffee", "query_id": "q" * 129})
    assert r.status_code == 400 and r.json()["parameter"] == "query_id" and "128" in r.json()["error"]
    assert uuid.UUID(r.json()["query_id"])  # a generated id, not the refused one
    for payload in ({"query": {"text": "coffee"}, "query_id": "q" * 60000}, {"query": "coffee", "query_id": "q" * 60000}):
        r = client.post("/ask", json=payload)
        assert r.status_code == 400 and r.json()["parameter"] == "query_id" and len(r.content) < 1000


@pytest.mark.parametrize("params", [{"site": "x" * 5000}, {"mode": "x" * 5000}])
def test_error_sentences_quote_at_most_a_short_piece_of_the_value(client, params):
    r = client.get("/ask", params={"query": "coffee", **params})
    assert r.status_code == 400 and len(r.json()["error"]) < 200, r.json()["error"][:300]


# --- streams: raw text and every frame field ----------------------------------------------------

def test_legacy_stream_as_raw_text_and_every_frame_field(client):
    r = client.get("/ask", params={"query": "ignition points", "top_k": "2", "query_id": "raw-1"})
    assert r.text.startswith(": keep-alive\n\n")
    frames = [json.loads(block[len("data: "):]) for block in r.text.split("\n\n")[1:] if block]
    begin, results, end = frames[0], frames[1:-1], frames[-1]
    assert begin == {"message_type": "begin-nlweb-response", "conversation_id": "raw-1", "query_id": "raw-1",
                     "query": "ignition points"}
    for frame in results:
        assert frame["message_type"] == "result" and frame["conversation_id"] == frame["query_id"] == "raw-1"
        (item,) = frame["content"]
        assert item["@type"] == "Item" and item["site"] == "aadhar.sh" and 0 <= item["score"] <= 100
        assert item["description"] and item["schema_object"]["@id"] == item["url"] == item["schema_object"]["url"]
        assert item["schema_object"]["@context"] == "https://schema.org" and item["schema_object"]["name"] == item["name"]
    assert end["message_type"] == "end-nlweb-response" and end["decontextualized_query"] == "ignition points"
    assert end["total"] == 46 and end["_meta"] == {
        "version": "0.55", "dialect": "legacy", "retrieval": "embedding", "ranking": "model:minilm-l6-v2-int8",
        "description": "extractive", "modes_supported": ["list"]}


def test_structured_stream_start_and_complete_fields(client):
    with connect_sse(client, "POST", "/ask", json={"query": {"text": "valve clearances"}, "top_k": 1,
                                                    "query_id": "s-9"}) as source:
        frames = [(e.event, json.loads(e.data)) for e in source.iter_sse()]
    (_, start), (_, result), (_, complete) = frames
    assert start == {"_meta": {"version": "0.55", "response_type": "answer", "mode": "list", "site": "aadhar.sh"},
                     "streaming": True, "query_id": "s-9"}
    assert result["index"] == 0 and result["item"]["url"] == "https://aadhar.sh/writing/cb550-valve-clearances"
    assert complete["query_id"] == "s-9" and complete["decontextualized_query"] == "valve clearances"
    assert complete["_meta"]["dialect"] == "0.55" and complete["_meta"]["description"] == "extractive"


def test_probabilities_over_http_sum_to_at_most_100_and_fall_with_rank(client):
    body = ask_json(client, query="which film simulation for grey days", top_k="50")
    scores = [r["score"] for r in body["results"]]
    assert len(scores) == 46 and sum(scores) <= 100 and scores == sorted(scores, reverse=True)
    assert all(isinstance(s, int) and 0 <= s <= 100 for s in scores)


# --- methods -----------------------------------------------------------------------------------

def test_ask_methods(client):
    for method in ("PUT", "DELETE", "PATCH"):
        r = client.request(method, "/ask", params={"query": "coffee"})
        assert r.status_code == 405 and r.headers["allow"] == "GET, HEAD, POST, OPTIONS"
    r = client.options("/ask")
    assert r.status_code == 204 and r.headers["allow"] == "GET, HEAD, POST, OPTIONS"
    r = client.head("/ask", params={"query": "coffee"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream") and r.content == b""


def test_head_ranks_nothing_and_spends_no_model_budget(client):
    """A HEAD answers GET's headers: neither form ranks for a body that is not sent, so 25 of them
    leave the caller's 20 model questions a minute untouched; a bad question is still its 400."""
    for streaming in ("0", "1") * 12 + ("0",):
        r = client.head("/ask", params={"query": "carburetor jets", "streaming": streaming})
        assert r.status_code == 200 and r.content == b""
        assert r.headers["content-type"].startswith("application/json" if streaming == "0" else "text/event-stream")
        assert "content-length" not in r.headers  # the length only the GET's ranking would give
    assert client.head("/ask", params={"query": " "}).status_code == 400
    ranked = client.get("/ask", params={"query": "carburetor jets", "streaming": "0"}).json()["_meta"]["ranking"]
    assert ranked == "model:minilm-l6-v2-int8"


def test_a_head_of_unknown_length_ends_with_its_headers(base):
    """Nothing follows the headers: waitress had announced such a HEAD as chunked and sent its last chunk."""
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"HEAD /ask?query=carburetor&streaming=0 HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, rest = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and rest == b""
    assert b"transfer-encoding" not in head.lower() and b"content-length" not in head.lower()


# --- fallbacks on servers of their own ----------------------------------------------------------

@pytest.mark.parametrize("ask_section,reason", [
    ({"deadline_ms": 0}, "lexical:timeout"),
    ({"model_path": "/nonexistent/minilm.onnx"}, "lexical:model-unavailable"),
])
def test_fallback_reasons_over_http(settings, checker, ask_section, reason):
    changed = dataclasses.replace(settings, sections={**settings.sections, "ask": {**settings.section("ask"), **ask_section}})
    with serve_wsgi(make_app(changed).wsgi) as url, http_client(url, checker) as c:
        body = c.get("/ask", params={"query": "carburetor jets", "streaming": "0"}).json()
        assert body["_meta"]["ranking"] == reason and body["_meta"]["retrieval"] == "lexical"
        scores = [r["score"] for r in body["results"]]
        assert all(1 <= s <= 100 for s in scores) and scores == sorted(scores, reverse=True)
        with connect_sse(c, "GET", "/ask", params={"query": "carburetor jets"}) as source:
            end = [json.loads(e.data) for e in source.iter_sse()][-1]
        assert end["message_type"] == "end-nlweb-response" and end["_meta"]["ranking"] == reason
