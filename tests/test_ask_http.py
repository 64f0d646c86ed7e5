"""/ask over HTTP against the real app in waitress: both dialects, both streams read frame by frame
by a real SSE client (httpx-sse), bad bodies, mode 501, and the model budget falling back to lexical.
Every JSON answer is validated against /openapi.json."""
from __future__ import annotations

import dataclasses
import json

import httpx
import pytest
from httpx_sse import connect_sse

from app import make_app
from conftest import build_site, make_settings
from servers import serve_wsgi
from siteapi.config import RatePolicy


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    settings = make_settings(tmp_path_factory.mktemp("ask-http"))
    settings = dataclasses.replace(settings, rates={**settings.rates, "ask_model": RatePolicy("ask_model", 20, 60)})
    build_site(settings)  # the content job computes the page vectors too
    with serve_wsgi(make_app(settings).wsgi) as url:
        yield url


@pytest.fixture()
def client(base, checker):
    def validate(response):
        if "json" in response.headers.get("content-type", ""):
            response.read()
            checker.validate(response.request.method, response.request.url.path, response)

    with httpx.Client(base_url=base, timeout=30, event_hooks={"response": [validate]}) as c:
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


def test_legacy_stream_read_by_an_sse_client(client):
    with connect_sse(client, "GET", "/ask", params={"query": "film simulation recipe", "top_k": "2",
                                                     "query_id": "h-2"}) as source:
        assert source.response.headers["content-type"].startswith("text/event-stream")
        assert source.response.headers["cache-control"] == "no-cache"
        assert source.response.headers["x-accel-buffering"] == "no"
        # no length: siteapi.serving sends each frame as it is yielded (tests/test_serving.py)
        assert source.response.headers["transfer-encoding"] == "chunked"
        frames = [(e.event, json.loads(e.data)) for e in source.iter_sse()]
    assert all(event == "message" for event, _ in frames)  # unnamed data frames
    kinds = [data["message_type"] for _, data in frames]
    assert kinds == ["begin-nlweb-response", "result", "result", "end-nlweb-response"]
    item = frames[1][1]["content"][0]
    assert item["@type"] == "Item" and item["url"].startswith("https://aadhar.sh/")
    assert frames[-1][1]["query_id"] == "h-2" and "error" not in frames[-1][1]


def test_structured_stream_read_by_an_sse_client(client):
    payload = {"query": {"text": "where do I book a coffee"}, "top_k": 2, "query_id": "h-3"}
    with connect_sse(client, "POST", "/ask", json=payload) as source:
        frames = [(e.event, json.loads(e.data)) for e in source.iter_sse()]
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


def test_modes_and_sites_over_http(client):
    r = client.get("/ask", params={"query": "coffee", "mode": "summarize"})
    assert r.status_code == 501 and r.json()["supported_modes"] == ["list"]
    r = client.get("/ask", params={"query": "coffee", "site": "example.com"})
    assert r.status_code == 400 and r.json()["parameter"] == "site"
    r = client.get("/ask")
    assert r.status_code == 400 and r.json()["parameter"] == "query"


def test_the_21st_question_in_a_minute_is_ranked_lexically(client):
    headers = {"X-Forwarded-For": "192.0.2.77"}
    rankings = [client.get("/ask", params={"query": "carburetor", "streaming": "0"}, headers=headers)
                .json()["_meta"]["ranking"] for _ in range(21)]
    assert rankings[:20] == ["model:minilm-l6-v2-int8"] * 20 and rankings[20] == "lexical:rate-limited"
