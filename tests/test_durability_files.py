"""Files the jobs put in place reach the disk before their names do.

A power loss cannot be staged here; what it needs can be seen: every rename into place (a
thumbnail, a public copy, a new site.db) comes after the file's own fsync and before its folder's,
the renamed file is whole, and a write the kernel cuts short leaves no file behind. The calls are
recorded by wrapping `os.fsync` and `os.replace` of the standard library, as test_durability.py's
hook does.
"""
from __future__ import annotations

import errno
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from conftest import ROOT, make_settings
from siteapi import db, demo_photos, files, ingest, stack


def record_syncs_and_renames(monkeypatch) -> list[tuple]:
    """("fsync", path) and ("replace", source, target), in the order they happen."""
    calls = []
    fsync, replace = os.fsync, os.replace

    def traced_fsync(fd):
        fsync(fd)
        calls.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))

    def traced_replace(source, target, *args, **kwargs):
        replace(source, target, *args, **kwargs)
        calls.append(("replace", str(source), str(target)))
    monkeypatch.setattr(os, "fsync", traced_fsync)
    monkeypatch.setattr(os, "replace", traced_replace)
    return calls


def test_every_file_the_photo_job_puts_in_place_is_synced_before_its_name(tmp_path, monkeypatch):
    settings = make_settings(tmp_path)
    demo_photos.generate(settings.photos_dir, count=3)
    calls = record_syncs_and_renames(monkeypatch)
    assert ingest.run_photos(settings) == "added 3, updated 0, removed 0, failed 0"
    renames = [(i, source, target) for i, (kind, *names) in enumerate(calls) if kind == "replace"
               for source, target in [names]]
    placed = {Path(target) for _, _, target in renames}
    images = settings.images_dir
    assert placed == {settings.db_path, *(p for p in images.iterdir() if p.is_file()),
                      *(images / ingest.FULL_DIR).iterdir()}
    assert len(placed) == 1 + 3 * 4 + 3
    for i, source, target in renames:
        if Path(target) != settings.db_path:  # site.db's new file is synced by SQLite as it closes it
            assert ("fsync", source) in calls[:i], f"{target} renamed before its bytes were synced"
        assert ("fsync", str(Path(target).parent)) in calls[i + 1:], f"{target}: its folder was not synced"
    assert not [p for p in images.rglob(".*.tmp")]


def test_a_synced_file_replaces_the_old_one_whole(tmp_path):
    target, temp = tmp_path / "photo.jpg", tmp_path / ".photo.jpg.tmp"
    target.write_bytes(b"old")
    payload = os.urandom(300_000)
    with target.open("rb") as reading:
        files.write_synced(temp, payload)
        files.replace_synced(temp, target)
        assert reading.read() == b"old"  # a reader that had the old file keeps it whole
    assert target.read_bytes() == payload
    assert [p.name for p in tmp_path.iterdir()] == ["photo.jpg"]


