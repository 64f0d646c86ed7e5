"""/search.json: query terms, FTS5 bm25 ranking (title over description over body), snippets.

A word with letters of a script written without spaces (Chinese, Japanese, Thai...) is searched in
`pages_unspaced` as the phrase of its letters, so it is found inside any longer run of text, as
a reader's find-in-page finds it: 東京 finds the page that says 東京タワー. Other words are searched
in `pages_fts`; a page found by both scores the sum."""
from __future__ import annotations

import re
import sqlite3
import unicodedata

from siteapi import db, graphemes
from siteapi.content import UNSPACED, shown, spaced, unspaced_hash
from siteapi.pages import page_url
from siteapi.web import ApiError, Reply, cached_json, clamp_int

MAX_QUERY = 160
MAX_TERMS = 12
# English function words plus words every question here carries ("find", "photo", "post").
STOPWORDS = frozenset("""
a about after all also an and any are as at be been but by can could did do does for from had has
have how i if in into is it its me my of on or our she should so that the their them then there
these they this to was we were what when where which who why will with would you your find show
page post site photo photos shot
""".split())
# bm25 column weights for (title, description, text): a title hit outweighs a description hit,
# which outweighs a body hit.
WEIGHTS = (10.0, 4.0, 1.0)
SNIPPET_BEFORE, SNIPPET_LENGTH = 70, 220
# Control characters, and lone surrogates a JSON body can carry as \u escapes (no tokenizer or
# encoder takes them), become one space.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]+")
# What neither the FTS index nor the model's tokenizer reads: controls, format characters (zero-width,
# bidi and byte-order marks), surrogates, spaces, and the U+FFFD that stands in for bytes not UTF-8.
_UNREADABLE = frozenset({"Cc", "Cf", "Cs", "Zs", "Zl", "Zp"})


def clean(text: str) -> str:
    """`text` with control characters as spaces and trimmed; "" when no character in it can be read."""
    text = _CONTROL.sub(" ", text).strip()
    readable = any(ch != "\ufffd" and unicodedata.category(ch) not in _UNREADABLE for ch in text)
    return text if readable else ""


# Format characters that sit inside words in text copied from pages (soft hyphens, zero-width
# spaces and joiners, bidi marks, byte-order marks): dropped, not read as a break between words.
_INVISIBLE = re.compile("[\u00ad\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff]")
# What \w does not match, and the underscore: a word ends there unless it is a combining mark.
_GAP = re.compile(r"[\W_]+")


def _is_mark(char: str) -> bool:
    return unicodedata.category(char)[0] == "M"


def words(text: str, cut: int | None = None) -> list[str]:
    """`text` lowercased, its first `cut` characters, split into words: runs of letters and digits
    with the combining marks that follow them (vowel signs, viramas, harakat). Read in NFKC form:
    full-width and styled letters and ligatures as the plain letters the index holds; a soft hyphen
    or zero-width space inside a word leaves the word whole.

    The index's unicode61 tokenizer splits हिन्दी at its marks into ह, न, द; a word searched as one
    FTS5 phrase is split the same way and finds them in a row, where its one-letter pieces alone
    would be dropped as too short or match any word holding them."""
    # İ is the one letter whose lower() adds a mark (i + U+0307); unicode61 reads it as a plain i
    text = unicodedata.normalize("NFKC", _INVISIBLE.sub("", text)).replace("İ", "i").lower()[:cut]
    if text.isascii():  # no marks to keep: split at once, in about half the time (most photo fields)
        return [word for word in _GAP.split(text) if word]
    text = " " + text  # ends marks that open the text, which follow no letter
    found, start = [], 0
    for gap in _GAP.finditer(text):
        end = gap.start()
        while end < gap.end() and _is_mark(text[end]):
            end += 1
        if end < gap.end():  # the gap holds more than marks: the word ends with them
            found.append(text[start:end])
            start = gap.end()
    found.append(text[start:])
    return [word for word in found if word]


# Han letters (with their iteration marks), each of which can be a word on its own (猫, 雪); a lone
# kana, Thai or other letter is a particle or a piece of a word.
_HAN = re.compile("[\u3005\u3007\u3021-\u3029\u3038-\u303b\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
                  "\U00020000-\U0003134f]")


def tokens(query: str) -> list[str]:
    """The words of the query's first 160 characters longer than one character (or one Han
    letter), the first 12."""
    return [t for t in words(query[:MAX_QUERY], MAX_QUERY) if len(t) > 1 or _HAN.match(t)][:MAX_TERMS]


