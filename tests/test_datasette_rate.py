"""Datasette's /data/ spends the caller's `data` budget (plugins/rate_limit.py): the project's
Datasette, as `make run` starts it, with [rate] data_q = 5 in its environment; two of them sharing
counts through a real redis; and the project's Caddyfile in front of one. The turns a caller's
requests take run the plugin's ASGI wrapper around an app that holds each request until released."""
import asyncio
import contextlib
import http.client
import importlib.util
import json
import os
import re
import shutil
import subprocess
import time
from typing import NamedTuple
from urllib.parse import urlencode, urlsplit

import pytest
from datasette.app import Datasette

from conftest import ROOT
from servers import accepts, running
from siteapi import db
from siteapi.config import load_settings
from siteapi.stack import datasette_command
from siteapi.web import DOCS_PATH
from test_metadata import serving_datasette
from test_stack_e2e import caddy_in_front, free_port, needs_caddy

QUOTA = 5
POLICY = f'"data";q={QUOTA};w=60'
TABLE = "/data/site/pages.json"
DOCS = load_settings().url(DOCS_PATH)  # what the Datasettes started here read too


class Answer(NamedTuple):
    status: int
    headers: http.client.HTTPMessage
    body: bytes

    def __repr__(self) -> str:
        return f"Answer({self.status}, {dict(self.headers)}, {self.body[:300]!r})"


def get(port: int, path: str, forwarded: str | None = None, source: str = "127.0.0.1", method: str = "GET",
        headers: dict | None = None) -> Answer:
    """GET (or `method`) from `source` (any address of 127/8 reaches a server on 127.0.0.1), with
    `forwarded` as X-Forwarded-For."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=(source, 0))
    try:
        connection.request(method, path, headers={**({"X-Forwarded-For": forwarded} if forwarded else {}),
                                                  **(headers or {})})
        response = connection.getresponse()
        return Answer(response.status, response.headers, response.read())
    finally:
        connection.close()


def remaining(answer: Answer) -> int:
    assert answer.headers["RateLimit-Policy"] == POLICY, answer
    return int(re.fullmatch(r'"data";r=(\d+);t=\d+', answer.headers["RateLimit"])[1])


def assert_refused(answer: Answer) -> None:
    """The app's 429: Retry-After, both RateLimit fields, the JSON Error body."""
    assert answer.status == 429 and answer.headers["Content-Type"] == "application/json", answer
    retry = int(answer.headers["Retry-After"])
    assert 1 <= retry <= 60 and remaining(answer) == 0 and answer.headers["Cache-Control"] == "no-store"
    assert json.loads(answer.body) == {
        "error": f"Too many requests: the data budget is {QUOTA} per 60 seconds per caller; retry in {retry} second{'s' * (retry != 1)}.",
        "code": "rate_limited", "status": 429, "retry_after": retry, "docs": DOCS}


@contextlib.contextmanager
def datasette(path, **env: str):
    """The project's Datasette on `path` (test_metadata.serving_datasette) with `env` in its
    environment, and only in its; yields its port."""
    with contextlib.ExitStack() as stack:
        with pytest.MonkeyPatch.context() as patch:
            for name, value in {"SITE_RATE_DATA_Q": str(QUOTA), **env}.items():
                patch.setenv(name, value)
            base = stack.enter_context(serving_datasette(path))
        yield urlsplit(base).port


@pytest.fixture(scope="module")
def site_db(tmp_path_factory):
    path = tmp_path_factory.mktemp("datasette-rate") / "site.db"
    db.writer(path).close()  # the schema: every table metadata.yml describes, empty
    return path


@pytest.fixture(scope="module")
def port(site_db):
    """One Datasette for the module, counting in memory; each test spends the budgets of callers
    of its own."""
    with datasette(site_db) as port:
        yield port


