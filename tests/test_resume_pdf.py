"""/resume.pdf over HTTP against the real app in waitress: the PDF read back with pypdf (text,
metadata, links), its headers and validators, and resumes that are odd, foreign or hostile."""
import hashlib
import io
import json
import logging
from contextlib import closing

import pytest
import requests
from conftest import ROOT, Client, OpenApiChecker, build_site, make_settings
from pypdf import PdfReader
from servers import serve_wsgi

from app import RESUME_CACHE, make_app
from siteapi import db, openapi, resume_pdf

CANONICAL = "https://aadhar.sh/resume.json"
OWNER = json.loads((ROOT / "content" / "resume.json").read_text())


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    settings = make_settings(tmp_path_factory.mktemp("resume-pdf"))
    build_site(settings)
    with serve_wsgi(make_app(settings).wsgi) as base:
        yield settings, Client(base, OpenApiChecker(openapi.document(settings)))


@pytest.fixture()
def publish(site):
    """Store another resume as the content job would (None: none published); the owner's comes back after."""
    settings, _ = site

    def store(body: str | None) -> None:
        with closing(db.connect(settings.db_path)) as conn, conn:
            conn.execute("DELETE FROM site_files WHERE name = 'resume.json'")
            if body is not None:
                conn.execute("INSERT INTO site_files(name, body, hash) VALUES ('resume.json', ?, ?)",
                             (body, hashlib.sha256(body.encode("utf-8", "surrogatepass")).hexdigest()))

    original = (ROOT / "content" / "resume.json").read_text()
    yield store
    store(original)


def read(response: requests.Response) -> tuple[PdfReader, str]:
    assert response.status_code == 200 and response.headers["Content-Type"] == "application/pdf"
    assert response.content.startswith(b"%PDF-") and response.content.rstrip().endswith(b"%%EOF")
    pdf = PdfReader(io.BytesIO(response.content), strict=True)
    return pdf, "\n".join(page.extract_text() for page in pdf.pages)


def test_the_pdf_is_the_resume_as_selectable_text_with_metadata_and_links(site):
    _, api = site
    r = api.get("/resume.pdf")
    pdf, text = read(r)
    basics = OWNER["basics"]
    assert text.startswith(basics["name"] + "\n" + basics["label"] + "\n")
    flat = " ".join(text.split())  # lines wrap where the page ends them
    assert all(f"{job['position']} — {job['name']}" in flat and job["summary"] in flat for job in OWNER["work"])
    assert all(word in flat for skill in OWNER["skills"] for word in skill["keywords"])
    assert f"The same resume as JSON Resume: {CANONICAL} (updated {OWNER['meta']['lastModified'][:10]})." in flat
    assert pdf.metadata.title == f"{basics['name']} — Resume" and pdf.metadata.author == basics["name"]
    assert pdf.metadata.creation_date.isoformat() == OWNER["meta"]["lastModified"] + "+00:00"
    links = {annot.get_object()["/A"]["/URI"] for page in pdf.pages for annot in page.get("/Annots", [])}
    assert {CANONICAL, "mailto:" + basics["email"], *(p["url"] for p in basics["profiles"])} <= links
    assert pdf.pages[0].mediabox.width == 612 and pdf.pages[0].mediabox.height == 792  # US Letter, in points


def test_the_bytes_depend_on_the_json_alone(site):
    """A render from scratch (no process cache) gives the bytes served: the ETag holds across restarts."""
    _, api = site
    served = api.get("/resume.pdf").content
    resume_pdf.render.cache_clear()
    assert resume_pdf.render((ROOT / "content" / "resume.json").read_text(), CANONICAL) == served


def test_headers_validators_head_and_methods(site):
    _, api = site
    r = api.get("/resume.pdf")
    assert r.headers["Cache-Control"] == RESUME_CACHE and r.headers["Content-Disposition"] == 'inline; filename="resume.pdf"'
    assert "RateLimit-Policy" in r.headers and 'rel="service-desc"' in r.headers["Link"]
    assert r.headers["Access-Control-Allow-Origin"] == "*" and int(r.headers["Content-Length"]) == len(r.content)
    etag = r.headers["ETag"]
    head = api.request("HEAD", "/resume.pdf")
    assert (head.status_code, head.content, head.headers["ETag"], head.headers["Content-Type"]) == (
        200, b"", etag, "application/pdf")
    for method in ("GET", "HEAD"):
        again = api.request(method, "/resume.pdf", headers={"If-None-Match": etag})
        assert (again.status_code, again.content, again.headers["ETag"]) == (304, b"", etag)
        assert again.headers["Cache-Control"] == RESUME_CACHE
    put = api.request("PUT", "/resume.pdf")
    assert put.status_code == 405 and put.json()["allow"] == ["GET", "HEAD", "OPTIONS"]


