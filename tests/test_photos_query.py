"""/photos/query.json rules on the real server, over a temp site.db filled by ingesting the demo photos."""
from __future__ import annotations

import dataclasses
import email.utils
import http.client
import io
import json
import os
import re
import shutil
import time
from urllib.parse import parse_qsl, unquote

import exiv2
import numpy as np
import pytest
from PIL import Image

from siteapi import db, demo_photos, ingest, photos
from siteapi.config import load_settings

from app import make_app
from conftest import ROOT, SHARED, Client, make_settings
from servers import serve_wsgi

DEMOS = {demo.stem: demo for demo in demo_photos.DEMOS}


@pytest.fixture(scope="module")
def env(tmp_path_factory, checker):
    tmp = tmp_path_factory.mktemp("photoq")
    settings = make_settings(tmp)
    demo_photos.generate(settings.photos_dir, count=len(demo_photos.DEMOS))
    ingest.run_photos(settings)
    conn = db.connect(settings.db_path, readonly=True)
    with serve_wsgi(make_app(settings).wsgi) as base:
        yield settings, conn, Client(base, checker)
    conn.close()


def get(env, **params):
    return env[2].get("/photos/query.json", params=params)


def run(env, **params):
    answer = get(env, **params)
    assert answer.status_code == 200, answer.text
    return answer.json()


def stems(body):
    return [photo["stem"] for photo in body["photos"]]


def newest_first(selected):
    return sorted(sorted(selected), key=lambda stem: DEMOS[stem].date, reverse=True)


def test_no_parameters_lists_newest_first(env):
    body = run(env)
    assert body["ranking"] == {"mode": "filters-only", "terms": [], "semantic": False}
    assert body["query"] == {"q": "", "camera": "", "lens": "", "film": "", "recipe": "", "from": "", "to": ""}
    assert body["total"] == len(DEMOS) and (body["limit"], body["offset"]) == (25, 0)
    assert stems(body) == newest_first(DEMOS)[:25]
    assert "score" not in body["photos"][0] and "matched" not in body["photos"][0]


def test_the_utility_pages_examples_find_demo_photos(env):
    """Each example request on /utilities/photos finds photos in the demo archive a first make run
    generates: a reader trying them sees the filters work."""
    text = (ROOT / "content" / "utilities" / "photos.md").read_text(encoding="utf-8")
    examples = re.findall(r"^/photos/query\.json\?(\S+)$", text, re.M)
    assert len(examples) >= 2
    for example in examples:
        assert run(env, **dict(parse_qsl(example)))["total"] > 0, example


def test_photo_shape(env):
    settings, conn, _ = env
    photo = run(env, camera="ILCE")["photos"][0]
    row = conn.execute("SELECT * FROM photos WHERE stem = 'DSC01234'").fetchone()
    assert photo["stem"] == "DSC01234" and photo["alt"] == "Hot-air balloons rising over the valley"
    assert photo["full"] == settings.url("/images/full/DSC01234.jpg")
    assert photo["thumb"] == {k: settings.url("/images/" + row["thumb_" + k]) for k in ("avif", "jpg", "small", "xs")}
    assert photo["metadata"] == json.loads(row["metadata"])
    hidden = photos.query(conn, dataclasses.replace(settings, originals_public=False), {"camera": "ILCE"})
    assert hidden["photos"][0]["full"] is None
    assert run(env, q="", camera="GR III")["photos"][0]["alt"] == "Shadow of a bicycle on a whitewashed wall"
    assert run(env, camera="X-S20", q="")["photos"][0]["stem"] == "DSCF0122"
    assert run(env, stem="ignored", film="eterna")["total"] == 3  # Eterna and Eterna Bleach Bypass


def test_limit_and_offset_are_clamped(env):
    assert run(env, limit="0")["limit"] == 1
    assert run(env, limit="500")["limit"] == 100
    assert run(env, limit="abc")["limit"] == 25
    assert run(env, offset="-5")["offset"] == 0
    assert run(env, limit="9" * 5000)["limit"] == 100 and run(env, offset="9" * 5000)["offset"] == 10000
    body = run(env, offset="999999")
    assert body["offset"] == 10000 and body["photos"] == [] and body["total"] == len(DEMOS)
    assert stems(run(env, limit="3", offset="2")) == newest_first(DEMOS)[2:5]


