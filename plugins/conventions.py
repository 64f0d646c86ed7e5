"""Datasette plugin: the site's method and version rules on /data/, as on every app route (API.md
§4, §9), answered before Datasette runs anything.

GET and HEAD are served; OPTIONS answers 204 with `Allow`; any other method is the app's JSON 405
`method_not_allowed` with `Allow` (Datasette 0.65 answered a method it has no handler for, TRACE or
PROPFIND, with a 500 and a logged traceback, a POST to a table with a 500, and the rest with a
plain-text 405 without `Allow`). An `API-Version` other than 1 is the app's 400
`unsupported_api_version`. The publication is read-only, so no POST is served (its canned queries
are reads).
"""
from datasette import hookimpl

from siteapi.asgi import answer, refuse, site_settings, unprefixed
from siteapi.web import method_refusal, version_refusal

ALLOWED = ["GET", "HEAD", "OPTIONS"]


@hookimpl
def asgi_wrapper(datasette):
    settings = site_settings()
    prefix = datasette.setting("base_url")

    def public_path(scope) -> str:
        return prefix.rstrip("/") + unprefixed(scope, prefix.encode())["path"]

    def wrap(app):
        async def conventions(scope, receive, send):
            if scope["type"] != "http":
                return await app(scope, receive, send)
            method = scope["method"].upper()
            if method == "OPTIONS":
                return await answer(send, 204, [("Allow", ", ".join(ALLOWED))])
            version = next((value.decode("latin-1") for name, value in scope["headers"] if name == b"api-version"), None)
            refusal = (method_refusal(public_path(scope), method, ALLOWED) if method not in ALLOWED
                       else version_refusal(version))
            if refusal is None:
                return await app(scope, receive, send)
            await refuse(send, scope, refusal, settings)

        return conventions

    return wrap
