"""The content job: incremental indexing, deletions, broken front matter, job_runs."""
import shutil
import subprocess
import sys

from conftest import ROOT, make_settings

import jobs
from siteapi import db


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
