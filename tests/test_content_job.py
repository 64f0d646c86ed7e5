"""The content job: incremental indexing, deletions, broken front matter, job_runs."""
import dataclasses
import html
import json
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import requests
from conftest import ROOT, Client, held_to_cpu, make_settings
from servers import serve_wsgi

import jobs
from app import make_app
from siteapi import content, db
from siteapi.content import (MAX_FILE_BYTES, content_files, markdown, parse_file, plain_text,
                             read_content)


def copy_content(tmp_path):
    target = tmp_path / "content"
    shutil.copytree(ROOT / "content", target)
    return target


def pages(settings):
    conn = db.connect(settings.db_path, readonly=True)
    try:
        return {r["path"]: r["hash"] for r in conn.execute("SELECT path, hash FROM pages")}
    finally:
        conn.close()


def rows(settings, sql, *params):
    conn = db.connect(settings.db_path, readonly=True)
    try:
        return [tuple(r) for r in conn.execute(sql, params)]
    finally:
        conn.close()


def page_text(title, path, kind="page", extra=""):
    return f"---\ntitle: {title}\nkind: {kind}\npath: {path}\n{extra}---\nSome words about {title}.\n"


def small_site(tmp_path):
    """Three pages and a resume, indexed once."""
    content = tmp_path / "content"
    (content / "pages").mkdir(parents=True)
    (content / "writing").mkdir()
    (content / "pages" / "about.md").write_text(page_text("About", "/about", extra="date: 2026-01-02\ntags: [me]\n"))
    (content / "pages" / "uses.md").write_text(page_text("Uses", "/uses"))
    (content / "writing" / "first.md").write_text(page_text("First post", "/writing/first", "writing"))
    (content / "resume.json").write_text('{"basics": {"name": "Owner"}}')
    settings = make_settings(tmp_path, content_dir=content)
    ok, summary = jobs.run_job(settings, "content")
    assert ok, summary
    return content, settings


def test_incremental_index_changes_and_deletions(tmp_path):
    content = copy_content(tmp_path)
    settings = make_settings(tmp_path, content_dir=content)
    ok, summary = jobs.run_job(settings, "content")
    assert ok, summary
    first = pages(settings)
    assert len(first) >= 40 and "/" in first

    ok, summary = jobs.run_job(settings, "content")
    assert ok and "0 added or changed, 0 removed" in summary

    about = content / "pages" / "about.md"
    about.write_text(about.read_text() + "\nA brand new paragraph about zymurgy.\n")
    victim = next((content / "writing").glob("*.md"))
    victim_path = [p for p, h in first.items() if p.startswith("/writing/")]
    victim.unlink()
    ok, summary = jobs.run_job(settings, "content")
    assert ok and "1 added or changed, 1 removed" in summary
    after = pages(settings)
    assert after["/about"] != first["/about"] and len(after) == len(first) - 1
    conn = db.connect(settings.db_path, readonly=True)
    hits = conn.execute("SELECT count(*) FROM pages_fts WHERE pages_fts MATCH 'zymurgy'").fetchone()[0]
    assert hits == 1 and victim_path


def test_broken_front_matter_is_reported_and_last_good_kept(tmp_path):
    content = copy_content(tmp_path)
    settings = make_settings(tmp_path, content_dir=content)
    assert jobs.run_job(settings, "content")[0]
    before = pages(settings)
    about = content / "pages" / "about.md"
    about.write_text("---\ntitle: [unclosed\nkind: page\npath: /about\n---\nbody\n")
    (content / "writing" / "new-post.md").write_text(
        "---\ntitle: Fresh\ndescription: A new post.\nkind: writing\npath: /writing/fresh\ndate: 2026-01-02\n---\nHello.\n")
    ok, error = jobs.run_job(settings, "content")
    assert not ok
    assert "pages/about.md line" in error
    after = pages(settings)
    assert after["/about"] == before["/about"]  # the last good row stays
    assert "/writing/fresh" in after            # and the rest of the site is indexed
    conn = db.connect(settings.db_path, readonly=True)
    run = conn.execute("SELECT * FROM job_runs ORDER BY id DESC LIMIT 1").fetchone()
    assert run["name"] == "content" and run["ok"] == 0 and "about.md" in run["error"] and run["finished"]


