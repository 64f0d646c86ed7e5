"""The photo archive as served: the `photos` table, /photos/query.json and /images/manifest.json.

`query` filters by substring (camera, lens, film, the whole recipe card) and date, and ranks by
`q` across the fields a photographer searches (caption, film, camera, lens, the words the file
implies, year, recipe, file name) with the weights and match rules of REFERENCE.md §4.
Queries run on an in-memory index of the table (numpy masks, inverted token lists) that each
process rebuilds when the ingest job bumps `photos_state.generation`; only the page's rows are
read from SQLite. `manifest` lists every published photo. The ingest job (ingest.py) fills the table.
"""
from __future__ import annotations

import bisect
import json
import re
import sqlite3
import threading
from datetime import date
from urllib.parse import quote

import numpy as np

from siteapi.web import ApiError, clamp_int

SCHEMA = """
CREATE TABLE IF NOT EXISTS photos (
    stem TEXT PRIMARY KEY,
    file_name TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    stat_key TEXT NOT NULL,
    size INTEGER NOT NULL,
    alt TEXT,
    camera TEXT,
    lens TEXT,
    film TEXT,
    date TEXT,
    taken TEXT,
    year INTEGER,
    recipe TEXT,
    recipe_text TEXT,
    metadata TEXT NOT NULL,
    thumb_avif TEXT NOT NULL,
    thumb_jpg TEXT NOT NULL,
    thumb_small TEXT NOT NULL,
    thumb_xs TEXT NOT NULL,
    expansion TEXT NOT NULL DEFAULT '',
    extractor TEXT NOT NULL,
    extractor_version TEXT NOT NULL,
    uploaded TEXT NOT NULL,
    updated TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS photos_newest ON photos(taken DESC, stem);
-- Bumped by every ingest that changes `photos`, so readers know to rebuild their in-memory index.
CREATE TABLE IF NOT EXISTS photos_state (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    generation INTEGER NOT NULL
);
"""

TEXT_MAX = 120
LIMIT_DEFAULT, LIMIT_MAX, OFFSET_MAX = 25, 100, 10000
MAX_TERMS = 12
COMMON_SHARE, COMMON_MIN_CANDIDATES = 0.9, 4
FILTERS = {"camera": "camera", "lens": "lens", "film": "film", "recipe": "recipe_text"}
# Field → weight for `q`; each term scores once, at its best-matching field.
WEIGHTS = {"film": 6, "alt": 5, "camera": 4, "lens": 4, "expansion": 3, "year": 3, "recipe": 2, "stem": 1}
STOPWORDS = frozenset("""
a about all an and any are as at be by can do does for from get give has have how i in is it its
me my of on or our please show some that the their them there these this those to was what when
where which who with you your
find photo photos picture pictures pic pics image images shot shots taken
""".split())
_SPLIT = re.compile(r"[^\w]+|_+")  # tokens are runs of letters and digits
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
ORDER_SQL = "ORDER BY taken IS NULL, taken DESC, stem"  # newest first, undated last, then by name


def _text_param(params: dict, name: str) -> str:
    value = params.get(name)
    return " ".join(str(value).split())[:TEXT_MAX] if value is not None else ""


def _date_param(params: dict, name: str) -> str:
    value = _text_param(params, name)
    if not value:
        return ""
    try:
        if not _DATE.fullmatch(value):
            raise ValueError
        date.fromisoformat(value)
    except ValueError:
        raise ApiError(400, f"Parameter {name} must be a date written YYYY-MM-DD, such as 2024-05-31; "
                            f"{value!r} is not one.", code="invalid_parameter", parameter=name) from None
    return value


def query_terms(q: str) -> list[str]:
    """Lower-cased tokens longer than one character, the first 12, stopwords dropped."""
    tokens = [t for t in _SPLIT.split(q.lower()) if len(t) > 1][:MAX_TERMS]
    return list(dict.fromkeys(t for t in tokens if t not in STOPWORDS))


def _plural_stem(term: str) -> str:
    if len(term) > 4 and term.endswith("ies"):
        return term[:-3] + "y"
    if len(term) > 4 and term.endswith(("ches", "shes", "sses", "xes", "zes")):
        return term[:-2]
    if len(term) > 3 and term.endswith("s") and not term.endswith(("ss", "us", "is")):
        return term[:-1]
    return term


def token_matches(term: str, token: str) -> bool:
    """A token matches when it starts with the term or its plural stem; a token of 5+ characters
    also matches when the term starts with it; a term with a digit also matches inside a token."""
    return (token.startswith((term, _plural_stem(term)))
            or (len(token) >= 5 and term.startswith(token))
            or (any(ch.isdigit() for ch in term) and term in token))


