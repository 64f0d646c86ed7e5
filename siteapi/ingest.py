"""The photo ingest job: originals folder → thumbnails, public copies of the originals, `photos` rows.

Each JPEG's metadata, recipe card and public copy come from exif.py; `make_thumbnails` writes the
four content-hashed thumbnails with Pillow, carrying no metadata but the colour profile.
`run_photos(settings)` is the job: it ingests new and changed files (by content hash), removes
deleted ones, skips and reports what it cannot read (a file name that is not UTF-8 included),
embeds captions with the /ask model (when it can be loaded) for matching by meaning, and writes
everything in one short transaction; the public copies (`images_dir/full/<file name>`, only while
originals_public is true) are staged and renamed into place before it, so no row is served ahead
of its copy (a commit that fails puts back the copies they replaced and removes the new ones), and
any copy of a photo no longer published is removed (after the commit, and at the start of the next
run, for a run killed in between). Every file is on the disk before its name is
(files.write_synced), so a power loss leaves no name on a short file. A removed photo's thumbnails go
with it; a replaced photo's old ones stay SUPERSEDED_GRACE_S, for the cached replies that still
name them. A folder with no JPEG left while the archive has photos (a drive not mounted) is
refused rather than emptying the archive, unless it holds EMPTY_MARKER.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import logging
import os
import re
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

from PIL import Image, ImageOps
from tqdm import tqdm

from siteapi import db, files, ranker
from siteapi.config import Settings
from siteapi.exif import EXTRACTOR, EXTRACTOR_VERSION, PhotoError, public_original, read_metadata, recipe_text

log = logging.getLogger(__name__)

JPEG_SUFFIXES = (".jpg", ".jpeg")
FULL_DIR = "full"  # under images_dir: the public copies of the originals, served as /images/full/
# A folder with no JPEG empties the archive only when this file says the emptiness is meant.
EMPTY_MARKER = ".empty-archive"
# A replaced photo's old thumbnails stay this long after the replacement: query replies cached by
# the app, browsers and proxies (up to 10 minutes) still name them. A removed photo's go at once.
SUPERSEDED_GRACE_S = 3600
# Faults of the disk the run writes to, not of a photo: they fail the whole run (a full disk was
# reported as every photo it reached failing, in a run recorded as ok).
OUR_DISK_FAULTS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS})
THUMB_SIZES = {"jpg": 1600, "avif": 1600, "small": 400, "xs": 200}
# What make_thumbnails names a file: the only files the job ever deletes from images_dir.
THUMB_NAME = re.compile(r".+\.[0-9a-f]{10}\.(jpg|avif)")
NAMED_AT_MOST = 5  # files named in a summary per kind; a RAW+JPEG folder would list thousands


@dataclass
class IngestReport:
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    folders: list[str] = field(default_factory=list)
    thumbnails: list[str] = field(default_factory=list)  # photos unchanged whose missing thumbnails were made again

    def summary(self) -> str:
        line = (f"added {len(self.added)}, updated {len(self.updated)}, "
                f"removed {len(self.removed)}, failed {len(self.failed)}")
        if self.failed:
            line += " (" + _named([f"{name}: {why}" for name, why in self.failed], "; ") + ")"
        if self.skipped:
            line += f"; skipped {len(self.skipped)} non-JPEG: " + _named(self.skipped)
        if self.folders:
            line += (f"; skipped {len(self.folders)} subfolder{'s' if len(self.folders) > 1 else ''} "
                     f"(only the folder's own files are read): " + _named(self.folders))
        if self.thumbnails:
            line += f"; made the missing thumbnails of {len(self.thumbnails)} again: " + _named(self.thumbnails)
        return line


def _named(items: list[str], sep: str = ", ") -> str:
    shown = sep.join(items[:NAMED_AT_MOST])
    return shown + (f"{sep}and {len(items) - NAMED_AT_MOST} more" if len(items) > NAMED_AT_MOST else "")


# ---------------------------------------------------------------------------------------------
# thumbnails


def _fit(image: Image.Image, edge: int) -> Image.Image:
    if max(image.size) <= edge:
        return image.copy()
    scale = edge / max(image.size)
    size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
    return image.resize(size, Image.Resampling.LANCZOS, reducing_gap=3.0)


def make_thumbnails(data: bytes, stem: str, out_dir: Path) -> dict[str, str]:
    """Write avif + jpg (1600 px), small (400 px) and xs (200 px) for one JPEG; returns kind → file name.

    Names carry a hash of each file's bytes, so a changed photo never reuses a cached URL.
    Only the colour profile is kept: no EXIF, XMP, GPS or serial numbers reach a thumbnail.
    Raises PhotoError when Pillow cannot decode the image (corrupt or truncated).
    """
    try:
        with Image.open(io.BytesIO(data)) as source:
            if source.format not in ("JPEG", "MPO"):  # MPO: a JPEG with a preview index (CIPA DC-007)
                raise PhotoError(f"not a JPEG ({source.format})")
            source.draft("RGB", (THUMB_SIZES["jpg"], THUMB_SIZES["jpg"]))  # DCT-domain downscale
            icc = source.info.get("icc_profile")
            upright = ImageOps.exif_transpose(source).convert("RGB")
    except PhotoError:
        raise
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        raise PhotoError(f"cannot decode the image ({exc})") from None
    large = _fit(upright, THUMB_SIZES["jpg"])
    encoded = {}
    for kind, image in (("jpg", large), ("avif", large),
                        ("small", _fit(large, THUMB_SIZES["small"])), ("xs", _fit(large, THUMB_SIZES["xs"]))):
        image.info = {}
        buffer = io.BytesIO()
        extra = {"icc_profile": icc} if icc else {}
        if kind == "avif":
            image.save(buffer, "AVIF", quality=60, speed=8, **extra)
        else:
            image.save(buffer, "JPEG", quality=82, optimize=True, progressive=kind == "jpg", **extra)
        encoded[kind] = buffer.getvalue()
    names = {}
    out_dir.mkdir(parents=True, exist_ok=True)
    for kind, payload in encoded.items():
        suffix = {"jpg": "", "avif": "", "small": "-400", "xs": "-200"}[kind]
        ext = "avif" if kind == "avif" else "jpg"
        name = f"{stem}{suffix}.{hashlib.sha256(payload).hexdigest()[:10]}.{ext}"
        target = out_dir / name
        if not target.exists():
            temp = target.with_name(f".{name}.tmp")
            files.write_synced(temp, payload)
            try:
                files.replace_synced(temp, target)
            except BaseException:
                temp.unlink(missing_ok=True)
                raise
        names[kind] = name
    return names


# ---------------------------------------------------------------------------------------------
# public copies of the originals: staged beside their final names


def _stage_copy(full_dir: Path, name: str, payload: bytes) -> Path:
    """Write a public copy to a temporary file beside its final name; _publish_copies renames it into
    place just before the transaction (keeping the copy it replaces aside until the commit)."""
    full_dir.mkdir(parents=True, exist_ok=True)
    temp = full_dir / f".{name}.tmp"
    files.write_synced(temp, payload)
    return temp


def _copy_is_current(original: Path, copy: Path) -> bool:
    """The copy was written after the original was last put in place (its ctime, which no restore
    keeping old times can set back): a copy put back by a run whose commit failed, or left by a run
    stopped before it staged the new one, is older, and is written again. The copy keeps its own
    write time, which /images/full/ gives as Last-Modified: it never goes back when an older file
    replaces an original."""
    try:
        return copy.stat().st_mtime_ns >= original.stat().st_ctime_ns
    except FileNotFoundError:
        return False


# ---------------------------------------------------------------------------------------------
# the job

PHOTO_COLUMNS = (
    "stem", "file_name", "sha256", "stat_key", "size", "alt", "camera", "lens", "film", "date", "taken",
    "year", "recipe", "recipe_text", "metadata", "thumb_avif", "thumb_jpg", "thumb_small", "thumb_xs",
    "expansion", "extractor", "extractor_version", "uploaded", "updated",
)

MONTHS = ("january february march april may june july august september october november december").split()


def expansion_words(meta: dict) -> str:
    """Words a photographer searches by that the file implies but no field spells out."""
    words = []
    film = (meta.get("film") or "").lower()
    if film.startswith(("acros", "monochrome", "sepia")):
        words += ["black", "white", "monochrome", "bw"]
    elif film:
        words += ["color", "colour"]
    width, height = meta.get("width"), meta.get("height")
    if width and height:
        words.append("portrait" if height > width else "square" if height == width else "landscape")
    date = meta.get("date") or ""
    if len(date) >= 13:
        month, hour = int(date[5:7]), int(date[11:13])
        if 1 <= month <= 12:
            words.append(MONTHS[month - 1])
            words.append(("winter", "spring", "summer", "autumn")[month % 12 // 3])
        words.append("night" if hour < 5 or hour >= 21 else "morning" if hour < 12
                     else "afternoon" if hour < 17 else "evening")
    if (meta.get("flash") or "").lower().startswith(("fired", "yes")):
        words.append("flash")
    return " ".join(words)


def _stat_key(path: Path, sidecar: Path) -> str:
    stat = path.stat()
    key = f"{stat.st_size}:{stat.st_mtime_ns}"
    if sidecar.exists():
        side = sidecar.stat()
        key += f"+{side.st_size}:{side.st_mtime_ns}"
    return key


def build_row(path: Path, data: bytes, sidecar_text: str | None, content_hash: str, stat_key: str,
              images_dir: Path, uploaded: str, now: str) -> dict:
    """One `photos` row for a JPEG (metadata, caption, thumbnails written); raises PhotoError."""
    if not data:
        raise PhotoError("empty file (0 bytes)")
    if not data.startswith(b"\xff\xd8\xff"):
        raise PhotoError("not a JPEG (wrong file signature)")
    extracted = read_metadata(data, sidecar_text)
    thumbs = make_thumbnails(data, path.stem, images_dir)
    meta = extracted.metadata
    date = meta.get("date")
    recipe = meta.get("recipe")
    return {
        "stem": path.stem, "file_name": path.name, "sha256": content_hash, "stat_key": stat_key,
        "size": len(data), "alt": extracted.alt, "camera": meta.get("camera"), "lens": meta.get("lens"),
        "film": meta.get("film"), "date": date[:10].replace(":", "-") if date else None, "taken": date,
        "year": int(date[:4]) if date else None,
        "recipe": json.dumps(recipe, ensure_ascii=False) if recipe else None,
        "recipe_text": recipe_text(recipe) or None,
        "metadata": json.dumps(meta, ensure_ascii=False),
        "thumb_avif": thumbs["avif"], "thumb_jpg": thumbs["jpg"], "thumb_small": thumbs["small"],
        "thumb_xs": thumbs["xs"], "expansion": expansion_words(meta), "extractor": EXTRACTOR,
        "extractor_version": EXTRACTOR_VERSION, "uploaded": uploaded, "updated": now,
    }


def caption_vectors(settings, conn, rows: list[dict], kept: list) -> list[tuple[str, bytes]]:
    """(sha256, float32 vector bytes) for the captions of the photos written this run and of kept
    photos that have no vector from the current model yet; [] when the model cannot be loaded."""
    stored = {r[0] for r in conn.execute("SELECT sha256 FROM photo_vectors WHERE model = ?", (ranker.MODEL_NAME,))}
    wanted = {row["sha256"]: row["alt"] for row in rows if row["alt"]}
    for row in kept:
        if row["alt"] and row["sha256"] not in stored:
            wanted.setdefault(row["sha256"], row["alt"])
    model = ranker.model_for(settings) if wanted else None
    if model is None:
        return []
    # One caption per model run: on one thread batching is no faster and pads every caption.
    return [(sha, model.embed([alt])[0].tobytes())
            for sha, alt in tqdm(wanted.items(), desc="captions", unit="caption", disable=None)]


def _thumb_names(row) -> set[str]:
    return {row[k] for k in ("thumb_avif", "thumb_jpg", "thumb_small", "thumb_xs") if row[k]}


def _shown_name(path: Path) -> str:
    """The file name as text that can be logged and stored: bytes that are not UTF-8 as \\xNN."""
    return os.fsencode(path.name).decode("utf-8", "backslashreplace")


def run_photos(settings: Settings) -> str:
    """Ingest `settings.photos_dir` into the `photos` table and `settings.images_dir`; returns the summary.

    Raises RuntimeError when the originals folder is missing, or holds no JPEG while the archive
    has photos (rather than emptying the archive).
    """
    folder = Path(settings.photos_dir)
    if not folder.is_dir():
        raise RuntimeError(f"The photos folder {folder} does not exist; set photos_dir in site.toml "
                           f"(or run `python -m siteapi.demo_photos {folder}` for the demo set).")
    full_dir = Path(settings.images_dir) / FULL_DIR
    started = time.time()
    conn = db.writer(settings.db_path)
    try:
        existing = {row["stem"]: row for row in conn.execute("SELECT * FROM photos")}
        published_before = {old["file_name"] for old in existing.values()} if settings.originals_public else set()
        _delete_unpublished(full_dir, published_before)  # what a run killed after its commit left public
        entries, jpeg_stems, folders = _list_originals(folder, existing)
        run = _Run(settings, existing, started, db.now_iso(), IngestReport(folders=folders))
        try:
            _ingest_files(run, entries, jpeg_stems)
            gone = run.report.removed = [stem for stem in existing if stem not in run.seen]
            referenced = _publish_and_commit(conn, run, gone)
        except BaseException:
            _undo_files(run, published_before)
            raise
        _clean_after_commit(conn, run, gone, referenced)
        return run.report.summary()
    finally:
        conn.close()


@dataclass
class _Run:
    """One run's state, handed from stage to stage: what the files say to write, and the files
    written ahead of the commit, which a run that fails takes back."""
    settings: Settings
    existing: dict[str, sqlite3.Row]  # stem → the photo's row before this run
    started: float  # time.time() at the start: older temporary files are a killed run's
    now: str
    report: IngestReport
    seen: set[str] = field(default_factory=set)  # the stems of the JPEGs read
    rows: list[dict] = field(default_factory=list)  # new and changed photos
    touched: list[tuple[str, str]] = field(default_factory=list)  # (stat_key, stem) of photos whose row stays
    written: set[str] = field(default_factory=set)  # the thumbnails made for new and changed photos
    # public copy name → its staged file, renamed into place before the commit
    copies: dict[str, Path] = field(default_factory=dict)
    # public copy name → the copy it replaced, put back if the commit fails
    kept_aside: dict[str, Path] = field(default_factory=dict)

    @property
    def images_dir(self) -> Path:
        return Path(self.settings.images_dir)

    @property
    def full_dir(self) -> Path:
        return self.images_dir / FULL_DIR


def _list_originals(folder: Path, existing: dict) -> tuple[list[Path], set[str], list[str]]:
    """The folder's files in the order they are ingested, the stems of its JPEGs, and its subfolders
    (as shown names: they are not read). Raises RuntimeError when it holds no JPEG while the archive
    has photos, unless it holds EMPTY_MARKER."""
    listed = [p for p in folder.iterdir() if not p.name.startswith(".")]
    # Of two files with one stem (dup.jpg, dup.JPG), the one published keeps its place.
    entries = sorted((p for p in listed if p.is_file()),
                     key=lambda p: (p.stem, p.name != existing.get(p.stem, {"file_name": p.name})["file_name"], p.name))
    jpeg_stems = {p.stem for p in entries if p.suffix.lower() in JPEG_SUFFIXES}
    if existing and not jpeg_stems and not (folder / EMPTY_MARKER).exists():
        raise RuntimeError(f"The photos folder {folder} holds no .jpg or .jpeg file while the archive has "
                           f"{len(existing)} photos, so nothing was changed: is the drive that holds the "
                           f"originals mounted? To empty the archive on purpose, create a file named "
                           f"{EMPTY_MARKER} in that folder and run the job again.")
    return entries, jpeg_stems, sorted(_shown_name(p) + "/" for p in listed if p.is_dir())


def _ingest_files(run: _Run, entries: list[Path], jpeg_stems: set[str]) -> None:
    """Ingest the folder's JPEGs one by one into `run`; the other files are reported as skipped (a
    JPEG's .txt sidecar aside), a name that is not UTF-8 or is a second file's stem as failed."""
    report = run.report
    for path in tqdm(entries, desc="photos", unit="file", disable=None):
        shown = _shown_name(path)
        if path.suffix.lower() not in JPEG_SUFFIXES:
            if not (path.suffix.lower() == ".txt" and path.stem in jpeg_stems):
                report.skipped.append(shown)
        elif shown != path.name:
            log.warning("failed %s: the file name is not valid UTF-8", shown)
            report.failed.append((shown, "the file name is not valid UTF-8 (rename the file)"))
        elif path.stem in run.seen:
            report.failed.append((path.name, f"another file already has the name {path.stem}"))
        else:
            run.seen.add(path.stem)
            _ingest_or_report(run, path)
    if report.skipped or report.folders:
        log.warning("skipped (only the folder's own .jpg and .jpeg files are ingested): %s",
                    _named(report.skipped + report.folders))


def _ingest_or_report(run: _Run, path: Path) -> None:
    """Ingest one JPEG into `run`; a file that cannot be read fails alone, named in the report."""
    old = run.existing.get(path.stem)
    try:
        row = _ingest_one(run, path, old)
    except PhotoError as exc:
        log.warning("failed %s: %s", path.name, exc)
        run.report.failed.append((path.name, str(exc)))
        return
    except OSError as exc:
        if exc.errno in OUR_DISK_FAULTS:  # no fault of this photo: the run fails, the archive stays
            raise
        log.warning("failed %s: %s", path.name, exc.strerror or exc)
        run.report.failed.append((path.name, f"cannot read ({exc.strerror or exc})"))
        return
    except Exception as exc:  # a file no rule foresaw fails alone, never the archive
        log.warning("failed %s: %s: %s", path.name, type(exc).__name__, exc, exc_info=True)
        run.report.failed.append((path.name, f"cannot be read ({type(exc).__name__}: {exc})"))
        return
    if row:
        run.rows.append(row)
        (run.report.updated if old else run.report.added).append(path.stem)


def _ingest_one(run: _Run, path: Path, old: sqlite3.Row | None) -> dict | None:
    """The row of a JPEG new or changed (its thumbnails written), or None when its row stays; its
    public copy is staged when it has none written since the file was. Raises what reading raises."""
    sidecar = path.with_suffix(".txt")
    stat_key = _stat_key(path, sidecar)
    # a thumbnail lost since (images_dir emptied, moved, not in a backup) is made again
    current = (old is not None and old["extractor_version"] == EXTRACTOR_VERSION
               and all((run.images_dir / name).is_file() for name in _thumb_names(old)))
    row, data = None, None
    if not (current and old["stat_key"] == stat_key and old["file_name"] == path.name):
        data = path.read_bytes()
        row = _changed_row(run, path, data, old, current, stat_key)
    if run.settings.originals_public and (row or not _copy_is_current(path, run.full_dir / path.name)):
        copy = public_original(data if data is not None else path.read_bytes())
        run.copies[path.name] = _stage_copy(run.full_dir, path.name, copy)
    return row


def _changed_row(run: _Run, path: Path, data: bytes, old: sqlite3.Row | None, current: bool,
                 stat_key: str) -> dict | None:
    """The row of a JPEG read again (its file or sidecar touched, or its stored row not `current`),
    or None when its content is as stored: its new stat_key is then noted in run.touched, and its
    thumbnails made again if they were missing."""
    sidecar = path.with_suffix(".txt")
    sidecar_bytes = sidecar.read_bytes() if sidecar.exists() else b""
    digest = hashlib.sha256(data)
    if sidecar_bytes:
        digest.update(b"\0sidecar\0" + sidecar_bytes)
    content_hash = digest.hexdigest()
    if current and old["sha256"] == content_hash and old["file_name"] == path.name:
        run.touched.append((stat_key, path.stem))
        return None
    sidecar_text = sidecar_bytes.decode("utf-8-sig", "replace") if sidecar_bytes else None
    row = build_row(path, data, sidecar_text, content_hash, stat_key, run.images_dir,
                    old["uploaded"] if old else run.now, run.now)
    if old is not None and all(row[c] == old[c] for c in PHOTO_COLUMNS if c not in ("updated", "stat_key")):
        run.report.thumbnails.append(path.stem)  # its row and public copy stay as they are
        run.touched.append((stat_key, path.stem))  # (an original restored with a new mtime)
        return None
    run.written |= _thumb_names(row)
    return row


def _publish_and_commit(conn, run: _Run, gone: list[str]) -> set[str]:
    """Embed the captions, put the staged public copies in place, and write the archive in one
    transaction; returns the thumbnails the archive names after it."""
    written_stems = {row["stem"] for row in run.rows}
    kept = [old for stem, old in run.existing.items() if stem in run.seen and stem not in written_stems]
    vectors = caption_vectors(run.settings, conn, run.rows, kept)
    referenced = _all_referenced(run.rows + kept)
    superseded = _all_referenced(run.existing[stem] for stem in written_stems if stem in run.existing) - referenced
    # Before the commit, so that no row is served before its public copy, and a run killed
    # after the commit leaves the replaced thumbnails dated for the sweep's grace.
    for name in superseded:
        with contextlib.suppress(FileNotFoundError):
            os.utime(run.images_dir / name)
    _publish_copies(run.full_dir, run.copies, run.kept_aside)
    _write_archive(conn, run.rows, run.touched, gone, vectors)
    return referenced


def _publish_copies(full_dir: Path, copies: dict[str, Path], kept_aside: dict[str, Path]) -> None:
    """Rename each staged copy into place, first keeping the copy it replaces aside (noted in
    `kept_aside` as it goes) to be put back if the commit fails."""
    for name, temp in copies.items():
        if (full_dir / name).exists():
            aside = full_dir / f".{name}.prev.tmp"
            aside.unlink(missing_ok=True)
            os.link(full_dir / name, aside)
            kept_aside[name] = aside
        files.replace_synced(temp, full_dir / name)


def _write_archive(conn, rows: list[dict], touched: list[tuple[str, str]], gone: list[str],
                   vectors: list[tuple[str, bytes]]) -> None:
    """The run's one transaction: rows written, stat_keys updated, photos gone deleted, caption
    vectors stored; the photos' generation changes when any of it changed something."""
    placeholders = ", ".join("?" for _ in PHOTO_COLUMNS)
    with db.transaction(conn):
        conn.executemany(
            f"INSERT OR REPLACE INTO photos ({', '.join(PHOTO_COLUMNS)}) VALUES ({placeholders})",
            [tuple(row[c] for c in PHOTO_COLUMNS) for row in rows])
        conn.executemany("UPDATE photos SET stat_key = ? WHERE stem = ?", touched)
        conn.executemany("DELETE FROM photos WHERE stem = ?", [(stem,) for stem in gone])
        # A rewritten photo's old vector may describe an old caption; without a model it stays unset.
        changes = conn.total_changes
        conn.executemany("DELETE FROM photo_vectors WHERE sha256 = ?", [(row["sha256"],) for row in rows])
        conn.executemany("INSERT OR REPLACE INTO photo_vectors (sha256, model, vector) VALUES (?, ?, ?)",
                         [(sha, ranker.MODEL_NAME, blob) for sha, blob in vectors])
        conn.execute("DELETE FROM photo_vectors WHERE sha256 NOT IN "
                     "(SELECT sha256 FROM photos WHERE alt IS NOT NULL)")
        if rows or gone or conn.total_changes != changes:
            conn.execute("INSERT INTO photos_state (id, generation) VALUES (1, random()) "
                         "ON CONFLICT (id) DO UPDATE SET generation = excluded.generation")


