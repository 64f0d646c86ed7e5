"""The photo archive as served: the `photos` table, /photos/query.json and /images/manifest.json.

`query` filters by substring (camera, lens, film, the whole recipe card) and date, and ranks by
`q` across the fields a photographer searches (caption, film, camera, lens, the words the file
implies, year, recipe, file name) with the weights and match rules of REFERENCE.md §4.
A term no field contains literally is then matched by meaning against the caption vectors the
ingest job stores from the /ask model (ranker.py), so "seaside" finds the beach photos.
Queries run on an in-memory index of the table (numpy masks, inverted token lists, the caption
vectors as one matrix) that each process rebuilds when the ingest job draws a new
`photos_state.generation`; only the page's rows are read from SQLite. `manifest` lists every
published photo. The ingest job (ingest.py) fills the tables.
"""
from __future__ import annotations

import bisect
import functools
import json
import re
import sqlite3
import threading
from datetime import date
from urllib.parse import quote

import numpy as np

from siteapi import db, ranker, search
from siteapi.content import UNSPACED
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
-- A new random number from every ingest that changes `photos`; each process rebuilds its in-memory
-- index when it differs from the one the index was built at. Random, not counted: a site.db restored
-- from a backup (same path, same inode) must not show the number of the file it replaced, as two
-- files each made by one ingest would (1 and 1).
CREATE TABLE IF NOT EXISTS photos_state (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    generation INTEGER NOT NULL
);
-- One caption vector per photo content (photos.sha256), so unchanged photos are never re-embedded.
CREATE TABLE IF NOT EXISTS photo_vectors (
    sha256 TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    vector BLOB NOT NULL
);
"""

TEXT_MAX = 120
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".avif")  # what /images/ serves; the Caddyfile's @stored names the same
# As the Caddyfile's image_files imports: thumbnails have content-hashed names; an original keeps
# the camera's name through a re-edit, so it is cached a day and then revalidated.
THUMBNAIL_CACHE = "public, max-age=31536000, immutable"
ORIGINAL_CACHE = "public, max-age=86400"
LIMIT_DEFAULT, LIMIT_MAX, OFFSET_MAX = 25, 100, 10000
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
# Matching by meaning, for terms no field contains. Captions are embedded as written, terms as
# "a photo of <term>" (it ranks captions better than the bare word: best F1 0.72 vs 0.67).
# The threshold was fitted by hand-labelling which of the 25 demo captions each of 25 search words
# should find (seaside, coast, halloween, musician, railway, kitten, summit ...: 50 relevant pairs)
# plus 16 words that should find nothing (zebra, pizza, qwerty, xqzvbn ...), then scoring every
# word against every caption: F0.5 (precision first: a wrong photo costs a searcher more than a
# missing one) is flat at 0.75-0.77 from 0.39 to 0.42, and 0.40 sits in that plateau with precision
# 0.86, recall 0.50. Of the 16 unrelated words only "skiing" passes (0.41, the snowy platform);
# "zebra" peaks at 0.32.
SEMANTIC_THRESHOLD = 0.40
SEMANTIC_WEIGHT = 3     # below a literal caption match (5)
SEMANTIC_TERMS_MAX = 3  # terms embedded per query, each about 1 ms of one core
SEMANTIC_CACHE = 256    # terms whose matching rows each index keeps (paging repeats a query)
TERM_TEMPLATE = "a photo of {}"
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}", re.ASCII)
ORDER_SQL = "ORDER BY taken IS NULL, taken DESC, stem"  # newest first, undated last, then by name


def _recipe_pattern(needle: str) -> re.Pattern:
    """The `recipe` filter as the card writes a setting ("Name: value": no space before the colon,
    one after), whatever spacing was sent; a number that ends it ends there, so "Highlight: -1" is
    not also -1.5."""
    text = re.sub(r"\s*:\s*", ": ", needle.lower())
    return re.compile(re.escape(text) + (r"(?!\.?\d)" if text[-1:].isdigit() else ""))


def _text_param(params: dict, name: str) -> str:
    value = params.get(name)
    return " ".join(str(value).split())[:TEXT_MAX] if value is not None else ""


def _date_param(params: dict, name: str) -> str:
    value = _text_param(params, name)
    if not value:
        return ""
    if not _DATE.fullmatch(value):
        raise ApiError(400, f"Parameter {name} must be a date written YYYY-MM-DD, such as 2024-05-31; "
                            f"{value!r} is not one.", code="invalid_parameter", parameter=name)
    try:
        date.fromisoformat(value)
    except ValueError:
        raise ApiError(400, f"Parameter {name} is written YYYY-MM-DD but {value} is no day of the calendar; "
                            f"send a real date, such as 2024-05-31.", code="invalid_parameter", parameter=name) from None
    return value


def query_terms(q: str) -> list[str]:
    """The site search's tokens (search.tokens) less the photo stopwords; none left means no-terms."""
    return list(dict.fromkeys(t for t in search.tokens(q) if t not in STOPWORDS))


