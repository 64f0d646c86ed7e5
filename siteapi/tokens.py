"""Token counting with OpenAI's o200k_base vocabulary, loaded from the copy shipped in `models/`.

tiktoken would download the vocabulary on first use; this machine (and a user's offline box)
cannot, so the file travels with the project and its hash is checked against tiktoken's own.
"""
from __future__ import annotations

import base64
import functools
import gzip
import hashlib
from pathlib import Path

import tiktoken

VOCAB = Path(__file__).resolve().parent.parent / "models" / "o200k_base.tiktoken.gz"
VOCAB_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
NAME = "o200k_base"

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


@functools.cache
def encoding() -> tiktoken.Encoding:
    raw = gzip.decompress(VOCAB.read_bytes())
    if hashlib.sha256(raw).hexdigest() != VOCAB_SHA256:
        raise RuntimeError(f"{VOCAB} does not match the o200k_base vocabulary tiktoken expects.")
    ranks = {base64.b64decode(token): int(rank) for token, rank in (line.split() for line in raw.splitlines() if line)}
    return tiktoken.Encoding(NAME, pat_str=_PATTERN, mergeable_ranks=ranks, special_tokens=_SPECIAL)


def count(text: str) -> int:
    """Tokens in `text`; special-token look-alikes in the text are counted as ordinary text."""
    return len(encoding().encode_ordinary(text))
