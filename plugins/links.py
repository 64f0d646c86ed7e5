"""Datasette plugin: every Link header Datasette answers is RFC 8288's `<URL>; params`, its URL
percent-encoded, so no request can add a link of its own.

Datasette 0.65 writes two: a page's `URL; rel="alternate"; type="application/json+datasette"`
(without the <> RFC 8288 requires) and a redirect's `<URL>; rel=preload`. Both URLs repeat the
request's query string as it came, and `,` `;` `<` `>` there made further links and parameters:
`?a=1;b,<https://evil.example/>;rel=preload;as=script` added a preload of the caller's choosing to
a page of the site's origin (sec_audit24 #3). The URL is taken from between the known beginning and
end of each form, and what a URL may not hold, those four characters included, is escaped; a Link
in any other form is dropped rather than passed on unread.
"""
from urllib.parse import quote

from datasette import hookimpl

# Datasette's two forms: what comes before the URL and what after it
FORMS = [(b"", b'; rel="alternate"; type="application/json+datasette"'), (b"<", b">; rel=preload")]
# RFC 3986's reserved characters but "," and ";", and "%" so an escape stays one
URL_SAFE = ":/?#[]@!$&'()*+=%"


def rfc_8288(value: bytes) -> bytes | None:
    for before, after in FORMS:
        if value.startswith(before) and value.endswith(after) and len(value) >= len(before) + len(after):
            url = value[len(before):len(value) - len(after)]
            return b"<" + quote(url, safe=URL_SAFE).encode() + b">" + after.removeprefix(b">")
    return None


@hookimpl
def asgi_wrapper():
    def wrap(app):
        async def linked(scope, receive, send):
            async def send_linked(message):
                if message["type"] == "http.response.start":
                    headers = [(name, rfc_8288(value) if name.lower() == b"link" else value)
                               for name, value in message.get("headers", [])]
                    message = {**message, "headers": [(name, value) for name, value in headers if value is not None]}
                await send(message)

            return await app(scope, receive, send_linked)

        return linked

    return wrap
