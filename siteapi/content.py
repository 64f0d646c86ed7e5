"""content/ -> the `pages` table: front-matter parsing, plain text, and the incremental `content` job.

A content file is Markdown with YAML front matter (title, description, date, kind, path, tags).
The job reads every file, parses outside any transaction, then applies added, changed and
deleted pages in one short write transaction. A file that does not parse is reported by file and
line; its last good row stays, and every other page is still indexed.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import html
import json
import re
from dataclasses import dataclass
from pathlib import Path

import yaml
from markdown_it import MarkdownIt

from siteapi import db, ranker

KINDS = ("page", "writing", "document", "utility")

SCHEMA = """
CREATE TABLE IF NOT EXISTS pages (
    path TEXT PRIMARY KEY,
    title TEXT NOT NULL,
    description TEXT NOT NULL,
    kind TEXT NOT NULL,
    date TEXT,
    body TEXT NOT NULL,
    text TEXT NOT NULL,
    hash TEXT NOT NULL,
    source TEXT NOT NULL,
    tags TEXT NOT NULL DEFAULT '[]'
);
CREATE VIRTUAL TABLE IF NOT EXISTS pages_fts USING fts5(
    title, description, text, content='pages', content_rowid='rowid', tokenize='porter unicode61'
);
CREATE TRIGGER IF NOT EXISTS pages_ai AFTER INSERT ON pages BEGIN
    INSERT INTO pages_fts(rowid, title, description, text) VALUES (new.rowid, new.title, new.description, new.text);
END;
CREATE TRIGGER IF NOT EXISTS pages_ad AFTER DELETE ON pages BEGIN
    INSERT INTO pages_fts(pages_fts, rowid, title, description, text) VALUES ('delete', old.rowid, old.title, old.description, old.text);
END;
CREATE TRIGGER IF NOT EXISTS pages_au AFTER UPDATE ON pages BEGIN
    INSERT INTO pages_fts(pages_fts, rowid, title, description, text) VALUES ('delete', old.rowid, old.title, old.description, old.text);
    INSERT INTO pages_fts(rowid, title, description, text) VALUES (new.rowid, new.title, new.description, new.text);