class _Index:
    """The photos table in memory, newest first: filter columns by distinct value, and per ranked
    field an inverted index token → rows. Built once per ingest generation, then read-only."""

    def __init__(self, rows: list):
        self.stems = [row["stem"] for row in rows]
        self.size = len(rows)
        self.filters = {}
        for name, column in FILTERS.items():
            values, codes = {}, np.empty(self.size, dtype=np.int32)
            for i, row in enumerate(rows):
                codes[i] = values.setdefault((row[column] or "").lower(), len(values))
            self.filters[name] = (list(values), codes)
        self.dates = np.array([int(row["date"].replace("-", "")) if row["date"] else 0 for row in rows], dtype=np.int32)
        self.postings: dict[str, dict[str, np.ndarray]] = {}
        self.vocab: dict[str, list[str]] = {}
        for name in WEIGHTS:
            postings: dict[str, list[int]] = {}
            for i, row in enumerate(rows):
                value = row[name]
                if value:
                    for token in set(_SPLIT.split(str(value).lower())):
                        if token:
                            postings.setdefault(token, []).append(i)
            self.postings[name] = {token: np.array(ids, dtype=np.int32) for token, ids in postings.items()}
            self.vocab[name] = sorted(postings)

    def filter_mask(self, name: str, needle: str) -> np.ndarray:
        values, codes = self.filters[name]
        needle = needle.lower()
        wanted = [code for code, value in enumerate(values) if needle in value]
        return np.isin(codes, wanted)

    def term_mask(self, field_name: str, term: str) -> np.ndarray:
        vocab, postings = self.vocab[field_name], self.postings[field_name]
        tokens = set()
        for start in {term, _plural_stem(term)}:
            i = bisect.bisect_left(vocab, start)
            while i < len(vocab) and vocab[i].startswith(start):
                tokens.add(vocab[i])
                i += 1
        tokens.update(term[:k] for k in range(5, len(term)) if term[:k] in postings)
        if any(ch.isdigit() for ch in term):
            tokens.update(token for token in vocab if term in token)
        mask = np.zeros(self.size, dtype=bool)
        for token in tokens:
            mask[postings[token]] = True
        return mask


_indexes: dict[str, tuple[int, _Index]] = {}
_index_lock = threading.Lock()


def _index(conn: sqlite3.Connection) -> _Index:
    """This database's index, rebuilt when the ingest job has bumped the generation."""
    path = conn.execute("PRAGMA database_list").fetchone()[2]
    found = conn.execute("SELECT generation FROM photos_state WHERE id = 1").fetchone()
    generation = found[0] if found else 0
    cached = _indexes.get(path)
    if cached and cached[0] == generation:
        return cached[1]
    with _index_lock:
        cached = _indexes.get(path)
        if not cached or cached[0] != generation:
            rows = conn.execute("SELECT stem, date, film, alt, camera, lens, expansion, year, "
                                f"recipe_text, recipe_text AS recipe FROM photos {ORDER_SQL}").fetchall()
            _indexes[path] = cached = (generation, _Index(rows))
    return cached[1]


def _photo(row: sqlite3.Row, settings) -> dict:
    return {
        "stem": row["stem"],
        "alt": row["alt"] or "",
        "full": settings.url("/images/full/" + quote(row["file_name"])) if settings.originals_public else None,
        "thumb": {kind: settings.url("/images/" + quote(row["thumb_" + kind]))
                  for kind in ("avif", "jpg", "small", "xs")},
        "metadata": json.loads(row["metadata"]),
    }


