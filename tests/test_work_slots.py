"""Lens work holds a waitress thread for as long as the target takes: the app runs at most
`concurrent_scans` lens requests at once, and `concurrent_scans_per_caller` for one caller, over
HTTP and MCP alike; past them a request is refused at once (429 for the caller's own share, 503
for the process's) and the rest of the site keeps answering."""
import dataclasses
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import lens_web
from app import make_app
from conftest import Client, build_site, make_settings
from servers import serve_wsgi, start_thread, stop_thread
from test_lens_target_budget import tool_call


class GatedWeb(ThreadingHTTPServer):
    """A page that answers only once the test opens the gate; `arrived` counts requests waiting."""
    daemon_threads = True
    block_on_close = False

    def __init__(self):
        super().__init__(("127.0.0.1", 0), GatedPage)
        self.port = self.server_address[1]
        self.gate = self.stopping = threading.Event()  # stop_thread opens the gate
        self.arrived = threading.Semaphore(0)


class GatedPage(BaseHTTPRequestHandler):
    def do_GET(self):
        self.server.arrived.release()
        self.server.gate.wait(30)
        body = b"<title>through the gate</title>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def gated(tmp_path, checker):
    web, thread = start_thread(GatedWeb())
    base = make_settings(tmp_path)
    lens = {**base.section("lens"), "concurrent_scans": 2, "concurrent_scans_per_caller": 1}
    settings = dataclasses.replace(base, sections={**base.sections, "lens": lens})
    build_site(settings)
    try:
        with serve_wsgi(make_app(settings, fetcher=lens_web.loopback_fetcher(web, timeout_s=30)).wsgi) as url:
            yield Client(url, checker), web
    finally:
        stop_thread(web, thread)


def page_phase(api, web, caller: str):
    return api.get("/lens/fetch", params={"url": f"http://shop.test:{web.port}/", "phases": "page"},
                   headers={"X-Forwarded-For": caller})


def test_lens_work_is_capped_per_caller_and_in_total(gated, checker):
    api, web = gated
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(page_phase, api, web, "203.0.113.1")
        assert web.arrived.acquire(timeout=10)
        mine = page_phase(api, web, "203.0.113.1")  # the caller's one slot is taken
        assert mine.status_code == 429 and mine.json()["code"] == "rate_limited" and mine.json()["ok"] is False
        assert mine.json()["limit"] == "lens_running"  # API.md §7: every 429 is rate_limited
        assert mine.headers["Retry-After"] == "5" and "you already have 1 lens requests running" in mine.json()["error"]
        assert mine.json()["retry_after"] == 5 and mine.headers["RateLimit"] == '"lens_running";r=0;t=5'
        assert mine.headers["RateLimit-Policy"] == '"inspect";q=100000;w=60, "lens_running";q=1;w=5'
        second = pool.submit(page_phase, api, web, "203.0.113.2")
        assert web.arrived.acquire(timeout=10)
        full = page_phase(api, web, "203.0.113.3")  # both slots are taken
        assert full.status_code == 503 and full.json()["code"] == "busy" and full.headers["Retry-After"] == "5"
        assert full.json()["retry_after"] == 5 and full.headers["RateLimit-Policy"] == '"inspect";q=100000;w=60'
        assert api.get("/search.json", params={"q": "lens"}).status_code == 200  # the rest of the site answers
        result = tool_call(api, "lens_page", {"url": f"http://shop.test:{web.port}/"}, "203.0.113.3")
        assert result["isError"] is True and "Busy" in result["content"][0]["text"]
        # the snapshot tools hold a lens slot too, and say which refusal it was as the endpoints do
        for who, code in (("203.0.113.3", "busy"), ("203.0.113.1", "rate_limited")):
            result = tool_call(api, "representation_capture", {"url": f"http://shop.test:{web.port}/"}, who)
            details = json.loads(result["content"][1]["text"])
            assert result["isError"] is True and details["code"] == code and details["retry_after"] == 5, result
        compare = api.get("/lens/compare.json", headers={"X-Forwarded-For": "203.0.113.4"}, params={
            "left": f"http://shop.test:{web.port}/", "right": f"http://shop.test:{web.port}/b"})
        assert compare.status_code == 503 and compare.json()["code"] == "busy"  # validated as LensBusy
        assert ("/lens/compare.json", 503) in checker.checked[-3:]
        web.gate.set()
        assert first.result().status_code == 200 and second.result().status_code == 200
    assert page_phase(api, web, "203.0.113.3").status_code == 200  # every slot given back
