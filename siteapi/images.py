"""/images/ when the app runs without Caddy, which serves the same files in production: the
thumbnails and the published originals the photos job writes to images_dir, with their validators,
conditional requests and byte ranges.
"""
from __future__ import annotations

import os
import re
import time

import bottle

from siteapi import pages, photos
from siteapi.web import ApiError, Reply, etag_matches, header


def serve_file(settings, path: str) -> Reply:
    """The file at `path` under images_dir: its 200, 206 or 304, or a JSON 404 or 416."""
    # Originals come from images_dir/full/, the ingest job's copies of the published ones
    # without private metadata, never from photos_dir. Normalised as static_file will, so that
    # /images/./full/ is no way around originals_public.
    path = os.path.normpath(path.strip("/\\"))
    original = path.startswith("full/")
    cache = photos.ORIGINAL_CACHE if original else None  # None: the route's THUMBNAIL_CACHE
    if original and not settings.originals_public:
        raise ApiError(404, "Originals are not published on this site.", code="not_found")
    missing = ApiError(404, f"There is no image at {pages.shown_path(bottle.request.path)}.", code="not_found")
    if not path.lower().endswith(photos.IMAGE_SUFFIXES):  # image types only, as at the edge
        raise missing
    # static_file reads If-Modified-Since; RFC 9110 has If-None-Match override it, and a date later
    # than now is invalid (a client clock ahead must not be told its stale copy is current).
    since = bottle.parse_date(header("If-Modified-Since") or "")
    if header("If-None-Match") or (since and since > time.time()):
        bottle.request.environ.pop("HTTP_IF_MODIFIED_SINCE", None)
    try:
        stat = (settings.images_dir / path).stat()
    except OSError:
        raise missing from None
    modified_s = stat.st_mtime_ns // 10**9  # floored, as Go's Unix() and Last-Modified take it, before 1970 too
    etag = _file_etag(modified_s, stat.st_size)
    if not _preconditions_hold(etag, modified_s):
        raise ApiError(412, "The file is no longer the version If-Match or If-Unmodified-Since names; ask again "
                       "without them, or with its current ETag.", code="precondition_failed", headers={"ETag": etag})
    if etag_matches(etag):  # before the Range (RFC 9110 13.2.2): a 304, whatever range was asked
        return Reply(b"", status=304, headers={"ETag": etag}, cache=cache)
    if (served := _served_range(etag, modified_s)) is None:
        bottle.request.environ.pop("HTTP_RANGE", None)
    else:
        bottle.request.environ["HTTP_RANGE"] = served
    found = bottle.static_file(path, root=str(settings.images_dir), etag=False)  # Bottle's own ETag is unquoted
    if found.status_code >= 400 and found.status_code != 416:
        raise missing
    if found.status_code == 416:
        raise ApiError(416, f"The Range is not within the file's {stat.st_size} bytes; ask for bytes within "
                       "them or send no Range.", code="range_not_satisfiable",
                       headers={"Content-Range": f"bytes */{stat.st_size}"})
    kept = ("Content-Length", "Last-Modified", "Accept-Ranges", "Content-Range")
    return Reply(found.body, status=found.status_code, content_type=found.content_type,
                 headers={"ETag": etag, **{k: v for k, v in found.headers.items() if k in kept}},
                 cache=cache)


_ONE_BYTE_RANGE = re.compile(r"bytes=\s*(?:(\d+)-(\d*)|-(\d+))", re.I | re.ASCII)


def _served_range(etag: str, modified_s: int) -> str | None:
    """The request's Range as Bottle reads it (`bytes=first-last`), when it is served from a file of
    strong `etag` and mtime `modified_s` (whole seconds, as Last-Modified says it); None for the
    whole file. One valid byte range only (several get the whole file, as RFC 9110 allows, where
    Bottle sent the first alone; another unit or no valid range is ignored, RFC 9110 14.2), and an
    If-Range that still names this version (its ETag, or its Last-Modified date), so that a
    download resumed across a change of the file gets the new file whole, not two versions spliced."""
    ranges = header("Range")
    one = _ONE_BYTE_RANGE.fullmatch(ranges.strip()) if ranges and "," not in ranges else None
    if one is None or (one[2] and int(one[2]) < int(one[1])):
        return None
    validator = header("If-Range").strip()
    if validator and (validator != etag if validator.startswith('"')
                      else bottle.parse_date(validator) != modified_s):
        return None
    return f"bytes=-{one[3]}" if one[3] else f"bytes={one[1]}-{one[2]}"


def _preconditions_hold(etag: str, modified_s: int) -> bool:
    """RFC 9110 13.2.2's first two steps: If-Match by strong comparison (a weak tag never matches),
    else If-Unmodified-Since; true when neither is sent. Caddy's file_server checks both too."""
    if_match = header("If-Match", None)
    if if_match is not None:
        sent = [tag.strip() for tag in if_match.split(",")]
        return "*" in sent or etag in sent
    since = bottle.parse_date(header("If-Unmodified-Since") or "")
    return not since or modified_s <= since


def _file_etag(modified_s: int, size: int) -> str:
    """Caddy file_server's ETag of a file (its mtime in whole seconds, then its size, in base 36),
    so that a validator either one gave is good at the other: the edge hands the app the requests
    file_server does not answer."""
    return f'"{_base36(modified_s)}{_base36(size)}"'


def _base36(number: int) -> str:
    """As Go's strconv.FormatInt(number, 36): a file dated before 1970 has a negative mtime."""
    if number < 0:
        return "-" + _base36(-number)
    digits = ""
    while True:
        number, digit = divmod(number, 36)
        digits = "0123456789abcdefghijklmnopqrstuvwxyz"[digit] + digits
        if not number:
            return digits
