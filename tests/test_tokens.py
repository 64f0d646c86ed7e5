"""Token counts: cutting a long text into chunks must not change its o200k count, yet a huge word is cut short."""
from __future__ import annotations

import random
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from siteapi import tokens

WORDS = ("the of and to in is that it was for on are with as his they be at one have this from "
         "Machine readers Markdown llms.txt sourdough photographs Open Web API JSON-LD HTTP").split()
CONTRACTIONS = ("it's", "don't", "they'll", "we're", "I'M", "you'VE", "she'd", "rock 'n' roll")
PUNCTUATION = (",", ".", ";", ":", "!", "?", " —", "…", ")", "\"", "'", "/", "...", "?!")
NUMBERS = ("2025", "3.14", "1,000,000", "42", "7", "12345678", "0x1F", "v2.0.1", "½", "²")
CJK = "機械が読むウェブのための文章です。日本語と中文的句子，没有空格、也能切分！한국어 문장도 있습니다."


def sentence(rng: random.Random) -> str:
    parts = []
    for _ in range(rng.randint(3, 25)):
        roll = rng.random()
        if roll < 0.07:
            parts.append(rng.choice(NUMBERS))
        elif roll < 0.12:
            parts.append(rng.choice(CONTRACTIONS))
        elif roll < 0.15:
            parts.append(f"({rng.choice(WORDS)})" if rng.random() < 0.5 else f"https://example.com/{rng.choice(WORDS)}/")
        else:
            parts.append(rng.choice(WORDS))
        if rng.random() < 0.08:
            parts[-1] += rng.choice(PUNCTUATION)
    return " ".join(parts).capitalize() + rng.choice((".", "!", "?", ":", ".\u201d"))


def paragraph(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.1:  # CJK: thousands of characters and no spaces
        return "".join(rng.choice(CJK) if rng.random() < 0.2 else CJK[:rng.randint(1, len(CJK))]
                       for _ in range(rng.randint(10, 200)))
    if roll < 0.2:  # a Markdown list or code block, with indentation
        return "\n".join(rng.choice(("- ", "* ", "1. ", "    ", "\t", "> ")) + sentence(rng) for _ in range(rng.randint(2, 8)))
    if roll < 0.25:  # a long run, a line of dashes, an identifier
        return rng.choice(("a" * rng.randint(300, 1500), "-" * rng.randint(3, 80), "snake_case_name_" * rng.randint(1, 40)))
    return " ".join(sentence(rng) for _ in range(rng.randint(1, 12)))


def document(seed: int) -> str:
    rng = random.Random(seed)
    out = []
    while sum(map(len, out)) < 30_000:
        out.append(paragraph(rng))
        out.append(rng.choice(("\n\n", "\n", "\r\n\r\n", "\n\n\n", " \n", "  \n\n", "\n \n")))
    return "".join(out)


@pytest.mark.parametrize("seed", range(40))
def test_chunked_count_equals_the_whole_text_count(seed):
    text = document(seed)
    assert len(list(tokens._chunks(text))) > 5
    assert tokens.count(text) == len(tokens.encoding().encode_ordinary(text))


@pytest.mark.parametrize("text", [
    "word " * 818 + "end.\n\nNext paragraph here.",  # a cut before a newline after a full stop split ".\n\n"
    "- a list item;\n" * 400,  # and ";\n"
    "機械が読むウェブ。" * 2000,  # no spaces at all
    "12345,67890." * 500,  # cut after a digit
    "नमस्ते दुनिया, हिन्दी पाठ।\n" * 500,  # a vowel sign belongs to the letter before it
])
def test_texts_whose_count_a_careless_cut_changes(text):
    assert tokens.count(text) == len(tokens.encoding().encode_ordinary(text))


def test_a_huge_word_is_still_cut_short():
    word = "x" * 200_000
    text = "Some words first. " + word + " and some after."
    chunks = list(tokens._chunks(text))
    assert "".join(chunks) == text
    assert max(map(len, chunks)) <= tokens.CHUNK_CHARS
    inside = [c for c in chunks if set(c) == {"x"}]
    assert inside and max(map(len, inside)) <= tokens.RUN_CHARS
    assert sum(map(len, inside)) > len(word) - tokens.CHUNK_CHARS  # only the word is cut into runs
    assert tokens.count(word) > 0


def test_empty_and_short_texts():
    assert tokens.count("") == 0
    assert list(tokens._chunks("hello")) == ["hello"]
    assert tokens.count("hello world") == len(tokens.encoding().encode_ordinary("hello world"))



@pytest.mark.parametrize("text", ["see <|endoftext|> here", "a <|endofprompt|> b", "<|endoftext|>",
                                  "<|fim_prefix|><|im_start|>user<|im_end|>"])
def test_special_token_look_alikes_are_counted_as_ordinary_text(text):
    """A page holding `<|endoftext|>` is that many characters of text: read as the one special token,
    a hostile page had shrunk its reported cost (and a plain encode() refuses it: a 500)."""
    assert tokens.count(text) == len(tokens.encoding().encode_ordinary(text))


def test_a_special_token_look_alike_is_several_tokens_of_text():
    assert tokens.count("see <|endoftext|> here") == 9  # as the one special token: 4


def test_a_special_token_look_alike_across_a_chunk_boundary_is_counted_as_ordinary_text():
    # words up to the look-alike, whose second "|" (a place a cut may fall) is the chunk's last character
    words = ("word " * tokens.CHUNK_CHARS)[:tokens.CHUNK_CHARS - len(" <|endoftext")]
    assert not words.endswith(" ")
    text = words + " <|endoftext|> and <|endofprompt|> after" * 3
    chunks = list(tokens._chunks(text))
    assert "".join(chunks) == text
    assert chunks[0].endswith("<|endoftext") and chunks[1].startswith("|>")  # the cut falls inside the look-alike
    assert tokens.count(text) == len(tokens.encoding().encode_ordinary(text))
    assert tokens.count(text) > len(tokens.encoding().encode(text, allowed_special="all"))

def test_threads_asking_at_once_share_one_loaded_vocabulary():
    """Waitress's threads all want the vocabulary on the first Markdown requests; each loading its
    own 80 MB copy left the app at three times its memory."""
    tokens._load.cache_clear()
    start = threading.Barrier(8)

    def first_use(_):
        start.wait()
        return tokens.encoding()

    with ThreadPoolExecutor(8) as pool:
        loaded = list(pool.map(first_use, range(8)))
    assert all(encoding is loaded[0] for encoding in loaded)
