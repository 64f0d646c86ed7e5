"""Shared fixtures: settings on a temporary site.db, the app live in waitress, and a client that
validates every JSON response it sees against /openapi.json."""
from __future__ import annotations

import dataclasses
import os
import re
import resource
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import requests
from jsonschema import Draft202012Validator

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import jobs  # noqa: E402
from app import make_app  # noqa: E402
from servers import serve_wsgi  # noqa: E402
from siteapi import demo_photos  # noqa: E402
from siteapi.config import RatePolicy, load_settings  # noqa: E402

SHARED = ROOT.parent / "shared"  # the spec and data beside the project, absent on a user's machine
# Work that must stay linear runs in a child held to this much CPU: linear code takes milliseconds at
# the sizes the tests give it, the quadratic code it replaced minutes, so the limit tells them apart
# without timing anything that noise on a shared machine could sway.
CPU_LIMIT_S = 60
# The Datasettes the tests start (test_metadata's, the stack's) read [rate] data from the environment:
# raised as make_settings raises the app's quotas; test_metadata's sends one ~60 requests in seconds.
os.environ.setdefault("SITE_RATE_DATA_Q", "100000")


def make_settings(tmp: Path, **changes):
    """The project's settings pointed at a temporary site.db and photo folders, quotas raised, and
    the /ask embedding deadline out of reach (a busy machine can stall past its 250 ms and turn the
    model's answer a test expects into a lexical one; the fallback has tests of its own)."""
    base = load_settings(ROOT / "site.toml")
    rates = {name: RatePolicy(p.name, 100_000, p.window) for name, p in base.rates.items()}
    # The lens's per-target budget too: a fast machine would otherwise scan one loopback site past it.
    sections = {**base.sections, "ask": {**base.section("ask"), "deadline_ms": 60_000},
                "lens": {**base.section("lens"), "target_scans": 10_000}}
    values = dict(db_path=tmp / "site.db", photos_dir=tmp / "originals", images_dir=tmp / "images",
                  access_log=tmp / "access.log", bot_key_file=tmp / "bot-signing-key.pem", rates=rates,
                  sections=sections)
    values.update(changes)
    return dataclasses.replace(base, **values)


def build_site(settings, photos: bool = False) -> None:
    """Index content/ (with page vectors) and, with `photos`, ingest the generated demo photos."""
    if photos:
        demo_photos.generate(settings.photos_dir)
    for job in ("content", "photos") if photos else ("content",):
        ok, summary = jobs.run_job(settings, job)
        assert ok, summary


class OpenApiChecker:
    """Validates JSON bodies against the response schema the document gives for path + status."""

    # Statuses every operation must name itself: the document's `default` (any other Error) does not cover them.
    NAMED = (400, 404, 405, 429)

    def __init__(self, doc: dict):
        self.doc = doc
        # A literal path before a template that would match it too (/images/manifest.json, /images/{path});
        # a {path} parameter spans segments (/images/full/x.jpg), any other one segment.
        self.paths = [(re.compile("^" + re.sub(r"\{[^/]+\}", "[^/]+", p.replace("{path}", "(.+)")) + "$"), p)
                      for p in sorted(doc["paths"], key=lambda p: "{" in p)]
        self.checked: list[tuple[str, int]] = []

    def schema_for(self, path: str, method: str, status: int, content_type: str):
        for pattern, template in self.paths:
            if pattern.match(path):
                op = self.doc["paths"][template].get(method.lower())
                if op is None:  # an unserved method: its 405 is the one the path's operations document
                    op = next((o for o in self.doc["paths"][template].values() if "405" in o.get("responses", {})),
                              None) if status == 405 else None
                if op is None:
                    return None
                responses = op["responses"]
                response = responses.get(str(status)) or (responses.get("default") if status not in self.NAMED else None)
                if response is None:
                    raise AssertionError(f"{method} {path}: status {status} is not documented in /openapi.json")
                response = self.resolve(response)
                media = content_type.split(";")[0].strip()
                content = response.get("content", {})
                entry = content.get(media) or next((v for k, v in content.items() if k.endswith("json")), None)
                return entry and entry.get("schema")
        return None

    def validate_stream(self, method: str, path: str, frames: list[tuple[str, object]]) -> None:
        """Each (event name, decoded data) of a 200 event stream against the schema the operation's
        `x-sse-data` (unnamed frames, whose name an SSE client gives as "message") or `x-sse-events`
        (per name) gives; an event it does not name fails."""
        stream = next(self.resolve(self.doc["paths"][t][method.lower()]["responses"]["200"])["content"]["text/event-stream"]
                      for pattern, t in self.paths if pattern.match(path))
        for event, data in frames:
            schema = stream["x-sse-data"] if event == "message" and "x-sse-data" in stream else stream["x-sse-events"].get(event)
            assert schema is not None, f"{method} {path}: event {event!r} is not documented in /openapi.json"
            Draft202012Validator({**schema, "components": self.doc["components"]},
                                 format_checker=Draft202012Validator.FORMAT_CHECKER).validate(data)
            self.checked.append((path, f"event {event}"))

    def unnamed(self, method: str, path: str, response: requests.Response) -> list[str]:
        """Where the JSON body has a field its documented schema does not name (no schema forbids
        one, so validation passes, but a typed client cannot see it): JSON pointers."""
        schema = self.schema_for(path, method, response.status_code, response.headers.get("Content-Type", ""))
        return list(self._unnamed(schema, response.json(), ""))

    def _branches(self, schema):
        schema = self.resolve(schema)
        yield schema
        for key in ("allOf", "anyOf", "oneOf"):
            for branch in schema.get(key, ()):
                yield from self._branches(branch)

    def _unnamed(self, schema, value, where):
        branches = list(self._branches(schema))
        if isinstance(value, dict):
            named = {}
            for branch in branches:
                named.update(branch.get("properties", {}))
            # free-form where a branch allows any other field or names none
            free = any(b.get("additionalProperties", False) is not False
                       or "object" in (b.get("type") if isinstance(b.get("type"), list) else [b.get("type")])
                       and "properties" not in b for b in branches)
            for key, item in value.items():
                if key in named:
                    yield from self._unnamed(named[key], item, f"{where}/{key}")
                elif not free:
                    yield f"{where}/{key}"
        elif isinstance(value, list):
            for branch in branches:
                if "items" in branch:
                    for n, item in enumerate(value):
                        yield from self._unnamed(branch["items"], item, f"{where}/{n}")

    def resolve(self, node):
        while isinstance(node, dict) and "$ref" in node:
            node = self.lookup(node["$ref"])
        return node

    def lookup(self, ref: str):
        node = self.doc
        for part in ref.lstrip("#/").split("/"):
            node = node[part]
        return node

    def validate(self, method: str, path: str, response: requests.Response) -> None:
        content_type = response.headers.get("Content-Type", "")
        if "json" not in content_type or method == "HEAD" or not response.content:
            return
        schema = self.schema_for(path, method, response.status_code, content_type)
        if schema is None and response.status_code >= 400:  # an unknown path or unserved method: still an Error
            schema = {"$ref": "#/components/schemas/ApiError"}
        if schema is None:
            return
        Draft202012Validator({**schema, "components": self.doc["components"]},
                             format_checker=Draft202012Validator.FORMAT_CHECKER).validate(response.json())
        self.checked.append((path, response.status_code))