def query(conn: sqlite3.Connection, settings, params: dict, embed=None) -> dict:
    """GET /photos/query.json: a PhotoQuery dict; raises ApiError(400) naming a bad `from`/`to`.

    `embed` (text → vector) is the hook for caption vectors from the /ask model: once the ingest
    job stores them, a term no caption contains can match by meaning and `semantic` turns true.
    Until then it is unused and `semantic` is false.
    """
    echo = {name: _text_param(params, name) for name in ("q", *FILTERS)}
    echo["from"], echo["to"] = _date_param(params, "from"), _date_param(params, "to")
    limit = clamp_int(params.get("limit"), LIMIT_DEFAULT, 1, LIMIT_MAX)
    offset = clamp_int(params.get("offset"), 0, 0, OFFSET_MAX)
    terms = query_terms(echo["q"])
    ranking: dict = {"mode": "filters-only", "terms": terms, "semantic": False}

    index = _index(conn)
    candidates = np.ones(index.size, dtype=bool)
    for name in FILTERS:
        if echo[name]:
            candidates &= index.filter_mask(name, echo[name])
    if echo["from"]:
        candidates &= index.dates >= int(echo["from"].replace("-", ""))
    if echo["to"]:
        candidates &= (index.dates <= int(echo["to"].replace("-", ""))) & (index.dates > 0)

    scores, matched_by_term = None, {}
    if not terms:
        if echo["q"]:
            ranking["mode"] = "no-terms"
        order = np.flatnonzero(candidates)
    else:
        order, scores, matched_by_term = _rank(index, candidates, terms, ranking)
    page = [int(i) for i in order[offset:offset + limit]]
    full_rows = {}
    if page:
        stems = [index.stems[i] for i in page]
        marks = ", ".join("?" for _ in stems)
        full_rows = {row["stem"]: row for row in conn.execute(f"SELECT * FROM photos WHERE stem IN ({marks})", stems)}
    photos = []
    for i in page:
        row = full_rows.get(index.stems[i])
        if row is None:  # removed since the index was read; the next request sees the new generation
            continue
        photo = _photo(row, settings)
        if echo["q"]:
            photo["score"] = int(scores[i]) if scores is not None else 0
            photo["matched"] = [t for t in terms if t in matched_by_term and matched_by_term[t][i]]
        photos.append(photo)
    return {"query": echo, "ranking": ranking, "total": len(order), "offset": offset, "limit": limit,
            "photos": photos}


def _rank(index: _Index, candidates: np.ndarray, terms: list[str], ranking: dict):
    """Rows to return in order, their scores, and per term the rows it matched; fills `ranking`."""
    total = int(candidates.sum())
    fields = sorted(WEIGHTS, key=WEIGHTS.get, reverse=True)
    masks = {term: {name: index.term_mask(name, term) & candidates for name in fields} for term in terms}
    counts = {term: {name: int(mask.sum()) for name, mask in by_field.items()} for term, by_field in masks.items()}
    # A term–field pair matching nearly every candidate tells nothing apart: it is ignored.
    ignored = set()
    if total >= COMMON_MIN_CANDIDATES:
        ignored = {(term, name) for term in terms for name, n in counts[term].items() if n >= COMMON_SHARE * total}
    common = [term for term in terms if any(counts[term].values())
              and all((term, name) in ignored for name, n in counts[term].items() if n)]
    active = [term for term in terms if term not in common]
    scores = np.zeros(index.size, dtype=np.int32)
    hits = np.zeros(index.size, dtype=np.int32)
    matched_by_term = {}
    for term in active:
        best = np.zeros(index.size, dtype=np.int32)
        for name in fields:  # heaviest field first: each term scores once, at its best field
            if (term, name) not in ignored and counts[term][name]:
                best = np.where((best == 0) & masks[term][name], WEIGHTS[name], best)
        matched_by_term[term] = best > 0
        scores += best
        hits += matched_by_term[term]
    dropped = [term for term in active if not matched_by_term[term].any()]
    if common:
        ranking["common"] = common
    if dropped:
        ranking["dropped"] = dropped
    if not active:  # every term is too common to tell photos apart: all candidates, unranked
        ranking["mode"], selected = "all-terms", candidates
    elif (hits == len(active)).any():
        ranking["mode"], selected = "all-terms", hits == len(active)
    elif hits.any():
        ranking["mode"], selected = "partial", hits > 0
    else:
        ranking["mode"], selected = "no-match", np.zeros(index.size, dtype=bool)
    rows = np.flatnonzero(selected)  # already newest first
    order = rows[np.argsort(-scores[rows], kind="stable")]
    return order, scores, matched_by_term


def manifest(conn: sqlite3.Connection, settings) -> dict:
    """GET /images/manifest.json: every published photo, newest first."""
    photos = []
    for row in conn.execute("SELECT stem, file_name, size, uploaded, thumb_avif, thumb_jpg, thumb_small, thumb_xs "
                            f"FROM photos {ORDER_SQL}"):
        photos.append({
            "full": settings.url("/images/full/" + quote(row["file_name"])) if settings.originals_public else None,
            **{key: settings.url("/images/" + quote(row[key]))
               for key in ("thumb_avif", "thumb_jpg", "thumb_small", "thumb_xs")},
            "stem": row["stem"],
            "size": row["size"],
            "uploaded": row["uploaded"],
        })
    return {"_address": settings.url("/images/manifest.json"), "photos": photos, "count": len(photos)}