def test_a_write_the_kernel_cuts_short_leaves_no_file(tmp_path):
    """The file size limit (RLIMIT_FSIZE) stops the write partway with EFBIG, as a full disk does
    with ENOSPC (that one is in test_durability.py, on a real full tmpfs, as root)."""
    script = f"""
import resource, signal, sys
from pathlib import Path
sys.path.insert(0, {str(ROOT)!r})
from siteapi import files
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
try:
    files.write_synced(Path(sys.argv[1]), b"x" * 100_000)
except OSError as exc:
    print(exc.errno)
"""
    result = subprocess.run([sys.executable, "-c", script, str(tmp_path / ".thumb.jpg.tmp")],
                            capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == str(errno.EFBIG), result.stdout + result.stderr
    assert list(tmp_path.iterdir()) == []


def test_demo_photos_generated_by_a_first_run_stopped_midway_are_each_whole_and_the_next_start_completes_them(
        tmp_path, monkeypatch):
    """`make run` killed while it generates the demo photos: the photos there are whole (no half
    file for the ingest to refuse), the ingest reads every one of them, and the next `make run`
    generates the rest of the set."""
    settings = make_settings(tmp_path)
    paused = tmp_path / "paused"
    code = f"""
import os, sys, time
sys.path.insert(0, {str(ROOT)!r})
replace = os.replace
def stopping(src, dst, *args, **kwargs):
    if str(dst).endswith("DSCF0104.jpg"):  # the fourth photo is written, not yet under its name
        open({str(paused)!r}, "w").close()
        time.sleep(600)
    return replace(src, dst, *args, **kwargs)
os.replace = stopping
from siteapi import demo_photos
demo_photos.generate({str(settings.photos_dir)!r})
"""
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 120  # only a child that never reaches its pause waits this long
        while not paused.exists():
            assert child.poll() is None and time.monotonic() < deadline, "the generation ended before its fourth photo"
            time.sleep(0.02)
        child.kill()
        child.wait()
    finally:
        if child.poll() is None:
            child.kill()
    photos = sorted(p.name for p in settings.photos_dir.glob("*.jpg"))
    assert photos == ["DSCF0101.jpg", "DSCF0102.jpg", "DSCF0103.jpg"]
    assert ingest.run_photos(settings).startswith("added 3, updated 0, removed 0, failed 0;")

    assert demo_photos.unfinished(settings.photos_dir) == demo_photos.DEFAULT_COUNT
    site_environment(monkeypatch, settings)
    stack.first_run(settings)
    assert len(list(settings.photos_dir.glob("*.jpg"))) == demo_photos.DEFAULT_COUNT
    assert demo_photos.unfinished(settings.photos_dir) is None
    assert not (settings.photos_dir / demo_photos.UNFINISHED).exists()
    with sqlite3.connect(settings.db_path) as conn:
        assert conn.execute("SELECT count(*) FROM photos").fetchone()[0] == demo_photos.DEFAULT_COUNT


def site_environment(monkeypatch, settings) -> None:
    """The settings' paths in the environment, for the jobs `first_run` starts."""
    for name, value in (("DB_PATH", settings.db_path), ("PHOTOS_DIR", settings.photos_dir),
                        ("IMAGES_DIR", settings.images_dir), ("ACCESS_LOG", settings.access_log)):
        monkeypatch.setenv(f"SITE_{name}", str(value))


def test_only_a_demo_set_whose_generation_was_stopped_is_completed(tmp_path):
    """The owner's own photos (a Fujifilm names its files DSCF0101.jpg too) and a demo set the owner
    trimmed are never added to; a generation stopped before its first photo is completed."""
    owners = tmp_path / "owners"
    demo_photos.generate(tmp_path / "scratch", count=2)
    owners.mkdir()
    for name in ("DSCF0101.jpg", "DSCF0105.jpg"):
        (owners / name).write_bytes((tmp_path / "scratch" / "DSCF0101.jpg").read_bytes())
    assert demo_photos.unfinished(owners) is None
    trimmed = tmp_path / "trimmed"
    demo_photos.generate(trimmed, count=6)
    for photo in sorted(trimmed.glob("*.jpg"))[3:]:
        photo.unlink()
    assert demo_photos.unfinished(trimmed) is None
    stopped = tmp_path / "stopped"  # the mark written, the first photo not yet under its name
    stopped.mkdir()
    (stopped / demo_photos.UNFINISHED).write_text("6")
    (stopped / ".DSCF0101.jpg.tmp").write_bytes(b"half a photo")
    assert demo_photos.unfinished(stopped) == 6
    demo_photos.generate(stopped, demo_photos.unfinished(stopped))
    assert len(list(stopped.glob("*.jpg"))) == 6 and demo_photos.unfinished(stopped) is None


def test_an_empty_photo_folder_beside_an_archive_with_photos_gets_no_demo_set(tmp_path, monkeypatch, capsys):
    """The owner's originals drive not mounted under make run: the archive keeps its photos."""
    settings = make_settings(tmp_path)
    demo_photos.generate(settings.photos_dir, count=2)
    assert ingest.run_photos(settings).startswith("added 2,")
    with db.transaction(conn := db.writer(settings.db_path)):
        conn.execute("INSERT INTO pages(path, title, description, kind, body, text, hash, source, tags) "
                     "VALUES ('/', 'Home', '', 'page', '', '', 'h', 'index.md', '[]')")
    conn.close()
    for photo in settings.photos_dir.iterdir():
        photo.unlink()
    site_environment(monkeypatch, settings)
    stack.first_run(settings)
    assert list(settings.photos_dir.iterdir()) == []
    assert "is empty while the archive has photos" in capsys.readouterr().out
    with sqlite3.connect(settings.db_path) as check:
        assert check.execute("SELECT count(*) FROM photos").fetchone()[0] == 2
