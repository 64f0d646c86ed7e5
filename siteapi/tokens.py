"""Token counting with OpenAI's o200k_base vocabulary, loaded from the copy shipped in `models/`.

tiktoken would download the vocabulary on first use; this machine (and a user's offline box)
cannot, so the file travels with the project and its hash is checked against tiktoken's own.
Used for `x-markdown-tokens` and for the lens's token cost.
"""
from __future__ import annotations

import base64
import functools
import gzip
import hashlib
import re
import threading
import unicodedata
from pathlib import Path

import tiktoken

VOCABULARY = Path(__file__).resolve().parent.parent / "models" / "o200k_base.tiktoken.gz"
VOCABULARY_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
NAME = "o200k_base"
CHUNK_CHARS = 4096
RUN_CHARS = 256

# The o200k_base split pattern and special tokens, as tiktoken_ext/openai_public.py defines them.
_PATTERN = "|".join([
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])
_SPECIAL = {"<|endoftext|>": 199999, "<|endofprompt|>": 200018}


class VocabularyError(RuntimeError):
    """The shipped vocabulary is missing or is not the file tiktoken expects."""


_loading = threading.Lock()


def encoding() -> tiktoken.Encoding:
    """The process-wide encoding, loaded on first use (about 0.3 s and 80 MB) by one thread while
    the others wait: functools.cache alone let each of waitress's threads load its own copy at
    once, and the app kept 535 MB instead of 160."""
    with _loading:
        return _load()


@functools.cache
def _load() -> tiktoken.Encoding:
    try:
        raw = gzip.decompress(VOCABULARY.read_bytes())
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise VocabularyError(f"The token vocabulary {VOCABULARY} cannot be read ({exc}).") from None
    if hashlib.sha256(raw).hexdigest() != VOCABULARY_SHA256:
        raise VocabularyError(f"The token vocabulary {VOCABULARY} is not the o200k_base file tiktoken expects.")
    ranks = {base64.b64decode(token): int(rank) for token, rank in (line.split() for line in raw.splitlines() if line)}
    return tiktoken.Encoding(NAME, pat_str=_PATTERN, mergeable_ranks=ranks, special_tokens=_SPECIAL)


# Where the o200k pre-tokenizer (`_PATTERN`) always starts a new piece, so that a cut there leaves
# every piece as it was (its one lookahead, in `\s+(?!\S)`, looks only past whitespace, and no cut
# follows whitespace): a space after anything but whitespace, since no alternative takes a space
# after its first character; or, after a letter or digit (`[^\W_]`), anything but a letter, digit,
# mark or apostrophe, since letters run on only through letters, marks and a 's-style suffix, and
# digits through digits. `_cut` refuses a mark or an unassigned character there: `re` cannot tell
# marks apart, and Python's Unicode tables may be older than tiktoken's, in which a newly assigned
# character may be a letter.
_CUT = re.compile(r"(?<=\S) |(?<=[^\W_])[^\w']")


def _cut(text: str, start: int, end: int) -> int | None:
    """The last position in (start, end] where cutting `text` leaves its o200k pieces as they were."""
    while end > start:  # backwards, RUN_CHARS at a time: ordinary text has a cut near the end
        low = max(start, end - RUN_CHARS)
        for found in reversed(list(_CUT.finditer(text, low + 1, end + 1))):
            if unicodedata.category(found.group()) not in ("Mn", "Mc", "Me", "Cn"):
                return found.start()
        end = low
    return None


def _chunks(text: str, size: int = CHUNK_CHARS):
    """Pieces of at most `size` chars whose token counts add up to the count of the whole text.

    BPE time grows with the square of a piece's length, so a page that is one 2 MB "word" would
    take seconds; cutting bounds the work. A text with no cut in `size` chars (such a word, or a
    long run of whitespace) is cut every RUN_CHARS instead, which can change its count slightly.
    """
    start = 0
    while len(text) - start > size:
        cut = _cut(text, start, start + size)
        if cut is None:
            end = start + size
            yield from (text[i:min(i + RUN_CHARS, end)] for i in range(start, end, RUN_CHARS))
            start = end
        else:
            yield text[start:cut]
            start = cut
    yield text[start:]


def count(text: str) -> int:
    """Tokens in `text`; special-token look-alikes in the text are counted as ordinary text."""
    enc = encoding()
    return sum(len(enc.encode_ordinary(piece)) for piece in _chunks(text)) if text else 0
