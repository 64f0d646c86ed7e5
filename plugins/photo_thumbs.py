"""Datasette plugin: show the photo archive's thumbnails as images in the `photos` table.

Thumbnails are served by the edge under /images/ (Caddy), on the same origin as /data/.
"""
from datasette import hookimpl
from markupsafe import Markup, escape

THUMB_COLUMNS = {"thumb_xs", "thumb_small"}


@hookimpl
def render_cell(row, value, column, table):
    if table != "photos" or column not in THUMB_COLUMNS or not isinstance(value, str) or not value:
        return None
    src = escape("/images/" + value)
    # the link's only content is the image, so its alt text is the link's name for a screen reader
    name = escape(_field(row, "alt") or _field(row, "stem") or value)
    return Markup(f'<a href="{src}"><img src="{src}" alt="{name}" loading="lazy" style="max-width:100px;max-height:100px"></a>')


def _field(row, name: str):
    try:
        return row[name]
    except (IndexError, KeyError):  # a query that selected the thumbnail without the caption
        return None