class Client:
    """requests against the live server; every JSON answer is validated against the OpenAPI document."""

    def __init__(self, base: str, checker: OpenApiChecker):
        self.base = base
        self.checker = checker
        self.session = requests.Session()

    def request(self, method: str, path: str, **kwargs) -> requests.Response:
        kwargs.setdefault("timeout", 30)
        kwargs.setdefault("allow_redirects", False)
        response = self.session.request(method, self.base + path, **kwargs)
        self.checker.validate(method, path.split("?")[0], response)
        return response

    def get(self, path: str, **kwargs) -> requests.Response:
        return self.request("GET", path, **kwargs)


@pytest.fixture(scope="session")
def site_settings(tmp_path_factory):
    settings = make_settings(tmp_path_factory.mktemp("site"))
    build_site(settings, photos=True)
    return settings


@pytest.fixture(scope="session")
def checker(live):
    """Checks against the document the live server serves."""
    return OpenApiChecker(requests.get(live + "/openapi.json", timeout=30).json())


@pytest.fixture(scope="session")
def live(site_settings):
    """The app in waitress on a loopback port, for the whole session."""
    with serve_wsgi(make_app(site_settings).wsgi) as base:
        yield base


@pytest.fixture(scope="session")
def sites():
    """The loopback web of lens fixture sites (ready.test, blog.test, spa.test ...), by Host header."""
    from lens_sites import start_web, stop_web

    server, thread = start_web()
    yield server
    stop_web(server, thread)


@pytest.fixture(scope="session")
def dns_server():
    """A loopback DNS server with the fixture sites' SVCB/HTTPS records; broken.test answers SERVFAIL."""
    from lens_sites import DnsServer

    server = DnsServer(servfail=("broken.test.",))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def scanner():
    """A loopback stand-in for the CDN's agent-readiness scanner (an MCP server), for mode=cloudflare."""
    from lens_sites import start_scanner
    from servers import stop_thread

    server, thread = start_scanner()
    yield server
    stop_thread(server, thread)


@pytest.fixture()
def api(live, checker):
    return Client(live, checker)


def held_to_cpu(code: str) -> subprocess.CompletedProcess:
    """Run Python `code` (with the project and the tests importable) in a child held to CPU_LIMIT_S."""
    return subprocess.run(
        [sys.executable, "-c", code], cwd=Path(__file__).parent, env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, timeout=300,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_CPU, (CPU_LIMIT_S, CPU_LIMIT_S)))


class WriteLockAsks:
    """The threads (the main one left out) whose connections have asked SQLite for the write lock
    (BEGIN IMMEDIATE): a test holding the lock releases it once its writers are known to wait."""

    def __init__(self):
        self.threads: set[str] = set()
        self._changed = threading.Condition()

    def traced(self, statement: str) -> None:
        if statement.startswith("BEGIN IMMEDIATE") and threading.current_thread() is not threading.main_thread():
            with self._changed:
                self.threads.add(threading.current_thread().name)
                self._changed.notify_all()

    def wait_for(self, count: int, timeout_s: float = 120) -> None:
        with self._changed:
            assert self._changed.wait_for(lambda: len(self.threads) >= count, timeout_s), self.threads


@pytest.fixture()
def write_lock_asks(monkeypatch):
    """Every connection opened during the test traced for its asks of the write lock."""
    asks, connect = WriteLockAsks(), sqlite3.connect

    def traced_connect(*args, **kwargs):
        conn = connect(*args, **kwargs)
        conn.set_trace_callback(asks.traced)
        return conn
    monkeypatch.setattr(sqlite3, "connect", traced_connect)
    return asks
