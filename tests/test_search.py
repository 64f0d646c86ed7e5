"""/search.json on the real server: terms, ranking, limits, snippets, bad input."""
import pytest

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


def test_limit_is_clamped_and_defaults(api):
    assert api.get("/search.json?q=the film camera recipe&limit=abc").json()["returned"] <= 20
    assert api.get("/search.json?q=a e i o&limit=999").json()["returned"] <= 50
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


def test_long_q_is_truncated_not_rejected(api):
    r = api.get("/search.json?q=" + "motorcycle " * 40)
    assert r.status_code == 200 and len(r.json()["query"]) == 160


@pytest.mark.parametrize("q", ['"', "' OR 1=1 --", "NEAR(a b)", "col:title", "*", "a AND", "%_%", "\u0000x", "🙂 emoji"])
def test_fts_syntax_in_q_is_literal(api, q):
    r = api.get("/search.json", params={"q": q})
    assert r.status_code == 200 and isinstance(r.json()["results"], list)


def test_versioned_cache_empties_after_another_connection_commits(tmp_path):
    from siteapi import db

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
