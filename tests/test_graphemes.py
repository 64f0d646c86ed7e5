"""Text cut where a reader sees a character end: titles, descriptions, snippets and captions keep an
accent on its letter, a flag's two halves together and an emoji's joiners with it (unicode_audit24 L1);
and a page's path in the form keyboards and browsers send (L2)."""
import re

import pytest
import requests

import jobs
from app import make_app
from conftest import make_settings
from servers import serve_wsgi
from siteapi import graphemes
from siteapi.content import parse_file
from siteapi.exif import ALT_MAX, _clean_caption
from siteapi.search import snippet

FAMILY = "\U0001F469\u200d\U0001F469\u200d\U0001F467"  # woman, ZWJ, woman, ZWJ, girl: one character seen
FRANCE = "\U0001F1EB\U0001F1F7"  # two regional indicators: one flag


@pytest.mark.parametrize("text, limit, kept", [
    ("C" * 3 + "e\u0301x", 4, "CCC"),  # the e goes with its accent
    ("C" * 3 + "e\u0301x", 5, "CCCe\u0301"),
    ("ab" + FAMILY, 4, "ab"),  # not the first woman and a dangling joiner
    (FRANCE * 3, 3, FRANCE),  # not a flag and a half
    ("\U0001F44D\U0001F3FD!", 1, ""),  # a thumbs up keeps its skin tone
    ("\u2764\ufe0f!", 1, ""),  # and a heart its emoji presentation
    ("plain text", 5, "plain"),
    ("short", 99, "short"),
])
def test_a_cut_ends_between_the_characters_a_reader_sees(text, limit, kept):
    assert graphemes.cut(text, limit) == kept


def test_a_piece_from_the_middle_starts_between_them_too():
    text = FRANCE * 5
    assert graphemes.start_at(text, 3) == 4 and graphemes.start_at(text, 4) == 4
    assert graphemes.start_at("xe\u0301\u0301y", 2) == 4 and graphemes.start_at("ab", 1) == 1


@pytest.mark.parametrize("run", [FRANCE * 60, "e\u0301" * 100, FAMILY * 40])
def test_a_snippet_cut_in_a_run_without_spaces_splits_no_character(run):
    text = run + "\u3002target" + run
    shown = snippet(text, re.compile("target"))
    inner = shown.strip("…")
    assert inner.startswith(run[:2]) or inner.startswith("\u3002"), shown[:20]
    assert all(graphemes.is_boundary(text, i) for i in (text.index(inner), text.index(inner) + len(inner)))


def test_a_long_caption_keeps_its_last_emoji_whole():
    caption = _clean_caption(FAMILY * 100)
    assert len(caption) <= ALT_MAX and caption.endswith(FAMILY + "…")


def test_titles_and_descriptions_keep_their_last_letters_whole(tmp_path):
    (tmp_path / "pages").mkdir()
    file = tmp_path / "pages" / "long.md"
    file.write_text("---\ntitle: " + "C" * 139 + "e\u0301x\nkind: page\npath: /long\n---\n" + "Caf" + "e\u0301 " * 200 + "\n",
                    encoding="utf-8")
    page = parse_file(file, tmp_path)
    assert page.title == "C" * 139
    assert len(page.description) <= 240 and page.description.endswith("e\u0301")


def test_a_path_written_decomposed_is_served_at_its_composed_url(tmp_path):
    """macOS file names and text copied from them spell é as e + U+0301; links and browsers send
    the composed form, which answered 404 (L2)."""
    content = tmp_path / "content"
    content.mkdir()
    (content / "cafe.md").write_text("---\ntitle: Caf\u00e9\nkind: writing\ndate: 2026-01-02\npath: /writing/cafe\u0301\n"
                                     "---\nEspresso notes.\n", encoding="utf-8")
    settings = make_settings(tmp_path, content_dir=content)
    assert jobs.run_job(settings, "content")[0]
    with serve_wsgi(make_app(settings).wsgi) as base:
        assert requests.get(base + "/writing/caf%C3%A9", timeout=30).status_code == 200
        assert requests.get(base + "/writing/caf%C3%A9.md", timeout=30).status_code == 200
        assert requests.get(base + "/writing/cafe%CC%81", timeout=30).status_code == 200  # its old URL still answers
        found = requests.get(base + "/search.json", params={"q": "espresso"}, timeout=30).json()["results"]
        assert [r["url"] for r in found] == ["https://aadhar.sh/writing/caf%C3%A9"]