def _undo_files(run: _Run, published_before: set[str]) -> None:
    """What a run that fails before its commit wrote goes, and the copies it replaced come back."""
    _delete_files(run.images_dir, run.written - _all_referenced(run.existing.values()))
    _delete_files(run.full_dir, {temp.name for temp in run.copies.values()})
    for name, aside in run.kept_aside.items():
        files.replace_synced(aside, run.full_dir / name)
    _delete_unpublished(run.full_dir, published_before)


def _clean_after_commit(conn, run: _Run, gone: list[str], referenced: set[str]) -> None:
    """Delete what the commit left unused: thumbnails no photo names, copies no longer published,
    the copies kept aside, and the temporary files of a run killed earlier."""
    # Thumbnails of removed photos, and those written for a file that then failed, go now;
    # those of replaced photos were marked with the time of their replacement and are swept later.
    _delete_files(run.images_dir, (run.written | _all_referenced(run.existing[stem] for stem in gone)) - referenced)
    if run.images_dir.is_dir():
        _sweep_superseded(run.images_dir, referenced)
    _delete_unpublished(run.full_dir, {r[0] for r in conn.execute("SELECT file_name FROM photos")}
                        if run.settings.originals_public else set())
    _delete_files(run.full_dir, {aside.name for aside in run.kept_aside.values()})
    for place in (run.images_dir, run.full_dir):
        _delete_stale_temps(place, run.started)