def test_a_caller_gets_its_budget_then_a_429_before_datasette_runs(port):
    slow = "/data/site.json?" + urlencode({"sql": "with recursive n(i) as (select 1 union all select i + 1 from n) "
                                                 "select count(*) from n"})
    answers = [get(port, TABLE, "198.51.100.1") for _ in range(QUOTA - 1)]
    answers.append(get(port, slow, "198.51.100.1"))  # runs until sql_time_limit_ms stops it
    assert answers[-1].status == 400 and b"took too long" in answers[-1].body
    assert [a.status for a in answers[:-1]] == [200] * (QUOTA - 1)
    assert [remaining(a) for a in answers] == list(range(QUOTA - 1, -1, -1))  # the 400 carries them too
    assert_refused(get(port, slow, "198.51.100.1"))  # the plugin's 429, answered before Datasette runs
    assert_refused(get(port, "/data/", "198.51.100.1"))  # every page spends it, not only JSON


DATA_PATHS = ["/data/", "/data/site", "/data/site/pages.json", "/data/-/static/app.css"]


@pytest.mark.parametrize("path", DATA_PATHS)
def test_methods_and_versions_follow_the_sites_rules(port, path):
    """Datasette had answered TRACE or PROPFIND with a 500 and a traceback, a POST to a table with a
    500, a PUT with a plain-text 405 without Allow, and OPTIONS with 405 or 200 by path."""
    caller = f"2001:db8:5:{DATA_PATHS.index(path)}::1"  # a budget of its own for each path
    for method in ("TRACE", "PROPFIND", "POST", "PUT", "DELETE", "FOO"):
        refused = get(port, path, caller, method=method, headers={"Content-Type": "application/json"})
        assert refused.status == 405 and refused.headers["Allow"] == "GET, HEAD, OPTIONS", (method, refused)
        assert json.loads(refused.body) == {"error": f"{path} answers GET, HEAD, OPTIONS, not {method}.",
                                            "code": "method_not_allowed", "status": 405,
                                            "allow": ["GET", "HEAD", "OPTIONS"], "docs": DOCS}
    options = get(port, path, caller, method="OPTIONS", headers={"Origin": "https://x.example",
                                                                 "Access-Control-Request-Method": "GET"})
    assert (options.status, options.headers["Allow"], options.body) == (204, "GET, HEAD, OPTIONS", b"")
    assert {name: options.headers[name] for name in ("Access-Control-Allow-Origin", "Access-Control-Allow-Methods",
                                                     "Access-Control-Allow-Headers")} == {
        "Access-Control-Allow-Origin": "*", "Access-Control-Allow-Methods": "GET, HEAD, OPTIONS",
        "Access-Control-Allow-Headers": "*"}  # a browser's preflight passes, as at the app's routes
    for version, status in (("1", 200), ("", 200), ("2", 400), ("1, 2", 400)):
        answer = get(port, path, caller, headers={"API-Version": version})
        assert answer.status == status, (version, answer)
        if status == 400:
            assert json.loads(answer.body)["code"] == "unsupported_api_version"
            assert json.loads(answer.body)["supported"] == ["1"]
    head = get(port, path, caller, method="HEAD", headers={"API-Version": "2"})
    assert head.status == 400 and head.body == b""


def test_any_origin_reads_the_data_errors_are_never_stored_and_ttl_only_shortens(port):
    """As the app's answers: any script may read them, RateLimit included (Datasette sends no CORS
    without --cors); a 404 or 403 carries no-store (Datasette's had no Cache-Control, so a cache could
    keep a table's absence); a link's `_ttl` cannot make browsers keep rebuilt data for a year."""
    callers = (f"2001:db8:9:{n}::1" for n in range(100))  # a budget each: a /64 is one caller
    for path, status in ((TABLE, 200), ("/data/site/nope.json", 404), ("/data/site/job_runs.json", 403),
                         ("/data/-/static/app.css", 200)):
        answer = get(port, path, next(callers), headers={"Origin": "https://x.example"})
        assert answer.status == status and answer.headers.get_all("Access-Control-Allow-Origin") == ["*"], (path, answer)
        assert "RateLimit" in answer.headers["Access-Control-Expose-Headers"].split(", "), path
        if status >= 400:
            assert answer.headers.get_all("Cache-Control") == ["no-store"], (path, answer)
    for ttl, kept in (("31536000", "max-age=5"), ("2", "max-age=2"), ("0", "no-cache"), ("x", "max-age=5")):
        assert get(port, f"{TABLE}?_ttl={ttl}", next(callers)).headers["Cache-Control"] == kept, ttl
    # Datasette's own long lifetimes stay (review25b): the favicon is a static file, not rebuilt data
    assert get(port, "/data/favicon.ico", next(callers)).headers["Cache-Control"] == "max-age=3600, immutable, public"
    caller = next(callers)
    answers = [get(port, TABLE, caller) for _ in range(QUOTA + 1)]
    assert answers[-1].status == 429  # the rate plugin's refusal, once CORS-readable whichever plugin is outer
    assert answers[-1].headers.get_all("Access-Control-Allow-Origin") == ["*"], answers[-1]


