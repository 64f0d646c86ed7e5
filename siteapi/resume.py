"""The owner's resume: what the JSON Resume the content job stores says (`read`), and that as
Markdown (/resume.md); siteapi/resume_pdf.py lays the same reading out as PDF.

The JSON is the owner's file, checked only for being JSON: every field may be missing or of another
type, and what is not text is left out rather than failing the page.
"""
from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from siteapi.web import ApiError

# JSON Resume 1.0.0 sections with (title key, subtitle key, detail key), in the order a reader expects.
SECTIONS = (
    ("work", "Work", ("position", "name", "summary")),
    ("projects", "Projects", ("name", "", "description")),
    ("volunteer", "Volunteering", ("position", "organization", "summary")),
    ("education", "Education", ("studyType", "institution", "area")),
    ("awards", "Awards", ("title", "awarder", "summary")),
    ("certificates", "Certificates", ("name", "issuer", "")),
    ("publications", "Publications", ("name", "publisher", "summary")),
    ("references", "References", ("name", "", "reference")),
)
LINK_SCHEMES = ("https://", "http://", "mailto:")  # what a link may point at; other URLs stay text


def stored(conn: sqlite3.Connection) -> str:
    """The resume.json the content job stored, as the owner wrote it; a 404 when there is none."""
    row = conn.execute("SELECT body FROM site_files WHERE name = 'resume.json'").fetchone()
    if row is None:
        raise ApiError(404, "No resume is published yet.", code="not_found")
    return row["body"]


@dataclass
class Entry:
    """One entry of a section; it has a title, a subtitle, a detail, items or a link."""
    title: str
    subtitle: str
    url: str
    facts: list[str]  # its dates and place
    detail: str
    items: list[str]  # highlights, then courses


@dataclass
class Content:
    """Everything the resume shows, as text; empty where the JSON has nothing readable."""
    name: str
    label: str
    contact: list[tuple[str, str]]  # (text, link target or "")
    summary: str
    sections: list[tuple[str, list[Entry]]]  # only those with an entry
    groups: list[tuple[str, list[tuple[str, str, list[str]]]]]  # Skills, Interests: (name, level, keywords)
    languages: list[str]
    modified: str  # meta.lastModified


def text_of(value) -> str:
    return " ".join(str(value).split()) if isinstance(value, (str, int, float)) and not isinstance(value, bool) else ""


def _objects_in(value) -> list[dict]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _texts_in(value) -> list[str]:
    return [text for text in map(text_of, value) if text] if isinstance(value, list) else []


def _object(value) -> dict:
    return value if isinstance(value, dict) else {}


def _date_range(entry: dict) -> str:
    start, end = text_of(entry.get("startDate")), text_of(entry.get("endDate"))
    return f"{start} – {end or 'present'}" if start else end


def _entry(entry: dict, keys: tuple[str, str, str]) -> Entry | None:
    title, subtitle, detail = (text_of(entry.get(key)) if key else "" for key in keys)
    url = text_of(entry.get("url"))
    items = _texts_in(entry.get("highlights")) + [f"Course: {c}" for c in _texts_in(entry.get("courses"))]
    if not (title or subtitle or detail or items or url.startswith(LINK_SCHEMES)):
        return None
    facts = [part for part in (_date_range(entry), text_of(entry.get("location"))) if part]
    return Entry(title, subtitle, url, facts, detail, items)


def read(resume: object) -> Content:
    """What the stored resume JSON says, whatever its shape."""
    resume = _object(resume)  # a site.db from before the content job checked
    basics, location = _object(resume.get("basics")), _object(_object(resume.get("basics")).get("location"))
    email, url = text_of(basics.get("email")), text_of(basics.get("url"))
    contact = [part for part in (
        (", ".join(filter(None, (text_of(location.get(k)) for k in ("city", "region", "countryCode")))), ""),
        (email, "mailto:" + email if email else ""),
        (url, url),
        *((text_of(p.get("network")) or text_of(p.get("url")), text_of(p.get("url"))) for p in _objects_in(basics.get("profiles"))),
    ) if part[0]]
    sections = [(heading, entries) for key, heading, keys in SECTIONS
                if (entries := [e for e in (_entry(entry, keys) for entry in _objects_in(resume.get(key))) if e])]
    groups = [(heading, found) for key, heading in (("skills", "Skills"), ("interests", "Interests"))
              if (found := [(text_of(g.get("name")), text_of(g.get("level")), _texts_in(g.get("keywords")))
                            for g in _objects_in(resume.get(key)) if text_of(g.get("name")) or _texts_in(g.get("keywords"))])]
    languages = [" ".join(filter(None, (text_of(lang.get("language")), f"({text_of(lang.get('fluency'))})"
                                        if text_of(lang.get("fluency")) else ""))) for lang in _objects_in(resume.get("languages"))]
    return Content(text_of(basics.get("name")), text_of(basics.get("label")), contact, text_of(basics.get("summary")),
                   sections, groups, [lang for lang in languages if lang],
                   text_of(_object(resume.get("meta")).get("lastModified")))


def _link(label: str, url: str) -> str:
    return f"[{label}]({url})" if url.startswith(LINK_SCHEMES) else label


def _entry_lines(entry: Entry) -> list[str]:
    if entry.title and entry.subtitle:
        heading = f"{entry.title} — {_link(entry.subtitle, entry.url)}"
    else:
        heading = _link(entry.title or entry.subtitle, entry.url)
    out = [f"### {heading or 'Untitled'}", ""]
    if entry.facts:
        out += ["*" + " · ".join(entry.facts) + "*", ""]
    if entry.detail:
        out += [entry.detail, ""]
    if entry.items:
        out += [f"- {item}" for item in entry.items] + [""]
    return out


def markdown(resume: object, canonical: str) -> str:
    """The resume as one Markdown document, ending with a link to `canonical`, the JSON."""
    content = read(resume)
    out = [f"# {content.name or 'Resume'}", ""]
    if content.label:
        out += [f"**{content.label}**", ""]
    if content.contact:
        out += [" · ".join(_link(text, target) for text, target in content.contact), ""]
    if content.summary:
        out += [content.summary, ""]
    for heading, entries in content.sections:
        out += [f"## {heading}", "", *(line for entry in entries for line in _entry_lines(entry))]
    for heading, groups in content.groups:
        out += [f"## {heading}", ""]
        out += [f"- **{name or heading}**{f' ({level})' if level else ''}{': ' + ', '.join(words) if words else ''}"
                for name, level, words in groups] + [""]
    if content.languages:
        out += ["## Languages", "", *(f"- {lang}" for lang in content.languages), ""]
    updated = content.modified[:10]
    out += ["---", "", f"The same resume as JSON Resume: <{canonical}>{f' (updated {updated})' if updated else ''}."]
    return "\n".join(out) + "\n"
