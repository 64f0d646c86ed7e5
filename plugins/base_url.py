"""Datasette plugin: serve the `base_url` prefix (/data/) the way Datasette 0.65 expects to be
served behind a proxy, whether a request comes through the edge or straight to Datasette.

Datasette builds its links from the request's path plus `base_url`, so a request that keeps the
prefix got links with it twice (/data/data/site/pages.json); and the redirects it builds from the
path alone (a trailing slash, a %-escape turned into its ~ form, /-/config) drop it, so behind an
edge that strips the prefix, /data/site/ was sent to /site, a page of the app. This wrapper takes
the prefix off the path before Datasette sees it and puts it back on every redirect that lacks it.
"""
from datasette import hookimpl

from siteapi.asgi import unprefixed


@hookimpl
def asgi_wrapper(datasette):
    prefix = datasette.setting("base_url").encode()

    def with_prefix(location: bytes) -> bytes:
        if location.startswith(b"/") and not location.startswith((prefix, b"//")):
            return prefix + location[1:]
        return location

    def wrap(app):
        if prefix == b"/":
            return app

        async def served(scope, receive, send):
            if scope["type"] != "http":
                return await app(scope, receive, send)
            scope = unprefixed(scope, prefix)

            async def send_prefixed(message):
                if message["type"] == "http.response.start" and 300 <= message["status"] < 400:
                    message = {**message, "headers": [(name, with_prefix(value) if name.lower() == b"location" else value)
                                                      for name, value in message["headers"]]}
                await send(message)

            return await app(scope, receive, send_prefixed)

        return served

    return wrap
