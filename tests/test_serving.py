"""siteapi.serving on a real socket: a streamed response leaves piece by piece even though sized
responses gather up to send_bytes, and a client that goes away stops the stream."""
from __future__ import annotations

import threading
import time

from servers import open_stream, read_until, serve_wsgi


def test_each_frame_of_a_stream_is_sent_before_the_next_is_made():
    first_received = threading.Event()

    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/event-stream")])

        def frames():
            yield b"data: one\n\n"
            # Without the streaming channel this frame would sit in waitress's buffer and the
            # client would never see it, so this wait would time out.
            assert first_received.wait(5), "the first frame was held back"
            yield b"data: two\n\n"

        return frames()

    with serve_wsgi(app) as base:
        sock = open_stream(base, "/")
        try:
            head = read_until(sock, b"data: one")
            assert b"Transfer-Encoding: chunked" in head and b"data: two" not in head
            first_received.set()
            assert b"data: two" in read_until(sock, b"data: two")
        finally:
            sock.close()


def test_a_client_that_leaves_stops_the_stream():
    made, stopped = [], threading.Event()

    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/event-stream")])

        def frames():
            try:
                for n in range(2000):
                    made.append(n)
                    yield b"data: %d\n\n" % n
                    time.sleep(0.005)
            finally:
                stopped.set()

        return frames()

    with serve_wsgi(app) as base:
        sock = open_stream(base, "/")
        read_until(sock, b"data: 0")
        sock.close()
        assert stopped.wait(5), "the stream ran on after its client left"
        assert len(made) < 2000


def test_a_sized_response_is_whole_and_carries_its_length():
    body = b'{"ok":true}'

    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "application/json")])
        return [body]

    with serve_wsgi(app) as base:
        sock = open_stream(base, "/")
        try:
            reply = read_until(sock, body)
            assert b"Content-Length: 11" in reply and b"chunked" not in reply
        finally:
            sock.close()
