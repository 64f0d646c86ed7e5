"""The owner's resume as PDF (/resume.pdf): what `resume.read` finds, as /resume.md shows it, laid
out for print with fpdf2 in DejaVu Sans (siteapi/fonts, with its licence).

US Letter, because the owner works in New York; the 20 mm margins leave a text block that also
prints unscaled on A4. Characters DejaVu Sans has no glyph for (CJK, most emoji) print as U+FFFD
and are exact only in /resume.json and /resume.md; the title and author metadata keep them. The
bytes depend on the JSON alone: the creation date is meta.lastModified, or 1970-01-01 without one.
A field is cut at TEXT_CHARS and the document after MAX_PAGES, so a hostile file costs a bounded
render; `render` keeps the last few results, since the JSON changes only when the content job runs.
"""
from __future__ import annotations

import functools
import json
import logging
from datetime import datetime, timezone
from pathlib import Path

from fpdf import FPDF

from siteapi.resume import LINK_SCHEMES, Content, Entry, read

# fpdf2 subsets the font with fontTools, which logs each table it prunes at INFO: some 75 lines
# in the app's log for every render, none of them about the site.
logging.getLogger("fontTools").setLevel(logging.WARNING)

FONTS = Path(__file__).with_name("fonts")
TEXT_CHARS = 2_000
MAX_PAGES = 10
UNDATED = datetime(1970, 1, 1, tzinfo=timezone.utc)
INK, GREY, LINK, RULE = (25, 25, 25), (100, 100, 100), (20, 70, 150), (190, 190, 190)
# kind: (font style, size in pt, colour, space before in mm, indent in mm)
STYLES = {
    "name": ("B", 20, INK, 0, 0),
    "label": ("", 12, INK, 1, 0),
    "contact": ("", 9, GREY, 2, 0),
    "summary": ("", 10, INK, 4, 0),
    "section": ("B", 12, INK, 6, 0),
    "heading": ("B", 10.5, INK, 3, 0),
    "facts": ("", 9, GREY, 0.5, 0),
    "detail": ("", 10, INK, 1, 0),
    "item": ("", 10, INK, 0.8, 5),
    "closing": ("", 9, GREY, 6, 0),
}


def _url(url: str) -> str:
    return url if url.startswith(LINK_SCHEMES) and len(url) <= TEXT_CHARS else ""


def _entry(entry: Entry):
    """The blocks of one entry, as resume.markdown lays it out: heading, facts, detail, items."""
    url = _url(entry.url)
    if entry.title and entry.subtitle:
        yield "heading", [(f"{entry.title} — ", ""), (entry.subtitle, url)]
    else:
        yield "heading", [(entry.title or entry.subtitle or "Untitled", url)]
    if entry.facts:
        yield "facts", [(" · ".join(entry.facts), "")]
    if entry.detail:
        yield "detail", [(entry.detail, "")]
    for item in entry.items:
        yield "item", [(item, "")]


def _blocks(content: Content):
    """(kind, [(text, link), ...]) in reading order, lazily: a render that stops early lays out no further."""
    yield "name", [(content.name or "Resume", "")]
    if content.label:
        yield "label", [(content.label, "")]
    if content.contact:
        yield "contact", [piece for i, (text, target) in enumerate(content.contact)
                          for piece in ([(" · ", "")] if i else []) + [(text, _url(target))]]
    if content.summary:
        yield "summary", [(content.summary, "")]
    for heading, entries in content.sections:
        yield "section", [(heading, "")]
        for entry in entries:
            yield from _entry(entry)
    for heading, groups in content.groups:
        yield "section", [(heading, "")]
        for name, level, words in groups:
            rest = (f" ({level})" if level else "") + (": " + ", ".join(words) if words else "")
            yield "item", [(name or heading, "", "B"), (rest, "")]
    if content.languages:
        yield "section", [("Languages", "")]
        for lang in content.languages:
            yield "item", [(lang, "")]