def _plural_stem(term: str) -> str:
    if len(term) > 4 and term.endswith("ies"):
        return term[:-3] + "y"
    if len(term) > 4 and term.endswith(("ches", "shes", "sses", "xes", "zes")):
        return term[:-2]
    if len(term) > 3 and term.endswith("s") and not term.endswith(("ss", "us", "is")):
        return term[:-1]
    return term


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
        with_vector = [i for i, row in enumerate(rows) if row["vector"]]
        self.vector_rows = np.array(with_vector, dtype=np.int64)
        self.vector_of = np.full(self.size, -1, dtype=np.int64)  # row → its line in `vectors`
        self.vector_of[self.vector_rows] = np.arange(len(with_vector))
        self.semantic_rows: dict[tuple, np.ndarray] = {}  # (model, term) → rows over the threshold
        self.semantic_lock = threading.Lock()
        self.vectors = np.frombuffer(b"".join(rows[i]["vector"] for i in with_vector),
                                     dtype=np.float32).reshape(len(with_vector), ranker.DIM)
        self.postings: dict[str, dict[str, np.ndarray]] = {}
        self.vocab: dict[str, list[str]] = {}
        for name in WEIGHTS:
            postings: dict[str, list[int]] = {}
            for i, row in enumerate(rows):
                value = row[name]
                if value:
                    for token in set(search.words(str(value))):
                        postings.setdefault(token, []).append(i)
            self.postings[name] = {token: np.array(ids, dtype=np.int32) for token, ids in postings.items()}
            self.vocab[name] = sorted(postings)

    def filter_mask(self, name: str, needle: str) -> np.ndarray:
        values, codes = self.filters[name]
        if name == "recipe":
            pattern = _recipe_pattern(needle)
            wanted = [code for code, value in enumerate(values) if pattern.search(value)]
        else:
            needle = needle.lower()
            wanted = [code for code, value in enumerate(values) if needle in value]
        return np.isin(codes, wanted)

    def term_mask(self, field_name: str, term: str) -> np.ndarray:
        """Rows whose field holds a token that starts with the term or its plural stem, a token of
        5+ characters the term starts with, or (for a term with a digit or a letter of a script written
        without spaces) a token holding the term; the term in each of its spellings (search.spellings)."""
        vocab, postings = self.vocab[field_name], self.postings[field_name]
        tokens = set()
        for spelling in search.spellings(term):  # Straße and STRASSE, as the site search reads them
            for start in {spelling, _plural_stem(spelling)}:
                i = bisect.bisect_left(vocab, start)
                while i < len(vocab) and vocab[i].startswith(start):
                    tokens.add(vocab[i])
                    i += 1
            tokens.update(spelling[:k] for k in range(5, len(spelling)) if spelling[:k] in postings)
            if any(ch.isdigit() for ch in spelling) or UNSPACED.search(spelling):  # 東京 inside 東京駅の朝
                tokens.update(token for token in vocab if spelling in token)
        mask = np.zeros(self.size, dtype=bool)
        for token in tokens:
            mask[postings[token]] = True
        return mask

    def semantic_mask(self, model: ranker.Model, term: str, candidates: np.ndarray) -> np.ndarray:
        """Candidate rows whose caption vector has a cosine of at least SEMANTIC_THRESHOLD with the term's."""
        mask = np.zeros(self.size, dtype=bool)
        cached = self.semantic_rows.get((model, term))
        if cached is not None:
            mask[cached] = True
            return mask & candidates
        vector = _term_vector(model, term)
        rows = np.flatnonzero(candidates & (self.vector_of >= 0))
        # The scan is bound by memory bandwidth (1.5 KB a photo): when filters leave a few rows,
        # gathering their vectors reads far less than the whole matrix; past about 3% the copy costs more.
        if len(rows) * 32 < len(self.vector_rows):
            mask[rows[self.vectors[self.vector_of[rows]] @ vector >= SEMANTIC_THRESHOLD]] = True
            return mask
        matching = self.vector_rows[self.vectors @ vector >= SEMANTIC_THRESHOLD]
        with self.semantic_lock:
            if len(self.semantic_rows) >= SEMANTIC_CACHE:
                del self.semantic_rows[next(iter(self.semantic_rows))]  # the oldest
            self.semantic_rows[(model, term)] = matching
        mask[matching] = True
        return mask & candidates