END;
CREATE TABLE IF NOT EXISTS site_files (
    name TEXT PRIMARY KEY,
    body TEXT NOT NULL,
    hash TEXT NOT NULL
);
"""

markdown = MarkdownIt("commonmark", {"typographer": False}).enable("table")
_TAGS = re.compile(r"<[^>]+>")
_SPACE = re.compile(r"\s+")


class ContentError(ValueError):
    """A content file that cannot be indexed; the message names the file and line."""


@dataclass
class Page:
    path: str
    title: str
    description: str
    kind: str
    date: str | None
    body: str
    text: str
    hash: str
    source: str
    tags: str
    path_line: int = 1  # where `path:` sits in the source, for error messages; not stored

    def row(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "path_line"}


def plain_text(markdown_body: str) -> str:
    return _SPACE.sub(" ", html.unescape(_TAGS.sub(" ", markdown.render(markdown_body)))).strip()


def parse_file(file: Path, root: Path) -> Page:
    rel = file.relative_to(root).as_posix()
    raw = file.read_bytes()
    try:
        source = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise ContentError(f"{rel} line {line}: not UTF-8 text (byte {exc.start}).") from None
    if not source.startswith("---"):
        raise ContentError(f"{rel} line 1: front matter must start with a '---' line.")
    end = re.search(r"^---\s*$", source[3:], re.M)
    if end is None:
        raise ContentError(f"{rel} line 1: front matter is not closed by a '---' line.")
    front, body = source[3:3 + end.start()], source[3 + end.end():].lstrip("\n")
    try:
        meta = yaml.safe_load(front) or {}
    except yaml.MarkedYAMLError as exc:
        line = (exc.problem_mark.line + 2) if exc.problem_mark else 1
        raise ContentError(f"{rel} line {line}: front matter is not valid YAML ({exc.problem}).") from None
    if not isinstance(meta, dict):
        raise ContentError(f"{rel} line 2: front matter must be a mapping of keys to values.")
    for key in ("title", "path", "kind"):
        if not isinstance(meta.get(key), str) or not meta[key].strip():
            raise ContentError(f"{rel} line {key_line(front, key)}: front matter needs a text '{key}'.")
    if meta["kind"] not in KINDS:
        raise ContentError(f"{rel} line {key_line(front, 'kind')}: kind must be one of {', '.join(KINDS)}, "
                           f"not {meta['kind']!r}.")
    path = meta["path"].strip()
    if not path.startswith("/") or path.endswith(".md") or (path != "/" and path.endswith("/")):
        raise ContentError(f"{rel} line {key_line(front, 'path')}: path must start with '/' and not end with '/' "
                           f"or '.md', not {path!r}.")
    date = meta.get("date")
    if isinstance(date, (dt.date, dt.datetime)):
        date = date.isoformat()[:10]
    text = plain_text(body)
    return Page(
        path=path,
        title=meta["title"].strip()[:140],
        description=str(meta.get("description") or text[:240]).strip()[:240],
        kind=meta["kind"],
        date=str(date) if date else None,
        body=body,
        text=text,
        hash=hashlib.sha256(raw).hexdigest(),
        source=rel,
        tags=json.dumps([str(t) for t in meta.get("tags") or []]),
        path_line=key_line(front, "path"),
    )


def key_line(front: str, key: str) -> int:
    """The file line of `key` in the front matter (which starts on line 1, after the '---'), or 1."""
    for number, line in enumerate(front.split("\n"), 1):
        if re.match(rf"{key}\s*:", line):
            return number
    return 1


def read_content(root: Path) -> tuple[list[Page], list[str], list[str]]:
    """Every parseable page, the error sentences of the rest, and the sources that failed."""
    pages, errors, failed = [], [], []
    seen: dict[str, str] = {}
    for file in sorted(root.rglob("*.md")):
        try:
            page = parse_file(file, root)
            if page.path in seen:
                raise ContentError(f"{page.source} line {page.path_line}: path {page.path} is already used by "
                                   f"{seen[page.path]}.")
        except ContentError as exc:
            errors.append(str(exc))
            failed.append(file.relative_to(root).as_posix())
            continue
        seen[page.path] = page.source
        pages.append(page)
    return pages, errors, failed


def read_resume(root: Path) -> str | None:
    file = root / "resume.json"
    if not file.exists():
        return None
    text = file.read_text(encoding="utf-8")
    try:
        resume = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ContentError(f"resume.json line {exc.lineno}: not valid JSON ({exc.msg}).") from None
    if not isinstance(resume, dict):
        raise ContentError("resume.json must be one JSON object (a JSON Resume), not a "
                           f"{type(resume).__name__}.")
    return text


def run_content(settings) -> str:
    """Index content/ into `pages` incrementally; raise after applying the good files if any failed."""
    pages, errors, failed = read_content(settings.content_dir)
    try:
        resume = read_resume(settings.content_dir)
    except ContentError as exc:
        errors.append(str(exc))
        resume = None
    conn = db.writer(settings.db_path)
    try:
        stored = {r["path"]: (r["hash"], r["source"]) for r in conn.execute("SELECT path, hash, source FROM pages")}
        wanted = {p.path: p for p in pages}
        changed = [p for p in pages if stored.get(p.path, (None,))[0] != p.hash]
        # A file that failed keeps its last good row; only pages whose file is gone are deleted.
        gone = [path for path, (_, source) in stored.items()
                if path not in wanted and source not in failed]
        with db.transaction(conn):
            for page in changed:
                conn.execute(
                    "INSERT INTO pages(path, title, description, kind, date, body, text, hash, source, tags)"
                    " VALUES (:path, :title, :description, :kind, :date, :body, :text, :hash, :source, :tags)"
                    " ON CONFLICT(path) DO UPDATE SET title=excluded.title, description=excluded.description,"
                    " kind=excluded.kind, date=excluded.date, body=excluded.body, text=excluded.text,"
                    " hash=excluded.hash, source=excluded.source, tags=excluded.tags",
                    page.row(),
                )
            conn.executemany("DELETE FROM pages WHERE path = ?", [(p,) for p in gone])
            if resume is not None:
                conn.execute(
                    "INSERT INTO site_files(name, body, hash) VALUES ('resume.json', ?, ?)"
                    " ON CONFLICT(name) DO UPDATE SET body=excluded.body, hash=excluded.hash",
                    (resume, hashlib.sha256(resume.encode()).hexdigest()),
                )
        embedded = ranker.refresh_page_vectors(conn, settings)
        summary = (f"{len(pages)} pages: {len(changed)} added or changed, {len(gone)} removed, {len(errors)} failed;"
                   f" {embedded} page vectors computed")
    finally:
        conn.close()
    if errors:
        raise ContentError(summary + ". " + " ".join(errors))
    return summary

