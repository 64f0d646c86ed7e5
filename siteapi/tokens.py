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


@functools.cache
def encoding() -> tiktoken.Encoding:
    """The process-wide encoding, loaded on first use (about 0.3 s)."""
    try:
        raw = gzip.decompress(VOCABULARY.read_bytes())
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise VocabularyError(f"The token vocabulary {VOCABULARY} cannot be read ({exc}).") from None
    if hashlib.sha256(raw).hexdigest() != VOCABULARY_SHA256:
        raise VocabularyError(f"The token vocabulary {VOCABULARY} is not the o200k_base file tiktoken expects.")
    ranks = {base64.b64decode(token): int(rank) for token, rank in (line.split() for line in raw.splitlines() if line)}
    return tiktoken.Encoding(NAME, pat_str=_PATTERN, mergeable_ranks=ranks, special_tokens=_SPECIAL)


def _chunks(text: str, size: int = CHUNK_CHARS):
    """Pieces of at most `size` chars, cut just before whitespace where there is some.

    BPE time grows with the square of a word's length, so a page that is one 2 MB "word" would
    take seconds; cutting it bounds the work. A cut before whitespace leaves the o200k pieces
    as they were, so counts of ordinary text are unchanged.
    """
    start = 0
    while start < len(text):
        end = min(len(text), start + size)
        if end < len(text):
            space = max(text.rfind(" ", start + 1, end), text.rfind("\n", start + 1, end))
            # no whitespace nearby: a run that long is cut short, where BPE stays cheap
            end = space if space > start + size // 2 else start + RUN_CHARS
        yield text[start:end]
        start = end


def count(text: str) -> int:
    """Tokens in `text`; special-token look-alikes in the text are counted as ordinary text."""
    enc = encoding()
    return sum(len(enc.encode_ordinary(piece)) for piece in _chunks(text)) if text else 0
