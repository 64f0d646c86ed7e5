"""/search.json on the real server: terms, ranking, limits, snippets, bad input."""
import contextlib
import dataclasses
import json
import re
from pathlib import Path

import pytest

from siteapi import search
from siteapi.content import shown
from siteapi.search import MAX_TERMS, terms


def test_terms_drop_stopwords_and_cap_at_twelve():
    assert terms("How do I find the carburetor jets?") == ["carburetor", "jets"]
    many = " ".join(f"word{i}" for i in range(30))
    assert len(terms(many)) == MAX_TERMS
    assert terms("the and of") == ["the", "and", "of"]  # nothing survives: the raw tokens are used


def test_search_ranks_title_hits_first_and_reports_total(api):
    r = api.get("/search.json?q=carburetor")
    assert r.status_code == 200
    body = r.json()
    assert body["query"] == "carburetor" and body["total"] >= body["returned"] == len(body["results"]) > 0
    top = body["results"][0]
    assert "carb" in (top["title"] + top["description"]).lower()
    assert top["kind"] in ("page", "writing", "document", "utility")
    assert top["url"].startswith("https://aadhar.sh/")
    scores = [x["score"] for x in body["results"]]
    assert scores == sorted(scores, reverse=True)


def test_snippet_is_around_the_first_match(api):
    body = api.get("/search.json?q=valve clearances").json()
    snippet = body["results"][0]["snippet"]
    assert len(snippet) <= 222 and ("valve" in snippet.lower() or "clearance" in snippet.lower())


@pytest.mark.parametrize("q, matched", [("bikes", "bike"), ("walks", "walk"), ("books", "book"), ("cafe", "café")])
def test_the_snippet_shows_a_match_found_by_stem_or_without_its_accent(api, q, matched):
    """The index matches plurals by their porter stem and letters without their accents (unicode61):
    the snippet finds those matches too, rather than starting at the page's first word."""
    results = api.get("/search.json", params={"q": q, "limit": 50}).json()["results"]
    assert results
    for result in results:
        if search.fold(matched) in search.fold(f"{result['title']} {result['description']}"):
            continue  # matched in the title or description, maybe not in the text
        assert re.search(rf"\b{search.fold(matched)}", search.fold(result["snippet"])), (result["url"], result["snippet"])


def test_snippets_are_cut_between_words(api, site_settings):
    """The 70/220-character window moves to the nearest space: "…nly good news." began inside a word."""
    from siteapi import db
    conn = db.connect(site_settings.db_path, readonly=True)
    cut = 0
    for q in ("valve clearances", "carburetor jets", "coffee", "robots", "grain", "news"):
        for result in api.get("/search.json", params={"q": q}).json()["results"]:
            snippet, path = result["snippet"], result["url"].removeprefix(site_settings.public_base_url) or "/"
            text = shown(conn.execute("SELECT text FROM pages WHERE path = ?", (path,)).fetchone()["text"])
            inner = snippet.removeprefix("…").removesuffix("…")
            at = text.find(inner)
            assert at != -1 and len(snippet) <= 222, snippet
            if snippet.startswith("…"):
                assert text[at - 1].isspace(), snippet
            if snippet.endswith("…"):
                assert text[at + len(inner)].isspace(), snippet
            cut += snippet.startswith("…") + snippet.endswith("…")
    assert cut >= 10


def test_a_heading_does_not_run_into_the_sentence_after_it(api):
    """A heading, a list item or a table cell ends where the next block starts: the snippet shows
    " · " there (a paragraph ending a sentence needs nothing); the words themselves are the page's."""
    snippets = [r["snippet"] for q in ("rate limiting", "needle clip", "recently")
                for r in api.get("/search.json", params={"q": q}).json()["results"]]
    assert any("Rate limiting · To keep the API fair" in s for s in snippets), snippets
    assert any("Needle clip · 3rd groove · 3rd groove · Float height · 22 mm" in s for s in snippets), snippets
    assert any("Recently · The latest garage note" in s for s in snippets), snippets
    assert not any(". · " in s or s.startswith(("· ", "…·")) or s.endswith(("·", "·…")) for s in snippets), snippets


