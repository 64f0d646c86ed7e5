"""waitress as this site runs it: the options every server shares (`app.serve()`, the tests'
servers, bench/ceiling_app.py) and a channel that sends a response of unknown length, such as an
/ask event stream, piece by piece as the app yields it.

`send_bytes=18000` (waitress's default before 1.0, still honoured by 3.0 with a deprecation
warning) lets a worker leave a response under 18 KB to the main loop, which sends status, headers
and body in one write instead of two: /search.json 3,900 -> 5,600 requests/s and the constant-JSON
ceiling 5,200 -> 8,500 (bench/bench_search.py). On its own it would also hold back every frame of an
event stream until 18 KB had gathered, so a short /ask stream would arrive whole once ranked; the
task below sends each piece of an unsized (streamed) response at once, and sized responses keep
the single write. waitress's own error answers are JSON, like the app's.

waitress warns "Task queue depth is N" for every request that finds no idle thread: 2,393 lines in
a ten-second burst, burying the log when the box is busiest. `QueueWarnings` lets one through a
minute, with the deepest queue and how many it held back.

`max_request_body_size`: waitress's default is 1 GB, which it spools to disk before the app sees a
byte, though no route reads more than `web.MAX_BODY_BYTES`. A body a little over that still reaches
the app, which answers it in the route's own terms (a JSON-RPC error on /mcp); one of twice that or
more gets waitress's 413 as soon as its Content-Length arrives (and the edge's, the same, before it
reaches the app: Caddyfile).
"""
from __future__ import annotations

import copy
import logging
import time
import warnings

import waitress.server
from waitress.channel import HTTPChannel
from waitress.task import ErrorTask, WSGITask

from siteapi.web import MAX_BODY_BYTES, ApiError, json_bytes

OPTIONS = dict(host="127.0.0.1", threads=8, send_bytes=18000, max_request_body_size=2 * MAX_BODY_BYTES)
# Behind the trusted local proxy (Caddy), whose X-Forwarded-For becomes REMOTE_ADDR.
PROXY_OPTIONS = dict(trusted_proxy="127.0.0.1", trusted_proxy_count=1,
                     trusted_proxy_headers={"x-forwarded-for", "x-forwarded-proto", "x-forwarded-host"},
                     clear_untrusted_proxy_headers=True)
warnings.filterwarnings("ignore", "send_bytes will be removed", DeprecationWarning)


class StreamingTask(WSGITask):
    """A WSGI task that, for a response without a Content-Length, switches its channel to
    waitress's stock send_bytes=1 until the next request: every piece is then sent as it is
    written, and a client that has gone away is noticed at the next piece (ClientDisconnected),
    by waitress's own code."""

    def start(self):
        self.channel.adj = self.channel.server.adj
        super().start()

    @property
    def has_body(self):
        """A HEAD of unknown length (an /ask answer, a stream) has no body to frame. waitress counts
        only the status, so it announced one as chunked and sent a last chunk after the headers."""
        if self.request.command != "HEAD":
            return super().has_body
        return any(name.lower() == "content-length" for name, _ in self.response_headers) and super().has_body

    def write(self, data):
        if data and self.content_length is None:
            self.channel.adj = self.channel.server.streaming_adj
        super().write(data)


class JsonErrorTask(ErrorTask):
    """waitress's own answers to a request it cannot take (unparseable, headers or body over its
    limits, an unknown transfer coding) as the JSON error every other answer is, not a text page."""

    ADVICE = {400: "send a well-formed HTTP/1.1 request", 413: "send a smaller body",
              431: "send fewer or shorter headers", 501: "send it without that transfer coding"}
    CODES = {400: "bad_request", 413: "body_too_large", 431: "headers_too_large", 501: "not_implemented"}

    def execute(self):
        error = self.request.error
        adj = self.channel.adj
        # In our words where waitress's would name its settings (max_body, max_header)
        detail = {413: f"the body is over {adj.max_request_body_size // 2**10} KB, more than any endpoint here reads",
                  431: f"the headers are over {adj.max_request_header_size // 2**10} KB"}.get(
                      error.code, " ".join(str(error.body).split()).rstrip("."))
        sentence = f"{error.reason}: {detail}; {self.ADVICE.get(error.code, 'try again later')}."
        body = json_bytes(ApiError(error.code, sentence, code=self.CODES.get(error.code, "internal_error")).body)
        self.status = f"{error.code} {error.reason}"
        self.response_headers.extend([("Content-Type", "application/json"), ("Cache-Control", "no-store"),
                                      ("Access-Control-Allow-Origin", "*")])  # a browser page can read why
        self.set_close_on_finish()
        self.content_length = len(body)
        self.write(body)


class StreamingChannel(HTTPChannel):
    task_class = StreamingTask
    error_task_class = JsonErrorTask


class QueueWarnings(logging.Filter):
    """One "Task queue depth" warning a minute from waitress.queue; the next one says how many were
    held back, when, and the deepest queue among them."""

    def __init__(self, every_s: float = 60):
        super().__init__()
        self.every_s, self.quiet_until = every_s, 0.0
        self.held, self.deepest, self.held_from, self.held_to = 0, 0, 0.0, 0.0

    def filter(self, record: logging.LogRecord) -> bool:
        depth = record.args[0] if isinstance(record.args, tuple) and record.args else 0
        now = time.monotonic()  # the quiet minute: a step of the wall clock neither lengthens nor ends it
        if now < self.quiet_until:
            self.held, self.deepest = self.held + 1, max(self.deepest, depth)
            self.held_from, self.held_to = self.held_from or record.created, record.created
            return False
        if self.held:
            record.msg = "Task queue depth is %d; %d such warnings held back from %s to %s UTC, the deepest %d"
            record.args = (depth, self.held, *(time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t))
                                               for t in (self.held_from, self.held_to)), self.deepest)
        self.quiet_until, self.held, self.deepest, self.held_from = now + self.every_s, 0, 0, 0.0
        return True


def create_server(app, behind_proxy: bool = True, **overrides):
    """A waitress server for `app` under OPTIONS (and PROXY_OPTIONS unless told it is not behind
    Caddy), overridden by keyword; not yet running."""
    server = waitress.server.create_server(app, **{**OPTIONS, **(PROXY_OPTIONS if behind_proxy else {}), **overrides})
    queue_log = server.task_dispatcher.queue_logger
    if not any(isinstance(f, QueueWarnings) for f in queue_log.filters):
        queue_log.addFilter(QueueWarnings())
    server.channel_class = StreamingChannel
    server.streaming_adj = copy.copy(server.adj)
    server.streaming_adj.send_bytes = 1
    return server


def serve(app, **overrides) -> None:
    """Serve `app` until interrupted."""
    server = create_server(app, **overrides)
    server.print_listen("Serving on http://{}:{}")
    server.run()
