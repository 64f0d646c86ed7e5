"""The owner's resume as PDF (/resume.pdf): the content of /resume.md (siteapi/resume.py reads the
JSON the same way), laid out for print with fpdf2 in DejaVu Sans (siteapi/fonts, with its licence).

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
from datetime import datetime, timezone
from pathlib import Path

from fpdf import FPDF

from siteapi.resume import SECTIONS, date_range, objects_in, text_of, texts_in

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
    return url if url.startswith(("https://", "http://", "mailto:")) and len(url) <= TEXT_CHARS else ""


def _entry(entry: dict, keys: tuple[str, str, str]):
    """The blocks of one entry, as resume.markdown lays it out: heading, facts, detail, items."""
    title, subtitle, detail = (text_of(entry.get(key)) if key else "" for key in keys)
    url = _url(text_of(entry.get("url")))
    heading = [(f"{title} — ", ""), (subtitle, url)] if title and subtitle else [(title or subtitle, url)]
    facts = " · ".join(part for part in (date_range(entry), text_of(entry.get("location"))) if part)
    items = texts_in(entry.get("highlights")) + [f"Course: {c}" for c in texts_in(entry.get("courses"))]
    if not (title or subtitle or detail or items):
        return
    yield "heading", heading if title or subtitle else [("Untitled", url)]
    if facts:
        yield "facts", [(facts, "")]
    if detail:
        yield "detail", [(detail, "")]
    for item in items:
        yield "item", [(item, "")]


def _blocks(resume: dict, canonical: str):
    """(kind, [(text, link), ...]) in reading order, lazily: a render that stops early reads no further."""
    basics = resume.get("basics") if isinstance(resume.get("basics"), dict) else {}
    yield "name", [(text_of(basics.get("name")) or "Resume", "")]
    if text_of(basics.get("label")):
        yield "label", [(text_of(basics["label"]), "")]
    location = basics.get("location") if isinstance(basics.get("location"), dict) else {}
    email, url = text_of(basics.get("email")), text_of(basics.get("url"))
    contact = [part for part in (
        (", ".join(filter(None, (text_of(location.get(k)) for k in ("city", "region", "countryCode")))), ""),
        (email, _url("mailto:" + email) if email else ""),
        (url, _url(url)),
        *((text_of(p.get("network")) or text_of(p.get("url")), _url(text_of(p.get("url")))) for p in objects_in(basics.get("profiles"))),
    ) if part[0]]
    if contact:
        yield "contact", [piece for i, part in enumerate(contact) for piece in ([(" · ", "")] if i else []) + [part]]
    if text_of(basics.get("summary")):
        yield "summary", [(text_of(basics["summary"]), "")]
    for key, heading, keys in SECTIONS:
        announced = False
        for entry in objects_in(resume.get(key)):
            for block in _entry(entry, keys):
                if not announced:
                    announced = True
                    yield "section", [(heading, "")]
                yield block
    for key, heading in (("skills", "Skills"), ("interests", "Interests")):
        groups = [(text_of(g.get("name")), text_of(g.get("level")), texts_in(g.get("keywords"))) for g in objects_in(resume.get(key))
                  if text_of(g.get("name")) or texts_in(g.get("keywords"))]
        if groups:
            yield "section", [(heading, "")]
            for name, level, words in groups:
                rest = (f" ({level})" if level else "") + (": " + ", ".join(words) if words else "")
                yield "item", [(name or heading, "", "B"), (rest, "")]
    languages = [" ".join(filter(None, (text_of(lang.get("language")), f"({text_of(lang.get('fluency'))})"
                                        if text_of(lang.get("fluency")) else ""))) for lang in objects_in(resume.get("languages"))]
    if any(languages):
        yield "section", [("Languages", "")]
        for lang in filter(None, languages):
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


def _created(meta: dict) -> datetime:
    try:
        stamp = datetime.fromisoformat(text_of(meta.get("lastModified")))
    except ValueError:
        return UNDATED
    if stamp.year < 1000:  # a PDF date has four digits of year
        return UNDATED
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=timezone.utc)  # naive: not the server's zone


@functools.lru_cache(maxsize=4)
def render(stored: str, canonical: str) -> bytes:
    """The PDF of the stored resume JSON, ending with a link to `canonical`, the JSON."""
    resume = json.loads(stored)
    resume = resume if isinstance(resume, dict) else {}  # a site.db from before the content job checked
    basics = resume.get("basics") if isinstance(resume.get("basics"), dict) else {}
    meta = resume.get("meta") if isinstance(resume.get("meta"), dict) else {}
    name = text_of(basics.get("name"))
    pdf = _Document(name[:80] or "Resume")
    pdf.set_title(_metadata_text(f"{name} — Resume" if name else "Resume"))
    if name:
        pdf.set_author(_metadata_text(name))
    if text_of(basics.get("label")):
        pdf.set_subject(_metadata_text(text_of(basics["label"])))
    pdf.set_creation_date(_created(meta))
    pdf.add_page()
    for kind, parts in _blocks(resume, canonical):
        if pdf.page_no() > MAX_PAGES:
            pdf.block("closing", [(f"The resume goes on past the {MAX_PAGES} pages this PDF prints.", "")])
            break
        pdf.block(kind, parts)
    updated = text_of(meta.get("lastModified"))[:10]
    pdf.block("closing", [("The same resume as JSON Resume: ", ""), (canonical, canonical),
                          (f" (updated {updated})." if updated else ".", "")])
    return bytes(pdf.output())