@pytest.mark.parametrize("text, seen", [
    ("Rate limiting\nTo keep it fair.\nNext one.", "Rate limiting · To keep it fair. Next one."),
    ('She said "Stop."\nThen (quietly.)\nDone', 'She said "Stop." Then (quietly.) Done'),
    ("a\nb", "a · b"),
])
def test_a_block_break_shows_as_a_dot_unless_a_sentence_ended(text, seen):
    assert shown(text) == seen


def test_limit_below_one_is_clamped_to_one(api):
    assert api.get("/search.json?q=camera&limit=0").json()["returned"] == 1
    assert api.get("/search.json?q=camera&limit=-4").json()["returned"] == 1


def test_total_counts_before_the_limit(api):
    full = api.get("/search.json?q=camera&limit=50").json()
    one = api.get("/search.json?q=camera&limit=1").json()
    assert one["total"] == full["total"] and one["returned"] == 1 and full["total"] > 1


@pytest.mark.parametrize("query", ["", "q=", "q=%20%20", "q=%09"])
def test_missing_or_blank_q_is_a_400_sentence(api, query):
    r = api.get("/search.json?" + query)
    assert r.status_code == 400
    assert "q" in r.json()["error"] and r.json()["parameter"] == "q"


@pytest.mark.parametrize("query", ["q=%00", "q=%00%1B%7F", "q=%E2%80%8B", "q=%EF%BB%BF%E2%80%AE", "q=%EF%BF%BD"])
def test_q_with_nothing_readable_is_a_400_as_blank(api, query):
    """Control, zero-width, bidi and byte-order characters, or the U+FFFD that stands for unreadable
    bytes, are no words (bytes that are not UTF-8 are refused before: test_http_conventions)."""
    r = api.get("/search.json?" + query)
    assert r.status_code == 400 and r.json()["parameter"] == "q", r.text
    assert "readable" in r.json()["error"] and "q=carburetor" in r.json()["error"]


def test_control_characters_are_not_echoed(api):
    body = api.get("/search.json", params={"q": "carburetor\x00\x1b[31m"}).json()
    assert body["query"] == "carburetor [31m" and body["total"] > 0


@pytest.mark.parametrize("spelled", ["car\u00adbu\u00adre\u00adtor", "carbu\u200bretor", "carbu\u2060re\ufefftor",
                                     "ｃａｒｂｕｒｅｔｏｒ", "\U0001d41c\U0001d41a\U0001d42b\U0001d41b\U0001d42e\U0001d42b\U0001d41e\U0001d42d\U0001d428\U0001d42b", "CARBURETOR"])
def test_full_width_styled_and_soft_hyphenated_letters_find_what_plain_letters_find(api, spelled):
    plain = api.get("/search.json", params={"q": "carburetor"}).json()
    body = api.get("/search.json", params={"q": spelled}).json()
    assert body["query"] == spelled and plain["total"] > 0
    assert [r["url"] for r in body["results"]] == [r["url"] for r in plain["results"]]


def test_ligatures_are_read_as_their_letters(api):
    assert api.get("/search.json", params={"q": "\ufb01lm"}).json()["total"] == api.get("/search.json?q=film").json()["total"] > 0


def test_long_q_is_truncated_not_rejected(api):
    r = api.get("/search.json?q=" + "motorcycle " * 40)
    assert r.status_code == 200 and len(r.json()["query"]) == 160


def test_twelve_terms_are_read(api):
    """API.md 9: the first 12 terms are searched (OR-ed into one MATCH), what follows is not read."""
    misses = " ".join(f"zq{chr(97 + i)}" for i in range(12))
    assert api.get("/search.json", params={"q": "carburetor"}).json()["total"] > 0
    assert api.get("/search.json", params={"q": f"{misses} carburetor"}).json()["total"] == 0
    assert api.get("/search.json", params={"q": f"{misses[4:]} carburetor"}).json()["total"] > 0


@pytest.mark.parametrize("q", ['"', "' OR 1=1 --", "NEAR(a b)", "col:title", "*", "a AND", "%_%", "\u0000x", "🙂 emoji"])
def test_fts_syntax_in_q_is_literal(api, q):
    r = api.get("/search.json", params={"q": q})
    assert r.status_code == 200 and isinstance(r.json()["results"], list)