def terms(query: str) -> list[str]:
    """The query's tokens less stopwords (or the raw tokens when nothing else survives)."""
    raw = tokens(query)
    kept = [t for t in raw if t not in STOPWORDS]
    return list(dict.fromkeys(kept or raw))


def _base_letter(char: str) -> str:
    decomposed = unicodedata.normalize("NFKD", char)[0]
    return decomposed if decomposed.isascii() else char


# Latin letters with diacritics as their base letter, one character for one, as the index's
# unicode61 tokenizer reads them (café matches cafe): offsets in folded text are the text's own.
_FOLD = str.maketrans({chr(c): _base_letter(chr(c)) for c in range(0xC0, 0x250) if _base_letter(chr(c)) != chr(c)})


def fold(text: str) -> str:
    """`text` lowercased with Latin diacritics dropped, each character still one character."""
    return text.translate(_FOLD).lower()


def _stem(word: str) -> str:
    """A prefix the index's porter stem of `word` starts with, near enough: longer words lose up to
    three letters, short ones a plural or past ending (bikes → bik, mixes → mix, books → book)."""
    if len(word) > 5:
        return word[: max(4, len(word) - 3)]
    for ending in ("es", "ed", "s"):
        if word.endswith(ending) and len(word) - len(ending) >= 3:
            return word[: -len(ending)]
    return word


def spellings(word: str) -> list[str]:
    """`word`, and with an ß or an ss, the word spelled with ss throughout and with ß throughout:
    unicode61 folds neither, so Straße and STRASSE are different words to the index."""
    return list(dict.fromkeys((word, word.replace("ß", "ss"), word.replace("ss", "ß"))))


def stems_pattern(words: list[str]) -> re.Pattern:
    """Matches the start of any term's stem (in either spelling) at a word boundary, or an UNSPACED
    term anywhere, in `fold`ed text."""
    stems = sorted({_stem(fold(s)) for w in words if not UNSPACED.search(w) for s in spellings(w)}, key=len, reverse=True)
    inside = sorted({fold(w) for w in words if UNSPACED.search(w)}, key=len, reverse=True)
    return re.compile("|".join(([r"\b(?:" + "|".join(map(re.escape, stems)) + ")"] if stems else [])
                               + [re.escape(w) for w in inside]))


def snippet(text: str, pattern: re.Pattern) -> str:
    """At most 220 chars from about 70 before the earliest match of a term (or its stem), with … on
    cut sides; a cut falls between words, never inside one. The text is `shown`: a heading no longer
    runs into the sentence after it ("Rate limiting · To keep the API fair")."""
    # folded before it is shown, as the same offsets: fold keeps an ASCII text on str.translate's fast
    # path, which shown's "·" would leave for the slow one (a search took 1.3 times as long)
    match = pattern.search(shown(fold(text)))
    text = shown(text)
    start = max(0, match.start() - SNIPPET_BEFORE) if match else 0
    if start > 0 and not text[start - 1].isspace():
        space = text.find(" ", start, match.start())
        start = space + 1 if space != -1 else graphemes.start_at(text, start)
    end = min(len(text), start + SNIPPET_LENGTH)
    if end < len(text) and not text[end].isspace():
        space = text.rfind(" ", start, end)
        end = space if space > (match.end() if match else start) else graphemes.end_at(text, end)
    piece = text[start:end].strip(" ·")  # a window cut beside a block's end keeps no dangling " · "
    return ("…" if start > 0 else "") + piece + ("…" if end < len(text) else "")


def fts_match(words: list[str]) -> str:
    return " OR ".join('"' + s.replace('"', '""') + '"' for w in words for s in spellings(w))


def search(conn: sqlite3.Connection, q: str, limit: int, settings) -> dict:
    """SearchResults for `q`, from this thread's cache while site.db has not changed since."""
    words = terms(q)
    query = q[:MAX_QUERY]
    if not words:
        return {"query": query, "total": 0, "returned": 0, "results": []}
    cache = db.versioned_cache(conn)
    key = ("rank", tuple(words), limit, settings.public_base_url)
    if key not in cache:
        cache[key] = rank(conn, words, limit, settings)
    return {"query": query, **cache[key]}