def test_substring_filters_are_case_insensitive(env):
    assert set(stems(run(env, camera="x100vi"))) == {"DSCF0101", "DSCF0106", "DSCF0109", "DSCF0113", "DSCF0117", "DSCF0121"}
    assert set(stems(run(env, lens="xf33MM"))) == {"DSCF0102", "DSCF0116", "DSCF0125"}
    assert set(stems(run(env, film="acros"))) == {"DSCF0103", "DSCF0104", "DSCF0118"}
    assert set(stems(run(env, film="Reala ACE"))) == {"DSCF0102", "DSCF0116"}
    both = run(env, camera="X-T5", film="classic")
    assert set(stems(both)) == {"DSCF0112", "DSCF0125"} and both["query"]["film"] == "classic"


def test_each_text_filter_is_described_with_examples_that_find_photos(env):
    """The examples are what keeps a model from sending a sentence as `camera`; the MCP tool
    photo_query shows the same descriptions."""
    api = env[2]
    described = {p["name"]: p["description"] for p in api.get("/openapi.json").json()["paths"]["/photos/query.json"]["get"]["parameters"]}
    tools = api.request("POST", "/mcp", data=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
                        headers={"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}).json()
    (tool,) = [t for t in tools["result"]["tools"] if t["name"] == "photo_query"]
    for name in ("camera", "lens", "film", "recipe"):
        assert tool["inputSchema"]["properties"][name]["description"] == described[name]
        (listed,) = re.findall(r"like (`[^`]+`(?: or `[^`]+`)*)", described[name])
        for example in re.findall(r"`([^`]+)`", listed):
            assert run(env, **{name: example})["total"] > 0, (name, example)


def test_recipe_filter_matches_across_the_card(env):
    dr400 = {s for s, d in DEMOS.items() if d.fuji and d.fuji["dr"] == (1, 400)}  # (0, 400) is DR-Auto
    assert set(stems(run(env, recipe="DR400"))) == dr400
    clarity2 = {s for s, d in DEMOS.items() if d.fuji and d.fuji["modern"] and d.fuji["clarity"] == 2}
    assert set(stems(run(env, recipe="Clarity: +2", limit="100"))) == clarity2
    assert stems(run(env, recipe="grain effect: strong / large", film="nostalgic")) == ["DSCF0109"]
    assert stems(run(env, recipe="4700K, R+4 / B-2")) == ["DSCF0101"]


def test_recipe_filter_takes_any_spacing_around_the_colon_and_whole_numbers(env):
    cards = {r["stem"]: r["recipe_text"].splitlines() for r in env[1].execute("SELECT stem, recipe_text FROM photos")
             if r["recipe_text"]}
    minus_one = {stem for stem, lines in cards.items() if "Highlight: -1" in lines}
    assert minus_one and any("Highlight: -1.5" in lines for lines in cards.values())  # both on the demo cards
    for sent in ("Highlight: -1", "highlight:-1", "Highlight :  -1", "HIGHLIGHT:\t-1"):
        assert set(stems(run(env, recipe=sent, limit="100"))) == minus_one, sent
    half = {stem for stem, lines in cards.items() if "Highlight: -1.5" in lines}
    assert set(stems(run(env, recipe="Highlight:-1.5", limit="100"))) == half
    dr400 = {stem for stem, lines in cards.items() if "Dynamic Range: DR400" in lines}
    assert set(stems(run(env, recipe="Dynamic Range:DR400", limit="100"))) == dr400 != set()


def test_dates_filter_inclusively(env):
    in_2024 = {s for s, d in DEMOS.items() if d.date.startswith("2024")}
    body = run(env, **{"from": "2024-01-01", "to": "2024-12-31", "limit": "100"})
    assert set(stems(body)) == in_2024 and body["query"]["from"] == "2024-01-01"
    assert stems(run(env, **{"from": "2023-01-14", "to": "2023-01-14"})) == ["DSCF0101"]
    assert run(env, **{"from": "2026-01-01"})["total"] == 3


def test_from_after_to_is_empty_not_an_error(env):
    body = run(env, **{"from": "2025-01-01", "to": "2024-01-01"})
    assert body["total"] == 0 and body["photos"] == []


@pytest.mark.parametrize("name, value", [("from", "2024-13-45"), ("to", "yesterday"), ("from", "2024-2-1"),
                                         ("to", "2024-02-30"), ("from", "２０２４-０５-３１")])
def test_bad_dates_are_400_naming_the_parameter(env, name, value):
    answer = get(env, **{name: value})
    assert answer.status_code == 400
    assert answer.json()["parameter"] == name
    assert name in answer.json()["error"] and "YYYY-MM-DD" in answer.json()["error"]
    # a date written right that is no day of the calendar is told so, not that it is written wrong
    assert ("no day of the calendar" in answer.json()["error"]) == (value in ("2024-13-45", "2024-02-30"))


def test_a_parameter_sent_twice_is_read_from_its_first_value(env):
    """As the OpenAPI document says, for every endpoint: /photos/query.json echoes what it read."""
    answer = env[2].get("/photos/query.json?q=harbour&q=beach&camera=&camera=X100VI")
    assert answer.status_code == 200 and answer.json()["query"]["q"] == "harbour"
    assert answer.json()["query"]["camera"] == ""


def test_text_filters_are_truncated_to_120_characters(env):
    body = run(env, camera="X" * 200, q="beach " * 40)
    assert len(body["query"]["camera"]) == 120 and len(body["query"]["q"]) == 120
    assert body["total"] == 0


@pytest.mark.parametrize("value", ["%", "_", "'", '"', "X_T5", "%Classic%", "' OR 1=1 --", "\\"])
def test_sql_and_like_metacharacters_match_literally(env, value):
    for name in ("camera", "lens", "film", "recipe"):
        body = run(env, **{name: value})
        assert body["total"] == 0 and body["query"][name] == value, (name, value)
    ranked = run(env, q=value)  # q splits on punctuation: no error, only the words count
    assert ranked["ranking"]["terms"] == photos.query_terms(value)


def test_literal_punctuation_still_matches(env):
    assert stems(run(env, lens="F2.8-4 R")) == ["DSCF0107"]
    assert set(stems(run(env, recipe="R+1 / B-3"))) == {"DSCF0102"}


def test_q_all_terms_with_plural_stems(env):
    body = run(env, q="beaches")
    assert body["ranking"] == {"mode": "all-terms", "terms": ["beaches"], "semantic": False}
    assert stems(body) == ["DSCF0118", "DSCF0116", "DSCF0102"]  # equal caption scores: newest first
    assert all(p["score"] == 5 and p["matched"] == ["beaches"] for p in body["photos"])
    both = run(env, q="Beach kite")
    assert stems(both) == ["DSCF0102"] and both["photos"][0]["score"] == 10
    wide = run(env, q="Ｂｅａｃｈ 𝐤𝐢𝐭𝐞")  # full-width and styled letters read as plain ones (NFKC)
    assert wide["ranking"]["terms"] == ["beach", "kite"] and stems(wide) == ["DSCF0102"]


def test_q_partial_lists_dropped_terms(env):
    body = run(env, q="kite zebra")
    assert body["ranking"]["mode"] == "partial" and body["ranking"]["dropped"] == ["zebra"]
    assert set(stems(body)) == {"DSCF0102", "DSCF0125"}
    assert all(p["matched"] == ["kite"] for p in body["photos"])
    partial = run(env, q="beach tram")
    assert partial["ranking"]["mode"] == "partial" and "dropped" not in partial["ranking"]
    assert set(stems(partial)) == {"DSCF0102", "DSCF0116", "DSCF0118", "DSCF0110"}


def test_q_no_match(env):
    body = run(env, q="zebra giraffe")
    assert body["ranking"] == {"mode": "no-match", "terms": ["zebra", "giraffe"], "semantic": False,
                               "dropped": ["zebra", "giraffe"]}
    assert body["total"] == 0 and body["photos"] == []


def test_q_of_stopwords_only_is_no_terms(env):
    body = run(env, q="show me the photos", camera="sony")
    assert body["ranking"] == {"mode": "no-terms", "terms": [], "semantic": False}
    assert stems(body) == ["DSC01234"] and body["photos"][0]["score"] == 0
    assert body["query"]["q"] == "show me the photos"


def test_common_terms_score_nothing_when_four_or_more_candidates(env):
    body = run(env, q="fujifilm harbour")
    assert body["ranking"]["common"] == ["fujifilm"]
    assert body["ranking"]["mode"] == "all-terms" and stems(body) == ["DSCF0101"]
    assert body["photos"][0]["matched"] == ["fujifilm", "harbour"] and body["photos"][0]["score"] == 5
    few = run(env, q="fujifilm", film="acros")  # three candidates: too few to call anything common
    assert "common" not in few["ranking"] and few["total"] == 3
    assert all(p["score"] == 4 for p in few["photos"])  # camera weight


def test_a_common_term_still_selects_the_photos_that_have_it(env):
    """Too common to rank by, but "fujifilm" does not bring back the Sony and Ricoh frames."""
    fuji = {stem for stem, demo in DEMOS.items() if "FUJIFILM" in demo.make.upper()}
    assert 4 <= len(fuji) < len(DEMOS)
    body = run(env, q="fujifilm", limit=100)
    assert body["ranking"]["common"] == ["fujifilm"] and body["ranking"]["mode"] == "all-terms"
    assert set(stems(body)) == fuji and body["total"] == len(fuji)
    assert all(p["score"] == 0 and p["matched"] == ["fujifilm"] for p in body["photos"])
    sony = run(env, q="fujifilm harbour", camera="sony")  # one candidate, so nothing is common
    assert sony["ranking"]["mode"] == "no-match" and sony["photos"] == []


def test_weights_choose_the_best_field_once_per_term(env):
    reala = run(env, q="reala")
    assert set(stems(reala)) == {"DSCF0102", "DSCF0116"} and {p["score"] for p in reala["photos"]} == {6}
    night = run(env, q="night")  # caption (5) beats the implied-words field (3), scored once
    assert night["photos"][0]["stem"] == "DSCF0103" and night["photos"][0]["score"] == 5
    assert {p["score"] for p in night["photos"][1:]} == {3}
    mixed = run(env, q="classic beach", limit="100")  # no photo has both: film (6) ranks above caption (5)
    assert mixed["ranking"]["mode"] == "partial"
    scores = [p["score"] for p in mixed["photos"]]
    assert scores == sorted(scores, reverse=True) and scores[0] == 6 and scores[-1] == 5
    assert {p["stem"] for p in mixed["photos"] if p["score"] == 5} == {"DSCF0102", "DSCF0116", "DSCF0118"}


def test_matching_rules(env):
    assert stems(run(env, q="moun"))[:1] == ["DSCF0105"]  # token starts with the term
    assert stems(run(env, q="harbourside")) == ["DSCF0101"]  # the term starts with a 5+ letter token
    assert "DSCF0101" not in stems(run(env, q="harbinger"))
    digit = run(env, q="100vi")  # a term with a digit matches inside a token
    assert digit["total"] == 6 and {p["score"] for p in digit["photos"]} == {4}
    year = run(env, q="2023")
    assert year["total"] == sum(d.date.startswith("2023") for d in DEMOS.values())
    assert stems(run(env, q="r0001234")) == ["R0001234"]  # the file name, last resort
    assert set(stems(run(env, q="monochrome", limit="100"))) >= {"DSCF0110", "DSCF0103", "DSCF0114"}


def token_matches(term: str, token: str) -> bool:
    """Whether the index that answers queries matches `term` to a caption of the one word `token`."""
    row = dict.fromkeys(("date", "vector", *photos.FILTERS.values(), *photos.WEIGHTS), None)
    index = photos._Index([{**row, "stem": "one", "alt": token}])
    return bool(index.term_mask("alt", term)[0])


def test_token_matching_rules():
    assert token_matches("cities", "city")
    assert token_matches("beach", "beaches")
    assert not token_matches("each", "beach")
    assert token_matches("mountains", "mountain")
    assert token_matches("mountains", "mount")  # a 5+ letter token the term starts with
    assert not token_matches("mountains", "moun")
    assert token_matches("100vi", "x100vi") and not token_matches("ooxvi", "x100vi")
    assert photos.query_terms("Show me PHOTOS of the beach, at night! a b") == ["beach", "night"]
    assert len(photos.query_terms(" ".join(f"w{i}x" for i in range(20)))) == 12


@pytest.fixture(scope="module")
def marked(tmp_path_factory, checker):
    """Four demo photos, the cathedral's sidecar caption rewritten in Hindi with a Turkish İ, a ß and a
    run of Japanese, served live."""
    settings = make_settings(tmp_path_factory.mktemp("marked"))
    paths = demo_photos.generate(settings.photos_dir, count=4)
    paths[3].with_suffix(".txt").write_text("हिन्दी में कैप्शन: the cathedral in İstanbul on the Hauptstraße, 京都駅の朝\n",
                                            encoding="utf-8")
    ingest.run_photos(settings)
    with serve_wsgi(make_app(settings).wsgi) as base:
        yield Client(base, checker)


@pytest.mark.parametrize("q, term", [("हिन्दी", "हिन्दी"), ("İstanbul", "istanbul"), ("ISTANBUL", "istanbul")])
def test_caption_words_with_combining_marks_match_as_the_site_search_reads_them(marked, q, term):
    """Query and caption split alike: a word keeps its vowel signs and viramas, and İ reads as i."""
    body = marked.get("/photos/query.json", params={"q": q}).json()
    assert body["ranking"] == {"mode": "all-terms", "terms": [term], "semantic": False}
    assert stems(body) == ["DSCF0104"]


@pytest.mark.parametrize("q", ["京都", "駅", "駅の朝"])
def test_caption_words_of_a_script_written_without_spaces_are_found_inside_a_run(marked, q):
    """京都駅の朝 is one word to the splitter: a part of it finds the photo, as the site search finds
    a page (a single Han letter is a word of its own)."""
    body = marked.get("/photos/query.json", params={"q": q}).json()
    assert body["ranking"]["terms"] == [q] and stems(body) == ["DSCF0104"]


@pytest.mark.parametrize("q", ["hauptstraße", "HAUPTSTRASSE", "Hauptstrasse"])
def test_caption_words_are_found_in_either_spelling_of_sharp_s(marked, q):
    """As the site search finds them (review24 M2)."""
    assert stems(marked.get("/photos/query.json", params={"q": q}).json()) == ["DSCF0104"]


SEA = {"DSCF0101", "DSCF0102", "DSCF0109", "DSCF0116", "DSCF0118"}  # harbour, beach, pier, beach huts, beach


def matches_literally(conn, term: str) -> bool:
    """Whether any field `q` searches matches the term, by the index that answers queries."""
    index = photos._index(conn)
    return any(index.term_mask(name, term).any() for name in photos.WEIGHTS)


def test_a_term_no_field_contains_matches_captions_by_meaning(env):
    for term in ("seaside", "coast", "halloween"):
        assert not matches_literally(env[1], term), term
    body = run(env, q="seaside")
    assert body["ranking"] == {"mode": "all-terms", "terms": ["seaside"], "semantic": True}
    assert {"DSCF0102", "DSCF0116", "DSCF0118"} <= set(stems(body)) <= SEA
    assert all(p["matched"] == ["seaside"] and p["score"] == photos.SEMANTIC_WEIGHT for p in body["photos"])
    assert stems(run(env, q="seaside", limit="2", offset="1")) == stems(body)[1:3]  # pages agree
    assert stems(run(env, q="halloween")) == ["DSCF0113"]  # pumpkins on the doorstep
    both = run(env, q="seaside kite")  # a literal caption match (5) plus a semantic one (3)
    assert both["ranking"]["semantic"] and stems(both) == ["DSCF0102"] and both["photos"][0]["score"] == 8
    assert both["photos"][0]["matched"] == ["seaside", "kite"]


def test_semantic_matches_respect_the_filters(env):
    assert set(stems(run(env, q="seaside", film="Reala ACE"))) == {"DSCF0102", "DSCF0116"}
    body = run(env, q="seaside", camera="GR III")  # the one GR photo is a bicycle's shadow
    assert body["ranking"] == {"mode": "no-match", "terms": ["seaside"], "semantic": False, "dropped": ["seaside"]}


def test_literal_terms_keep_semantic_false(env):
    for q in ("beach", "harbour night", "kite zebra"):
        assert run(env, q=q)["ranking"]["semantic"] is False, q
    assert run(env, q="kite zebra")["ranking"]["dropped"] == ["zebra"]  # a literal hit embeds nothing else


def test_unrelated_and_nonsense_terms_stay_dropped(env):
    for q in ("xqzvbn", "zebra", "keyboard pizza"):
        assert not any(matches_literally(env[1], term) for term in photos.query_terms(q)), q
        body = run(env, q=q)
        assert body["ranking"]["semantic"] is False and body["ranking"]["dropped"] == photos.query_terms(q), q
        assert body["ranking"]["mode"] == "no-match" and body["total"] == 0


def test_at_most_three_terms_are_matched_by_meaning(env):
    assert stems(run(env, q="halloween")) == ["DSCF0113"]
    body = run(env, q="seaside coast ocean halloween")  # only the first three unmatched terms are embedded
    assert body["ranking"]["semantic"] and body["ranking"]["dropped"] == ["halloween"]
    assert body["ranking"]["mode"] == "partial" and "DSCF0113" not in stems(body)
    assert stems(body)[0] == "DSCF0102" and body["photos"][0]["matched"] == ["seaside", "coast", "ocean"]


def test_without_the_model_queries_answer_lexically(env, tmp_path, checker):
    settings = make_settings(tmp_path, db_path=env[0].db_path, photos_dir=env[0].photos_dir,
                             images_dir=env[0].images_dir,
                             sections={**env[0].sections, "ask": {"model_path": str(tmp_path / "absent.onnx")}})
    with serve_wsgi(make_app(settings).wsgi) as base:
        answer = Client(base, checker).get("/photos/query.json", params={"q": "seaside"})
        assert answer.status_code == 200
        assert answer.json()["ranking"] == {"mode": "no-match", "terms": ["seaside"], "semantic": False,
                                            "dropped": ["seaside"]}
        literal = Client(base, checker).get("/photos/query.json", params={"q": "beach"}).json()
        assert literal["ranking"]["semantic"] is False and literal["total"] == 3


def test_paging_through_ranked_results(env):
    everything = run(env, q="fujifilm x100vi", limit="100")
    page = run(env, q="fujifilm x100vi", limit="2", offset="2")
    assert stems(page) == stems(everything)[2:4] and page["total"] == everything["total"]


def test_results_follow_a_new_ingest(tmp_path):
    settings = dataclasses.replace(load_settings(), db_path=tmp_path / "site.db", photos_dir=tmp_path / "originals",
                                   images_dir=tmp_path / "public")
    paths = demo_photos.generate(settings.photos_dir, count=3)
    ingest.run_photos(settings)
    conn = db.connect(settings.db_path, readonly=True)
    try:
        assert photos.query(conn, settings, {"q": "harbour"})["total"] == 1
        paths[0].unlink()
        ingest.run_photos(settings)
        after = photos.query(conn, settings, {"q": "harbour"})
        assert after["ranking"]["semantic"] and stems(after) == ["DSCF0102"]  # only the beach, by meaning
        assert photos.query(conn, settings, {})["total"] == 2
    finally:
        conn.close()


def test_manifest_lists_exactly_the_published_photos(env):
    settings, conn, client = env
    r = client.get("/images/manifest.json")
    assert r.status_code == 200
    body = r.json()
    stored = {row["stem"]: row for row in conn.execute("SELECT stem, size, uploaded FROM photos")}
    assert body["count"] == len(body["photos"]) == len(stored) == len(DEMOS)
    for entry in body["photos"]:
        row = stored[entry["stem"]]
        assert entry["size"] == row["size"] and entry["uploaded"] == row["uploaded"]
        assert entry["full"] == settings.url(f"/images/full/{entry['stem']}.jpg")


def test_thumbnails_and_originals_are_served_without_metadata(env):
    import exiv2

    settings, conn, client = env
    photo = run(env, camera="X100VI", limit="1")["photos"][0]
    for key in ("avif", "jpg", "small", "xs"):
        path = photo["thumb"][key].removeprefix(settings.public_base_url)
        r = client.get(path)
        assert r.status_code == 200 and r.headers["Cache-Control"] == photos.THUMBNAIL_CACHE, path
        image = exiv2.ImageFactory.open(r.content)
        image.readMetadata()
        assert len(image.exifData()) == 0 and len(image.xmpData()) == 0 and len(image.iptcData()) == 0, path
    original = client.get(photo["full"].removeprefix(settings.public_base_url))
    assert original.status_code == 200 and original.headers["Content-Type"] == "image/jpeg"
    for path in ("/images/nope.jpg", "/images/full/nope.jpg", "/images/../site.db", "/images/full/../../site.db"):
        assert client.get(path).status_code in (400, 404), path


def test_an_image_dated_before_1970_has_caddys_etag_too(env):
    """The ETag is file_server's formula, a negative mtime included: the base-36 loop had never
    ended on one, holding a waitress thread at full CPU (review24b L1)."""
    settings, _, client = env
    old = settings.images_dir / "restored-200.0123456789.jpg"
    old.write_bytes(b"\xff\xd8 a restored thumbnail")
    os.utime(old, ns=(-1_500_000_000, -1_500_000_000))  # 1969-12-31T23:59:58.5Z: Go's Unix() floors to -2
    answer = client.get("/images/restored-200.0123456789.jpg")
    assert answer.status_code == 200 and answer.headers["ETag"] == '"-2n"'  # -2, then the size 23 in base 36
    resumed = client.get("/images/restored-200.0123456789.jpg",
                         headers={"Range": "bytes=0-4", "If-Range": answer.headers["Last-Modified"]})
    assert resumed.status_code == 206 and resumed.content == b"\xff\xd8 a "  # its own date names it (review24c L4)


def test_if_match_and_if_unmodified_since_are_preconditions_of_an_image(env):
    """RFC 9110 13.2.2, as Caddy's file_server checks them, now that the app answers every Range
    request (review24b L3): a 412 when the file is not the version named, checked before the Range."""
    settings, _, client = env
    thumb = run(env, limit="1")["photos"][0]["thumb"]["jpg"].removeprefix(settings.public_base_url)
    etag = client.get(thumb).headers["ETag"]
    for sent in (etag, '"other", ' + etag, "*"):
        assert client.get(thumb, headers={"If-Match": sent, "Range": "bytes=0-9"}).status_code == 206, sent
    for sent in ('"other"', "W/" + etag):  # strong comparison: a weak tag never matches
        failed = client.get(thumb, headers={"If-Match": sent, "Range": "bytes=0-9"})
        assert failed.status_code == 412 and failed.json()["code"] == "precondition_failed", sent
        assert failed.headers["Cache-Control"] == "no-store" and failed.headers["ETag"] == etag
    assert client.get(thumb, headers={"If-Unmodified-Since": "Sat, 01 Jan 2000 00:00:00 GMT"}).status_code == 412
    assert client.get(thumb, headers={"If-Unmodified-Since": "Fri, 01 Jan 2100 00:00:00 GMT"}).status_code == 200
    # If-None-Match before the Range: a 304 even for a range past the end (review24c L1)
    assert client.get(thumb, headers={"If-None-Match": etag, "Range": "bytes=99999999-"}).status_code == 304


def test_the_app_serves_images_as_the_edge_does(env):
    """Alone (no Caddy), the app answers images with a quoted ETag and 304, 206 and 416 for ranges
    (If-Range honoured, several ranges answered whole), and only image files: a caption sidecar beside the originals is not published."""
    settings, conn, client = env
    full = run(env, limit="1")["photos"][0]["full"].removeprefix(settings.public_base_url)
    first = client.get(full)
    etag = first.headers["ETag"]
    assert first.status_code == 200 and etag.startswith('"') and etag.endswith('"')
    assert first.headers["Cache-Control"] == photos.ORIGINAL_CACHE  # a camera's name, not a content hash
    doubled = client.get(full.replace("/images/", "/images//"))  # the file served, and stat'ed, is the same one
    assert doubled.status_code == 200 and doubled.headers["ETag"] == etag and doubled.content == first.content
    for sent in (etag, "W/" + etag, '"other", ' + etag, "*"):
        not_modified = client.get(full, headers={"If-None-Match": sent})
        assert not_modified.status_code == 304 and not_modified.headers["Cache-Control"] == photos.ORIGINAL_CACHE, sent
    changed = client.get(full, headers={"If-None-Match": '"other"', "If-Modified-Since": first.headers["Last-Modified"]})
    assert changed.status_code == 200  # If-None-Match decides when both are sent
    same = client.get(full, headers={"If-Modified-Since": first.headers["Last-Modified"]})
    assert same.status_code == 304
    ahead = client.get(full, headers={"If-Modified-Since": email.utils.formatdate(time.time() + 86400, usegmt=True)})
    assert ahead.status_code == 200 and ahead.content == first.content  # a date after now is invalid: ignored
    part = client.get(full, headers={"Range": "bytes=0-9"})
    assert part.status_code == 206 and len(part.content) == 10 and part.content == first.content[:10]
    # If-Range: the range only while the file is the version named; several ranges get the whole file
    modified = first.headers["Last-Modified"]
    for if_range in (etag, modified):
        resumed = client.get(full, headers={"Range": "bytes=10-19", "If-Range": if_range})
        assert resumed.status_code == 206 and resumed.content == first.content[10:20], if_range
        assert resumed.headers["Content-Range"] == f"bytes 10-19/{len(first.content)}"
    earlier = email.utils.formatdate(email.utils.parsedate_to_datetime(modified).timestamp() - 1, usegmt=True)
    for if_range in ('"another-version"', "W/" + etag, earlier, "not a date"):
        whole = client.get(full, headers={"Range": "bytes=10-19", "If-Range": if_range})
        assert whole.status_code == 200 and whole.content == first.content, if_range
        assert "Content-Range" not in whole.headers
    several = client.get(full, headers={"Range": "bytes=0-1,5-6"})
    assert several.status_code == 200 and several.content == first.content
    for unread in ("items=0-5", "bytes=abc", "bytes=5-2"):  # another unit, no valid range: ignored
        ignored = client.get(full, headers={"Range": unread})
        assert ignored.status_code == 200 and ignored.content == first.content, unread
    for spelt in ("BYTES=0-9", "bytes= 0-9"):  # the unit is case-insensitive (RFC 9110 14.1)
        assert client.get(full, headers={"Range": spelt}).content == first.content[:10], spelt
    assert client.get(full, headers={"Range": "bytes=-10"}).content == first.content[-10:]
    past = client.get(full, headers={"Range": "bytes=999999999-", "Accept": "application/json"})
    assert past.status_code == 416 and past.json()["code"] == "range_not_satisfiable"
    assert past.headers["Content-Range"] == f"bytes */{len(first.content)}"
    sidecar = settings.photos_dir / (full.rsplit("/", 1)[1].rsplit(".", 1)[0] + ".txt")
    sidecar.write_text("a caption\n")
    try:
        assert client.get("/images/full/" + sidecar.name, headers={"Accept": "application/json"}).status_code == 404
    finally:
        sidecar.unlink()


REAL_PHOTOS = SHARED / "data" / "photos"
# What the originals carry and no published file may: the demo set's serials and owner, and the
# shared real camera files' serials, owner name and site.
PRIVATE = (demo_photos.BODY_SERIAL, demo_photos.FUJI_SERIAL[:12], demo_photos.LENS_SERIAL, demo_photos.OWNER,
           "FFDT22873443", "FF02B8054953", "4B005176", "58A15074", "Victor Quiroz", "victorhqc.com")


@pytest.fixture(scope="module")
def published(tmp_path_factory, checker):
    """Demo photos, the shared real camera files when present, and files the job does not publish
    (a dot-file, a file in a subfolder, a broken file, the losing one of two names), served live."""
    settings = make_settings(tmp_path_factory.mktemp("published"))
    paths = demo_photos.generate(settings.photos_dir, count=4)
    real = sorted(REAL_PHOTOS.glob("*.jpg")) if REAL_PHOTOS.is_dir() else []
    for path in real:
        shutil.copy(path, settings.photos_dir / path.name)
    folder, data = settings.photos_dir, paths[0].read_bytes()
    (folder / ".draft.jpg").write_bytes(data)
    (folder / "sub").mkdir()
    (folder / "sub" / "extra.jpg").write_bytes(data)
    (folder / "cut.jpg").write_bytes(data[: len(data) // 2])
    (folder / "twin.jpeg").write_bytes(paths[1].read_bytes())
    (folder / "twin.jpg").write_bytes(data)  # sorts after twin.jpeg, so it loses the name
    summary = ingest.run_photos(settings)
    assert summary.startswith(f"added {5 + len(real)}, updated 0, removed 0, failed 2 (cut.jpg: cannot decode")
    with serve_wsgi(make_app(settings).wsgi) as base:
        yield settings, Client(base, checker), len(real)


def test_originals_are_served_without_private_metadata(published):
    settings, client, real = published
    manifest = client.get("/images/manifest.json").json()
    assert manifest["count"] == 5 + real
    for photo in manifest["photos"]:
        name = unquote(photo["full"].rsplit("/", 1)[1])
        r = client.get(photo["full"].removeprefix(settings.public_base_url))
        assert r.status_code == 200 and r.headers["Content-Type"] == "image/jpeg", name
        original = (settings.photos_dir / name).read_bytes()
        with Image.open(io.BytesIO(r.content)) as served, Image.open(io.BytesIO(original)) as source:
            assert np.array_equal(np.asarray(served), np.asarray(source)), name
        image = exiv2.ImageFactory.open(r.content)
        image.readMetadata()
        keys = {datum.key() for datum in image.exifData()}
        assert not [key for key in keys if key.startswith(("Exif.GPSInfo.", "Exif.Fujifilm.", "Exif.Thumbnail."))
                    or key.endswith(("SerialNumber", "MakerNote", "Artist", "Copyright", "CameraOwnerName"))], name
        assert image.xmpData().count() == 0 and image.iptcData().count() == 0, name
        for secret in PRIVATE:
            assert secret.encode() not in r.content, (name, secret)
        assert any(secret.encode() in original for secret in PRIVATE), name  # there was something to remove


def test_unpublished_originals_answer_404(published):
    settings, client, _ = published
    for name in (".draft.jpg", "sub/extra.jpg", "cut.jpg", "twin.jpg"):
        assert (settings.photos_dir / name).exists()
        r = client.get("/images/full/" + name, headers={"Accept": "application/json"})
        assert r.status_code == 404 and r.json()["code"] == "not_found", name
    assert client.get("/images/full/twin.jpeg").status_code == 200


def test_no_path_reaches_originals_that_are_not_public(published, checker):
    """originals_public = false closes /images/full/ however the path is spelled, even before the
    next job run removes the copies."""
    settings, _, _ = published
    hidden = dataclasses.replace(settings, originals_public=False)
    with serve_wsgi(make_app(hidden).wsgi) as base:
        for path in ("/images/full/DSCF0101.jpg", "/images/./full/DSCF0101.jpg", "/images//full/DSCF0101.jpg",
                     "/images/x/../full/DSCF0101.jpg"):
            connection = http.client.HTTPConnection(base.removeprefix("http://"), timeout=30)
            connection.request("GET", path, headers={"Accept": "application/json"})  # sent as written
            answer = connection.getresponse()
            assert answer.status in (400, 404) and "error" in json.loads(answer.read()), path
            connection.close()
