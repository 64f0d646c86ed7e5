"""The owner's resume as Markdown (/resume.md), rendered from the JSON Resume the content job stores.

The JSON is the owner's file, checked only for being JSON: every field may be missing or of another
type, and what is not text is left out rather than failing the page.
"""
from __future__ import annotations

# JSON Resume 1.0.0 sections with (title key, subtitle key, detail key), in the order a reader expects.
SECTIONS = (
    ("work", "Work", ("position", "name", "summary")),
    ("projects", "Projects", ("name", "", "description")),
    ("volunteer", "Volunteering", ("position", "organization", "summary")),
    ("education", "Education", ("studyType", "institution", "area")),
    ("awards", "Awards", ("title", "awarder", "summary")),
    ("certificates", "Certificates", ("name", "issuer", "")),
    ("publications", "Publications", ("name", "publisher", "summary")),
)


def text_of(value) -> str:
    """A string or number as one line of text; anything else as "" (shared with resume_pdf)."""
    return " ".join(str(value).split()) if isinstance(value, (str, int, float)) and not isinstance(value, bool) else ""


def objects_in(value) -> list[dict]:
    """The objects of a list; nothing when it is no list."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def texts_in(value) -> list[str]:
    """The non-empty texts of a list; nothing when it is no list."""
    return [text for text in map(text_of, value) if text] if isinstance(value, list) else []


def _link(label: str, url: str) -> str:
    return f"[{label}]({url})" if url.startswith(("https://", "http://", "mailto:")) else label


def date_range(entry: dict) -> str:
    """"start – end" of an entry, "start – present" while it runs."""
    start, end = text_of(entry.get("startDate")), text_of(entry.get("endDate"))
    return f"{start} – {end or 'present'}" if start else end


def _entry(entry: dict, keys: tuple[str, str, str]) -> list[str]:
    title, subtitle, detail = (text_of(entry.get(key)) if key else "" for key in keys)
    url = text_of(entry.get("url"))
    heading = f"{title} — {_link(subtitle, url)}" if title and subtitle else _link(title or subtitle, url)
    facts = [part for part in (date_range(entry), text_of(entry.get("location"))) if part]
    items = texts_in(entry.get("highlights")) + [f"Course: {c}" for c in texts_in(entry.get("courses"))]
    if not (heading or detail or items):
        return []
    out = [f"### {heading or 'Untitled'}", ""]
    if facts:
        out += ["*" + " · ".join(facts) + "*", ""]
    if detail:
        out += [detail, ""]
    if items:
        out += [f"- {item}" for item in items] + [""]
    return out


def markdown(resume: object, canonical: str) -> str:
    """The resume as one Markdown document, ending with a link to `canonical`, the JSON."""
    resume = resume if isinstance(resume, dict) else {}  # a site.db from before the content job checked
    basics = resume.get("basics") if isinstance(resume.get("basics"), dict) else {}
    name = text_of(basics.get("name")) or "Resume"
    out = [f"# {name}", ""]
    if text_of(basics.get("label")):
        out += [f"**{text_of(basics['label'])}**", ""]
    location = basics.get("location") if isinstance(basics.get("location"), dict) else {}
    email, url = text_of(basics.get("email")), text_of(basics.get("url"))
    contact = [part for part in (
        ", ".join(filter(None, (text_of(location.get(k)) for k in ("city", "region", "countryCode")))),
        _link(email, "mailto:" + email) if email else "",
        _link(url, url),
        *(_link(text_of(p.get("network")) or text_of(p.get("url")), text_of(p.get("url"))) for p in objects_in(basics.get("profiles"))),
    ) if part]
    if contact:
        out += [" · ".join(contact), ""]
    if text_of(basics.get("summary")):
        out += [text_of(basics["summary"]), ""]
    for key, heading, keys in SECTIONS:
        lines = [line for entry in objects_in(resume.get(key)) for line in _entry(entry, keys)]
        if lines:
            out += [f"## {heading}", "", *lines]
    for key, heading in (("skills", "Skills"), ("interests", "Interests")):
        groups = [(text_of(g.get("name")), text_of(g.get("level")), texts_in(g.get("keywords"))) for g in objects_in(resume.get(key))
                  if text_of(g.get("name")) or texts_in(g.get("keywords"))]
        if groups:
            out += [f"## {heading}", ""]
            out += [f"- **{name or heading}**{f' ({level})' if level else ''}{': ' + ', '.join(words) if words else ''}"
                    for name, level, words in groups] + [""]
    languages = [" ".join(filter(None, (text_of(lang.get("language")), f"({text_of(lang.get('fluency'))})"
                                        if text_of(lang.get("fluency")) else ""))) for lang in objects_in(resume.get("languages"))]
    if any(languages):
        out += ["## Languages", "", *(f"- {lang}" for lang in languages if lang), ""]
    meta = resume.get("meta") if isinstance(resume.get("meta"), dict) else {}
    updated = text_of(meta.get("lastModified"))[:10]
    out += ["---", "", f"The same resume as JSON Resume: <{canonical}>{f' (updated {updated})' if updated else ''}."]
    return "\n".join(out) + "\n"
