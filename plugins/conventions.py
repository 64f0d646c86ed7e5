"""Datasette plugin: the site's method and version rules on /data/, as on every app route (API.md
§4, §9), answered before Datasette runs anything.

GET and HEAD are served; OPTIONS answers 204 with `Allow`; any other method is the app's JSON 405
`method_not_allowed` with `Allow` (Datasette 0.65 answered a method it has no handler for, TRACE or
PROPFIND, with a 500 and a logged traceback, a POST to a table with a 500, and the rest with a
plain-text 405 without `Allow`). An `API-Version` other than 1 is the app's 400
`unsupported_api_version`. The publication is read-only, so no POST is served (its canned queries
are reads).
"""
import json

from datasette import hookimpl

from siteapi.web import method_refusal, version_refusal

ALLOWED = ["GET", "HEAD", "OPTIONS"]


async def _answer(send, status: int, headers: list[tuple[str, str]], body: bytes = b"") -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(name.lower().encode(), value.encode()) for name, value in headers]})
    await send({"type": "http.response.body", "body": body})


@hookimpl
def asgi_wrapper(datasette):
    prefix = datasette.setting("base_url")

    def public_path(path: str) -> str:
        # plugins/base_url.py may have taken the prefix off already (plugins load in directory order)
        return path if path.startswith(prefix) else prefix.rstrip("/") + path

    def wrap(app):
        async def conventions(scope, receive, send):
            if scope["type"] != "http":
                return await app(scope, receive, send)
            method = scope["method"].upper()
            if method == "OPTIONS":
                return await _answer(send, 204, [("Allow", ", ".join(ALLOWED))])
            version = next((value.decode("latin-1") for name, value in scope["headers"] if name == b"api-version"), None)
            refusal = (method_refusal(public_path(scope["path"]), method, ALLOWED) if method not in ALLOWED
                       else version_refusal(version))
            if refusal is None:
                return await app(scope, receive, send)
            payload = json.dumps(refusal.body).encode()
            await _answer(send, refusal.status, [
                ("Content-Type", "application/json"), ("Content-Length", str(len(payload))), ("Cache-Control", "no-store"),
                *refusal.headers.items()], b"" if method == "HEAD" else payload)

        return conventions

    return wrap