def _all_referenced(rows) -> set[str]:
    names = set()
    for row in rows:
        names |= _thumb_names(row)
    return names


def _delete_unpublished(full_dir: Path, published: set[str]) -> None:
    """Delete the public copies in `full_dir` whose photo is not among `published` (file names)."""
    if full_dir.is_dir():
        _delete_files(full_dir, {p.name for p in full_dir.iterdir() if p.is_file() and not p.name.startswith(".")}
                      - published)


def _sweep_superseded(images_dir: Path, referenced: set[str]) -> None:
    """Delete the thumbnails no photo names whose replacement is SUPERSEDED_GRACE_S old (only
    files named as thumbnails: anything else in the folder is the owner's)."""
    cutoff = time.time() - SUPERSEDED_GRACE_S
    _delete_files(images_dir, {entry.name for entry in os.scandir(images_dir)
                               if entry.is_file() and THUMB_NAME.fullmatch(entry.name)
                               and entry.name not in referenced and entry.stat().st_mtime < cutoff})


def _delete_stale_temps(folder: Path, before: float) -> None:
    """Delete the temporary files a run killed while writing left (one run at a time, under jobs.py's
    lock: this run's own are renamed or gone by now). By ctime: a staged copy carries an old mtime."""
    if folder.is_dir():
        _delete_files(folder, {entry.name for entry in os.scandir(folder) if entry.is_file()
                               and entry.name.startswith(".") and entry.name.endswith(".tmp")
                               and entry.stat().st_ctime < before})


def _delete_files(folder: Path, names: set[str]) -> None:
    for name in names:
        try:
            (folder / name).unlink()
        except FileNotFoundError:
            pass