def test_static_files_cost_nothing(port):
    """What a page pulls in (its CSS and scripts, the favicon) spends nothing and carries no budget."""
    page = get(port, "/data/site/pages", "198.51.100.2")
    assert page.status == 200 and remaining(page) == QUOTA - 1
    assets = re.findall(r'(?:href|src)="(/data/-/static/[^"]+)"', page.body.decode())
    assert len(assets) >= 2  # app.css and table.js
    for _ in range(3):
        for path in [*assets, "/data/favicon.ico"]:
            free = get(port, path, "198.51.100.2")
            assert free.status == 200 and not [h for h in free.headers if h.lower().startswith("ratelimit")], path
    assert remaining(get(port, TABLE, "198.51.100.2")) == QUOTA - 2


def test_callers_count_apart_and_only_loopback_names_them(port):
    """uvicorn takes the caller from X-Forwarded-For when the peer is 127.0.0.1 (Caddy), by its /64
    for IPv6; from any other peer the header is ignored and the peer is the caller."""
    for _ in range(QUOTA):
        assert get(port, TABLE, "198.51.100.3").status == 200
    assert_refused(get(port, TABLE, "198.51.100.3"))
    assert remaining(get(port, TABLE, "198.51.100.4")) == QUOTA - 1
    for n in range(QUOTA):  # one subscriber's /64, address by address
        assert get(port, TABLE, f"2001:db8:0:7::{n + 1}").status == 200
    assert_refused(get(port, TABLE, "2001:db8:0:7::ffff"))
    assert remaining(get(port, TABLE, "2001:db8:0:8::1")) == QUOTA - 1
    for n in range(QUOTA):  # a fresh address each time, from a peer that is not the proxy
        assert get(port, TABLE, f"203.0.113.{n}", source="127.0.0.4").status == 200
    assert_refused(get(port, TABLE, "203.0.113.99", source="127.0.0.4"))


@pytest.mark.skipif(shutil.which("redis-server") is None and not os.environ.get("CI"),
                    reason="redis-server is not installed (CI installs it)")
