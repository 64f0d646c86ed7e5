"""Datasette plugin: the site's method, version, CORS and caching rules on /data/, as on every app
route (API.md §4, §9), the refusals answered before Datasette runs anything.

GET and HEAD are served; OPTIONS answers 204 with `Allow` and a CORS preflight's headers; any other
method is the app's JSON 405 `method_not_allowed` with `Allow` (Datasette 0.65 answered a method it
has no handler for, TRACE or PROPFIND, with a 500 and a logged traceback, a POST to a table with a
500, and the rest with a plain-text 405 without `Allow`). An `API-Version` other than 1 is the
app's 400 `unsupported_api_version`. The publication is read-only, so no POST is served (its
canned queries are reads).

Every answer may be read by a script on any origin, as the app's are, with the same headers
exposed (Datasette sends no CORS headers unless started with --cors, whose list differs). An error
is never stored (Datasette's 404 had no Cache-Control, so a cache could keep a table's absence after
the jobs add it), and a caller's `_ttl` may shorten Datasette's cache lifetime but not lengthen it:
any link could otherwise have browsers keep, for a year, data the jobs rebuild every few minutes
(Datasette's static files keep their own long lifetimes).
"""
import re

from datasette import hookimpl

from siteapi.asgi import answer, refuse, site_settings, unprefixed, wire
from siteapi.web import CORS, NO_STORE, method_refusal, preflight_headers, version_refusal

ALLOWED = ["GET", "HEAD", "OPTIONS"]
MAX_AGE = re.compile(rb"max-age=(\d+)")


@hookimpl
def asgi_wrapper(datasette):
    settings = site_settings()
    prefix = datasette.setting("base_url")
    longest = int(datasette.setting("default_cache_ttl"))

    def public_path(scope) -> str:
        return prefix.rstrip("/") + unprefixed(scope, prefix.encode())["path"]

    def ruled(status: int, headers: list, asked_ttl: bool) -> list:
        """Datasette's headers with the site's CORS, no-store on an error, and the max-age a caller's
        `_ttl` set at most Datasette's own (its static files keep their long one)."""
        names = {name.lower() for name, _ in headers}
        if status >= 400:
            headers = [(n, v) for n, v in headers if n.lower() != b"cache-control"] + wire([("Cache-Control", NO_STORE)])
        elif asked_ttl:
            headers = [(n, MAX_AGE.sub(lambda age: b"max-age=%d" % min(int(age[1]), longest), v))
                       if n.lower() == b"cache-control" else (n, v) for n, v in headers]
        return headers + wire([(n, v) for n, v in CORS if n.lower().encode() not in names])

    def wrap(app):
        async def conventions(scope, receive, send):
            if scope["type"] != "http":
                return await app(scope, receive, send)
            method = scope["method"].upper()
            if method == "OPTIONS":
                return await answer(send, 204, [*preflight_headers(ALLOWED), *CORS])
            version = next((value.decode("latin-1") for name, value in scope["headers"] if name == b"api-version"), None)
            refusal = (method_refusal(public_path(scope), method, ALLOWED) if method not in ALLOWED
                       else version_refusal(version))
            if refusal is not None:
                return await refuse(send, scope, refusal, settings)

            asked_ttl = b"_ttl=" in scope.get("query_string", b"")

            async def send_ruled(message):
                if message["type"] == "http.response.start":
                    message = {**message, "headers": ruled(message["status"], list(message["headers"]), asked_ttl)}
                await send(message)

            return await app(scope, receive, send_ruled)

        return conventions

    return wrap