_indexes: dict[str, tuple[int, _Index]] = {}
_index_lock = threading.Lock()


def _generation(conn: sqlite3.Connection) -> int:
    found = conn.execute("SELECT generation FROM photos_state WHERE id = 1").fetchone()
    return found[0] if found else 0


def _index(conn: sqlite3.Connection) -> _Index:
    """This database's index, rebuilt when its generation is not the one the index was built at."""
    path = conn.execute("PRAGMA database_list").fetchone()[2]
    cached = _indexes.get(path)
    if cached and cached[0] == _generation(conn):
        return cached[1]
    with _index_lock, db.one_snapshot(conn):  # the generation and the rows it stands for
        generation = _generation(conn)
        cached = _indexes.get(path)
        if not cached or cached[0] != generation:
            rows = conn.execute(
                "SELECT stem, date, film, alt, camera, lens, expansion, year, recipe_text, recipe_text AS recipe, "
                "vector FROM photos LEFT JOIN photo_vectors AS v ON v.sha256 = photos.sha256 AND v.model = ? "
                f"{ORDER_SQL}", (ranker.MODEL_NAME,)).fetchall()
            _indexes[path] = cached = (generation, _Index(rows))
    return cached[1]


def _urls(row: sqlite3.Row, settings) -> tuple[str | None, dict[str, str]]:
    """The photo's original (None while originals are not public) and its thumbnails by kind."""
    full = settings.url("/images/full/" + quote(row["file_name"])) if settings.originals_public else None
    return full, {kind: settings.url("/images/" + quote(row["thumb_" + kind]))
                  for kind in ("avif", "jpg", "small", "xs")}


def _photo(row: sqlite3.Row, settings) -> dict:
    full, thumbs = _urls(row, settings)
    return {"stem": row["stem"], "alt": row["alt"] or "", "full": full, "thumb": thumbs,
            "metadata": json.loads(row["metadata"])}


@functools.lru_cache(maxsize=4096)
def _term_vector(model: ranker.Model, term: str) -> np.ndarray:
    return model.embed([TERM_TEMPLATE.format(term)])[0]


def query(conn: sqlite3.Connection, settings, params: dict) -> dict:
    """GET /photos/query.json: a PhotoQuery dict; raises ApiError(400) naming a bad `from`/`to`.

    Terms matching nothing literally are matched against caption vectors with the /ask model
    (settings [ask] model_path); without the model or stored vectors they stay `dropped`.
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
        def model() -> ranker.Model | None:  # loaded only when a term needs it
            return ranker.model_for(settings)

        order, scores, matched_by_term = _rank(index, candidates, terms, ranking, model)
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


def _rank(index: _Index, candidates: np.ndarray, terms: list[str], ranking: dict, load_model):
    """Rows to return in order, their scores, and per term the rows it matched; fills `ranking`.
    `load_model()` gives the /ask model for terms no field contains, or None."""
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
    unmatched = [term for term in active if not matched_by_term[term].any()]
    model = load_model() if unmatched and len(index.vectors) else None
    if model is not None:
        for term in unmatched[:SEMANTIC_TERMS_MAX]:
            close = index.semantic_mask(model, term, candidates)
            if close.any():
                matched_by_term[term] = close
                scores += SEMANTIC_WEIGHT * close
                hits += close
                ranking["semantic"] = True
    dropped = [term for term in active if not matched_by_term[term].any()]
    # A common term tells too few photos apart to score them, but it still selects: "fujifilm" in an
    # archive of mostly Fujifilm frames is not a request for the others too.
    having_common = candidates.copy()
    for term in common:
        matched_by_term[term] = np.logical_or.reduce([masks[term][name] for name in fields])
        having_common &= matched_by_term[term]
    if common:
        ranking["common"] = common
    if dropped:
        ranking["dropped"] = dropped
    if not active:  # every term is too common to rank by: the photos that have them all, unranked
        ranking["mode"], selected = "all-terms", having_common
    elif ((hits == len(active)) & having_common).any():
        ranking["mode"], selected = "all-terms", (hits == len(active)) & having_common
    elif ((hits > 0) & having_common).any():
        ranking["mode"], selected = "partial", (hits > 0) & having_common
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
        full, thumbs = _urls(row, settings)
        photos.append({"full": full, **{"thumb_" + kind: url for kind, url in thumbs.items()},
                       "stem": row["stem"], "size": row["size"], "uploaded": row["uploaded"]})
    return {"_address": settings.url("/images/manifest.json"), "photos": photos, "count": len(photos)}
