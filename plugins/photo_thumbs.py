"""Datasette plugin: show the photo archive's thumbnails as images in the `photos` table.

Thumbnails are served by the edge under /images/ (Caddy), on the same origin as /data/.
"""
from datasette import hookimpl
from markupsafe import Markup, escape

THUMB_COLUMNS = {"thumb_xs", "thumb_small"}


@hookimpl
def render_cell(value, column, table):
    if table != "photos" or column not in THUMB_COLUMNS or not isinstance(value, str) or not value:
        return None
    src = escape("/images/" + value)
    return Markup(f'<a href="{src}"><img src="{src}" alt="" loading="lazy" style="max-width:100px;max-height:100px"></a>')
