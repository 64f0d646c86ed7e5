"""content/ -> the `pages` table (and content/resume.json -> `site_files`): front-matter parsing,
plain text, and the incremental `content` job.

A content file is Markdown with YAML front matter (title, description, date, kind, path, tags, lang).
The job reads every file, parses outside any transaction, then applies added, changed and
deleted pages in one short write transaction, with the page index of scripts written without
spaces (`pages_unspaced`). A file that does not parse is reported by file and line; its last good row stays, and every other page is still indexed. A path claimed by two files stays
with the file that already publishes it. A content folder that is missing, or empty while pages exist,
is refused and every page kept.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import html
import json
import os
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import yaml
from markdown_it import MarkdownIt

from siteapi import db, graphemes, openapi, ranker

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
    tags TEXT NOT NULL DEFAULT '[]',
    lang TEXT
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
-- The pages with letters of a script written without spaces (Chinese, Japanese, Thai...), each of
-- those letters a word of its own: pages_fts reads a whole run between punctuation as one word, so
-- 東京 would find no page that says 東京タワー. The content job keeps it (index_unspaced); search.py
-- asks it for such a query word as the phrase of its letters.
CREATE VIRTUAL TABLE IF NOT EXISTS pages_unspaced USING fts5(
    title, description, text, path UNINDEXED, hash UNINDEXED, tokenize='porter unicode61'
);
CREATE TABLE IF NOT EXISTS site_files (
    name TEXT PRIMARY KEY,
    body TEXT NOT NULL,
    hash TEXT NOT NULL
);
"""

# The letters of the scripts written without spaces between words: Thai, Lao, Myanmar, Khmer, Han
# (with its iteration marks and the CJK radicals) and kana, full- and half-width; not the katakana
# middle dot, which parts words.
UNSPACED = re.compile("[\u0e01-\u0e5b\u0e81-\u0edf\u1000-\u109f\u1780-\u17ff\u2e80-\u2fdf\u3005-\u3007"
                      "\u3021-\u3029\u3038-\u303b\u3041-\u309f\u30a1-\u30fa\u30fc-\u30ff\u31f0-\u31ff"
                      "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f\U0001b000-\U0001b16f"
                      "\U00020000-\U0003134f]")


def spaced(text: str) -> str:
    """`text` with each UNSPACED letter set apart by spaces: one word each to the index's tokenizer."""
    return UNSPACED.sub(r" \g<0> ", text)


# Part of each pages_unspaced row's hash: bump it when what the index holds for a page changes, so
# the next content run makes every row again.
UNSPACED_INDEX = "unspaced-v2"


def unspaced_hash(page_hash: str) -> str:
    """The hash a pages_unspaced row stores for the page it was made from."""
    return f"{UNSPACED_INDEX}:{page_hash}"


def index_unspaced(conn, pages: dict) -> None:
    """Bring `pages_unspaced` to `pages` ({path: row with hash, title, description and text}): a row
    for each page that holds an UNSPACED letter, made again when its hash changes. Its text is read
    in NFKC form, as search.words reads a query (น้ำ's ำ as two letters, ２０２０ as 2020)."""
    indexed = {path: (rowid, hash_) for rowid, path, hash_ in conn.execute("SELECT rowid, path, hash FROM pages_unspaced")}
    stale = [(rowid,) for path, (rowid, hash_) in indexed.items()
             if path not in pages or unspaced_hash(pages[path]["hash"]) != hash_]
    conn.executemany("DELETE FROM pages_unspaced WHERE rowid = ?", stale)
    fields = ("title", "description", "text")
    conn.executemany(
        "INSERT INTO pages_unspaced(title, description, text, path, hash) VALUES (?, ?, ?, ?, ?)",
        [(*(spaced(unicodedata.normalize("NFKC", row[field])) for field in fields), path, unspaced_hash(row["hash"]))
         for path, row in pages.items() if indexed.get(path, (None, None))[1] != unspaced_hash(row["hash"])
         and any(not row[field].isascii() and UNSPACED.search(unicodedata.normalize("NFKC", row[field]))
                 for field in fields)])


ADDED_COLUMNS = {"pages": {"lang": "TEXT"}}
# A language tag as BCP 47 writes one, its primary language and then subtags (ja, pt-BR, zh-Hant-TW).
_LANGUAGE_TAG = re.compile(r"[A-Za-z]{2,3}(-[A-Za-z0-9]{1,8})*")

