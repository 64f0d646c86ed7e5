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