def test_jobs_cli_runs_one_job(tmp_path):
    settings = make_settings(tmp_path)
    env = {"SITE_DB_PATH": str(settings.db_path), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "jobs.py", "run", "content"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("content: ok: ")
    bad = subprocess.run([sys.executable, "jobs.py", "run", "nope"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2 and "usage" in bad.stderr


def test_every_front_matter_fault_names_its_file_and_line(tmp_path):
    from siteapi.content import read_content

    faults = {
        "no-title.md": ("---\ndescription: x\nkind: page\npath: /a\n---\nbody\n", "line 1: front matter needs a text 'title'"),
        "bad-kind.md": ("---\ntitle: T\n\nkind: poem\npath: /b\n---\nbody\n", "line 4: kind must be one of"),
        "bad-path.md": ("---\ntitle: T\nkind: page\npath: b/\n---\nbody\n", "line 4: path must start with '/'"),
        "blank-path.md": ("---\ntitle: T\nkind: page\npath: ' '\n---\nbody\n", "line 4: front matter needs a text 'path'"),
        "unclosed.md": ("---\ntitle: T\n", "line 1: front matter is not closed"),
        "z-duplicate.md": ("---\ntitle: T\nkind: page\ndate: 2026-01-01\npath: /ok\n---\nbody\n",
                           "line 5: path /ok is already used by ok.md"),
        "bad-lang.md": ("---\ntitle: T\nkind: page\npath: /c\nlang: Japanese!\n---\nbody\n",
                        "line 5: lang must be a language tag such as ja"),
        "list-lang.md": ("---\ntitle: T\nkind: page\npath: /d\nlang: [ja]\n---\nbody\n", "line 5: lang must be text"),
        "ok.md": ("---\ntitle: Fine\nkind: page\npath: /ok\n---\nbody\n", None),
    }
    for name, (text, _) in faults.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "latin1.md").write_bytes(b"---\ntitle: Caf\xe9\n---\n")
    faults["latin1.md"] = ("", "line 2: not UTF-8 text")
    pages, errors, failed = read_content(tmp_path)
    assert [p.source for p in pages] == ["ok.md"]
    for name, (_, expected) in faults.items():
        if expected:
            assert any(e.startswith(f"{name} {expected}") for e in errors), (name, errors)
    assert sorted(failed) == sorted(n for n, (_, e) in faults.items() if e)


def test_a_resume_that_is_not_one_object_keeps_the_last_good_one(tmp_path):
    content = copy_content(tmp_path)
    settings = make_settings(tmp_path, content_dir=content)
    assert jobs.run_job(settings, "content")[0]
    (content / "resume.json").write_text('[{"basics": {"name": "Someone Else"}}]')
    ok, error = jobs.run_job(settings, "content")
    assert not ok and "resume.json must be one JSON object" in error
    conn = db.connect(settings.db_path, readonly=True)
    stored = conn.execute("SELECT body FROM site_files WHERE name = 'resume.json'").fetchone()["body"]
    assert stored == (ROOT / "content" / "resume.json").read_text()


NOT_A_RESUME = "resume.json is not a JSON Resume as /openapi.json describes it, "


@pytest.mark.parametrize("body, where", [
    ('{"basics": {"name": "Someone Else"}, "work": [{"name": "Acme", "startDate": 2019}]}',
     NOT_A_RESUME + "at work[0].startDate: a number where a string belongs."),
    ('{"work": []}', NOT_A_RESUME + "at the top level: basics is missing."),
    ('{"basics": {}, "education": [{"endDate": "June 2019"}]}',
     NOT_A_RESUME + 'at education[0].endDate: "June 2019" is not a date YYYY, YYYY-MM or YYYY-MM-DD, '
     "as JSON Resume writes it."),
    ('{"basics": null}', NOT_A_RESUME + "at basics: null where an object belongs."),
    ('{"basics": {}, "work": [{"highlights": "%s"}]}' % ("x" * 5000),
     NOT_A_RESUME + "at work[0].highlights: a string where an array belongs."),
    # deep enough for the reader or the check to give up, whichever does first: a sentence either way
    ('{"basics": {}, "work": [{"highlights": %s}]}' % ("[" * 970 + "]" * 970), "nested too deeply to"),
])
def test_a_resume_the_document_does_not_describe_keeps_the_last_good_one(tmp_path, body, where):
    """/resume.json serves the file as it is: one that breaks /openapi.json's Resume is refused,
    with where and how, and the last good one stays."""
    content = copy_content(tmp_path)
    settings = make_settings(tmp_path, content_dir=content)
    assert jobs.run_job(settings, "content")[0]
    (content / "resume.json").write_text(body)
    ok, error = jobs.run_job(settings, "content")
    assert not ok and where in error and "Traceback" not in error, error
    assert len(error) < 1000  # the file's value is not repeated
    conn = db.connect(settings.db_path, readonly=True)
    stored = conn.execute("SELECT body FROM site_files WHERE name = 'resume.json'").fetchone()["body"]
    assert stored == (ROOT / "content" / "resume.json").read_text()


def test_a_resume_the_owner_removes_is_no_longer_served(tmp_path, checker):
    content = copy_content(tmp_path)
    settings = make_settings(tmp_path, content_dir=content)
    assert jobs.run_job(settings, "content")[0]
    with serve_wsgi(make_app(settings).wsgi) as base:
        api = Client(base, checker)
        assert api.get("/resume.json").status_code == 200
        (content / "resume.json").unlink()
        assert jobs.run_job(settings, "content")[0]
        for path in ("/resume.json", "/resume.md"):  # it was served on and on from its last row
            gone = api.get(path, headers={"Accept": "application/json"})
            assert gone.status_code == 404 and gone.json()["code"] == "not_found", path
        assert checker.checked[-2:] == [("/resume.json", 404), ("/resume.md", 404)]


def test_a_missing_or_empty_content_folder_is_refused_and_every_page_kept(tmp_path):
    content = copy_content(tmp_path)
    settings = make_settings(tmp_path, content_dir=content)
    assert jobs.run_job(settings, "content")[0]
    before = pages(settings)
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("not a page")
    for folder in (tmp_path / "contnet", empty):
        ok, error = jobs.run_job(make_settings(tmp_path, content_dir=folder), "content")
        assert not ok and str(folder) in error and "content_dir" in error and "Every page is kept" in error
        assert pages(settings) == before
    with serve_wsgi(make_app(settings).wsgi) as base:
        assert requests.get(base + "/about", timeout=30).status_code == 200
        assert requests.get(base + "/search.json?q=photo", timeout=30).json()["total"] > 0
    (tmp_path / "fresh").mkdir()
    fresh = make_settings(tmp_path / "fresh", content_dir=empty)  # no pages yet: an empty folder is fine
    ok, summary = jobs.run_job(fresh, "content")
    assert ok and summary.startswith("0 pages")


def break_date(content):
    (content / "pages" / "about.md").write_text(page_text("About", "/about", extra="date: 2024-13-05\n"))


def break_tags(content):
    (content / "pages" / "about.md").write_text(page_text("About", "/about", extra="tags: 5\n"))


def break_with_nul(content):
    (content / "pages" / "about.md").write_text("---\ntitle: Ab\x00out\nkind: page\npath: /about\n---\nBody.\n")


def break_link(content):
    (content / "pages" / "about.md").unlink()
    os.symlink(content / "pages" / "gone.md", content / "pages" / "about.md")


def break_into_folder(content):
    (content / "pages" / "about.md").unlink()
    (content / "pages" / "about.md").mkdir()


def break_with_length(content):
    words = "A sentence of an essay that goes on. " * 8000  # 296 KB
    (content / "pages" / "about.md").write_text(page_text("About", "/about", "page") + words)


def break_resume_with_length(content):
    (content / "resume.json").write_text(json.dumps({"basics": {"summary": "x" * MAX_FILE_BYTES}}))


def break_resume(content):
    (content / "resume.json").write_bytes(b'{"basics": {"name": "Caf\xe9"}}')


def break_resume_with_nan(content):
    (content / "resume.json").write_text('{"basics": {"name": "Owner"}, "meta": {"score": NaN}}')


def break_resume_with_depth(content):
    (content / "resume.json").write_text('{"basics": {"name": "Owner"}, "x": ' + "[" * 100_000 + "]" * 100_000 + "}")


@pytest.mark.parametrize("damage, expected", [
    (break_date, "pages/about.md line 5: date must be a real day written YYYY-MM-DD, e.g. date: 2024-05-13, "
                 "not '2024-13-05'."),
    (break_tags, "pages/about.md line 5: tags must be a list of text, e.g. tags: [film, recipes]"),
    (break_with_nul, "pages/about.md line 2: front matter holds the character U+0000"),
    (break_link, "pages/about.md cannot be read (No such file or directory)"),
    (break_into_folder, "pages/about.md cannot be read (Is a directory)"),
    (break_resume, "resume.json line 1: not UTF-8 text"),
    (break_with_length, "pages/about.md is over 256 KiB, the most one content file may hold; split it"),
    (break_resume_with_length, "resume.json is over 256 KiB"),
    # Python reads NaN, which /resume.json would then serve to parsers that refuse it
    (break_resume_with_nan, "resume.json: NaN is not a JSON value; write a number, or null, in its place."),
    (break_resume_with_depth, "resume.json is nested too deeply to read"),
], ids=["date", "tags", "nul", "link", "folder", "resume", "long-page", "long-resume", "resume-nan", "resume-deep"])
def test_one_bad_file_is_named_keeps_its_last_good_row_and_the_rest_is_indexed(tmp_path, damage, expected):
    content, settings = small_site(tmp_path)
    before = rows(settings, "SELECT * FROM pages WHERE path = '/about'")
    resume = rows(settings, "SELECT body FROM site_files WHERE name = 'resume.json'")
    damage(content)
    (content / "writing" / "second.md").write_text(page_text("Second post", "/writing/second", "writing"))
    ok, error = jobs.run_job(settings, "content")
    assert not ok and expected in error and "1 failed" in error
    assert rows(settings, "SELECT * FROM pages WHERE path = '/about'") == before
    assert rows(settings, "SELECT body FROM site_files WHERE name = 'resume.json'") == resume
    assert set(pages(settings)) == {"/about", "/uses", "/writing/first", "/writing/second"}


def test_a_wrong_type_is_reported_with_what_to_write_instead(tmp_path):
    from siteapi.content import read_content

    faults = {
        "title-number.md": ("title: 2024\nkind: page\npath: /a\n",
                            "line 2: title must be text, not a number; write title: and the text, in quotes"),
        "kind-yes.md": ("title: T\nkind: yes\npath: /b\n", "line 3: kind must be text, not yes/no"),
        "path-list.md": ("title: T\nkind: page\npath: [/c]\n", "line 4: path must be text, not a list"),
        "description-list.md": ("title: T\nkind: page\npath: /d\ndescription: [1, 2]\n",
                                "line 5: description must be text, not a list"),
        "date-words.md": ("title: T\nkind: page\npath: /e\ndate: last spring\n",
                          "line 5: date must be a real day written YYYY-MM-DD, e.g. date: 2024-05-13, "
                          "not 'last spring'."),
        "date-number.md": ("title: T\nkind: page\npath: /f\ndate: 20240105\n", "line 5: date must be a real day"),
        "tags-text.md": ("title: T\nkind: page\npath: /g\ntags: film\n",
                         "line 5: tags must be a list of text, e.g. tags: [film, recipes]"),
        "tags-nested.md": ("title: T\nkind: page\npath: /h\ntags: [film, {a: b}]\n", "line 5: tags must be a list"),
        "yaml-tab.md": ("title:\tT\nkind: page\npath: /i\n", "line 2: front matter is not valid YAML"),
        "path-query.md": ("title: T\nkind: page\npath: /j?draft=1\n", "line 4: path must be one URL path"),
        "path-space.md": ("title: T\nkind: page\npath: /my post\n", "line 4: path must be one URL path"),
        "path-double.md": ("title: T\nkind: page\npath: //evil.example\n", "line 4: path must be one URL path"),
        "path-dots.md": ("title: T\nkind: page\npath: /writing/../about\n", "line 4: path must be one URL path"),
        # served at /a%2520b only: a request's %-escapes are decoded before the lookup
        "path-escaped.md": ("title: T\nkind: page\npath: /a%20b\n", "line 4: path must be one URL path, without spaces, "
                            "'?', '#', '%'"),
        "path-index.md": ("title: T\nkind: page\npath: /index\n",
                          "line 4: path /index cannot be used: its Markdown twin would be /index.md, the home page's"),
        "path-twice.md": ("title: T\nkind: page\npath: /k\ntags: [a]\npath: /l\n",
                          "line 6: front matter is not valid YAML (the key 'path' is written twice; keep one)."),
    }
    for name, (front, _) in faults.items():
        (tmp_path / name).write_text(f"---\n{front}---\nbody\n")
    (tmp_path / "fine.md").write_text("---\ntitle: Fine\nkind: page\npath: /fine\ndate: 2024-02-29 10:00:00\n"
                                     "tags: [film, '2024']\n---\nbody\n")
    pages, errors, failed = read_content(tmp_path)
    assert [(p.source, p.date, p.tags) for p in pages] == [("fine.md", "2024-02-29", '["film", "2024"]')]
    for name, (_, expected) in faults.items():
        assert any(e.startswith(f"{name} {expected}") for e in errors), (name, errors)
    assert sorted(failed) == sorted(faults)


def test_a_page_moved_unchanged_keeps_its_last_good_row_when_its_new_file_breaks(tmp_path):
    content, settings = small_site(tmp_path)
    shutil.move(content / "pages" / "uses.md", content / "writing" / "uses.md")
    ok, summary = jobs.run_job(settings, "content")
    assert ok and "1 added or changed, 0 removed" in summary
    assert rows(settings, "SELECT source FROM pages WHERE path = '/uses'") == [("writing/uses.md",)]
    before = rows(settings, "SELECT * FROM pages WHERE path = '/uses'")
    (content / "writing" / "uses.md").write_text("---\ntitle: 'Uses\nkind: page\npath: /uses\n---\nBody.\n")
    ok, error = jobs.run_job(settings, "content")
    assert not ok and "writing/uses.md line" in error and "0 removed" in error
    assert rows(settings, "SELECT * FROM pages WHERE path = '/uses'") == before


def test_a_duplicate_path_stays_with_the_file_that_publishes_it(tmp_path):
    content, settings = small_site(tmp_path)
    (content / "writing" / "a-copy-of-first.md").write_text(page_text("A draft copy", "/writing/first", "writing"))
    ok, error = jobs.run_job(settings, "content")
    assert not ok
    assert "writing/a-copy-of-first.md line 4: path /writing/first is already used by writing/first.md." in error
    published = ("First post", "writing/first.md")
    assert rows(settings, "SELECT title, source FROM pages WHERE path = '/writing/first'") == [published]
    with serve_wsgi(make_app(settings).wsgi) as base:
        page = requests.get(base + "/writing/first", timeout=30)
        assert page.status_code == 200 and "First post" in page.text and "A draft copy" not in page.text

    # While the publishing file does not parse, it still holds the path against the newcomer.
    (content / "writing" / "first.md").write_text("---\ntitle: [First\nkind: writing\npath: /writing/first\n---\n")
    ok, error = jobs.run_job(settings, "content")
    assert not ok and "path /writing/first is already used by writing/first.md" in error
    assert rows(settings, "SELECT title, source FROM pages WHERE path = '/writing/first'") == [published]

    # Once that file is gone, the copy takes the path over.
    (content / "writing" / "first.md").unlink()
    ok, summary = jobs.run_job(settings, "content")
    assert ok, summary
    assert rows(settings, "SELECT title, source FROM pages WHERE path = '/writing/first'") == [
        ("A draft copy", "writing/a-copy-of-first.md")]


def test_a_byte_order_mark_is_read_past(tmp_path):
    content, settings = small_site(tmp_path)
    (content / "pages" / "uses.md").write_bytes(b"\xef\xbb\xbf" + page_text("Uses, saved on Windows", "/uses").encode())
    (content / "resume.json").write_bytes(b'\xef\xbb\xbf{"basics": {"name": "Owner"}}')
    ok, summary = jobs.run_job(settings, "content")
    assert ok, summary
    assert rows(settings, "SELECT title FROM pages WHERE path = '/uses'") == [("Uses, saved on Windows",)]


def test_a_folder_that_cannot_be_read_keeps_its_pages():
    """Root reads any folder: run as root (here and in CI), the job runs as nobody, as a service's
    user that cannot read the folder would."""
    as_root = os.geteuid() == 0
    if as_root and not shutil.which("setpriv"):
        pytest.skip("needs setpriv to run the job as a user other than root")
    root = Path(tempfile.mkdtemp(prefix="site-unreadable-"))  # not under pytest's folder, which only root may enter
    try:
        content, settings = small_site(root)
        (content / "writing").chmod(0)
        if as_root:
            nobody = pwd.getpwnam("nobody")
            root.chmod(0o755)
            subprocess.run(["chown", "-R", f"{nobody.pw_uid}:{nobody.pw_gid}", str(root)], check=True)
            done = subprocess.run(
                ["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups", sys.executable,
                 "jobs.py", "run", "content"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                env={**os.environ, "SITE_DB_PATH": str(settings.db_path), "SITE_CONTENT_DIR": str(content)})
            ok, error = done.returncode == 0, done.stdout + done.stderr
        else:
            ok, error = jobs.run_job(settings, "content")
        assert not ok and "writing/ cannot be read" in error, error
        assert set(pages(settings)) == {"/about", "/uses", "/writing/first"}
    finally:
        (root / "content" / "writing").chmod(0o755)
        shutil.rmtree(root, ignore_errors=True)


def test_line_ends_and_line_breaks_in_titles_are_read_as_markdown_and_one_line(tmp_path):
    """Windows (CRLF) and old Mac (CR) line ends are line ends; a title or description written over
    several lines is one line, as the headings and lists it goes into need."""
    content, settings = small_site(tmp_path)
    (content / "pages" / "uses.md").write_bytes(page_text("Uses", "/uses").replace("\n", "\r\n").encode())
    (content / "pages" / "now.md").write_bytes(page_text("Now", "/now").replace("\n", "\r").encode())
    (content / "pages" / "about.md").write_text(
        '---\ntitle: "About\\n# me"\ndescription: >-\n  Who\n\n  ## runs this\nkind: page\npath: /about\n---\n'
        "One.\r\n\r\nTwo.\n")
    ok, summary = jobs.run_job(settings, "content")
    assert ok, summary
    stored = rows(settings, "SELECT path, title, description, body FROM pages WHERE path IN ('/about', '/now', '/uses') "
                            "ORDER BY path")
    assert stored == [("/about", "About # me", "Who ## runs this", "One.\n\nTwo.\n"),
                      ("/now", "Now", "Some words about Now.", "Some words about Now.\n"),
                      ("/uses", "Uses", "Some words about Uses.", "Some words about Uses.\n")]


def test_hidden_files_and_folders_are_not_content(tmp_path):
    """An editor's lock link, the ._ twin a Mac writes on other disks and a notes app's .trash/ are
    neither pages nor failures."""
    content, settings = small_site(tmp_path)
    os.symlink("owner@laptop.4242:1700000000", content / "pages" / ".#about.md")  # how Emacs marks a file it edits
    (content / "pages" / "._uses.md").write_bytes(b"\x00\x05\x16\x07\x00\x02\x00\x00Mac OS X        ")
    (content / ".trash").mkdir()
    (content / ".trash" / "old.md").write_text(page_text("An old draft", "/old-draft"))
    ok, summary = jobs.run_job(settings, "content")
    assert ok and "0 failed" in summary, summary
    assert set(pages(settings)) == {"/about", "/uses", "/writing/first"}


def test_a_body_of_open_html_comments_is_indexed_in_linear_time_and_served(tmp_path):
    """200 KB of '<!--' is one HTML block that never closes, kept as it is in the rendered HTML. Taking
    the tags out of that HTML for the page's plain text scanned from every '<' to the end: 6.7 s of
    the content job for this one page, on every run (each run parses every file). At ten times that
    (2 MB) the scan would take ten minutes; held to conftest.CPU_LIMIT_S, it must finish."""
    child = held_to_cpu("from siteapi.content import plain_text; assert plain_text('<!--' * 500_000)")
    assert child.returncode == 0, child.stderr[-1500:]
    content, settings = small_site(tmp_path)
    comments = "<!--" * 50_000
    (content / "pages" / "comments.md").write_text(page_text("Comments", "/comments").replace("Some words", comments))
    parsed, errors, _ = read_content(content)
    assert errors == []
    assert next(p for p in parsed if p.path == "/comments").text.startswith("<!--<!--")
    ok, summary = jobs.run_job(settings, "content")
    assert ok, summary
    with serve_wsgi(make_app(settings).wsgi) as base:
        page = requests.get(base + "/comments", headers={"Accept": "text/html"}, timeout=30)
        assert page.status_code == 200 and comments in page.text
        twin = requests.get(base + "/comments.md", timeout=30)
        assert twin.status_code == 200 and twin.text.startswith("# Comments\n")


@pytest.mark.parametrize("body, text", [
    ("I rebuilt the [carburetors](/x). The *tank* was `rusty`, **then** fine.",
     "I rebuilt the carburetors. The tank was rusty, then fine."),
    ("One<br>two\n\n- three\n- four\n\n| a | b |\n|---|---|\n| c | d |", "One\ntwo\nthree\nfour\na\nb\nc\nd"),
    ("# Rate limiting\n\nTo keep it\nfair.\n\n\n\nNext <em>one</em>.", "Rate limiting\nTo keep it fair.\nNext one."),
    ("Look at ![logo](x.png) this.<!-- note --> Then<wbr>more.", "Look at this. Then more."),  # no block ends there
    ("<span>zan</span>zibar and H<sub>2</sub>O", "zanzibar and H2O"),
])
def test_inline_tags_join_their_words_and_blocks_part_them(body, text):
    """A link or emphasis before a full stop left "carburetors ." in search snippets and /ask descriptions.
    Blocks part at one line break (a line break of the Markdown source inside a paragraph is a space)."""
    assert plain_text(body) == text


def test_a_description_made_from_the_text_does_not_run_a_heading_into_it(tmp_path):
    (tmp_path / "pages").mkdir()
    file = tmp_path / "pages" / "limits.md"
    file.write_text("---\ntitle: Limits\nkind: page\npath: /limits\n---\n# Rate limiting\n\nTo keep it fair.\n")
    assert parse_file(file, tmp_path).description == "Rate limiting · To keep it fair."


def test_a_new_text_extraction_rereads_every_page(tmp_path):
    _, settings = small_site(tmp_path)
    ok, _ = jobs.run_job(settings, "content")
    conn = db.connect(settings.db_path, readonly=True)
    before = dict(conn.execute("SELECT path, hash FROM pages").fetchall())
    assert ok and before
    with pytest.MonkeyPatch.context() as patch:  # as a deploy whose plain_text() changed bumps it
        patch.setattr(content, "TEXT_EXTRACTION", "text-v0")
        ok, summary = jobs.run_job(settings, "content")
    assert ok and f"{len(before)} added or changed" in summary, summary
    assert all(before[path] != h for path, h in conn.execute("SELECT path, hash FROM pages"))


def test_the_plain_text_of_every_page_is_unchanged_by_the_linear_tag_scan(tmp_path):
    """What the text of every real page, and of HTML the scan cuts short, was with the plain regex."""
    def by_regex(body):
        joined = " ".join(html.unescape(re.sub(r"<[^>]+>", content._tag_gap, markdown.render(body))).split())
        return content._BLOCK_ENDS.sub("\n", joined).strip()

    bodies = [parse_file(file, ROOT / "content").body for file in content_files(ROOT / "content")[0]]
    bodies += ["a <b>c</b> <i", "<!-- open <b>bold</b>", "<>x<y>", "<div title='a>b'>\nx <y\n</div>", "x\n\n<!--\n<"]
    assert len(bodies) > 45
    for body in bodies:
        assert plain_text(body) == by_regex(body), body
    # an HTTP reader sees the same text: search finds a page by words only its plain text holds
    content_dir, settings = small_site(tmp_path)
    (content_dir / "pages" / "tagged.md").write_text(page_text("Tagged", "/tagged").replace(
        "Some words", "<span class='x'>zanzibar</span> <!-- and"))
    ok, summary = jobs.run_job(settings, "content")
    assert ok, summary
    with serve_wsgi(make_app(settings).wsgi) as base:
        found = requests.get(base + "/search.json", params={"q": "zanzibar"}, timeout=30).json()
        assert [r["url"] for r in found["results"]] == ["https://aadhar.sh/tagged"], found
        assert requests.get(base + "/search.json", params={"q": "span class"}, timeout=30).json()["results"] == []


def test_a_page_path_beyond_ascii_is_named_by_a_uri_everywhere(tmp_path):
    """Search, /ask (both rankers) and the sitemap spell such a path alike, percent-encoded: a URI."""
    content = tmp_path / "content"
    (content / "writing").mkdir(parents=True)
    (content / "writing" / "creme.md").write_text(page_text("Crème brûlée zanzibarite notes",
                                                            "/writing/crème-brûlée(notes)", "writing"))
    (content / "writing" / "other.md").write_text(page_text("Other", "/writing/other", "writing"))
    settings = make_settings(tmp_path, content_dir=content)
    assert jobs.run_job(settings, "content")[0]
    url = settings.public_base_url + "/writing/cr%C3%A8me-br%C3%BBl%C3%A9e%28notes%29"
    lexical = dataclasses.replace(settings, sections={**settings.sections,
                                                      "ask": {**settings.section("ask"), "deadline_ms": 0}})
    for served, ranking in ((settings, "model"), (lexical, "lexical")):
        with serve_wsgi(make_app(served).wsgi) as base:
            assert requests.get(base + "/search.json?q=zanzibarite", timeout=30).json()["results"][0]["url"] == url
            asked = requests.get(base + "/ask", params={"query": "zanzibarite quokka", "streaming": "0"},
                                 timeout=30).json()
            assert asked["_meta"]["ranking"].startswith(ranking)
            assert asked["results"][0]["url"] == asked["results"][0]["schema_object"]["url"] == url
            if ranking == "lexical":  # the page read back by its path holds one term of two: 50
                assert asked["results"][0]["score"] == 50
            assert f"<loc>{url}</loc>" in requests.get(base + "/sitemap.xml", timeout=30).text
            assert requests.get(url.replace(settings.public_base_url, base), timeout=30).status_code == 200