markdown = MarkdownIt("commonmark", {"typographer": False}).enable("table")
# Part of every page's hash: bump it when plain_text() changes, so the next content run re-reads every
# page (and the ranker re-embeds it) instead of keeping text made the old way until the file changes.
TEXT_EXTRACTION = "text-v5"
_TAGS = re.compile(r"<[^>]+>")
# Tags inside a line of text (a link, emphasis, code): they join what is around them, so a link
# before a full stop does not leave "carburetors ." in the text; any other tag is a break between words.
_INLINE_TAG = re.compile(r"</?(?:a|abbr|b|cite|code|del|dfn|em|i|ins|kbd|mark|q|s|samp|small|span|strong|sub|sup"
                         r"|time|u|var)\b", re.I)
_SPACE = re.compile(r"\s+")
# Tags that end no block though they are not inline text: an image, a word-break hint, a comment.
_SPACE_TAG = re.compile(r"<(?:img|wbr)\b|<!--", re.I)
_BLOCK_END = "\x00"  # what a block's tag leaves until the spaces are made one (markdown-it writes no NUL)
_BLOCK_ENDS = re.compile(r" ?\x00[\x00 ]*")
# A line break after a sentence's end, maybe inside a quote or brackets. The pattern starts at the
# line break so that only line breaks are tried: a lookbehind tried at every character of every
# result's text took a search 1.7 times as long.
_SENTENCE_BREAK = re.compile(r"\n(?:(?<=[.!?:;]\n)|(?<=[.!?:;][\"'”’)\]]\n))")
# What no page's URL can hold: a query or fragment, white space and controls, an empty or dot segment,
# and '%', since a request's %-escapes are decoded before its path is looked up.
_UNSERVABLE_PATH = re.compile(r"[?#%\\\s\x00-\x1f\x7f]|//|/\.\.?(?:/|$)")
TWIN_OF_HOME = "/index.md"  # the Markdown twin of `/`, where every other page's twin is its path plus `.md`
_DAY = re.compile(r"(\d{4}-\d\d-\d\d)(?:[Tt ].*)?")
# A page's row holds its Markdown and its plain text; at this size, that row and any sort of it stay
# under the 1 MiB a value that plugins/query_limits.py lets Datasette read (about 40,000 words).
MAX_FILE_BYTES = 256 * 1024
_TYPE_NAMES = {bool: "yes/no", int: "a number", float: "a number", list: "a list", dict: "a mapping"}


class _Loader(yaml.SafeLoader):
    """Safe YAML that leaves dates as text, so `date: 2024-13-05` is reported like any other bad date,
    and refuses a key written twice, of which plain YAML would keep the last without a word."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key, _ in node.value:
            if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                if key.value in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"the key {key.value!r} is written twice; keep one", key.start_mark)
                seen.add(key.value)
        return super().construct_mapping(node, deep)


_Loader.add_constructor("tag:yaml.org,2002:timestamp", yaml.SafeLoader.construct_yaml_str)


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
    lang: str | None = None  # the page's language, when it is not the site's
    path_line: int = 1  # where `path:` sits in the source, for error messages; not stored

    def row(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "path_line"}


def _tag_gap(tag: re.Match) -> str:
    if _INLINE_TAG.match(tag.group()):
        return ""
    return " " if _SPACE_TAG.match(tag.group()) else _BLOCK_END


def plain_text(markdown_body: str) -> str:
    rendered = markdown.render(markdown_body)
    # A tag ends at the first '>' after its '<'; past the last '>' no tag can end, and leaving that tail
    # out of the search keeps it linear: raw HTML of 50,000 '<!--' made every '<' scan to the end (6 s).
    end = rendered.rfind(">") + 1
    joined = _SPACE.sub(" ", html.unescape(_TAGS.sub(_tag_gap, rendered[:end]) + rendered[end:]))
    # One line break where blocks part (a heading, a paragraph, a list item, a table cell), so that
    # snippets can show where a heading ends; the model's tokenizer and FTS5 read it as a space.
    return _BLOCK_ENDS.sub("\n", joined).strip()


def shown(text: str) -> str:
    """A page's text as a reader sees it run on (snippets, a description made from it): a line break
    (where two blocks part) is a space after a sentence's end, else " · "."""
    return _SENTENCE_BREAK.sub(" ", text).replace("\n", " · ")