def test_versioned_cache_empties_after_another_connection_commits(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    from siteapi import db

    def check():
        writer = db.writer(tmp_path / "site.db")
        reader = db.connect(tmp_path / "site.db", readonly=True)
        cache = db.versioned_cache(reader, recheck_s=0)
        cache["k"] = "v"
        assert db.versioned_cache(reader, recheck_s=0) == {"k": "v"}  # nothing committed since
        with db.transaction(writer):
            writer.execute("INSERT INTO job_runs(name, started) VALUES ('x', 'now')")
        assert db.versioned_cache(reader, recheck_s=60) == {"k": "v"}  # inside the recheck window
        assert db.versioned_cache(reader, recheck_s=0) == {}           # rechecked: the commit is seen
        full = db.versioned_cache(reader, limit=3, recheck_s=60)
        full.update(a=1, b=2, c=3)
        assert db.versioned_cache(reader, limit=3, recheck_s=60) == {}  # a full cache starts over

    # In a thread of its own: the cache is per thread, and the test thread may hold one left by an
    # earlier test whose closed connection had the same id() as `reader` (and the same data_version).
    with ThreadPoolExecutor(1) as pool:
        pool.submit(check).result()


FILLER = "Notes on a long walk along the canal, with a flask of tea and a borrowed camera. " * 3


def writing_pages(content: Path):
    """A function writing one writing page into the new folder `content` per call."""
    content.mkdir()

    def page(name, title, description, body, lang=None):
        (content / f"{name}.md").write_text(f"---\ntitle: {title}\ndescription: {description}\nkind: writing\n"
                                            f"path: /writing/{name}\ndate: 2026-01-01\n"
                                            + (f"lang: {lang}\n" if lang else "") + f"---\n{body}\n", encoding="utf-8")
    return page


@pytest.fixture(scope="module")
def crowd(tmp_path_factory, checker):
    """A site of 60 pages that all mention "zeppelin", plus three that mention "dirigible" once each in
    a different field (and the body one three times), served by the real app."""
    from app import make_app
    from conftest import Client, build_site, make_settings
    from servers import serve_wsgi

    tmp = tmp_path_factory.mktemp("crowd")
    content = tmp / "content"
    page = writing_pages(content)
    for n in range(60):
        page(f"z{n:02d}", f"Walk number {n}", "A walk by the canal.", f"{FILLER} A zeppelin went over at {n} o'clock.")
    page("in-title", "The dirigible", "A walk by the canal.", FILLER)
    page("in-description", "A hangar visit", "A dirigible in its hangar.", FILLER)
    page("in-body", "A field trip", "A walk by the canal.", f"{FILLER} The dirigible, the dirigible, the dirigible.")
    settings = make_settings(tmp, content_dir=content)
    build_site(settings)
    with serve_wsgi(make_app(settings).wsgi) as base:
        yield Client(base, checker)


def test_limit_clamps_to_fifty_and_a_non_number_means_twenty(crowd):
    assert crowd.get("/search.json?q=zeppelin&limit=999").json()["returned"] == 50
    assert crowd.get("/search.json?q=zeppelin&limit=50").json()["returned"] == 50
    assert crowd.get("/search.json?q=zeppelin&limit=abc").json()["returned"] == 20
    assert crowd.get("/search.json?q=zeppelin&limit=" + "9" * 5000).json()["returned"] == 50  # past int()'s digits
    assert crowd.get("/search.json?q=zeppelin&limit=-" + "9" * 5000).json()["returned"] == 1
    assert crowd.get("/search.json?q=zeppelin&limit=0007").json()["returned"] == 7
    assert crowd.get("/search.json?q=zeppelin&limit=" + "0" * 15000 + "7").json()["returned"] == 7
    assert crowd.get("/search.json?q=zeppelin&limit=-" + "0" * 15000 + "7").json()["returned"] == 1
    # 16 KB of zeros then a non-digit: a non-number, answered at once (the old pattern backtracked
    # through every split of the zeros, 3 s of held GIL)
    assert crowd.get("/search.json?q=zeppelin&limit=" + "0" * 16000 + "x").json()["returned"] == 20
    for not_a_number in ("1_0", "%EF%BC%95", "5.0", "0x10", "%2B-3"):  # underscores, full-width digits...
        assert crowd.get("/search.json?q=zeppelin&limit=" + not_a_number).json()["returned"] == 20, not_a_number
    assert crowd.get("/search.json?q=zeppelin").json()["returned"] == 20
    body = crowd.get("/search.json?q=zeppelin&limit=7").json()
    assert body["returned"] == 7 and body["total"] == 60


def test_a_title_hit_outranks_a_description_hit_which_outranks_body_hits(crowd):
    urls = [r["url"].rsplit("/", 1)[-1] for r in crowd.get("/search.json?q=dirigible").json()["results"]]
    assert urls == ["in-title", "in-description", "in-body"]


def test_versioned_cache_is_never_inherited_by_a_connection_reusing_a_closed_ones_id(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    from siteapi import db

    db.writer(tmp_path / "site.db").close()

    def check():
        first = db.connect(tmp_path / "site.db", readonly=True)
        db.versioned_cache(first)["k"] = "v"
        first.close()
        del first
        for _ in range(200):  # CPython soon hands a new connection the freed one's address
            fresh = db.connect(tmp_path / "site.db", readonly=True)
            assert db.versioned_cache(fresh, recheck_s=60) == {}
            fresh.close()

    with ThreadPoolExecutor(1) as pool:
        pool.submit(check).result()


@pytest.fixture(scope="module")
def world(tmp_path_factory, checker):
    """A site of pages in scripts whose words carry combining marks (Devanagari, Tamil, Thai, vowelled
    Arabic), a Turkish İ and a German ß, served by the real app; `ask` is the same site with /ask's model out of
    reach, so that /ask ranks with the lexical fallback."""
    from app import make_app
    from conftest import Client, build_site, make_settings
    from servers import serve_wsgi

    tmp = tmp_path_factory.mktemp("world")
    content = tmp / "content"
    page = writing_pages(content)
    page("hindi", "हिन्दी लेख", "हिन्दी में एक छोटा लेख।", f"{FILLER} यह लेख हिन्दी में लिखा गया है।")
    page("tamil", "தமிழ் கட்டுரை", "ஒரு சிறிய கட்டுரை.", "இது தமிழ் மொழியில் எழுதப்பட்டது.")
    page("thai", "สวัสดี ชาวโลก", "A Thai greeting.", "สวัสดี")
    page("thai-swing", "สวิง", "A Thai word that shares a fragment with the greeting.", "สวิง")
    page("arabic", "مَرْحَبًا بِكُمْ", "A vowelled Arabic greeting.", "مَرْحَبًا", lang="ar")
    page("istanbul-dotted", "A ferry", "Across the Bosphorus.", f"{FILLER} Then the ferry to İstanbul.")
    page("istanbul-plain", "Istanbul at night", "The city after dark.", FILLER)
    page("sharp-s", "Straße des Cafés", "A street in Paris.", f"{FILLER} We walked down the Straße.")
    page("double-s", "Strasse im Regen", "A street in Zurich.", FILLER)
    page("tokyo", "東京タワーの夜景", "東京タワーから見た夜の街。", "展望台から東京の夜景を見た。", lang="ja")
    page("kyoto", "京都の寺", "古い寺を訪ねた。", "京都で三日間過ごした。")
    page("cities", "旅の記録", "三つの町。", "大阪、京都、東京")  # 京都 and 東京 each a whole run here
    page("cat", "猫と散歩", "A walk with a cat.", "猫が好きです。")
    page("shanghai", "上海的早晨", "A morning in Shanghai.", "我们在外滩喝咖啡。")
    page("thai-lunch", "อาหารกลางวัน", "Lunch in Bangkok.", "ฉันชอบกินข้าวมันไก่มาก")
    page("thai-falls", "น้ำตกเอราวัณ", "A waterfall.", "เราไปเที่ยวน้ำตกกัน")  # ำ: NFKC makes it two letters
    page("olympics", "大会２０２０の記録", "Full-width digits.", "ｶﾀｶﾅの看板")  # full-width digits, half-width kana
    settings = make_settings(tmp, content_dir=content)
    build_site(settings)
    lexical = dataclasses.replace(settings, sections={**settings.sections, "ask": {
        **settings.section("ask"), "model_path": str(tmp / "no-model.onnx")}})
    with serve_wsgi(make_app(settings).wsgi) as base, serve_wsgi(make_app(lexical).wsgi) as ask_base:
        yield {"search": Client(base, checker), "ask": Client(ask_base, checker)}


def found(world, q: str) -> list[str]:
    return [r["url"].rsplit("/", 1)[-1] for r in world["search"].get("/search.json", params={"q": q}).json()["results"]]


@pytest.mark.parametrize("q, pages", [
    ("हिन्दी", ["hindi"]),               # a vowel sign and a virama inside the word
    ("தமிழ்", ["tamil"]),
    ("สวัสดี", ["thai"]),                # not สวิง, which shares a fragment between two marks
    ("مَرْحَبًا", ["arabic"]),            # harakat
    ("İstanbul", ["istanbul-dotted", "istanbul-plain"]),  # lower() spells İ as i + U+0307
    ("istanbul", ["istanbul-dotted", "istanbul-plain"]),
])
def test_a_word_with_combining_marks_finds_its_pages(world, q, pages):
    assert sorted(found(world, q)) == pages


@pytest.mark.parametrize("q, pages", [
    ("東京", ["cities", "tokyo"]),        # inside 東京タワーの夜景 and 東京の夜景, and a run of its own
    ("タワー", ["tokyo"]),
    ("夜景", ["tokyo"]),
    ("京", ["cities", "kyoto", "tokyo"]),  # one Han letter is a word
    ("東京都", []),                        # the letters in a row, not each: 東京 and 京都 are not 東京都
    ("猫", ["cat"]),
    ("外滩", ["shanghai"]),
    ("ข้าวมันไก่", ["thai-lunch"]),        # a Thai word inside a run, its vowel and tone marks too
    ("東京 ferry", ["cities", "istanbul-dotted", "tokyo"]),  # words of both kinds: the pages of either
    ("น้ำตก", ["thai-falls"]),             # the page read in NFKC form, as the query is (review25 M1)
    ("大会2020", ["olympics"]),
    ("カタカナ", ["olympics"]),
    ("の", []), ("ร", []),                 # a lone kana or Thai letter is no word; a Han letter is
])
def test_a_word_of_a_script_written_without_spaces_is_found_inside_a_run(world, q, pages):
    """unicode61 reads a run between punctuation as one word, so such a word was found only when the
    run was exactly it (unicode_audit24 M2): now as a reader's find-in-page finds it."""
    assert sorted(found(world, q)) == pages


def test_the_snippet_and_asks_fallback_read_a_word_inside_a_run(world):
    body = world["search"].get("/search.json", params={"q": "夜景 ferry"}).json()
    assert body["total"] == 2 and {r["url"].rsplit("/", 1)[-1] for r in body["results"]} == {"tokyo", "istanbul-dotted"}
    assert "東京の夜景" in next(r["snippet"] for r in body["results"] if r["url"].endswith("/tokyo"))
    ranked = world["search"].get("/search.json", params={"q": "東京"}).json()["results"]
    assert [r["url"].rsplit("/", 1)[-1] for r in ranked] == ["tokyo", "cities"]  # a run of its own counts once (review25b N1)
    asked = world["ask"].get("/ask", params={"query": "東京", "streaming": "0"}).json()
    assert asked["_meta"]["ranking"] == "lexical:model-unavailable"
    assert [r["url"].rsplit("/", 1)[-1] for r in asked["results"]] == ["tokyo", "cities"]
    assert asked["results"][0]["score"] == 100  # in its title, its description and its text, each inside a run


def test_the_unspaced_index_follows_the_pages(tmp_path):
    """Kept by the content job: a page made before it existed is indexed by the next run, a page
    whose text changes is indexed again, and a page that loses its last such letter, or goes, leaves."""
    from conftest import build_site, make_settings
    from siteapi import db

    page = writing_pages(tmp_path / "content")
    page("tokyo", "東京タワー", "A tower.", "夜景")
    page("plain", "A plain page", "No such letters.", "Only English here.")
    settings = make_settings(tmp_path, content_dir=tmp_path / "content")
    build_site(settings)

    def indexed() -> dict:
        with contextlib.closing(db.connect(settings.db_path, readonly=True)) as conn:
            return {row["path"]: row["text"] for row in conn.execute("SELECT path, text FROM pages_unspaced")}

    assert indexed() == {"/writing/tokyo": " 夜  景 "}
    with contextlib.closing(db.writer(settings.db_path)) as conn, db.transaction(conn):
        conn.execute("UPDATE pages_unspaced SET hash = 'unspaced-v1:' || substr(hash, 13)")  # made the old way

    def total(q: str) -> int:
        with contextlib.closing(db.connect(settings.db_path, readonly=True)) as conn:
            return search.search(conn, q, 10, settings)["total"]

    assert total("タワー") == 0  # a row not made from the page as it stands finds nothing (review25 L1)
    build_site(settings)
    assert total("タワー") == 1
    with contextlib.closing(db.connect(settings.db_path, readonly=True)) as conn:
        assert [row[0][:12] for row in conn.execute("SELECT hash FROM pages_unspaced")] == ["unspaced-v2:"]
    with contextlib.closing(db.writer(settings.db_path)) as conn, db.transaction(conn):
        conn.execute("DELETE FROM pages_unspaced")  # as a site.db made before the index
    build_site(settings)
    assert indexed() == {"/writing/tokyo": " 夜  景 "}
    page("tokyo", "東京タワー", "A tower.", "朝の景色")
    page("plain", "A plain page", "Now with 猫.", "Only English here.")
    build_site(settings)
    assert indexed() == {"/writing/tokyo": " 朝  の  景  色 ", "/writing/plain": "Only English here."}
    (tmp_path / "content" / "tokyo.md").unlink()
    page("plain", "A plain page", "No such letters.", "Only English here.")
    build_site(settings)
    assert indexed() == {}


def test_the_snippet_shows_a_word_with_combining_marks(world):
    results = world["search"].get("/search.json", params={"q": "İstanbul"}).json()["results"]
    assert "ferry to İstanbul." in next(r["snippet"] for r in results if r["url"].endswith("/istanbul-dotted"))
    results = world["search"].get("/search.json", params={"q": "हिन्दी"}).json()["results"]
    assert "यह लेख हिन्दी में" in results[0]["snippet"]


def test_asks_lexical_fallback_reads_words_with_combining_marks(world):
    body = world["ask"].get("/ask", params={"query": "हिन्दी", "streaming": "0"}).json()
    assert body["_meta"]["ranking"] == "lexical:model-unavailable"
    top = body["results"][0]
    assert top["url"].endswith("/writing/hindi") and top["score"] == 100  # title, description and text


@pytest.mark.parametrize("q", ["straße", "STRASSE", "Strasse", "STRAẞE"])
def test_sharp_s_and_double_s_find_each_other(world, q):
    """unicode61 folds neither into the other, so a word with ß or ss is searched in both spellings."""
    assert sorted(found(world, q)) == ["double-s", "sharp-s"]
    results = world["search"].get("/search.json", params={"q": q}).json()["results"]
    assert "walked down the Straße." in next(r["snippet"] for r in results if r["url"].endswith("/sharp-s"))


@pytest.mark.parametrize("name, lang, direction", [("tokyo", "ja", "ltr"), ("arabic", "ar", "rtl"), ("hindi", "en", "ltr")])
def test_a_page_in_another_language_says_so_and_keeps_the_sites_own_words_in_english(world, name, lang, direction):
    """`lang` in the front matter: the page's language and direction (a screen reader's voice, a
    right-to-left page read right to left), the navigation and footer staying the site's English
    (unicode_audit24 L4); a page that names none is the site's."""
    page = world["search"].get(f"/writing/{name}", headers={"Accept": "text/html"}).text
    assert f'<html lang="{lang}" dir="{direction}">' in page
    chrome = ' lang="en" dir="ltr"' if lang != "en" else ""
    assert f"<header{chrome}>" in page and f"<footer{chrome}>" in page
    ld = json.loads(re.search(r'<script type="application/ld\+json">(.*?)</script>', page, re.S)[1])
    assert ld["@graph"][1]["inLanguage"] == lang