def test_datasette_processes_share_counts_through_redis(site_db, tmp_path):
    redis_port = free_port()
    with running(["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                  "--dir", str(tmp_path)], lambda: accepts(redis_port), "redis"):
        shared = {"SITE_RATE_STORAGE": f"redis://127.0.0.1:{redis_port}"}
        with datasette(site_db, **shared) as one, datasette(site_db, **shared) as two:
            answers = [get(port, TABLE, "198.51.100.5") for port in (one, two, one, two, one)]
            assert [(a.status, remaining(a)) for a in answers] == [(200, QUOTA - 1 - n) for n in range(QUOTA)]
            assert_refused(get(two, TABLE, "198.51.100.5"))
            assert_refused(get(one, TABLE, "198.51.100.5"))


@needs_caddy
def test_through_the_edge_each_visitor_has_a_budget(port, tmp_path):
    """The project's Caddyfile in front: Caddy puts the address it saw in X-Forwarded-For, so a
    visitor's own header buys no fresh budget, and passes the budget's headers and 429 on."""
    with caddy_in_front(free_port(), tmp_path, DATASETTE_PORT=str(port)) as edge:
        answers = [get(edge, TABLE, f"192.0.2.{n}", source="127.0.0.2") for n in range(QUOTA)]
        assert [(a.status, remaining(a)) for a in answers] == [(200, QUOTA - 1 - n) for n in range(QUOTA)]
        assert_refused(get(edge, TABLE, "192.0.2.99", source="127.0.0.2"))
        assert remaining(get(edge, TABLE, source="127.0.0.3")) == QUOTA - 1


def test_a_bad_data_setting_stops_datasette_with_one_sentence(site_db):
    out = subprocess.run(datasette_command(site_db, free_port()), cwd=ROOT, capture_output=True, text=True,
                         env={"SITE_RATE_DATA_Q": "0", "PATH": "/usr/bin"}, timeout=60)
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith(
        "datasette: Setting [rate] data_q (SITE_RATE_DATA_Q) must be a whole number from 1 to")


def test_requests_take_turns_all_callers_together_and_a_newcomer_is_next(monkeypatch):
    """The budget bounds the average; turns bound the concurrency: RUNNING requests run at once,
    all callers together (a few callers each within budget kept every query thread busy and a light
    page waited 14 to 28 s; load_audit23 #3), a freed turn goes to a caller that has not had one
    before the busy caller's next, and a turn ends when the answer starts, so a slow reader holds
    none. The plugin's ASGI wrapper around a loopback ASGI app that holds each request until told."""
    spec = importlib.util.spec_from_file_location("rate_limit_plugin", ROOT / "plugins" / "rate_limit.py")
    plugin = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plugin)
    monkeypatch.setenv("SITE_RATE_DATA_Q", "100")

    async def scenario():
        running, started, release, reading = set(), [], {}, {}

        async def held(scope, receive, send):
            name = scope["query_string"].decode()
            running.add(name)
            started.append(name)
            await release.setdefault(name, asyncio.Event()).wait()
            running.discard(name)
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await reading.setdefault(name, asyncio.Event()).wait()  # a client slow to read the body
            await send({"type": "http.response.body", "body": b"{}"})

        app = plugin.asgi_wrapper(Datasette([], settings={"base_url": "/data/"}))(held)

        async def request(client: str, name: str):
            sent = []
            scope = {"type": "http", "method": "GET", "path": "/data/site/pages.json", "raw_path": b"/data/site/pages.json",
                     "query_string": name.encode(), "headers": [], "client": (client, 1234)}

            async def send(message):
                sent.append(message)

            await app(scope, None, send)
            return sent[0]["status"]

        async def settle():
            for _ in range(100):
                await asyncio.sleep(0)

        tasks = [asyncio.create_task(request("203.0.113.7", f"busy{i}")) for i in range(5)]
        await settle()
        tasks.append(asyncio.create_task(request("203.0.113.8", "newcomer")))
        await settle()
        assert running == {"busy0", "busy1"} and plugin.RUNNING == 2  # the newcomer waits its turn, as busy2..4 do
        release.setdefault("busy0", asyncio.Event()).set()
        await settle()
        assert running == {"busy1", "newcomer"}  # ahead of the busy caller's three waiting; busy0 still being read
        for name in ("busy1", "newcomer", "busy2", "busy3", "busy4"):
            release.setdefault(name, asyncio.Event()).set()
            reading.setdefault(name, asyncio.Event()).set()
            await settle()
        reading["busy0"].set()
        statuses = await asyncio.gather(*tasks)
        return statuses, started

    statuses, started = asyncio.run(scenario())
    assert statuses == [200] * 6 and started == ["busy0", "busy1", "newcomer", "busy2", "busy3", "busy4"]


def test_datasette_logs_no_request_lines(site_db, tmp_path):
    """uvicorn's request lines hold the query string (SQL, search terms) the privacy page says is not kept."""
    port, log = free_port(), tmp_path / "datasette.log"
    with log.open("w") as out:
        proc = subprocess.Popen(datasette_command(site_db, port), cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not accepts(port):
            assert time.monotonic() < deadline and proc.poll() is None, log.read_text()
            time.sleep(0.2)
        assert get(port, "/data/site/pages.json?_search=my-private-term", "198.51.100.40").status == 200
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert "Application startup complete" in log.read_text() and "my-private-term" not in log.read_text()