def read_text(file: Path, rel: str) -> str:
    """The file as UTF-8 text, or a ContentError naming `rel` (and the line of a bad byte)."""
    try:
        with file.open("rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ContentError(f"{rel} cannot be read ({exc.strerror or exc}); fix or remove it.") from None
    if len(raw) > MAX_FILE_BYTES:
        raise ContentError(f"{rel} is over {MAX_FILE_BYTES >> 10} KiB, the most one content file may hold; "
                           "split it into several pages.")
    try:
        text = raw.decode("utf-8").removeprefix("\ufeff")  # the byte-order mark some editors write
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise ContentError(f"{rel} line {line}: not UTF-8 text (byte {exc.start}).") from None
    return text.replace("\r\n", "\n").replace("\r", "\n")  # Windows and old Mac line ends, as Markdown reads them


def day(value: object) -> str | None:
    """`value` as YYYY-MM-DD when it is a real day written that way (a time may follow), else None."""
    match = _DAY.fullmatch(value) if isinstance(value, str) else None
    try:
        return dt.date.fromisoformat(match[1]).isoformat() if match else None
    except ValueError:  # 2024-13-05
        return None


def parse_file(file: Path, root: Path) -> Page:
    rel = file.relative_to(root).as_posix()
    source = read_text(file, rel)
    if not source.startswith("---"):
        raise ContentError(f"{rel} line 1: front matter must start with a '---' line.")
    end = re.search(r"^---\s*$", source[3:], re.M)
    if end is None:
        raise ContentError(f"{rel} line 1: front matter is not closed by a '---' line.")
    front, body = source[3:3 + end.start()], source[3 + end.end():].lstrip("\n")
    try:
        meta = yaml.load(front, Loader=_Loader) or {}
    except yaml.MarkedYAMLError as exc:
        line = (exc.problem_mark.line + 1) if exc.problem_mark else 1  # mark lines count from 0
        raise ContentError(f"{rel} line {line}: front matter is not valid YAML ({exc.problem}).") from None
    except yaml.reader.ReaderError as exc:
        line = front[:exc.position].count("\n") + 1
        raise ContentError(f"{rel} line {line}: front matter holds the character U+{exc.character:04X}, which YAML "
                           "does not allow; delete it.") from None
    except RecursionError:
        raise ContentError(f"{rel}: front matter is nested too deeply to read.") from None
    if not isinstance(meta, dict):
        raise ContentError(f"{rel} line 2: front matter must be a mapping of keys to values.")
    for key in ("title", "path", "kind", "description", "lang"):
        value = meta.get(key)
        if value is not None and not isinstance(value, str):
            raise ContentError(f"{rel} line {key_line(front, key)}: {key} must be text, not "
                               f"{_TYPE_NAMES.get(type(value), type(value).__name__)}; write {key}: and the text, "
                               "in quotes if it could read as a number, yes/no, list or mapping.")
        if key not in ("description", "lang") and not (value or "").strip():
            raise ContentError(f"{rel} line {key_line(front, key)}: front matter needs a text '{key}'.")
    if meta["kind"] not in KINDS:
        raise ContentError(f"{rel} line {key_line(front, 'kind')}: kind must be one of {', '.join(KINDS)}, "
                           f"not {meta['kind']!r}.")
    path = unicodedata.normalize("NFC", meta["path"].strip())  # as keyboards and browsers spell it
    if not path.startswith("/") or path.endswith(".md") or (path != "/" and path.endswith("/")):
        raise ContentError(f"{rel} line {key_line(front, 'path')}: path must start with '/' and not end with '/' "
                           f"or '.md', not {path!r}.")
    if _UNSERVABLE_PATH.search(path):
        raise ContentError(f"{rel} line {key_line(front, 'path')}: path must be one URL path, without spaces, "
                           f"'?', '#', '%', '\\', '//' or '.'/'..' segments (write any other character as itself), "
                           f"e.g. path: /writing/my-post, not {path!r}.")
    if path + ".md" == TWIN_OF_HOME:
        raise ContentError(f"{rel} line {key_line(front, 'path')}: path {path} cannot be used: its Markdown twin "
                           f"would be {TWIN_OF_HOME}, the home page's; write path: / for the home page, or another path.")
    date = meta.get("date")
    if date is not None:
        date = day(date)
        if date is None:
            raise ContentError(f"{rel} line {key_line(front, 'date')}: date must be a real day written YYYY-MM-DD, "
                               f"e.g. date: 2024-05-13, not {meta['date']!r}.")
    tags = [] if meta.get("tags") is None else meta["tags"]
    if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
        raise ContentError(f"{rel} line {key_line(front, 'tags')}: tags must be a list of text, "
                           "e.g. tags: [film, recipes], with any tag that reads as a number in quotes.")
    lang = meta.get("lang")
    if lang is not None and not _LANGUAGE_TAG.fullmatch(lang.strip()):
        raise ContentError(f"{rel} line {key_line(front, 'lang')}: lang must be a language tag such as ja, de or "
                           f"pt-BR, not {lang!r}.")
    text = plain_text(body)
    return Page(
        path=path,
        title=graphemes.cut(one_line(meta["title"]), 140),
        description=graphemes.cut(one_line(meta.get("description") or graphemes.cut(shown(text), 240)), 240),
        kind=meta["kind"],
        date=date,
        body=body,
        text=text,
        hash=hashlib.sha256(f"{TEXT_EXTRACTION}\0{source}".encode()).hexdigest(),
        source=rel,
        tags=json.dumps(tags),
        lang=lang and lang.strip(),
        path_line=key_line(front, "path"),
    )


def one_line(text: str) -> str:
    """`text` with every run of white space, line breaks included, as one space: a title or
    description is one line of the headings and lists it goes into (llms.txt, the Markdown twin)."""
    return " ".join(text.split())


def key_line(front: str, key: str) -> int:
    """The file line of `key` in the front matter (which starts on line 1, after the '---'), or 1."""
    for number, line in enumerate(front.split("\n"), 1):
        if re.match(rf"{key}\s*:", line):
            return number
    return 1


def content_files(root: Path) -> tuple[list[Path], list[tuple[str, str]]]:
    """The .md files under `root` by name (symlinked folders not followed, as rglob), and the
    folders that could not be listed with why: a folder that cannot be read is not an empty one.
    Hidden files and folders are not content: an editor's lock link (.#about.md), the ._about.md
    a Mac leaves on other disks, a notes app's .trash/."""
    unreadable = []

    def note(exc: OSError):
        if Path(exc.filename) == root:
            raise ContentError(f"The content folder {root} cannot be read ({exc.strerror}); every page is kept.")
        unreadable.append((Path(exc.filename).relative_to(root).as_posix(), exc.strerror or str(exc)))

    # a folder named like a page is listed too, so that it is reported rather than its page deleted
    files = []
    for folder, dirs, names in os.walk(root, onerror=note):
        dirs[:] = [name for name in dirs if not name.startswith(".")]
        files += [Path(folder) / name for name in dirs + names if name.endswith(".md") and not name.startswith(".")]
    return sorted(files), unreadable


def failed_source(source: str, failed: list[str]) -> bool:
    """Whether `source` is a file that failed or lies in a folder that could not be read."""
    return any(source == f or source.startswith(f + "/") for f in failed)


def read_content(root: Path, owners: dict[str, str] | None = None) -> tuple[list[Page], list[str], list[str]]:
    """Every parseable page that holds its path, the error sentences of the rest, and the sources that failed.

    `owners` maps published paths to their files (site.db's `source`): a file that still claims its path,
    or no longer parses, keeps it from a newcomer; among newcomers the first file by name holds a path."""
    parsed, errors, failed = [], [], []
    files, unreadable = content_files(root)
    for folder, why in unreadable:
        errors.append(f"{folder}/ cannot be read ({why}); its pages are kept until it can.")
        failed.append(folder)
    for file in files:
        try:
            parsed.append(parse_file(file, root))
        except ContentError as exc:
            errors.append(str(exc))
            failed.append(file.relative_to(root).as_posix())
    claims = {(page.path, page.source) for page in parsed}
    holders = {path: source for path, source in (owners or {}).items()
               if failed_source(source, failed) or (path, source) in claims}
    pages = []
    for page in parsed:
        holder = holders.setdefault(page.path, page.source)
        if holder == page.source:
            pages.append(page)
        else:
            errors.append(f"{page.source} line {page.path_line}: path {page.path} is already used by {holder}.")
            failed.append(page.source)
    return pages, errors, failed


def _not_json(name: str):
    """Python's json reads NaN and Infinity, which no JSON parser our readers use accepts."""
    raise ValueError(f"{name} is not a JSON value; write a number, or null, in its place.")


def read_resume(root: Path) -> str | None:
    file = root / "resume.json"
    if not file.exists():
        return None
    text = read_text(file, "resume.json")
    try:
        resume = json.loads(text, parse_constant=_not_json)
    except json.JSONDecodeError as exc:
        raise ContentError(f"resume.json line {exc.lineno}: not valid JSON ({exc.msg}).") from None
    except ValueError as exc:
        raise ContentError(f"resume.json: {exc}") from None
    except RecursionError:
        raise ContentError("resume.json is nested too deeply to read; a JSON Resume needs a few levels, "
                           "not thousands.") from None
    if not isinstance(resume, dict):
        raise ContentError("resume.json must be one JSON object (a JSON Resume), not a "
                           f"{type(resume).__name__}.")
    # /resume.json serves the file as it is: one that breaks the Resume /openapi.json promises is refused
    try:
        problem = openapi.mismatch("Resume", resume)
    except RecursionError:  # json reads a little deeper than the validator walks
        problem = "nested too deeply to check (a JSON Resume needs a few levels)"
    if problem:
        raise ContentError(f"resume.json is not a JSON Resume as /openapi.json describes it, {problem}.")
    return text


def run_content(settings) -> str:
    """Index content/ into `pages` incrementally; raise after applying the good files if any failed."""
    root = settings.content_dir
    if not root.is_dir():
        raise ContentError(f"The content folder {root} is missing or not a folder; check content_dir. "
                           "Every page is kept.")
    conn = db.writer(settings.db_path)
    try:
        stored = {r["path"]: (r["hash"], r["source"]) for r in conn.execute("SELECT path, hash, source FROM pages")}
        pages, errors, failed = read_content(root, {path: source for path, (_, source) in stored.items()})
        if stored and not pages and not failed:
            raise ContentError(f"The content folder {root} holds no .md files; check content_dir. "
                               "Every page is kept.")
        resume_failed = False
        try:
            resume = read_resume(root)
        except ContentError as exc:
            errors.append(str(exc))
            resume, resume_failed = None, True
        wanted = {p.path: p for p in pages}
        # A page moved unchanged to another file is rewritten too: its row must name the file whose
        # later parse error keeps it.
        changed = [p for p in pages if stored.get(p.path) != (p.hash, p.source)]
        # A file that failed keeps its last good row; only pages whose file is gone are deleted.
        gone = [path for path, (_, source) in stored.items()
                if path not in wanted and not failed_source(source, failed)]
        # The vectors of what `pages` will hold are made first and written in the pages' transaction,
        # so the model never ranks a page by the vector of its old text (with no model, or for a page
        # the model fails on, there is no vector: the model ranking leaves the page out).
        kept = conn.execute("SELECT path, hash, title, description, text FROM pages").fetchall()
        after = {r["path"]: r for r in kept if r["path"] not in gone} | {p.path: p.row() for p in changed}
        embedded = ranker.missing_vectors(conn, list(after.values()), settings)
        errors += [f"{path}: the /ask model could not embed it ({why}); its model ranking leaves it out until a "
                   "run can." for path, why in (embedded.failed.items() if embedded else ())]
        with db.transaction(conn):
            for page in changed:
                conn.execute(
                    "INSERT INTO pages(path, title, description, kind, date, body, text, hash, source, tags, lang)"
                    " VALUES (:path, :title, :description, :kind, :date, :body, :text, :hash, :source, :tags, :lang)"
                    " ON CONFLICT(path) DO UPDATE SET title=excluded.title, description=excluded.description,"
                    " kind=excluded.kind, date=excluded.date, body=excluded.body, text=excluded.text,"
                    " hash=excluded.hash, source=excluded.source, tags=excluded.tags, lang=excluded.lang",
                    page.row(),
                )
            conn.executemany("DELETE FROM pages WHERE path = ?", [(p,) for p in gone])
            index_unspaced(conn, after)
            if resume is not None:
                conn.execute(
                    "INSERT INTO site_files(name, body, hash) VALUES ('resume.json', ?, ?)"
                    " ON CONFLICT(name) DO UPDATE SET body=excluded.body, hash=excluded.hash",
                    (resume, hashlib.sha256(resume.encode()).hexdigest()),
                )
            elif not resume_failed:  # the owner removed it: /resume.json and /resume.md answer 404 again
                conn.execute("DELETE FROM site_files WHERE name = 'resume.json'")
            if embedded is not None:
                ranker.store_vectors(conn, embedded)
        summary = (f"{len(pages)} pages: {len(changed)} added or changed, {len(gone)} removed, {len(errors)} failed;"
                   f" {len(embedded.vectors) if embedded else 0} page vectors computed")
    finally:
        conn.close()
    if errors:
        raise ContentError(summary + ". " + " ".join(errors))
    return summary

