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


def _text(value) -> str:
    return " ".join(str(value).split()) if isinstance(value, (str, int, float)) and not isinstance(value, bool) else ""


def _entries(value) -> list[dict]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _words(value) -> list[str]:
    return [text for text in map(_text, value) if text] if isinstance(value, list) else []


def _link(label: str, url: str) -> str:
    return f"[{label}]({url})" if url.startswith(("https://", "http://", "mailto:")) else label


def _dates(entry: dict) -> str:
    start, end = _text(entry.get("startDate")), _text(entry.get("endDate"))
    return f"{start} – {end or 'present'}" if start else end


def _entry(entry: dict, keys: tuple[str, str, str]) -> list[str]:
    title, subtitle, detail = (_text(entry.get(key)) if key else "" for key in keys)
    url = _text(entry.get("url"))
    heading = f"{title} — {_link(subtitle, url)}" if title and subtitle else _link(title or subtitle, url)
    facts = [part for part in (_dates(entry), _text(entry.get("location"))) if part]
    items = _words(entry.get("highlights")) + [f"Course: {c}" for c in _words(entry.get("courses"))]
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
    name = _text(basics.get("name")) or "Resume"
    out = [f"# {name}", ""]
    if _text(basics.get("label")):
        out += [f"**{_text(basics['label'])}**", ""]
    location = basics.get("location") if isinstance(basics.get("location"), dict) else {}
    email, url = _text(basics.get("email")), _text(basics.get("url"))
    contact = [part for part in (
        ", ".join(filter(None, (_text(location.get(k)) for k in ("city", "region", "countryCode")))),
        _link(email, "mailto:" + email) if email else "",
        _link(url, url),
        *(_link(_text(p.get("network")) or _text(p.get("url")), _text(p.get("url"))) for p in _entries(basics.get("profiles"))),
    ) if part]
    if contact:
        out += [" · ".join(contact), ""]
    if _text(basics.get("summary")):
        out += [_text(basics["summary"]), ""]
    for key, heading, keys in SECTIONS:
        lines = [line for entry in _entries(resume.get(key)) for line in _entry(entry, keys)]
        if lines:
            out += [f"## {heading}", "", *lines]
    for key, heading in (("skills", "Skills"), ("interests", "Interests")):
        groups = [(_text(g.get("name")), _text(g.get("level")), _words(g.get("keywords"))) for g in _entries(resume.get(key))
                  if _text(g.get("name")) or _words(g.get("keywords"))]
        if groups:
            out += [f"## {heading}", ""]
            out += [f"- **{name or heading}**{f' ({level})' if level else ''}{': ' + ', '.join(words) if words else ''}"
                    for name, level, words in groups] + [""]
    languages = [" ".join(filter(None, (_text(lang.get("language")), f"({_text(lang.get('fluency'))})"
                                        if _text(lang.get("fluency")) else ""))) for lang in _entries(resume.get("languages"))]
    if any(languages):
        out += ["## Languages", "", *(f"- {lang}" for lang in languages if lang), ""]
    meta = resume.get("meta") if isinstance(resume.get("meta"), dict) else {}
    updated = _text(meta.get("lastModified"))[:10]
    out += ["---", "", f"The same resume as JSON Resume: <{canonical}>{f' (updated {updated})' if updated else ''}."]
    return "\n".join(out) + "\n"