def test_no_resume_published_is_the_same_json_404_as_the_other_forms(site, publish):
    """JSON for a program, as /resume.json answers; a browser tab is shown the HTML page."""
    _, api = site
    publish(None)
    for path in ("/resume.json", "/resume.pdf"):
        for accept in ("*/*", "application/pdf", "application/json"):
            r = api.get(path, headers={"Accept": accept})
            assert r.status_code == 404 and r.headers["Content-Type"] == "application/json", (path, accept)
            assert r.json()["code"] == "not_found" and r.json()["error"] == "No resume is published yet."
    browser = api.get("/resume.pdf", headers={"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"})
    assert browser.status_code == 404 and browser.headers["Content-Type"].startswith("text/html")
    assert "No resume is published yet." in browser.text


def test_a_resume_in_any_script_is_a_pdf(site, publish):
    """What DejaVu Sans draws is real text; what it has no glyph for (CJK, the crab) prints as U+FFFD
    rather than vanishing, and the metadata keeps every character."""
    _, api = site
    name = "Zoë Ångström 山田太郎 😀🦀"
    publish(json.dumps({"basics": {"name": name, "label": "Ingeniera — 東京", "summary": "Привет, Γειά σου \ud800"},
                        "work": [{"position": "Développeuse", "name": "株式会社", "highlights": ["emoji 🎉 \x00"]}]}))
    pdf, text = read(api.get("/resume.pdf"))
    assert text.startswith("Zoë Ångström \ufffd\ufffd\ufffd\ufffd 😀\ufffd\n")
    assert "Привет, Γειά σου" in text and "Développeuse — \ufffd\ufffd\ufffd\ufffd" in text
    assert pdf.metadata.author == name and pdf.metadata.creation_date.year == 1970  # no meta.lastModified


@pytest.mark.parametrize("resume", [
    {"basics": {"name": 5, "label": True, "location": "Brooklyn", "profiles": "none", "email": ["a"], "url": {}},
     "work": {"not": "a list"}, "projects": [1, "x", None, {"name": None, "highlights": "nope"}],
     "skills": [{"keywords": [1, None, True, {}]}], "languages": "English", "meta": {"lastModified": 12}},
    {"basics": {"name": "Many Jobs", "summary": "x" * 100_000},
     "work": [{"position": f"Engineer {n}", "name": "Co", "url": "https://example.com/" + "a" * 5_000,
               "summary": "Did things. " * 30, "highlights": ["h" * 200] * 5} for n in range(5_000)]},
    ["not", "an", "object"],
], ids=["wrong-types", "five-thousand-jobs", "a-list"])
def test_an_odd_or_hostile_resume_still_renders_within_bounds(site, publish, resume):
    _, api = site
    publish(json.dumps(resume))
    r = api.get("/resume.pdf")
    pdf, text = read(r)
    assert len(r.content) < 1_000_000 and len(pdf.pages) <= resume_pdf.MAX_PAGES + 1
    assert text.rstrip().endswith("· " + str(len(pdf.pages)))  # the footer of a whole last page
    flat = " ".join(text.split())
    assert f"The same resume as JSON Resume: {CANONICAL}" in flat
    if isinstance(resume, dict) and len(resume.get("work", [])) == 5_000:
        assert "Engineer 0 — Co" in flat and "Engineer 4999" not in flat
        assert f"The resume goes on past the {resume_pdf.MAX_PAGES} pages this PDF prints." in flat


def test_the_documents_list_the_pdf(site):
    _, api = site
    op = api.get("/openapi.json").json()["paths"]["/resume.pdf"]["get"]
    assert op["responses"]["200"]["content"] == {"application/pdf": {"schema": {"type": "string", "format": "binary"}}}
    assert {"304", "404", "405", "429"} <= set(op["responses"])
    assert "(https://aadhar.sh/resume.pdf)" in api.get("/llms.txt").text
    assert "https://aadhar.sh/resume.pdf" in {e["anchor"] for e in api.get("/.well-known/api-catalog").json()["linkset"]}
    assert "curl -s -o resume.pdf https://aadhar.sh/resume.pdf" in api.get("/developers.md").text


def test_rendering_leaves_fonttools_info_out_of_the_log(caplog):
    """fpdf2 subsets the font with fontTools, which logs some 75 INFO lines per render."""
    resume_pdf.render.cache_clear()
    with caplog.at_level(logging.INFO):
        resume_pdf.render(json.dumps(OWNER), CANONICAL)
    assert [r.getMessage() for r in caplog.records if r.name.startswith("fontTools") and r.levelno < logging.WARNING] == []
