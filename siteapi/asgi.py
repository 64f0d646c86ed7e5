"""What the Datasette plugins (plugins/) share at the ASGI level: the site's settings, the path as
Datasette routes it, and an answer sent before Datasette runs, the app's JSON errors included."""
from siteapi.config import Settings, SettingsError, load_settings
from siteapi.web import CORS, DOCS_PATH, NO_STORE, ApiError, json_bytes


def site_settings() -> Settings:
    """The site's settings; a bad settings file stops Datasette with its sentence."""
    try:
        return load_settings()
    except SettingsError as exc:
        raise SystemExit(f"datasette: {exc}") from None


def unprefixed(scope: dict, prefix: bytes) -> dict:
    """`scope` with the base_url `prefix` taken off its `raw_path` and `path` from the "/" that ends
    it, as Datasette routes them; plugins/base_url.py may have taken it off already (plugins load in
    directory order), and then `scope` is as it came, with its `raw_path` set."""
    raw = scope.get("raw_path") or scope["path"].encode()
    if not raw.startswith(prefix):
        return {**scope, "raw_path": raw}
    keep = len(prefix) - 1
    return {**scope, "raw_path": raw[keep:], "path": scope["path"][keep:]}


def wire(headers) -> list[tuple[bytes, bytes]]:
    """(name, value) pairs as ASGI sends them."""
    return [(name.lower().encode(), value.encode()) for name, value in headers]


async def answer(send, status: int, headers, body: bytes = b"") -> None:
    await send({"type": "http.response.start", "status": status, "headers": wire(headers)})
    await send({"type": "http.response.body", "body": body})


async def refuse(send, scope: dict, error: ApiError, settings: Settings, headers=()) -> None:
    """`error` as the app answers it: its JSON body with `docs`, its headers and `headers`, never
    stored; a HEAD gets the headers alone."""
    body = json_bytes({**error.body, "docs": settings.url(DOCS_PATH)})
    await answer(send, error.status, [("Content-Type", "application/json"), ("Content-Length", str(len(body))),
                                      ("Cache-Control", NO_STORE), *CORS, *error.headers.items(), *headers],
                 b"" if scope["method"].upper() == "HEAD" else body)