class _Document(FPDF):
    def __init__(self, footer: str):
        super().__init__(format="letter")
        self.footer_text = footer
        self.add_font("DejaVu", "", FONTS / "DejaVuSans.ttf")
        self.add_font("DejaVu", "B", FONTS / "DejaVuSans-Bold.ttf")
        self.set_margins(20, 18, 20)
        self.set_auto_page_break(True, margin=20)

    def printable(self, text: str) -> str:
        """`text` cut to TEXT_CHARS, with what the current font has no glyph for as U+FFFD (fpdf2
        would drop it unseen)."""
        text = text if len(text) <= TEXT_CHARS else text[:TEXT_CHARS - 1] + "…"
        cmap = self.current_font.cmap
        return "".join(c if ord(c) in cmap else "\ufffd" for c in text)

    def footer(self):
        self.set_y(-13)
        self.set_font("DejaVu", "", 8)
        self.set_text_color(*GREY)
        self.cell(0, 5, self.printable(f"{self.footer_text} · {self.page_no()}"), align="C")

    def block(self, kind: str, parts: list[tuple]) -> None:
        style, size, colour, space, indent = STYLES[kind]
        if kind in ("section", "heading") and self.will_page_break(space + 16):
            self.add_page()  # not a heading alone at the foot of a page
        elif self.get_y() > self.t_margin:
            self.set_y(self.get_y() + space)
        height = size * 0.48  # pt to mm, with 1.35 leading
        left = self.l_margin
        if indent:
            self.set_font("DejaVu", "", size)
            self.set_text_color(*colour)
            self.set_x(left + indent - 4)
            self.write(height, "•")
            self.set_left_margin(left + indent)  # write() wraps to the left margin
        for text, link, *bold in parts:
            if self.page_no() > MAX_PAGES and kind != "closing":  # a block of a hundred thousand profiles
                break
            self.set_font("DejaVu", bold[0] if bold else style, size)
            self.set_text_color(*(LINK if link else colour))
            self.write(height, self.printable(text), link=link)
        self.set_left_margin(left)
        self.ln(height)
        if kind == "section":
            self.set_draw_color(*RULE)
            self.line(left, self.get_y() + 0.5, self.w - self.r_margin, self.get_y() + 0.5)
            self.set_y(self.get_y() + 1)


def _metadata_text(text: str) -> str:
    # The Info strings are UTF-16: a lone surrogate from the JSON would fail the encoding.
    return text[:200].encode("utf-16", "replace").decode("utf-16")


def _created(modified: str) -> datetime:
    try:
        stamp = datetime.fromisoformat(modified)
    except ValueError:
        return UNDATED
    if stamp.year < 1000:  # a PDF date has four digits of year
        return UNDATED
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=timezone.utc)  # naive: not the server's zone


@functools.lru_cache(maxsize=4)
def render(stored: str, canonical: str) -> bytes:
    """The PDF of the stored resume JSON, ending with a link to `canonical`, the JSON."""
    content = read(json.loads(stored))
    pdf = _Document(content.name[:80] or "Resume")
    pdf.set_title(_metadata_text(f"{content.name} — Resume" if content.name else "Resume"))
    if content.name:
        pdf.set_author(_metadata_text(content.name))
    if content.label:
        pdf.set_subject(_metadata_text(content.label))
    pdf.set_creation_date(_created(content.modified))
    pdf.add_page()
    for kind, parts in _blocks(content):
        if pdf.page_no() > MAX_PAGES:
            pdf.block("closing", [(f"The resume goes on past the {MAX_PAGES} pages this PDF prints.", "")])
            break
        pdf.block(kind, parts)
    updated = content.modified[:10]
    pdf.block("closing", [("The same resume as JSON Resume: ", ""), (canonical, canonical),
                          (f" (updated {updated})." if updated else ".", "")])
    return bytes(pdf.output())
