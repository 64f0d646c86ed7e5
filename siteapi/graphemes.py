"""Cutting text where a reader sees a character end, not inside one: an accent kept on its letter,
a flag's two regional indicators together, an emoji's joiners, skin tone and variation selector
with it. The boundaries are UAX #29's extended grapheme clusters for what a site's text holds
(combining marks, ZWJ sequences, variation selectors, emoji modifiers and tags, regional-indicator
pairs, CR LF); Hangul syllables spelled in jamo and Indic conjuncts may still be cut between parts.
"""
from __future__ import annotations

import unicodedata

ZWJ = "\u200d"


def _extends(char: str) -> bool:
    """Whether `char` belongs to the character before it."""
    code = ord(char)
    return (char == ZWJ or unicodedata.category(char) in ("Mn", "Mc", "Me")
            or 0xFE00 <= code <= 0xFE0F or 0xE0100 <= code <= 0xE01EF  # variation selectors
            or 0x1F3FB <= code <= 0x1F3FF or 0xE0020 <= code <= 0xE007F)  # skin tones, emoji tags


def _regional(char: str) -> bool:
    return 0x1F1E6 <= ord(char) <= 0x1F1FF


def is_boundary(text: str, i: int) -> bool:
    """Whether a cut before text[i] splits no character a reader sees."""
    if i <= 0 or i >= len(text):
        return True
    before, after = text[i - 1], text[i]
    if _extends(after) or before == ZWJ or (before, after) == ("\r", "\n"):
        return False
    if _regional(before) and _regional(after):
        run = 0
        while i - 1 - run >= 0 and _regional(text[i - 1 - run]):
            run += 1
        return run % 2 == 0  # an odd run before: `after` completes its pair
    return True


def cut(text: str, limit: int) -> str:
    """`text` to at most `limit` characters, ending at a boundary."""
    return text[:end_at(text, limit)]


def end_at(text: str, i: int) -> int:
    """The last boundary at or before `i`: where a piece cut from `text` may end."""
    while not is_boundary(text, i):
        i -= 1
    return i


def start_at(text: str, i: int) -> int:
    """The first boundary at or after `i`: where a piece cut from the middle of `text` may begin."""
    while not is_boundary(text, i):
        i += 1
    return i