_BM25 = ", ".join(map(str, WEIGHTS))
_HITS = {  # (page path, score) of a MATCH in each index; a pages_unspaced row counts while it is the page's
    "pages_fts": f"SELECT p.path, -bm25(pages_fts, {_BM25}) AS score FROM pages_fts JOIN pages p ON p.rowid = pages_fts.rowid"
                 " WHERE pages_fts MATCH ?",
    "pages_unspaced": f"SELECT p.path, -bm25(pages_unspaced, {_BM25}) AS score FROM pages_unspaced JOIN pages p"
                      " ON p.path = pages_unspaced.path AND pages_unspaced.hash = ? || p.hash WHERE pages_unspaced MATCH ?",
}


def _scores_with_unspaced(conn: sqlite3.Connection, words: list[str], unspaced: list[str]) -> dict[str, float]:
    """path -> score of the pages that hold any word: the `unspaced` ones (those of UNSPACED letters)
    in pages_unspaced, the others in pages_fts, a page's scores summed."""
    scores: dict[str, float] = {}
    spaced_words = [w for w in words if w not in unspaced]
    if spaced_words:
        scores.update(conn.execute(_HITS["pages_fts"], (fts_match(spaced_words),)).fetchall())
    inside = {}
    if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'pages_unspaced'").fetchone():
        inside = dict(conn.execute(_HITS["pages_unspaced"],
                                   (unspaced_hash(""), fts_match([spaced(w) for w in unspaced]))).fetchall())
    # a run equal to the word, in pages_fts, for the pages pages_unspaced does not hold yet (a site.db
    # from before it, which a read-only copy stays, or before the content job's run): a page it holds
    # is scored there alone, or a word it names once would count twice
    whole = conn.execute(_HITS["pages_fts"], (fts_match(unspaced),)).fetchall()
    for path, score in [*inside.items(), *((path, score) for path, score in whole if path not in inside)]:
        scores[path] = scores.get(path, 0.0) + score
    return scores


def rank(conn: sqlite3.Connection, words: list[str], limit: int, settings) -> dict:
    """Total before the limit and the ranked rows with kind and snippet."""
    unspaced = [w for w in words if UNSPACED.search(w)]
    with db.one_snapshot(conn):  # the total and the rows of one version
        if not unspaced:
            match = fts_match(words)
            total = conn.execute("SELECT count(*) FROM pages_fts WHERE pages_fts MATCH ?", (match,)).fetchone()[0]
            rows = conn.execute(
                f"SELECT p.path, p.title, p.description, p.kind, p.text, -bm25(pages_fts, {_BM25}) AS score"
                " FROM pages_fts JOIN pages p ON p.rowid = pages_fts.rowid WHERE pages_fts MATCH ?"
                " ORDER BY score DESC, p.path LIMIT ?",
                (match, limit),
            ).fetchall()
        else:
            scores = _scores_with_unspaced(conn, words, unspaced)
            total = len(scores)
            best = sorted(scores, key=lambda path: (-scores[path], path))[:limit]
            found = {row["path"]: row for row in conn.execute(
                f"SELECT path, title, description, kind, text FROM pages WHERE path IN ({', '.join('?' * len(best))})",
                best)}
            rows = [{**found[path], "score": scores[path]} for path in best if path in found]
    pattern = stems_pattern(words)
    results = [
        {
            "url": page_url(settings, row["path"]),
            "title": row["title"],
            "kind": row["kind"],
            "description": row["description"],
            "snippet": snippet(row["text"], pattern),
            "score": round(row["score"], 4),
        }
        for row in rows
    ]
    return {"total": total, "returned": len(results), "results": results}


def search_endpoint(conn: sqlite3.Connection, params, settings) -> Reply:
    """The /search.json body, already encoded: a repeated query costs a dictionary lookup."""
    sent = params.get("q") or ""
    q = clean(sent)
    if not q:
        problem = "has no readable characters (only control, invisible or undecodable ones)" if sent.strip() else "is required"
        other = " (query is /ask's parameter; this endpoint reads q)" if "query" in params and not sent else ""
        raise ApiError(400, f"Parameter q {problem}: send the words to search for as UTF-8 text, e.g. "
                       f"/search.json?q=carburetor{other}.", code="missing_parameter", parameter="q")
    limit = clamp_int(params.get("limit"), 20, 1, 50)
    return cached_json(conn, ("search", q, limit, settings.public_base_url), lambda: search(conn, q, limit, settings))
